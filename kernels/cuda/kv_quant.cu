// Writing rows into an 8-bit KV cache (paged_kv.cuh): one warp per token, KV
// head and K or V; the codes and the scale are ref::RoundTripKvRows' exactly
// (IEEE division, round to nearest even, E4M3 saturating at 448), or with a
// checkpoint's static scales ref::RoundTripKvRowsWithScale's.
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_kv.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(bf16 x) { return __bfloat162float(x); }

template <typename T>
__global__ void __launch_bounds__(kThreads) KvQuantizeKernel(const T* k, const T* v, int64_t ld, const int32_t* slots,
                                                             int64_t tokens, PagedKv cache) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int lane = threadIdx.x % 32;
  const int64_t rows = tokens * cache.kv_heads * 2;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp
  const int64_t t = row / (cache.kv_heads * 2), head = (row / 2) % cache.kv_heads;
  const bool is_v = row % 2 == 1;
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int D = static_cast<int>(cache.head_dim);
  const T* src = (is_v ? v : k) + t * ld + head * D;
  float x[kMaxPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int c = lane + 32 * i;
    x[i] = c < D ? ToFloat(src[c]) : 0.0f;
    amax = fmaxf(amax, fabsf(x[i]));
  }
  const bool fp8 = cache.code == KvCode::kFp8;
  float s;
  if (cache.static_scales != nullptr) {
    s = cache.static_scales[is_v ? 1 : 0];
  } else {
    amax = WarpMax(amax);
    s = amax > 0.0f && isfinite(amax) ? __fdiv_rn(amax, fp8 ? 448.0f : 127.0f) : 1.0f;
  }
  const int64_t at = (static_cast<int64_t>(slot) * cache.kv_heads + head) * D;
  auto* codes = static_cast<uint8_t*>(is_v ? cache.v : cache.k) + at;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c >= D) break;
    const float q = __fdiv_rn(x[i], s);
    codes[c] = fp8 ? static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3))
                   : static_cast<uint8_t>(static_cast<int8_t>(fminf(fmaxf(rintf(q), -127.0f), 127.0f)));
  }
  if (lane == 0) (is_v ? cache.v_scale : cache.k_scale)[static_cast<int64_t>(slot) * cache.kv_heads + head] = s;
}

template <typename T>
cudaError_t Launch(const T* k, const T* v, int64_t ld, const int32_t* slots, int64_t tokens, const PagedKv& cache,
                   cudaStream_t stream) {
  if (cache.code == KvCode::kBF16 || cache.head_dim <= 0 || cache.head_dim > 32 * kMaxPerLane ||
      cache.k_scale == nullptr || cache.v_scale == nullptr || ld < cache.kv_heads * cache.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0) return cudaSuccess;
  const int64_t blocks = (tokens * cache.kv_heads * 2 + kWarps - 1) / kWarps;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchKernel(KvQuantizeKernel<T>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, k, v, ld,
                      slots, tokens, cache);
}

}  // namespace

cudaError_t LaunchKvQuantize(const float* k, const float* v, int64_t ld, const int32_t* slots, int64_t tokens,
                             const PagedKv& cache, cudaStream_t stream) {
  return Launch(k, v, ld, slots, tokens, cache, stream);
}

cudaError_t LaunchKvQuantize(const bf16* k, const bf16* v, int64_t ld, const int32_t* slots, int64_t tokens,
                             const PagedKv& cache, cudaStream_t stream) {
  return Launch(k, v, ld, slots, tokens, cache, stream);
}

}  // namespace ag::cuda
