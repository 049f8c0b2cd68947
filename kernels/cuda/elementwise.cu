#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t items) { return static_cast<unsigned>(std::min<int64_t>((items + kThreads - 1) / kThreads, 65535 * 8)); }

template <Binary kOp>
__global__ void BinaryKernel(const bf16* a, const bf16* b, int64_t n, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    out[i] = __float2bfloat16(kOp == Binary::kAdd ? x + y : x * y);
  }
}

__global__ void SiluKernel(const bf16* x, int64_t n, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const float v = __bfloat162float(x[i]);
    out[i] = __float2bfloat16(FastSilu(v));
  }
}

__global__ void SliceKernel(const bf16* x, int64_t rows, int64_t cols, int64_t start, int64_t size, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t n = rows * size;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / size, c = i % size;
    out[i] = x[r * cols + start + c];
  }
}

__global__ void GatherKernel(const bf16* x, const int32_t* rows, int64_t num_rows, int64_t width, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t n = num_rows * width;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / width, c = i % width;
    out[i] = x[static_cast<int64_t>(rows[r]) * width + c];
  }
}

// One thread per channel pair of the rotated part; the rest is copied when not in place.
__global__ void RotaryKernel(const bf16* x, RopePositions positions, int64_t tokens, int64_t heads, int64_t head_dim,
                             RopeFrequencies freqs, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t pairs = head_dim / 2;
  const int64_t n = tokens * heads * pairs;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t t = i / (heads * pairs), p = i % pairs;
    const int64_t base = i / pairs * head_dim + 2 * p;  // (t, h) row offset + channel 2p
    float x0 = __bfloat162float(x[base]), x1 = __bfloat162float(x[base + 1]);
    if (2 * p < freqs.rot) {
      RotatePair(x0, x1, InvFreqOf(freqs, static_cast<int>(p)), RopePosition(positions, t, static_cast<int>(p)));
    }
    out[base] = __float2bfloat16(x0);
    out[base + 1] = __float2bfloat16(x1);
  }
}

__global__ void KvWriteKernel(const bf16* k, const bf16* v, const int32_t* slots, int64_t tokens, int64_t width,
                              bf16* k_cache, bf16* v_cache) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t n = tokens * width;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t t = i / width, c = i % width;
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    k_cache[static_cast<int64_t>(slot) * width + c] = k[i];
    v_cache[static_cast<int64_t>(slot) * width + c] = v[i];
  }
}

}  // namespace

cudaError_t LaunchBinary(Binary op, const bf16* a, const bf16* b, int64_t n, bf16* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (op == Binary::kAdd) {
    return LaunchKernel(BinaryKernel<Binary::kAdd>, dim3(GridFor(n)), dim3(kThreads), 0, stream, a, b, n, out);
  }
  return LaunchKernel(BinaryKernel<Binary::kMul>, dim3(GridFor(n)), dim3(kThreads), 0, stream, a, b, n, out);
}

cudaError_t LaunchSilu(const bf16* x, int64_t n, bf16* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return LaunchKernel(SiluKernel, dim3(GridFor(n)), dim3(kThreads), 0, stream, x, n, out);
}

cudaError_t LaunchSliceColumns(const bf16* x, int64_t rows, int64_t cols, int64_t start, int64_t size, bf16* out,
                               cudaStream_t stream) {
  if (rows * size == 0) return cudaSuccess;
  return LaunchKernel(SliceKernel, dim3(GridFor(rows * size)), dim3(kThreads), 0, stream, x, rows, cols, start, size,
                      out);
}

cudaError_t LaunchGatherRows(const bf16* x, const int32_t* rows, int64_t num_rows, int64_t width, bf16* out,
                             cudaStream_t stream) {
  if (num_rows * width == 0) return cudaSuccess;
  return LaunchKernel(GatherKernel, dim3(GridFor(num_rows * width)), dim3(kThreads), 0, stream, x, rows, num_rows, width,
                      out);
}

cudaError_t LaunchRotary(const bf16* x, const RopePositions& positions, int64_t tokens, int64_t heads, int64_t head_dim,
                         int64_t rot, float theta, bf16* out, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (head_dim % 2 != 0 || rot % 2 != 0 || rot > head_dim) return cudaErrorInvalidValue;
  return LaunchKernel(RotaryKernel, dim3(GridFor(tokens * heads * head_dim / 2)), dim3(kThreads), 0, stream, x, positions,
                      tokens, heads, head_dim, RopeFrequencies::Of(static_cast<int>(rot), theta), out);
}

cudaError_t LaunchKvCacheWrite(const bf16* k, const bf16* v, const int32_t* slots, int64_t tokens,
                               const PagedKv& cache, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  const int64_t width = cache.kv_heads * cache.head_dim;
  if (cache.code != KvCode::kBF16) return LaunchKvQuantize(k, v, width, slots, tokens, cache, stream);
  return LaunchKernel(KvWriteKernel, dim3(GridFor(tokens * width)), dim3(kThreads), 0, stream, k, v, slots, tokens, width,
                      static_cast<bf16*>(cache.k), static_cast<bf16*>(cache.v));
}

}  // namespace ag::cuda
