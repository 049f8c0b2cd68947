// Reference kernels for the elementwise, normalisation and matrix ops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ref/ref.h"

namespace ag::ref {

void Embedding(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden, float* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    std::memcpy(out + t * hidden, table + static_cast<int64_t>(ids[t]) * hidden, sizeof(float) * hidden);
  }
}

void RmsNorm(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
    float* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = w[i] * (xr[i] * scale);
  }
}

namespace {

// Dot product with eight independent partial sums, so the compiler can keep
// several multiply-adds in flight.
float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

void Linear(const float* x, const float* w, const float* bias, int64_t rows, int64_t in, int64_t out_features,
            float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    float* yr = y + r * out_features;
    for (int64_t o = 0; o < out_features; ++o) {
      yr[o] = Dot(xr, w + o * in, in) + (bias != nullptr ? bias[o] : 0.0f);
    }
  }
}

void Add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void SumParts(const float* const* parts, int num_parts, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float sum = parts[0][i];
    for (int p = 1; p < num_parts; ++p) sum += parts[p][i];
    out[i] = sum;
  }
}

void InterleaveColumns(const float* rank_major, int num_parts, int64_t rows, int64_t cols, float* out) {
  for (int p = 0; p < num_parts; ++p) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = rank_major + (p * rows + r) * cols;
      std::copy(src, src + cols, out + r * num_parts * cols + p * cols);
    }
  }
}

void Mul(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void Silu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SliceColumns(const float* x, int64_t rows, int64_t cols, int64_t start, int64_t size, float* out) {
  for (int64_t r = 0; r < rows; ++r) std::memmove(out + r * size, x + r * cols + start, sizeof(float) * size);
}

void GatherRows(const float* x, const int32_t* rows, int64_t num_rows, int64_t width, float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    std::memcpy(out + r * width, x + static_cast<int64_t>(rows[r]) * width, sizeof(float) * width);
  }
}

// The first index of the largest value that is not NaN (0 when the first value is NaN: nothing
// beats it). A scan keeping the best index waits on each compare (~2.6 ns an element: 0.4 ms for a
// 151,552-id row); eight independent running maxima vectorise, then the first index holding the
// maximum is found.
void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out) {
  constexpr int kLanes = 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    if (n <= 0 || std::isnan(xr[0])) {
      out[r] = 0;
      continue;
    }
    float lane[kLanes];
    std::fill(lane, lane + kLanes, xr[0]);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] < xr[i + j] ? xr[i + j] : lane[j];  // a NaN never wins
    }
    float best = lane[0];
    for (int j = 1; j < kLanes; ++j) best = best < lane[j] ? lane[j] : best;
    for (; i < n; ++i) best = best < xr[i] ? xr[i] : best;
    int64_t at = 0;
    while (!(xr[at] == best)) ++at;  // best is one of the values: found
    out[r] = static_cast<int32_t>(at);
  }
}

}  // namespace ag::ref
