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

inline uint16_t FloatToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float RoundToBF16(float f) { return BF16ToFloat(FloatToBF16(f)); }

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
