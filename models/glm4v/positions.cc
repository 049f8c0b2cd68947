#include "models/glm4v/positions.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::glm4v {

void AppendPatchPositions(const ImageGrid& grid, int64_t merge, std::vector<int32_t>* out) {
  for (int64_t t = 0; t < grid.t; ++t) {
    for (int64_t bh = 0; bh < grid.h / merge; ++bh) {
      for (int64_t bw = 0; bw < grid.w / merge; ++bw) {
        for (int64_t i = 0; i < merge; ++i) {
          for (int64_t j = 0; j < merge; ++j) {
            out->insert(out->end(), {static_cast<int32_t>(bh * merge + i), static_cast<int32_t>(bw * merge + j),
                                     static_cast<int32_t>(grid.h), static_cast<int32_t>(grid.w)});
          }
        }
      }
    }
  }
}

absl::StatusOr<RopeIndex> ComputeRopeIndex(const std::vector<int32_t>& tokens, int32_t image_token,
                                           const std::vector<ImageGrid>& grids, int64_t merge) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  RopeIndex r;
  r.positions.resize(static_cast<size_t>(3 * length));
  int64_t next = 0, max_position = -1;
  size_t image = 0;
  for (int64_t i = 0; i < length;) {
    if (tokens[i] != image_token) {  // text: the three streams are equal
      for (int s = 0; s < 3; ++s) r.positions[s * length + i] = static_cast<int32_t>(next);
      max_position = std::max(max_position, next);
      ++next;
      ++i;
      continue;
    }
    int64_t run = 0;
    while (i + run < length && tokens[i + run] == image_token) ++run;
    if (image >= grids.size()) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt has more image-token runs than images (", grids.size(), ")"));
    }
    const ImageGrid& g = grids[image++];
    const int64_t lh = g.h / merge, lw = g.w / merge;
    if (run != g.t * lh * lw) {
      return absl::InvalidArgumentError(absl::StrCat("image ", image - 1, " has ", g.t * lh * lw, " tokens; its run in "
                                                     "the prompt has ", run));
    }
    for (int64_t k = 0; k < run; ++k) {  // row-major over (t, row, column)
      const int64_t t = k / (lh * lw), row = k / lw % lh, col = k % lw;
      r.positions[i + k] = static_cast<int32_t>(next + t);
      r.positions[length + i + k] = static_cast<int32_t>(next + row);
      r.positions[2 * length + i + k] = static_cast<int32_t>(next + col);
      max_position = std::max({max_position, next + t, next + row, next + col});
    }
    next += std::max(lh, lw);  // text after an image continues past its larger side
    i += run;
  }
  if (image != grids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", image, " image-token runs for ", grids.size(),
                                                   " images"));
  }
  r.delta = max_position + 1 - length;
  return r;
}

}  // namespace ag::glm4v
