// W8A8 checkpoints (compressed-tensors input_activations, dynamic per token):
// the linear's input rows rounded through 8-bit codes before the product.
// Each row of x (normalised first when the linear has an RMSNorm prologue,
// rounded to bf16 as the norm's output is) gets s = amax / 448 (fp8) or
// amax / 127.5 (int8) and becomes bf16(s * c(x / s)), c = e4m3 saturating or
// clamp(rne, -128, 127): ref::QuantizeInputRows' values (IEEE division), then
// stored bf16 for the product kernels, which are unchanged. E4M3 values and
// int8 codes are exact in bf16, so a kernel multiplying codes (mma e4m3) and
// applying s per row later computes the same products: past
// kQuantLinearMaxRows rows on Hopper the W8A8 GEMM (w8a8_gemm_layout.h) does,
// reading the codes LaunchQuantizeInputCodes leaves in the scratch.
#ifndef AUTOGLM_KERNELS_CUDA_INPUT_QUANT_CUH_
#define AUTOGLM_KERNELS_CUDA_INPUT_QUANT_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/w8a8_gemm_layout.h"

namespace ag::cuda {

enum class InputQuantCode : uint8_t { kFp8, kInt8 };

// x [rows, k] -> out [rows, k]; norm_w [k] or null (no norm). k % 8 == 0; out must not alias x.
cudaError_t LaunchQuantizeInputRows(const __nv_bfloat16* x, const __nv_bfloat16* norm_w, int64_t rows, int64_t k,
                                    float eps, InputQuantCode code, __nv_bfloat16* out, cudaStream_t stream);

// Where a W8A8 linear's rounded x lives as codes: [rows, k] bytes (e4m3, or int8), a scale a row,
// and (int8) each row's sum of codes -- W8A8ScratchLayout's places in `scratch`.
struct InputCodes {
  unsigned char* codes = nullptr;
  float* scales = nullptr;
  int32_t* sums = nullptr;
};
inline InputCodes InputCodesIn(void* scratch, int64_t rows, int64_t k) {
  const W8A8Scratch l = W8A8ScratchLayout(rows, k);
  auto* base = static_cast<unsigned char*>(scratch);
  return {base, reinterpret_cast<float*>(base + l.scales), reinterpret_cast<int32_t*>(base + l.sums)};
}

// The same rounding with the codes, not their values, as the result: x [rows, k] (k % 16 == 0) ->
// InputCodesIn(scratch, rows, k), W8A8ScratchLayout(rows, k).bytes of it. The codes are exactly
// those whose values LaunchQuantizeInputRows writes; the scale is s (1 for a zero row, NaN for a
// row holding an infinity or NaN).
cudaError_t LaunchQuantizeInputCodes(const __nv_bfloat16* x, const __nv_bfloat16* norm_w, int64_t rows, int64_t k,
                                     float eps, InputQuantCode code, void* scratch, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_INPUT_QUANT_CUH_
