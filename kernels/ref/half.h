// Scalar conversions between float and the 16-bit float formats (bf16, f16).
// Header-only and dependency-free, so that loaders and backends share it.
// Round to nearest even, NaN preserved; used where data changes dtype on the
// host (checkpoint loading, bf16 emulation on the CPU).
#ifndef AUTOGLM_KERNELS_REF_HALF_H_
#define AUTOGLM_KERNELS_REF_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ag {

inline float BF16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Branch-free, so that a loop of it vectorises (staging an image's patches is tens of megabytes).
inline uint16_t FloatToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

inline float RoundToBF16(float f) { return BF16ToFloat(FloatToBF16(f)); }

// n values at once, in blocks of a fixed size: GCC's cheap vectoriser at -O2 takes such a loop and
// not the plain one (a screenshot's 63 MB of patches: 17.6 -> 12 ms on two cores).
inline void FloatsToBF16(const float* src, int64_t n, uint16_t* dst) {
  constexpr int64_t kBlock = 16;
  const int64_t whole = n / kBlock * kBlock;
  for (int64_t i = 0; i < whole; i += kBlock) {
    for (int64_t k = 0; k < kBlock; ++k) dst[i + k] = FloatToBF16(src[i + k]);
  }
  for (int64_t i = whole; i < n; ++i) dst[i] = FloatToBF16(src[i]);
}

// n bf16 values widened to float (exact).
inline void BF16sToFloats(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(src[i]);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7E00;
  if (a >= 65520.0f) return sign | 0x7C00;  // rounds to infinity
  if (a < 6.103515625e-05f) {               // subnormal: multiples of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, 11)));  // 11 significant bits
  if (mant == 2048) {
    mant = 1024;
    ++e;
  }
  return sign | static_cast<uint16_t>(((e + 14) << 10) | (mant & 0x3FF));
}

}  // namespace ag

#endif  // AUTOGLM_KERNELS_REF_HALF_H_
