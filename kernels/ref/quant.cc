#include "kernels/ref/quant.h"

#include <algorithm>
#include <cmath>

#include "kernels/ref/half.h"

namespace ag::ref {

uint8_t FloatToE4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7E;  // satfinite
  if (a < 0.015625f) {                  // below the smallest normal 2^-6: steps of 2^-9
    // Codes 0..8 are m * 2^-9 (8 is the smallest normal, whose code is also 8).
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e = 0;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exponent = e - 1;               // a = (2f) * 2^exponent
  int mantissa = static_cast<int>(std::nearbyint((2.0f * f - 1.0f) * 8.0f));
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  const int code = ((exponent + 7) << 3) | mantissa;
  return sign | static_cast<uint8_t>(std::min(code, 0x7E));
}

float E4M3ToFloat(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  float a;
  if (e == 15 && m == 7) {
    a = NAN;
  } else if (e == 0) {
    a = std::ldexp(static_cast<float>(m), -9);
  } else {
    a = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  }
  return (code & 0x80) ? -a : a;
}

namespace {

// The smallest bf16 value >= s (s > 0 and finite): a scale rounded up keeps
// the group's whole range within the format's steps, so no weight moves by more than half a step.
float RoundUpToBF16(float s) {
  const float nearest = RoundToBF16(s);
  if (!(nearest < s)) return nearest;
  return BF16ToFloat(static_cast<uint16_t>(FloatToBF16(nearest) + 1));
}

// One group of `len` weights -> codes, its scale and zero point.
void QuantizeGroup(const float* w, int64_t len, const QuantSpec& spec, uint8_t* codes, float* scale, uint8_t* zero) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < len; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  const float amax = std::max(-lo, hi);
  if (spec.fp8) {
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t i = 0; i < len; ++i) codes[i] = FloatToE4M3(w[i] / s);
    *scale = s;
    return;
  }
  const int levels = (1 << spec.bits) - 1;  // 255, 15
  const int half = 1 << (spec.bits - 1);    // 128, 8
  float s = spec.symmetric ? amax / static_cast<float>(half - 1) : (hi - lo) / static_cast<float>(levels);
  if (spec.group != 0) s = RoundUpToBF16(s);
  if (!(s > 0.0f) || !std::isfinite(s)) s = 1.0f;
  int z = half;
  if (!spec.symmetric) z = static_cast<int>(std::clamp(std::nearbyint(-lo / s), 0.0f, static_cast<float>(levels)));
  for (int64_t i = 0; i < len; ++i) {
    const float q = std::nearbyint(w[i] / s) + static_cast<float>(z);
    codes[i] = static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(levels)));
  }
  *scale = s;
  if (zero != nullptr) *zero = static_cast<uint8_t>(z);
}

}  // namespace

bool QuantizeRows(const float* w, int64_t n, int64_t k, const QuantSpec& spec, uint8_t* codes, float* scales,
                  uint8_t* zeros) {
  for (int64_t i = 0; i < n * k; ++i) {
    if (!std::isfinite(w[i])) return false;
  }
  const int64_t groups = spec.Groups(k), len = k / groups;
  const bool has_zeros = !spec.fp8 && !spec.symmetric;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = r * k + g * len;
      QuantizeGroup(w + at, len, spec, codes + at, scales + r * groups + g,
                    has_zeros ? zeros + r * groups + g : nullptr);
    }
  }
  return true;
}

void DequantizeRows(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t n, int64_t k,
                    const QuantSpec& spec, float* w) {
  const int64_t groups = spec.Groups(k), len = k / groups;
  const bool has_zeros = !spec.fp8 && !spec.symmetric;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scales[r * groups + g];
      const int z = has_zeros ? zeros[r * groups + g] : 1 << (spec.bits - 1);
      for (int64_t i = r * k + g * len; i < r * k + (g + 1) * len; ++i) {
        w[i] = spec.fp8 ? s * E4M3ToFloat(codes[i]) : s * static_cast<float>(static_cast<int>(codes[i]) - z);
      }
    }
  }
}

void RoundTripKvRows(float* x, int64_t rows, int64_t d, bool fp8) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * d;
    float amax = 0.0f;
    for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(row[i]));
    const float s = amax > 0.0f && std::isfinite(amax) ? amax / (fp8 ? 448.0f : 127.0f) : 1.0f;
    RoundTripKvRowsWithScale(row, 1, d, fp8, s);
  }
}

void RoundTripKvRowsWithScale(float* x, int64_t rows, int64_t d, bool fp8, float s) {
  for (int64_t i = 0; i < rows * d; ++i) {
    x[i] = fp8 ? s * E4M3ToFloat(FloatToE4M3(x[i] / s)) : s * std::clamp(std::nearbyint(x[i] / s), -127.0f, 127.0f);
  }
}

void QuantizeInputRows(float* x, int64_t rows, int64_t k, InputQuant q) {
  if (q == InputQuant::kNone) return;
  const bool fp8 = q == InputQuant::kFp8;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * k;
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(row[i]));
    if (!(amax > 0.0f) || !std::isfinite(amax)) continue;
    const float s = amax / (fp8 ? 448.0f : 127.5f);
    for (int64_t i = 0; i < k; ++i) {
      row[i] = fp8 ? s * E4M3ToFloat(FloatToE4M3(row[i] / s)) : s * std::nearbyint(std::clamp(row[i] / s, -128.0f, 127.0f));
    }
  }
}

}  // namespace ag::ref
