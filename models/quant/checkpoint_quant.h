// Pre-quantized checkpoints: what a config's quantization_config says about
// how the checkpoint stores its linears (GPTQ, AWQ, compressed-tensors; see
// ../shared/QUANT_NOTES.md section 1), and which weights that covers.
#ifndef AUTOGLM_MODELS_QUANT_CHECKPOINT_QUANT_H_
#define AUTOGLM_MODELS_QUANT_CHECKPOINT_QUANT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/quant.h"
#include "models/glm/config.h"
#include "models/glm/weight_map.h"

namespace ag::quant {

struct CheckpointQuant {
  ir::QuantPacking packing = ir::QuantPacking::kNone;
  ir::QuantFormat format;
  bool lm_head = false;  // the LM head is stored quantized too
  // Modules kept dense: AWQ's modules_to_not_convert (a module whose name
  // contains one), compressed-tensors' ignore (a name, or "re:" and a regular
  // expression matched from the start).
  std::vector<std::string> keep_dense;
  bool keep_dense_by_substring = false;  // AWQ's rule
  // compressed-tensors' kv_cache_scheme: the KV cache's codes (fp8 E4M3 or int8) with one static
  // scale per layer for K and one for V, the checkpoint's "<layer>.self_attn.k_scale"/"v_scale"
  // (value = scale * code, as vLLM reads them); empty: no scheme.
  std::optional<ir::DType> kv_cache;

  bool quantized() const { return packing != ir::QuantPacking::kNone; }
  // Whether `module` ("model.layers.0.mlp.down_proj", "lm_head") is stored quantized.
  bool Covers(absl::string_view module) const;
};

// Reads config.quantization (empty: a dense checkpoint). What this engine
// cannot load as it is — another method, GPTQModel's per-module `dynamic`
// bits, a KV-cache scheme other than static per-tensor scales, activation
// orders other than GPTQ's g_idx —
// is a one-line error naming the field.
absl::StatusOr<CheckpointQuant> ParseCheckpointQuant(const glm::ModelConfig& config);

// `source` with the checkpoint's storage filled in when it is a linear weight
// the checkpoint holds quantized (the weight map names it "<module>.weight").
glm::WeightSource Annotate(const CheckpointQuant& quant, glm::WeightSource source);

}  // namespace ag::quant

#endif  // AUTOGLM_MODELS_QUANT_CHECKPOINT_QUANT_H_
