// Reference kernels for the GLM-4.1V vision tower and for putting its rows
// into the decoder's embeddings. ../shared/GLM4V_SPEC.md section 3 gives the
// math; each follows transformers' fp32 computation.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ref/ref.h"

namespace ag::ref {
namespace {

// torch's cubic convolution with A = -0.75 (grid_sample's bicubic).
constexpr float kCubicA = -0.75f;
float Cubic1(float x) { return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1; }
float Cubic2(float x) { return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA; }
void CubicCoefficients(float t, float c[4]) {
  c[0] = Cubic2(t + 1.0f);
  c[1] = Cubic1(t);
  c[2] = Cubic1(1.0f - t);
  c[3] = Cubic2(2.0f - t);
}

}  // namespace

void ScatterRows(const float* x, int64_t tokens, const float* src, const int32_t* rows, int64_t m, int64_t width,
                 float* out) {
  if (out != x) std::copy(x, x + tokens * width, out);
  for (int64_t i = 0; i < m; ++i) std::copy(src + i * width, src + (i + 1) * width, out + int64_t{rows[i]} * width);
}

void LayerNorm(const float* x, const float* w, const float* b, int64_t rows, int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = (xr[i] - static_cast<float>(mean)) * rstd * w[i] + b[i];
  }
}

void Gelu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
}

void VisionPosEmbed(const float* x, const float* table, int64_t side, const int32_t* patch_pos, int64_t rows,
                    int64_t width, float* out) {
  const float size = static_cast<float>(side);
  auto tap = [&](int64_t i) { return std::clamp<int64_t>(i, 0, side - 1); };  // border padding
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* p = patch_pos + r * 4;
    // Normalised grid coordinates in [-1, 1], then torch's unnormalisation (corners not aligned).
    const float gx = ((static_cast<float>(p[1]) + 0.5f) / static_cast<float>(p[3])) * 2.0f - 1.0f;
    const float gy = ((static_cast<float>(p[0]) + 0.5f) / static_cast<float>(p[2])) * 2.0f - 1.0f;
    const float ix = ((gx + 1.0f) * size - 1.0f) / 2.0f, iy = ((gy + 1.0f) * size - 1.0f) / 2.0f;
    const float fx = std::floor(ix), fy = std::floor(iy);
    float cx[4], cy[4];
    CubicCoefficients(ix - fx, cx);
    CubicCoefficients(iy - fy, cy);
    const int64_t x0 = static_cast<int64_t>(fx) - 1, y0 = static_cast<int64_t>(fy) - 1;
    std::fill(row.begin(), row.end(), 0.0f);
    for (int i = 0; i < 4; ++i) {
      const float* line = table + tap(y0 + i) * side * width;
      for (int64_t c = 0; c < width; ++c) {
        const float along_x = line[tap(x0) * width + c] * cx[0] + line[tap(x0 + 1) * width + c] * cx[1] +
                              line[tap(x0 + 2) * width + c] * cx[2] + line[tap(x0 + 3) * width + c] * cx[3];
        row[c] += along_x * cy[i];
      }
    }
    for (int64_t c = 0; c < width; ++c) out[r * width + c] = x[r * width + c] + row[c];
  }
}

void VisionRotary(const float* x, const int32_t* patch_pos, int64_t rows, int64_t heads, int64_t head_dim, float theta,
                  float* out) {
  VisionRotaryRows(x, heads * head_dim, patch_pos, rows, heads, head_dim, theta, out, heads * head_dim);
}

void VisionRotaryRows(const float* x, int64_t x_stride, const int32_t* patch_pos, int64_t rows, int64_t heads,
                      int64_t head_dim, float theta, float* out, int64_t out_stride) {
  const int64_t quarter = head_dim / 4, half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t k = 0; k < quarter; ++k) {
    inv_freq[k] = 1.0f / std::pow(theta, static_cast<float>(2 * k) / static_cast<float>(half));
  }
  std::vector<float> cos_a(static_cast<size_t>(half)), sin_a(static_cast<size_t>(half)), head(static_cast<size_t>(head_dim));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < half; ++d) {
      const float pos = static_cast<float>(patch_pos[r * 4 + (d < quarter ? 0 : 1)]);
      const float angle = pos * inv_freq[d % quarter];
      cos_a[d] = std::cos(angle);
      sin_a[d] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x + r * x_stride + h * head_dim;
      std::copy(xh, xh + head_dim, head.begin());  // then out may be x
      float* oh = out + r * out_stride + h * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) {
        const float rotated = d < half ? -head[d + half] : head[d - half];
        oh[d] = head[d] * cos_a[d % half] + rotated * sin_a[d % half];
      }
    }
  }
}

void SegmentAttention(const float* q, const float* k, const float* v, const int32_t* offsets, int64_t segments,
                      int64_t heads, int64_t head_dim, float* out, int64_t in_stride) {
  const int64_t width = heads * head_dim, stride = in_stride > 0 ? in_stride : width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> scores;
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t begin = offsets[s], end = offsets[s + 1];
    scores.resize(static_cast<size_t>(end - begin));
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* qi = q + i * stride + h * head_dim;
        float best = -INFINITY;
        for (int64_t j = begin; j < end; ++j) {
          const float* kj = k + j * stride + h * head_dim;
          float dot = 0.0f;
          for (int64_t d = 0; d < head_dim; ++d) dot += qi[d] * kj[d];
          scores[j - begin] = dot * scale;
          best = std::max(best, scores[j - begin]);
        }
        float total = 0.0f;
        for (float& sc : scores) {
          sc = std::exp(sc - best);
          total += sc;
        }
        float* oi = out + i * width + h * head_dim;
        std::fill(oi, oi + head_dim, 0.0f);
        for (int64_t j = begin; j < end; ++j) {
          const float p = scores[j - begin] / total;
          const float* vj = v + j * stride + h * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) oi[d] += p * vj[d];
        }
      }
    }
  }
}

void MergeRows(const float* x, int64_t rows, int64_t width, int64_t group, float* out) {
  for (int64_t e = 0; e < rows / group; ++e) {
    for (int64_t j = 0; j < group; ++j) {
      for (int64_t c = 0; c < width; ++c) out[e * group * width + c * group + j] = x[(e * group + j) * width + c];
    }
  }
}

}  // namespace ag::ref
