// RMSNorm family, bf16 storage, fp32 math: one block per row.
//   rms_norm:          out = w * (x * rsqrt(mean(x^2) + eps))
//   rms_norm_residual: out = residual + rms_norm(x)        (out may alias residual)
//   add_rms_norm:      sum = a + b; normed = rms_norm(sum)  (sum may alias a)
// Rounding follows the CPU reference kernels of the fused ops: fp32 inside, bf16 at the outputs.
#ifndef AUTOGLM_KERNELS_CUDA_NORM_CUH_
#define AUTOGLM_KERNELS_CUDA_NORM_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

// n % 8 == 0.
cudaError_t LaunchRmsNorm(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t rows, int64_t n, float eps,
                          __nv_bfloat16* out, cudaStream_t stream);
cudaError_t LaunchRmsNormResidual(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* residual,
                                  int64_t rows, int64_t n, float eps, __nv_bfloat16* out, cudaStream_t stream);
cudaError_t LaunchAddRmsNorm(const __nv_bfloat16* a, const __nv_bfloat16* b, const __nv_bfloat16* w, int64_t rows,
                             int64_t n, float eps, __nv_bfloat16* sum, __nv_bfloat16* normed, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_NORM_CUH_
