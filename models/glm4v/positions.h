// GLM-4.1V's positions: where each patch sits in its image (for the vision
// tower's 2-D rotary and position table), and the decoder's three M-RoPE
// streams for a prompt with images (transformers' get_rope_index,
// ../shared/GLM4V_SPEC.md section 5.4).
#ifndef AUTOGLM_MODELS_GLM4V_POSITIONS_H_
#define AUTOGLM_MODELS_GLM4V_POSITIONS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ag::glm4v {

struct ImageGrid {
  int64_t t = 1, h = 0, w = 0;  // in patches
};

// Appends (h, w, grid_h, grid_w) for each patch row of an image, in the
// processor's block-major order (merge x merge blocks, row-major inside).
void AppendPatchPositions(const ImageGrid& grid, int64_t merge, std::vector<int32_t>* out);

// The three position streams of a prompt whose image tokens are already
// expanded (each maximal run of `image_token` is the next grid's t * h * w /
// merge^2 tokens): positions[s * L + i] for stream s, and the rope delta
// (decode token i is at i + delta in all three streams). An error when the
// runs and the grids disagree.
struct RopeIndex {
  std::vector<int32_t> positions;  // [3, L]
  int64_t delta = 0;
};
absl::StatusOr<RopeIndex> ComputeRopeIndex(const std::vector<int32_t>& tokens, int32_t image_token,
                                           const std::vector<ImageGrid>& grids, int64_t merge);

}  // namespace ag::glm4v

#endif  // AUTOGLM_MODELS_GLM4V_POSITIONS_H_
