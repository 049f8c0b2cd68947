// Weight-only quantized GEMV for decode (issue 18): y[m, n] = x[m, k] . W[n, k]^T
// with W = s * (q - z) stored as quant_pack.h packs it (int4 or int8 codes,
// a scale per group of 32, 64 or 128 inputs or per row, a zero point per group
// for asymmetric formats), dequantized in registers: the weight crosses the
// memory bus at 4 or 8 bits, the reason to quantize at decode.
#ifndef AUTOGLM_KERNELS_CUDA_QUANT_GEMV_CUH_
#define AUTOGLM_KERNELS_CUDA_QUANT_GEMV_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

struct QuantWeight {
  const uint32_t* codes = nullptr;  // [n, PackedRowWords(k, bits)]
  const float* scales = nullptr;    // [n, groups] fp32 (per-row scales: groups = 1)
  const uint8_t* zeros = nullptr;   // [n, groups], or null: symmetric, z = 2^(bits-1)
  int bits = 4;                     // 4 or 8
  int64_t group = 0;                // inputs per scale; 0: the whole row
  int64_t n = 0, k = 0;
};

inline constexpr int64_t kQuantGemvMaxRows = 8;  // x rows (decode tokens) one launch takes

// One warp per output column n, all m rows of x at once; fp32 accumulation,
// y rounded to bf16. x and y are [m, k] and [m, n] bf16, device memory.
// cudaErrorInvalidValue when m is outside [1, kQuantGemvMaxRows], bits is not
// 4 or 8, k is not a multiple of 128 / bits, or the group does not divide k.
cudaError_t LaunchQuantGemv(const __nv_bfloat16* x, int64_t m, const QuantWeight& w, __nv_bfloat16* y,
                            cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_QUANT_GEMV_CUH_
