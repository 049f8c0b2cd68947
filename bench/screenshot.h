// A synthetic phone screenshot for the benchmarks that time the image path.
#ifndef AUTOGLM_BENCH_SCREENSHOT_H_
#define AUTOGLM_BENCH_SCREENSHOT_H_

#include <cstdint>

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

}  // namespace ag::bench

#endif  // AUTOGLM_BENCH_SCREENSHOT_H_
