// A synthetic phone screenshot for the benchmarks that time the image path, as pixels or as the
// PNG the phone agent sends.
#ifndef AUTOGLM_BENCH_SCREENSHOT_H_
#define AUTOGLM_BENCH_SCREENSHOT_H_

#include <png.h>

#include <cstdint>
#include <string>
#include <vector>

#include "image/image.h"

namespace ag::bench {

// A screenshot-like image: smooth gradients with noise, different for each `seed` (so its hash differs).
inline image::RgbImage Screenshot(int width, int height, uint32_t seed) {
  image::RgbImage img;
  img.width = width;
  img.height = height;
  img.rgb.resize(static_cast<size_t>(width) * height * 3);
  uint32_t state = seed * 2654435761u + 1;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      state = state * 1664525u + 1013904223u;
      for (int c = 0; c < 3; ++c) {
        const int v = (x * (c + 1) + y * (3 - c)) / 8 + static_cast<int>((state >> (8 * c)) & 15);
        img.rgb[(static_cast<size_t>(y) * width + x) * 3 + c] = static_cast<uint8_t>(v & 255);
      }
    }
  }
  return img;
}

namespace screenshot_internal {
inline void AppendBytes(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
inline void NoFlush(png_structp) {}
}  // namespace screenshot_internal

// Screenshot(width, height, seed) as the phone sends it: RGBA (opaque), a PNG at zlib's default
// level with libpng's adaptive filters ("" if libpng fails).
inline std::string ScreenshotPng(int width, int height, uint32_t seed) {
  const image::RgbImage rgb = Screenshot(width, height, seed);
  std::vector<uint8_t> rgba(static_cast<size_t>(width) * height * 4, 255);
  for (size_t i = 0; i < static_cast<size_t>(width) * height; ++i) {
    for (int c = 0; c < 3; ++c) rgba[i * 4 + c] = rgb.rgb[i * 3 + c];
  }
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "";
  }
  png_set_write_fn(png, &out, screenshot_internal::AppendBytes, screenshot_internal::NoFlush);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y) png_write_row(png, rgba.data() + static_cast<size_t>(y) * width * 4);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace ag::bench

#endif  // AUTOGLM_BENCH_SCREENSHOT_H_
