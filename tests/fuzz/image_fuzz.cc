// Fuzz target: image files (PNG, JPEG, WebP by their magic), decoded with the
// engine's limits, then run through the GLM-4.1V processor with a small pixel
// budget. A decoded image must have the size it claims; the processor must
// give a whole number of merge blocks of finite values. A PNG the fast path
// takes (image/png_fast.h) must be one libpng reads, to the same pixels.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "image/image.h"
#include "image/png_fast.h"
#include "image/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ag::image::DecodeLimits limits;
  limits.max_width = limits.max_height = 4096;
  limits.max_pixels = 1 << 20;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (std::optional<ag::image::RgbImage> fast = ag::image::DecodeCommonPng(bytes, limits)) {
    absl::StatusOr<ag::image::RgbImage> libpng = ag::image::DecodePngLibpng(bytes, "fuzz", limits);
    if (!libpng.ok() || libpng->width != fast->width || libpng->height != fast->height || libpng->rgb != fast->rgb) {
      __builtin_trap();
    }
  }
  absl::StatusOr<ag::image::RgbImage> image = ag::image::Decode(bytes, "fuzz", limits);
  if (!image.ok()) return 0;
  if (image->rgb.size() != static_cast<size_t>(image->height) * image->width * 3) __builtin_trap();
  ag::image::ProcessorConfig config;
  config.max_pixels = 2 * 28 * 28 * 64;  // at most 64 merge blocks: fuzzing stays fast
  config.min_pixels = 2 * 28 * 28;
  absl::StatusOr<ag::image::Patches> patches = ag::image::Preprocess(*image, config, "fuzz");
  if (!patches.ok()) return 0;
  if (patches->grid_h % 2 != 0 || patches->grid_w % 2 != 0 ||
      patches->pixels.size() != static_cast<size_t>(patches->rows() * config.patch_values())) {
    __builtin_trap();
  }
  for (float v : patches->pixels) {
    if (!std::isfinite(v)) __builtin_trap();
  }
  return 0;
}
