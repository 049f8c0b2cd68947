#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vocab.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// (value, index) with the larger value winning and the lower index on ties.
struct Best {
  float value;
  int32_t index;
};
__device__ __forceinline__ Best Better(Best a, Best b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}
__device__ __forceinline__ Best WarpBest(Best v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, v.value, o), __shfl_xor_sync(0xffffffffu, v.index, o)};
    v = Better(v, other);
  }
  return v;
}

// As ref::Argmax: the largest value, the lowest index on ties; NaNs never win,
// but a NaN at index 0 (where the reference starts) makes the answer 0, and so
// does a row of only NaN and -inf.
__global__ void __launch_bounds__(kThreads) ArgmaxKernel(const bf16* __restrict__ logits, int64_t vocab,
                                                         int32_t* __restrict__ out) {
  __shared__ Best partial[kWarps];
  AllowNextKernel();
  WaitForPreviousKernel();
  const bf16* row = logits + blockIdx.x * vocab;
  Best best{-INFINITY, INT32_MAX};
  int64_t scalar_from = 0;
  if (vocab % 8 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    // 16-byte loads; each thread takes eight consecutive values per round.
    for (int64_t i = threadIdx.x * 8; i < vocab; i += kThreads * 8) {
      float f[8];
      ToFloat8(Load8(row + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) best = Better(best, Best{f[j], static_cast<int32_t>(i + j)});
    }
    scalar_from = vocab;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < vocab; i += kThreads) {
    best = Better(best, Best{__bfloat162float(row[i]), static_cast<int32_t>(i)});
  }
  best = WarpBest(best);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = threadIdx.x < kWarps ? partial[threadIdx.x] : Best{-INFINITY, INT32_MAX};
    best = WarpBest(best);
    if (threadIdx.x == 0) {
      const bool first_is_nan = isnan(__bfloat162float(row[0]));
      out[blockIdx.x] = first_is_nan || best.index == INT32_MAX ? 0 : best.index;
    }
  }
}

// Max, then the sum of exp((l - max) / T), then a scan of each thread's
// contiguous chunk to find where the target mass is crossed.
__global__ void __launch_bounds__(kThreads) SampleKernel(const bf16* __restrict__ logits, int64_t vocab, int64_t limit,
                                                         float inv_temperature, const float* __restrict__ uniforms,
                                                         int32_t* __restrict__ out) {
  __shared__ float scratch[kWarps];
  __shared__ float chunk_mass[kThreads];
  AllowNextKernel();
  WaitForPreviousKernel();
  const bf16* row = logits + blockIdx.x * vocab;
  const int64_t chunk = (limit + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * chunk, end = min(limit, begin + chunk);
  float m = -FLT_MAX;
  for (int64_t i = begin; i < end; ++i) m = fmaxf(m, __bfloat162float(row[i]));
  m = WarpMax(m);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  float row_max = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) row_max = fmaxf(row_max, scratch[w]);
  float mass = 0.0f;
  for (int64_t i = begin; i < end; ++i) mass += __expf((__bfloat162float(row[i]) - row_max) * inv_temperature);
  chunk_mass[threadIdx.x] = mass;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int t = 0; t < kThreads; ++t) total += chunk_mass[t];
    float target = uniforms[blockIdx.x] * total, acc = 0.0f;
    int t = 0;
    while (t < kThreads - 1 && acc + chunk_mass[t] <= target) acc += chunk_mass[t++];
    // Walk the chosen chunk.
    int32_t choice = static_cast<int32_t>(min(limit - 1, t * chunk));
    for (int64_t i = t * chunk; i < min(limit, (t + 1) * chunk); ++i) {
      acc += __expf((__bfloat162float(row[i]) - row_max) * inv_temperature);
      choice = static_cast<int32_t>(i);
      if (acc > target) break;
    }
    out[blockIdx.x] = choice;
  }
}

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void FillRandomKernel(bf16* out, int64_t n, uint64_t key, float center, float half_width) {
  AllowNextKernel();
  WaitForPreviousKernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t bits = SplitMix64(key + static_cast<uint64_t>(i));
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
    // No contraction into an FMA: the host computes the same expression with separate roundings.
    out[i] = __float2bfloat16(__fadd_rn(center, __fmul_rn(half_width, __fsub_rn(2.0f * u, 1.0f))));
  }
}

uint64_t SplitMix64Host(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

cudaError_t LaunchArgmax(const bf16* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return LaunchKernel(ArgmaxKernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, logits, vocab, out);
}

cudaError_t LaunchSampleTemperature(const bf16* logits, int64_t rows, int64_t vocab, int64_t vocab_limit,
                                    float temperature, const float* uniforms, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (!(temperature > 0.0f) || vocab_limit <= 0 || vocab_limit > vocab) return cudaErrorInvalidValue;
  return LaunchKernel(SampleKernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, logits, vocab,
                      vocab_limit, 1.0f / temperature, uniforms, out);
}

cudaError_t LaunchFillRandom(bf16* out, int64_t n, uint64_t seed, uint64_t stream_id, float center, float half_width,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t key = SplitMix64Host(seed ^ stream_id);  // as RandomUniform: SplitMix64(SplitMix64(seed ^ stream) + i)
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 32));
  return LaunchKernel(FillRandomKernel, dim3(blocks), dim3(256), 0, stream, out, n, key, center, half_width);
}

}  // namespace ag::cuda
