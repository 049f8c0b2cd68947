// exp over four floats at a time, for the host's sampler: a constrained row is sampled on the host,
// and std::exp one id at a time was most of its 0.84 ms at GLM-4's 151,552 ids. Cephes' expf
// (range reduction by ln 2 in two parts, a degree-5 polynomial on [-ln2/2, ln2/2]): within 2 ulp
// of std::exp over the range it is used for. GCC's and clang's vector extensions at SSE's width (every
// x86-64 has it; wider vectors would change the ABI of these functions without AVX), no intrinsics.
#ifndef AUTOGLM_KERNELS_REF_EXP4_H_
#define AUTOGLM_KERNELS_REF_EXP4_H_

#include <cstdint>
#include <cstring>

namespace ag::ref {

using Float4 = float __attribute__((vector_size(16)));
using Int4 = int32_t __attribute__((vector_size(16)));

inline Float4 Splat(float v) { return Float4{v, v, v, v}; }

inline Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof(v)); }

// `yes` where the mask's lane is all ones, `no` where it is zero (a comparison's result).
inline Float4 Select(Int4 mask, Float4 yes, Float4 no) {
  return reinterpret_cast<Float4>((mask & reinterpret_cast<Int4>(yes)) | (~mask & reinterpret_cast<Int4>(no)));
}

// exp(x) for x <= 0; x below -87.3 (and -inf) gives exp(-87.3), about 1.2e-38 (a sampler's weight
// that small is nothing beside the largest, which is 1). NaN is the caller's to keep out.
inline Float4 ExpNonPositive(Float4 x) {
  const Float4 lowest = Splat(-87.33654f);
  x = Select(x < lowest, lowest, x);
  // n = round(x / ln 2): adding 1.5 x 2^23 leaves the rounded integer in the float's low bits.
  const Float4 magic = Splat(12582912.0f);
  const Float4 n = (x * Splat(1.44269504088896341f) + magic) - magic;
  const Float4 r = (x - n * Splat(0.693359375f)) - n * Splat(-2.12194440e-4f);
  Float4 p = Splat(1.9875691500e-4f);
  p = p * r + Splat(1.3981999507e-3f);
  p = p * r + Splat(8.3334519073e-3f);
  p = p * r + Splat(4.1665795894e-2f);
  p = p * r + Splat(1.6666665459e-1f);
  p = p * r + Splat(5.0000001201e-1f);
  p = p * (r * r) + r + Splat(1.0f);
  const Int4 exponent = (__builtin_convertvector(n, Int4) + 127) << 23;  // 2^n, n in [-126, 0]
  return p * reinterpret_cast<Float4>(exponent);
}

}  // namespace ag::ref

#endif  // AUTOGLM_KERNELS_REF_EXP4_H_
