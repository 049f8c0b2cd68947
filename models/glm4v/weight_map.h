// GLM-4.1V's weight map: graph parameter -> checkpoint tensor. The decoder's
// parameters are glm4's (models/glm maps them under model.language_model.);
// the vision tower's keep their checkpoint names, its two convolutions read
// as linears over their flattened kernels.
#ifndef AUTOGLM_MODELS_GLM4V_WEIGHT_MAP_H_
#define AUTOGLM_MODELS_GLM4V_WEIGHT_MAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/glm/weight_map.h"
#include "models/glm4v/config.h"

namespace ag::glm4v {

// The shape of a vision parameter as the graph declares it (2-D for the convolutions).
absl::StatusOr<std::vector<int64_t>> VisionParamShape(const Config& config, absl::string_view param);
absl::StatusOr<glm::WeightSource> MapWeight(const Config& config, absl::string_view param);

// Whether a checkpoint tensor is the vision tower's, and one of its linear layers' weights (the
// blocks' attention and MLP, the merger's projections) that a quantizer would store packed.
bool IsVisionTensor(absl::string_view tensor);
bool IsVisionLinear(absl::string_view tensor);

}  // namespace ag::glm4v

#endif  // AUTOGLM_MODELS_GLM4V_WEIGHT_MAP_H_
