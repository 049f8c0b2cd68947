#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/input_quant.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// One block per row, as the RMSNorm kernel: the row is kept in shared memory
// (fp32) between its passes; each thread touches only its own elements of it,
// so only the reductions need barriers.
template <bool kNorm, bool kFp8>
__global__ void __launch_bounds__(kThreads) QuantizeInputRowsKernel(const bf16* __restrict__ x,
                                                                   const bf16* __restrict__ w, int64_t n, float eps,
                                                                   bf16* __restrict__ out) {
  extern __shared__ float row[];
  AllowNextKernel();
  WaitForPreviousKernel();
  __shared__ float sums[kWarps], maxima[kWarps];
  const int64_t r = blockIdx.x;
  const bf16* xr = x + r * n;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    float v[8];
    ToFloat8(Load8(xr + i), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      row[i + j] = v[j];
      sum += v[j] * v[j];
    }
  }
  const float scale = kNorm ? rsqrtf(BlockSum<kWarps>(sum, sums) / static_cast<float>(n) + eps) : 1.0f;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    if (kNorm) {  // the norm's output as the bf16 linear would read it
      float wv[8], y[8];
      ToFloat8(Load8(w + i), wv);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = wv[j] * (row[i + j] * scale);
      ToFloat8(FromFloat8(y), y);
#pragma unroll
      for (int j = 0; j < 8; ++j) row[i + j] = y[j];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(row[i + j]));
  }
  amax = WarpMax(amax);
  if (threadIdx.x % 32 == 0) maxima[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kWarps; ++k) amax = fmaxf(amax, maxima[k]);
  // A zero row stays zero; a row with an infinity (or NaN) is passed on as it is.
  const bool quantize = amax > 0.0f && isfinite(amax);
  const float s = quantize ? __fdiv_rn(amax, kFp8 ? 448.0f : 127.5f) : 1.0f;
  for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float q = __fdiv_rn(row[i + j], s);
      float c;
      if (kFp8) {
        const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
        c = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
      } else {
        c = rintf(fminf(fmaxf(q, -128.0f), 127.0f));
      }
      y[j] = quantize ? __fmul_rn(s, c) : row[i + j];
    }
    Store8(out + r * n + i, FromFloat8(y));
  }
}

template <bool kNorm, bool kFp8>
cudaError_t Launch(const bf16* x, const bf16* w, int64_t rows, int64_t n, float eps, bf16* out, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  if (smem > 200 * 1024) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<QuantizeInputRowsKernel<kNorm, kFp8>>();
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(QuantizeInputRowsKernel<kNorm, kFp8>, dim3(static_cast<unsigned>(rows)), dim3(kThreads), smem,
                      stream, x, w, n, eps, out);
}

}  // namespace

cudaError_t LaunchQuantizeInputRows(const bf16* x, const bf16* norm_w, int64_t rows, int64_t k, float eps,
                                    InputQuantCode code, bf16* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (k % 8 != 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  const bool fp8 = code == InputQuantCode::kFp8;
  if (norm_w != nullptr) {
    return fp8 ? Launch<true, true>(x, norm_w, rows, k, eps, out, stream)
               : Launch<true, false>(x, norm_w, rows, k, eps, out, stream);
  }
  return fp8 ? Launch<false, true>(x, nullptr, rows, k, eps, out, stream)
             : Launch<false, false>(x, nullptr, rows, k, eps, out, stream);
}

}  // namespace ag::cuda
