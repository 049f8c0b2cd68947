#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

enum class NormKind { kPlain, kResidual, kAddFirst };

// One block per row. The row is read into registers/shared memory once, its
// sum of squares reduced, then written; every read of a row happens before
// the barrier that precedes the first write, so in-place is safe.
template <NormKind kKind>
// x/other may alias out/out2 (in place), so only w is __restrict__.
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const bf16* x, const bf16* other, const bf16* __restrict__ w,
                                                          int64_t n, float eps, bf16* out, bf16* out2) {
  extern __shared__ float row[];  // n floats: the value normalised
  AllowNextKernel();
  WaitForPreviousKernel();
  __shared__ float scratch[kWarps];
  const int64_t r = blockIdx.x;
  const bf16* xr = x + r * n;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    float v[8];
    ToFloat8(Load8(xr + i), v);
    if (kKind == NormKind::kAddFirst) {
      float o[8];
      ToFloat8(Load8(other + r * n + i), o);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] += o[j];  // the sum stays fp32 inside the fused op
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      row[i + j] = v[j];
      sum += v[j] * v[j];
    }
  }
  const float total = BlockSum<kWarps>(sum, scratch);  // also the barrier before any write
  const float scale = rsqrtf(total / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
    float wv[8], y[8];
    ToFloat8(Load8(w + i), wv);
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = wv[j] * (row[i + j] * scale);
    if (kKind == NormKind::kResidual) {
      float res[8];
      ToFloat8(Load8(other + r * n + i), res);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] += res[j];
    }
    if (kKind == NormKind::kAddFirst) {
      float s[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j] = row[i + j];
      Store8(out2 + r * n + i, FromFloat8(s));
    }
    Store8(out + r * n + i, FromFloat8(y));
  }
}

template <NormKind kKind>
cudaError_t Launch(const bf16* x, const bf16* other, const bf16* w, int64_t rows, int64_t n, float eps, bf16* out,
                   bf16* out2, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (n % 8 != 0) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  if (smem > 200 * 1024) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<RmsNormKernel<kKind>>();
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(RmsNormKernel<kKind>, dim3(static_cast<unsigned>(rows)), dim3(kThreads), smem, stream, x, other, w,
                      n, eps, out, out2);
}

}  // namespace

cudaError_t LaunchRmsNorm(const bf16* x, const bf16* w, int64_t rows, int64_t n, float eps, bf16* out,
                          cudaStream_t stream) {
  return Launch<NormKind::kPlain>(x, nullptr, w, rows, n, eps, out, nullptr, stream);
}

cudaError_t LaunchRmsNormResidual(const bf16* x, const bf16* w, const bf16* residual, int64_t rows, int64_t n,
                                  float eps, bf16* out, cudaStream_t stream) {
  return Launch<NormKind::kResidual>(x, residual, w, rows, n, eps, out, nullptr, stream);
}

cudaError_t LaunchAddRmsNorm(const bf16* a, const bf16* b, const bf16* w, int64_t rows, int64_t n, float eps,
                             bf16* sum, bf16* normed, cudaStream_t stream) {
  return Launch<NormKind::kAddFirst>(a, b, w, rows, n, eps, normed, sum, stream);
}

}  // namespace ag::cuda
