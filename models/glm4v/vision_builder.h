// Builds the IR graph of GLM-4.1V's vision tower: one step over the patches of
// some images (../shared/GLM4V_SPEC.md section 3).
//
// Runtime inputs: `pixels` [P, patch values] (rows in block-major patch order,
// image after image), `patch_pos` i32[P, 4] (each row's h, w, grid_h, grid_w),
// `image_offsets` i32[I+1] (each image's first row). Output: `image_embeds`
// [E, hidden], E = P / merge^2 rows in each image's merged raster order: the
// embeddings of the images' tokens in the decoder.
#ifndef AUTOGLM_MODELS_GLM4V_VISION_BUILDER_H_
#define AUTOGLM_MODELS_GLM4V_VISION_BUILDER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "models/glm4v/config.h"

namespace ag::glm4v {

struct VisionBuildOptions {
  ir::DType dtype = ir::DType::kF32;
  int64_t max_patches = 4096;  // bound of P: a multiple of merge^2
  int64_t max_images = 16;     // bound of I
};

absl::StatusOr<ir::Graph> BuildVisionGraph(const Config& config, const VisionBuildOptions& options);

}  // namespace ag::glm4v

#endif  // AUTOGLM_MODELS_GLM4V_VISION_BUILDER_H_
