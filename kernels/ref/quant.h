// Reference weight quantization (round to nearest, no calibration data) and
// exact dequantization: the oracle of every quantized kernel. The formats are
// ir/quant.h's; this file knows only sizes and pointers.
//
// Codes are one byte per weight here (an int4 code in the low nibble); how a
// device packs them is its own business. Scales are fp32; group scales are
// rounded up to bf16 values before the weights are quantized with them, so the
// stored scale is the scale used and a bf16 scale on a device loses nothing.
// Dequantization is exact in fp32: s * (q - z) has at most 8 + 9 significant bits.
#ifndef AUTOGLM_KERNELS_REF_QUANT_H_
#define AUTOGLM_KERNELS_REF_QUANT_H_

#include <cstdint>

namespace ag::ref {

// OCP FP8 E4M3 ("fn": no infinities, 0x7F/0xFF are NaN, largest finite 448).
// Round to nearest even, saturating to +-448 (PTX cvt.rn.satfinite.e4m3x2.f32); NaN -> 0x7F.
uint8_t FloatToE4M3(float x);
float E4M3ToFloat(uint8_t code);

struct QuantSpec {
  bool fp8 = false;       // E4M3 codes, one scale per row; else unsigned integers of `bits`
  int bits = 8;           // 4 or 8 (integer formats)
  int64_t group = 0;      // inputs per scale; 0: the whole row
  bool symmetric = true;  // integer formats: zero point 2^(bits-1), else one per group

  int64_t Groups(int64_t k) const { return group == 0 ? 1 : k / group; }
};

// Quantizes w [n, k] row by row: codes [n, k], scales [n, groups], zeros
// [n, groups] (asymmetric integer formats only; may be null otherwise).
// Returns false, writing nothing useful, when w holds a NaN or an infinity.
//   integer, symmetric:  s = amax / (2^(b-1) - 1),  q = clamp(rne(w / s), -2^(b-1), 2^(b-1) - 1) + 2^(b-1)
//   integer, asymmetric: lo = min(w, 0), hi = max(w, 0), s = (hi - lo) / (2^b - 1),
//                        z = clamp(rne(-lo / s), 0, 2^b - 1), q = clamp(rne(w / s) + z, 0, 2^b - 1)
//   fp8:                 s = amax / 448, q = e4m3(w / s)
// An all-zero group gets s = 1.
bool QuantizeRows(const float* w, int64_t n, int64_t k, const QuantSpec& spec, uint8_t* codes, float* scales,
                  uint8_t* zeros);
// w = s * (q - z) (integers), s * e4m3(q) (fp8).
void DequantizeRows(const uint8_t* codes, const float* scales, const uint8_t* zeros, int64_t n, int64_t k,
                    const QuantSpec& spec, float* w);

// The 8-bit KV cache: each of `rows` rows of `d` values (one token's K or V
// of one KV head) is stored as codes with an fp32 scale, s = amax / 448 (fp8)
// or amax / 127 (int8, symmetric, round to nearest even), 1 for a zero row.
// Replaces each row by what the cache gives back: s * e4m3(x / s) or s * rne(x / s).
void RoundTripKvRows(float* x, int64_t rows, int64_t d, bool fp8);
// The same with a checkpoint's static scale `s` for every row (a compressed-tensors
// kv_cache_scheme): codes saturate at +-448 (fp8) or +-127 (int8), as vLLM writes them.
void RoundTripKvRowsWithScale(float* x, int64_t rows, int64_t d, bool fp8, float s);

// A linear's input rows the way a W8A8 checkpoint's dynamic per-token scheme rounds them before
// the product (compressed-tensors' quantize-dequantize, the oracle): each row of k values gets
//   fp8:  s = amax / 448,   x <- s * e4m3(x / s)                       (saturating)
//   int8: s = amax / 127.5, x <- s * clamp(rne(x / s), -128, 127)      (the range is 255 steps wide)
// A zero row stays zero; a row holding a NaN or an infinity is left as it is.
enum class InputQuant : uint8_t { kNone, kFp8, kInt8 };
void QuantizeInputRows(float* x, int64_t rows, int64_t k, InputQuant q);

}  // namespace ag::ref

#endif  // AUTOGLM_KERNELS_REF_QUANT_H_
