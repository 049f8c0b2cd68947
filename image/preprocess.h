// The GLM-4.1V image processor (Glm4vImageProcessor, transformers' default
// torchvision backend), bit for bit: smart_resize, the antialiased bicubic
// resize, CLIP normalisation and the patch order the vision tower reads.
// ../shared/GLM4V_SPEC.md section 4 is the specification.
#ifndef AUTOGLM_IMAGE_PREPROCESS_H_
#define AUTOGLM_IMAGE_PREPROCESS_H_

#include <array>
#include <cstdint>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "image/image.h"
#include "kernels/ref/parallel.h"

namespace ag::image {

// preprocessor_config.json: the fields the pipeline reads.
struct ProcessorConfig {
  int64_t min_pixels = 112 * 112;           // size.shortest_edge (counts 2 * h * w: the image twice in time)
  int64_t max_pixels = 28 * 28 * 15000;     // size.longest_edge
  int patch_size = 14;
  int merge_size = 2;
  int temporal_patch_size = 2;
  std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};
  double rescale_factor = 1.0 / 255.0;

  int factor() const { return patch_size * merge_size; }
  // Values of one patch row: 3 channels x temporal x patch x patch (1176 for GLM-4.1V).
  int64_t patch_values() const { return int64_t{3} * temporal_patch_size * patch_size * patch_size; }
};

// Parses preprocessor_config.json text; a pipeline this engine does not
// implement (no resize, another resampling, other patch geometry) is an error
// naming the field.
absl::StatusOr<ProcessorConfig> ParseProcessorConfig(absl::string_view json_text, absl::string_view source);

// transformers' smart_resize: the (height, width) an image is resized to,
// multiples of patch x merge, within the pixel budget. Python's round() is
// half to even.
absl::StatusOr<std::pair<int, int>> SmartResize(int height, int width, const ProcessorConfig& config);

// One image, ready for the vision program.
struct Patches {
  UninitializedVector<float> pixels;  // [grid_t * grid_h * grid_w, patch_values]
  int64_t grid_t = 1, grid_h = 0, grid_w = 0;
  // A keyed 128-bit hash of what the model sees (the resized pixels and the
  // grid): equal hashes mean equal encoder output. Keyed per process, so
  // nobody can make two images collide on purpose (the prefix cache trusts it).
  std::array<uint64_t, 2> hash = {0, 0};

  int64_t rows() const { return grid_t * grid_h * grid_w; }
};

absl::StatusOr<Patches> Preprocess(const RgbImage& image, const ProcessorConfig& config, absl::string_view source);

// The tokens an image of this grid becomes in the prompt.
inline int64_t ImageTokens(const Patches& p, const ProcessorConfig& config) {
  return p.rows() / (int64_t{config.merge_size} * config.merge_size);
}

// SipHash-2-4 with a 128-bit output under a 128-bit key (reference test vectors hold).
std::array<uint64_t, 2> SipHash128(const uint8_t* data, size_t size, const std::array<uint64_t, 2>& key);

// A keyed 128-bit hash of `size` bytes and the words `tail`, as a tree so that the cores share a big
// image: SipHash128 of each 1 MiB chunk under the key with the chunk's index + 1 folded in, then of
// those digests, the size and `tail` under the key itself.
std::array<uint64_t, 2> TreeHash128(const uint8_t* data, size_t size, const std::vector<int64_t>& tail,
                                    const std::array<uint64_t, 2>& key);

}  // namespace ag::image

#endif  // AUTOGLM_IMAGE_PREPROCESS_H_
