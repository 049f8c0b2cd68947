// The antialiased bicubic resize of 8-bit images that the GLM-4.1V default
// processor runs (torchvision's resize on a uint8 tensor, which is ATen's
// uint8 path, Pillow-SIMD's integer algorithm): for each axis, per output
// sample the Keys cubic (a = -0.5) stretched by the downscale factor over the
// input samples it covers, normalised in double, then turned into int16
// weights with the most precision that keeps the largest weight below 2^15;
// the sum of weights times samples (int32, starting from half an output step)
// shifted right by that precision and clamped to [0, 255]. The horizontal
// pass runs first into an 8-bit buffer, then the vertical pass; an axis whose
// size does not change is not passed over at all.
#include "image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ref/parallel.h"

namespace ag::image {
namespace {

double Cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// The taps of one axis: for output sample i, `size[i]` weights starting at input `first[i]`.
struct Taps {
  std::vector<int64_t> first, size;
  std::vector<int16_t> weight;  // [out, max_taps]
  int max_taps = 0;
  int precision = 0;
};

Taps AxisTaps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;  // interp_size 4, halved, stretched when shrinking
  const int max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.max_taps = max_taps;
  t.first.resize(out);
  t.size.resize(out);
  std::vector<double> w(static_cast<size_t>(out) * max_taps, 0.0);
  double w_max = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xsize = std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - xmin,
                                              0, max_taps);
    double total = 0.0;
    double* wi = w.data() + i * max_taps;
    for (int64_t j = 0; j < xsize; ++j) {
      wi[j] = Cubic((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        wi[j] /= total;
        w_max = std::max(w_max, wi[j]);
      }
    }
    t.first[i] = xmin;
    t.size[i] = xsize;
  }
  int precision = 0;
  for (; precision < 22; ++precision) {
    const int next = static_cast<int>(0.5 + w_max * (1 << (precision + 1)));
    if (next >= (1 << 15)) break;
  }
  t.precision = precision;
  t.weight.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << precision);
    t.weight[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return t;
}

uint8_t Finish(int32_t sum, int precision) {
  return static_cast<uint8_t>(std::clamp(sum >> precision, 0, 255));  // arithmetic shift: floor, as srai
}

}  // namespace

namespace {

// Output rows [y_begin, y_end) of the width pass: each output column from the taps of its input
// columns. (Plain locals, not a lambda's captures: the compiler keeps them in registers.)
void ResizeWidthRows(const RgbImage& src, const Taps& t, int64_t y_begin, int64_t y_end, RgbImage& next) {
  const int out_width = next.width, precision = t.precision, max_taps = t.max_taps;
  const int32_t half = precision > 0 ? 1 << (precision - 1) : 0;
  const int16_t* weights = t.weight.data();
  const int64_t* first = t.first.data();
  const int64_t* size = t.size.data();
  for (int64_t y = y_begin; y < y_end; ++y) {
    const uint8_t* row = src.rgb.data() + static_cast<size_t>(y) * src.width * 3;
    uint8_t* out = next.rgb.data() + static_cast<size_t>(y) * out_width * 3;
    for (int x = 0; x < out_width; ++x) {
      const int16_t* w = weights + static_cast<size_t>(x) * max_taps;
      const uint8_t* in = row + first[x] * 3;
      int32_t r = half, g = half, b = half;
      for (int64_t j = 0; j < size[x]; ++j, in += 3) {
        r += w[j] * in[0];
        g += w[j] * in[1];
        b += w[j] * in[2];
      }
      out[x * 3 + 0] = Finish(r, precision);
      out[x * 3 + 1] = Finish(g, precision);
      out[x * 3 + 2] = Finish(b, precision);
    }
  }
}

// Output rows [y_begin, y_end) of the height pass: each a weighted sum of whole input rows
// (contiguous: the compiler vectorises it).
void ResizeHeightRows(const RgbImage& src, const Taps& t, int64_t y_begin, int64_t y_end, RgbImage& next) {
  const size_t stride = static_cast<size_t>(src.width) * 3;
  const int precision = t.precision;
  const int32_t half = precision > 0 ? 1 << (precision - 1) : 0;
  std::vector<int32_t> sum(stride);
  for (int64_t y = y_begin; y < y_end; ++y) {
    const int16_t* w = t.weight.data() + static_cast<size_t>(y) * t.max_taps;
    std::fill(sum.begin(), sum.end(), half);
    for (int64_t j = 0; j < t.size[y]; ++j) {
      const uint8_t* in = src.rgb.data() + static_cast<size_t>(t.first[y] + j) * stride;
      const int32_t wj = w[j];
      for (size_t k = 0; k < stride; ++k) sum[k] += wj * in[k];
    }
    uint8_t* out = next.rgb.data() + static_cast<size_t>(y) * stride;
    for (size_t k = 0; k < stride; ++k) out[k] = Finish(sum[k], precision);
  }
}

// Rows are resized on their own: an image is split over the cores, a few dozen rows a thread at least.
constexpr int64_t kMinRowsPerThread = 32;

RgbImage ResizeWidth(const RgbImage& src, int out_width) {
  const Taps t = AxisTaps(src.width, out_width);
  RgbImage next{src.height, out_width, std::vector<uint8_t>(static_cast<size_t>(src.height) * out_width * 3)};
  ParallelFor(src.height, kMinRowsPerThread,
              [&](int64_t begin, int64_t end) { ResizeWidthRows(src, t, begin, end, next); });
  return next;
}

RgbImage ResizeHeight(const RgbImage& src, int out_height) {
  const Taps t = AxisTaps(src.height, out_height);
  RgbImage next{out_height, src.width, std::vector<uint8_t>(static_cast<size_t>(out_height) * src.width * 3)};
  ParallelFor(out_height, kMinRowsPerThread,
              [&](int64_t begin, int64_t end) { ResizeHeightRows(src, t, begin, end, next); });
  return next;
}

}  // namespace

RgbImage ResizeBicubicAntialias(const RgbImage& src, int out_height, int out_width) {
  if (out_width == src.width && out_height == src.height) return src;
  if (out_width == src.width) return ResizeHeight(src, out_height);
  RgbImage wide = ResizeWidth(src, out_width);
  return out_height == src.height ? wide : ResizeHeight(wide, out_height);
}

}  // namespace ag::image
