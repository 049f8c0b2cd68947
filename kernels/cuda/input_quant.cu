#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/input_quant.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// One block per row, as the RMSNorm kernel: the row is kept in shared memory
// (fp32) between its passes; each thread touches only its own elements of it,
// so only the reductions need barriers. kCodes: the row's codes, its scale and
// (int8) the sum of its codes go to `codes` (w8a8_gemm_layout.h's scratch)
// instead of the rounded values to `out`.
template <bool kNorm, bool kFp8, bool kCodes>
__global__ void __launch_bounds__(kThreads) QuantizeInputRowsKernel(const bf16* __restrict__ x,
                                                                   const bf16* __restrict__ w, int64_t n, float eps,
                                                                   bf16* __restrict__ out, InputCodes codes) {
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
  float code_sum = 0.0f;  // int8 codes: exact in fp32 (|sum| <= 128 n < 2^24)
  for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    float y[8];
    uint2 packed = make_uint2(0, 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float q = __fdiv_rn(row[i + j], s);
      float c;
      unsigned byte;
      if (kFp8) {
        const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
        c = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
        byte = code;
      } else {
        c = rintf(fminf(fmaxf(q, -128.0f), 127.0f));
        byte = static_cast<unsigned>(static_cast<int>(c)) & 0xFFu;
      }
      y[j] = quantize ? __fmul_rn(s, c) : row[i + j];
      if (!quantize) byte = 0;
      code_sum += quantize ? c : 0.0f;
      (j < 4 ? packed.x : packed.y) |= byte << (8 * (j % 4));
    }
    if constexpr (kCodes) {
      *reinterpret_cast<uint2*>(codes.codes + r * n + i) = packed;
    } else {
      Store8(out + r * n + i, FromFloat8(y));
    }
  }
  if constexpr (kCodes) {
    // A zero row: codes 0, scale 1. A row with an infinity or NaN cannot be coded: its scale is
    // NaN, so the product's row is NaN (the bf16 path passes such a row on and gets inf or NaN).
    const float total = kFp8 ? 0.0f : BlockSum<kWarps>(code_sum, sums);
    if (threadIdx.x == 0) {
      codes.scales[r] = quantize || amax == 0.0f ? s : __int_as_float(0x7fffffff);
      if (!kFp8) codes.sums[r] = static_cast<int32_t>(total);
    }
  }
}

template <bool kNorm, bool kFp8, bool kCodes>
cudaError_t Launch(const bf16* x, const bf16* w, int64_t rows, int64_t n, float eps, bf16* out, InputCodes codes,
                   cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  if (smem > 200 * 1024) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<QuantizeInputRowsKernel<kNorm, kFp8, kCodes>>();
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(QuantizeInputRowsKernel<kNorm, kFp8, kCodes>, dim3(static_cast<unsigned>(rows)), dim3(kThreads),
                      smem, stream, x, w, n, eps, out, codes);
}

template <bool kCodes>
cudaError_t LaunchFor(const bf16* x, const bf16* norm_w, int64_t rows, int64_t k, float eps, InputQuantCode code,
                      bf16* out, InputCodes codes, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (k % 8 != 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  const bool fp8 = code == InputQuantCode::kFp8;
  if (norm_w != nullptr) {
    return fp8 ? Launch<true, true, kCodes>(x, norm_w, rows, k, eps, out, codes, stream)
               : Launch<true, false, kCodes>(x, norm_w, rows, k, eps, out, codes, stream);
  }
  return fp8 ? Launch<false, true, kCodes>(x, nullptr, rows, k, eps, out, codes, stream)
             : Launch<false, false, kCodes>(x, nullptr, rows, k, eps, out, codes, stream);
}

}  // namespace

cudaError_t LaunchQuantizeInputRows(const bf16* x, const bf16* norm_w, int64_t rows, int64_t k, float eps,
                                    InputQuantCode code, bf16* out, cudaStream_t stream) {
  return LaunchFor<false>(x, norm_w, rows, k, eps, code, out, InputCodes{}, stream);
}

cudaError_t LaunchQuantizeInputCodes(const bf16* x, const bf16* norm_w, int64_t rows, int64_t k, float eps,
                                     InputQuantCode code, void* scratch, cudaStream_t stream) {
  if (k < 16 || k % 16 != 0) return cudaErrorInvalidValue;  // the GEMM's TMA row pitch
  return LaunchFor<true>(x, norm_w, rows, k, eps, code, nullptr, InputCodesIn(scratch, rows, k), stream);
}

}  // namespace ag::cuda
