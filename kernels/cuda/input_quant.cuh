// W8A8 checkpoints (compressed-tensors input_activations, dynamic per token):
// the linear's input rows rounded through 8-bit codes before the product.
// Each row of x (normalised first when the linear has an RMSNorm prologue,
// rounded to bf16 as the norm's output is) gets s = amax / 448 (fp8) or
// amax / 127.5 (int8) and becomes bf16(s * c(x / s)), c = e4m3 saturating or
// clamp(rne, -128, 127): ref::QuantizeInputRows' values (IEEE division), then
// stored bf16 for the product kernels, which are unchanged. E4M3 values and
// int8 codes are exact in bf16, so a kernel multiplying codes (mma e4m3) and
// applying s per row later computes the same products.
#ifndef AUTOGLM_KERNELS_CUDA_INPUT_QUANT_CUH_
#define AUTOGLM_KERNELS_CUDA_INPUT_QUANT_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

enum class InputQuantCode : uint8_t { kFp8, kInt8 };

// x [rows, k] -> out [rows, k]; norm_w [k] or null (no norm). k % 8 == 0; out must not alias x.
cudaError_t LaunchQuantizeInputRows(const __nv_bfloat16* x, const __nv_bfloat16* norm_w, int64_t rows, int64_t k,
                                    float eps, InputQuantCode code, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_INPUT_QUANT_CUH_
