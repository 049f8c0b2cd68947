// Images as the engine takes them: decoded from PNG, JPEG or WebP bytes to
// 8-bit RGB, with any transparency composited on white, exactly as the
// Hugging Face processors' PIL front end does (transformers' convert_to_rgb:
// PIL's alpha_composite onto an opaque white background). Pixels are data
// here: files, data URLs and limits on who may read what belong to the tools
// and the server. This room depends on nothing else in the project.
#ifndef AUTOGLM_IMAGE_IMAGE_H_
#define AUTOGLM_IMAGE_IMAGE_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace ag::image {

// Row-major height x width x 3 bytes.
struct RgbImage {
  int height = 0;
  int width = 0;
  std::vector<uint8_t> rgb;

  uint8_t at(int y, int x, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

// Checked against the file's header before any pixel is allocated.
struct DecodeLimits {
  int64_t max_width = 20000;
  int64_t max_height = 20000;
  int64_t max_pixels = int64_t{100} << 20;  // 100 M pixels: 300 MB of RGB
};

enum class Format { kPng, kJpeg, kWebp, kUnknown };
// The format by its first bytes (magic numbers), whatever the file is called.
Format SniffFormat(absl::string_view bytes);

// Decodes a whole file. Truncated or corrupt data, an unsupported format, or
// a size over the limits is an error naming `source` (a path, "messages[0].content[1]").
absl::StatusOr<RgbImage> Decode(absl::string_view bytes, absl::string_view source, const DecodeLimits& limits = {});

// PIL's alpha_composite of a straight-alpha RGBA pixel over opaque white, in its
// integer arithmetic (what transformers' convert_to_rgb computes).
void CompositeOnWhite(const uint8_t* rgba, int64_t pixels, uint8_t* rgb);

}  // namespace ag::image

#endif  // AUTOGLM_IMAGE_IMAGE_H_
