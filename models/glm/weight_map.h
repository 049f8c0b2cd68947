// The weight map: graph parameter (HF `glm` naming) -> checkpoint tensor.
//
// The graph always names weights the HF way (`model.layers.3.self_attn.q_proj.weight`).
// A checkpoint in the original ChatGLM layout stores q, k and v fused in
// `query_key_value`; their parameters map to row slices of it. Tied
// embeddings map `lm_head.weight` to the embedding table. `mlp.gate_proj` and
// `mlp.up_proj` name the two row halves of `mlp.gate_up_proj` (for sharding).
#ifndef AUTOGLM_MODELS_GLM_WEIGHT_MAP_H_
#define AUTOGLM_MODELS_GLM_WEIGHT_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/quant.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"

namespace ag::glm {

struct WeightSource {
  std::string tensor;                 // checkpoint tensor name
  std::vector<int64_t> tensor_shape;  // the whole checkpoint tensor's expected shape
  int64_t row_begin = 0;              // rows [row_begin, row_end) of axis 0 are this parameter
  int64_t row_end = 0;
  // A pre-quantized checkpoint's linear (set by models/quant): `tensor` names
  // the logical "<module>.weight" [N, K], stored as `packing` in `quant`.
  ir::QuantPacking packing = ir::QuantPacking::kNone;
  ir::QuantFormat quant;
};

// The shape of a graph parameter of this model, or an error for a name the
// model does not have.
absl::StatusOr<std::vector<int64_t>> ParamShape(const ModelConfig& config, absl::string_view param);

absl::StatusOr<WeightSource> MapWeight(const ModelConfig& config, absl::string_view param);

// A layer's static KV-cache scales, "model.layers.N.<suffix>" (compressed-tensors' kv_cache_scheme,
// models/quant): one value each.
inline constexpr absl::string_view kKvScaleSuffixes[2] = {"self_attn.k_scale", "self_attn.v_scale"};

// Checks that the tensor exists with the expected shape; the error names the
// tensor, the shapes and the checkpoint directory.
absl::StatusOr<const TensorView*> FindSourceTensor(const Checkpoint& checkpoint, const WeightSource& source);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_WEIGHT_MAP_H_
