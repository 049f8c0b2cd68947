// Builds the IR graph of one forward step of a GLM-4 family model.
//
// Runtime inputs: `tokens` [T], `positions` [T] and `logit_rows` [R] (the rows
// of the step whose next-token logits are wanted: each sequence's last token
// when generating, every token when a caller asks for prompt logits). Each
// layer's KV cache is state `$kv.L`. Outputs: `logits` [R, vocab] and
// `next_tokens` [R] (greedy choice).
#ifndef AUTOGLM_MODELS_GLM_BUILDER_H_
#define AUTOGLM_MODELS_GLM_BUILDER_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/glm/config.h"

namespace ag::glm {

struct BuildOptions {
  ir::DType dtype = ir::DType::kF32;  // weights, activations and KV cache
  // The KV cache's dtype when it is 8-bit (i8 or f8e4m3, with a scale per
  // token and KV head); kept as `dtype` otherwise.
  std::optional<ir::DType> kv_dtype;
  ir::DType KvDType() const { return kv_dtype.value_or(dtype); }
  int64_t kv_block_size = 16;         // tokens per KV-cache block
  int64_t max_batch_tokens = 256;     // bound of T (and R)
  int64_t max_seqs = 16;              // bound of S
  // GLM-4.1V: the step takes image rows (%mm_embeds, %mm_rows) that replace
  // the embeddings of its image tokens.
  bool image_rows = false;
};

absl::StatusOr<ir::Graph> BuildGlmGraph(const ModelConfig& config, const BuildOptions& options);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_BUILDER_H_
