#include <cfloat>
#include <type_traits>

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

__device__ __forceinline__ float ToFloat(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(float x) { return x; }

// As ref::Argmax over row[0, n): the largest value, the lowest index on ties;
// NaNs never win, but a NaN at index 0 (where the reference starts) makes the
// answer 0, and so does a row of only NaN and -inf. The answer is thread 0's.
template <typename T>
__device__ int32_t RowArgmax(const T* row, int64_t n, Best* partial) {
  Best best{-INFINITY, INT32_MAX};
  int64_t scalar_from = 0;
  if constexpr (std::is_same_v<T, bf16>) {
    if (n % 8 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
      // 16-byte loads; each thread takes eight consecutive values per round.
      for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
        float f[8];
        ToFloat8(Load8(row + i), f);
#pragma unroll
        for (int j = 0; j < 8; ++j) best = Better(best, Best{f[j], static_cast<int32_t>(i + j)});
      }
      scalar_from = n;
    }
  }
  for (int64_t i = scalar_from + threadIdx.x; i < n; i += kThreads) {
    best = Better(best, Best{ToFloat(row[i]), static_cast<int32_t>(i)});
  }
  best = WarpBest(best);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x >= 32) return 0;
  best = threadIdx.x < kWarps ? partial[threadIdx.x] : Best{-INFINITY, INT32_MAX};
  best = WarpBest(best);
  return isnan(ToFloat(row[0])) || best.index == INT32_MAX ? 0 : best.index;
}

__global__ void __launch_bounds__(kThreads) ArgmaxKernel(const bf16* __restrict__ logits, int64_t vocab,
                                                         int32_t* __restrict__ out) {
  __shared__ Best partial[kWarps];
  AllowNextKernel();
  WaitForPreviousKernel();
  const int32_t best = RowArgmax(logits + blockIdx.x * vocab, vocab, partial);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}

// ---- sampling where the logits are: ref::SampleFiltered's rule ----

// Unsigned keys in the order of the floats (larger float, larger key).
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
// z = x / T; NaN counts as -inf (never kept).
template <typename T>
__device__ __forceinline__ float ScaledLogit(const T* row, int64_t i, float inv_t) {
  const float x = ToFloat(row[i]);
  return isnan(x) ? -INFINITY : x * inv_t;
}

struct SampleShared {
  float hist[256];
  float reduce[kWarps];
  float chunk_mass[kThreads];
  float above;
  uint32_t bucket;
  Best partial[kWarps];
};

__device__ float BlockMaxAll(float v, SampleShared& sh) {
  v = WarpMax(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.reduce[threadIdx.x / 32] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sh.reduce[w]);
  return m;
}

// The largest key T such that the ids with key >= T (and >= floor) hold at
// least `target` -- of count (kMass false) or of weight exp(z - max_z) --
// found a byte at a time from the top, as a radix select does.
template <bool kMass, typename T>
__device__ uint32_t RadixThreshold(const T* row, int64_t n, float inv_t, float max_z, uint32_t floor_key,
                                   float target, SampleShared& sh) {
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) sh.above = 0.0f;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0.0f;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const float z = ScaledLogit(row, i, inv_t);
      const uint32_t key = OrderKey(z);
      if (z == -INFINITY || key < floor_key || (key & mask) != prefix) continue;
      atomicAdd(&sh.hist[(key >> shift) & 255u], kMass ? expf(z - max_z) : 1.0f);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = 255;
      for (; b > 0 && sh.above + sh.hist[b] < target; --b) sh.above += sh.hist[b];
      sh.bucket = static_cast<uint32_t>(b);
    }
    __syncthreads();
    prefix |= sh.bucket << shift;
    mask |= 255u << shift;
  }
  return prefix;
}

// The pick of one row's first n logits with r's parameters (thread 0 writes *out).
template <typename T>
__device__ void SampleRow1(const T* row, int64_t n, const SampleRow& r, SampleShared& sh, int32_t* out) {
  if (r.temperature == 0.0f || r.top_k == 1) {
    const int32_t best = RowArgmax(row, n, sh.partial);
    if (threadIdx.x == 0) *out = best;
    return;
  }
  const float inv_t = 1.0f / r.temperature;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, ScaledLogit(row, i, inv_t));
  const float max_z = BlockMaxAll(m, sh);
  if (max_z == -INFINITY) {  // nothing can be kept
    if (threadIdx.x == 0) *out = 0;
    return;
  }
  // min-p: z >= max z + ln(min_p) (ref::SampleFiltered's float expression), a key threshold as top-k's.
  uint32_t floor_key = r.min_p > 0.0f ? OrderKey(max_z + logf(r.min_p)) : 0;
  if (r.top_k > 0 && r.top_k < n) {
    floor_key = max(floor_key, RadixThreshold<false>(row, n, inv_t, max_z, 0, static_cast<float>(r.top_k), sh));
  }
  auto kept_weight = [&](int64_t i) {
    const float z = ScaledLogit(row, i, inv_t);
    return z == -INFINITY || OrderKey(z) < floor_key ? 0.0f : expf(z - max_z);
  };
  // Each thread's contiguous chunk of ids, for the mass and the final walk in id order.
  const int64_t chunk = (n + kThreads - 1) / kThreads;
  const int64_t begin = min(n, threadIdx.x * chunk), end = min(n, begin + chunk);
  auto total_mass = [&] {
    float mass = 0.0f;
    for (int64_t i = begin; i < end; ++i) mass += kept_weight(i);
    __syncthreads();
    sh.chunk_mass[threadIdx.x] = mass;
    __syncthreads();
    float total = 0.0f;
    for (int t = 0; t < kThreads; ++t) total += sh.chunk_mass[t];  // the same order in every thread
    return total;
  };
  if (r.top_p < 1.0f) {
    const float total = total_mass();
    floor_key = RadixThreshold<true>(row, n, inv_t, max_z, floor_key, r.top_p * total, sh);
  }
  const float total = total_mass();
  if (threadIdx.x != 0) return;
  const float target = r.uniform * total;
  float acc = 0.0f;
  int t = 0;
  while (t < kThreads - 1 && acc + sh.chunk_mass[t] <= target) acc += sh.chunk_mass[t++];
  int32_t choice = -1;
  for (int64_t i = min(n, t * chunk); i < min(n, (t + 1) * chunk); ++i) {
    const float w = kept_weight(i);
    if (w == 0.0f) continue;
    acc += w;
    choice = static_cast<int32_t>(i);
    if (acc > target) break;
  }
  if (choice < 0) {  // rounding left the target past the chunk: the last kept id
    for (int64_t i = n - 1; i >= 0 && choice < 0; --i) {
      if (kept_weight(i) > 0.0f) choice = static_cast<int32_t>(i);
    }
  }
  *out = choice < 0 ? 0 : choice;
}

// One block per entry of `rows`: an entry with penalties or a mask gets its logits row as float in
// its workspace row, the ids its mask leaves out -inf (ref::ApplyPenalties keeps them so) and
// penalised there. A kernel of its own, launched only when some entry needs it: inside the
// sampler, the IEEE division's slow path crowded its registers into local memory.
__global__ void __launch_bounds__(kThreads) PenalizeRowsKernel(const bf16* __restrict__ logits, int64_t vocab,
                                                               const SampleRow* __restrict__ rows,
                                                               const SamplePenalty* __restrict__ penalties,
                                                               const uint64_t* __restrict__ masks,
                                                               float* __restrict__ workspace) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const SampleRow r = rows[blockIdx.x];
  if (!r.Rewritten()) return;
  const bf16* row = logits + static_cast<int64_t>(r.row) * vocab;
  const int64_t n = r.vocab_limit > 0 ? min(vocab, static_cast<int64_t>(r.vocab_limit)) : vocab;
  float* work = workspace + static_cast<int64_t>(blockIdx.x) * vocab;
  const uint64_t* mask = r.mask_begin >= 0 ? masks + r.mask_begin : nullptr;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const bool allowed = mask == nullptr || ((mask[i / 64] >> (i % 64)) & 1) != 0;
    work[i] = allowed ? __bfloat162float(row[i]) : -INFINITY;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < r.penalty_count; j += kThreads) {
    const SamplePenalty p = penalties[r.penalty_begin + j];
    if (p.id < 0 || p.id >= n) continue;
    float w = work[p.id] + p.bias;  // the ids are distinct: one thread owns each
    if (p.scale != 1.0f) w = w > 0 ? w / p.scale : w * p.scale;  // IEEE division, as the host's
    work[p.id] = w - p.delta;
  }
}

// One block per entry of `rows`.
__global__ void __launch_bounds__(kThreads) SampleRowsKernel(const bf16* __restrict__ logits, int64_t vocab,
                                                             const SampleRow* __restrict__ rows,
                                                             const float* __restrict__ workspace,
                                                             int32_t* __restrict__ out) {
  __shared__ SampleShared sh;
  AllowNextKernel();
  WaitForPreviousKernel();
  const SampleRow r = rows[blockIdx.x];
  const bf16* row = logits + static_cast<int64_t>(r.row) * vocab;
  const int64_t n = r.vocab_limit > 0 ? min(vocab, static_cast<int64_t>(r.vocab_limit)) : vocab;
  if (!r.Rewritten() || workspace == nullptr) return SampleRow1(row, n, r, sh, out + blockIdx.x);
  SampleRow1(workspace + static_cast<int64_t>(blockIdx.x) * vocab, n, r, sh, out + blockIdx.x);  // PenalizeRowsKernel's
}

// One block per entry. The top ids: those above the k-th largest value (fewer than k), then the
// ties at it in id order (each thread's chunk is a run of ids: a scan of the per-thread tie
// counts places them), then a sort of those k on thread 0.
__global__ void __launch_bounds__(kThreads) LogprobsKernel(const bf16* __restrict__ logits, int64_t vocab,
                                                           const LogprobRow* __restrict__ rows, float* logprob,
                                                           int32_t* top_ids, float* top_logprobs) {
  __shared__ SampleShared sh;
  __shared__ int32_t picked[kMaxTopLogprobs];
  __shared__ float picked_value[kMaxTopLogprobs];
  __shared__ int32_t ties_before[kThreads];
  __shared__ int greater;
  AllowNextKernel();
  WaitForPreviousKernel();
  const LogprobRow r = rows[blockIdx.x];
  const bf16* row = logits + static_cast<int64_t>(r.row) * vocab;
  // Vocabularies are below 2^24 (models/glm/config.h): int indices, fewer registers.
  const int n = static_cast<int>(r.vocab_limit > 0 ? min(vocab, static_cast<int64_t>(r.vocab_limit)) : vocab);
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, ScaledLogit(row, i, 1.0f));
  const float peak = BlockMaxAll(m, sh);
  const int chunk = (n + kThreads - 1) / kThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * chunk), end = min(n, begin + chunk);
  float mass = 0.0f;
  for (int i = begin; i < end; ++i) mass += expf(ScaledLogit(row, i, 1.0f) - peak);
  sh.chunk_mass[threadIdx.x] = mass;
  __syncthreads();
  float total = 0.0f;
  for (int t = 0; t < kThreads; ++t) total += sh.chunk_mass[t];
  const float lse = peak + logf(total);
  if (threadIdx.x == 0) {
    logprob[blockIdx.x] = r.token >= 0 && r.token < n ? ScaledLogit(row, r.token, 1.0f) - lse : -INFINITY;
    greater = 0;
  }
  const int k = min(min(r.top, kMaxTopLogprobs), n);
  if (k <= 0) return;
  const uint32_t kth = RadixThreshold<false>(row, n, 1.0f, peak, 0, static_cast<float>(k), sh);
  int ties = 0;
  for (int i = begin; i < end; ++i) {
    const uint32_t key = OrderKey(ScaledLogit(row, i, 1.0f));
    if (key > kth) {
      const int slot = atomicAdd(&greater, 1);
      if (slot < kMaxTopLogprobs) picked[slot] = i;
    } else if (key == kth) {
      ++ties;
    }
  }
  ties_before[threadIdx.x] = ties;
  __syncthreads();
  if (threadIdx.x == 0) {
    int before = 0;
    for (int t = 0; t < kThreads; ++t) {
      const int c = ties_before[t];
      ties_before[t] = before;
      before += c;
    }
  }
  __syncthreads();
  const int have = min(greater, k);
  for (int i = begin, j = ties_before[threadIdx.x]; i < end && have + j < k; ++i) {
    if (OrderKey(ScaledLogit(row, i, 1.0f)) == kth) picked[have + j++] = i;
  }
  __syncthreads();
  if (threadIdx.x >= k) return;
  picked_value[threadIdx.x] = ScaledLogit(row, picked[threadIdx.x], 1.0f);
  __syncwarp((1u << k) - 1);  // k <= 20: lanes 0..k-1 of warp 0 are the ones left
  // Each of the k places itself: larger values first, lower ids on ties.
  const int32_t id = picked[threadIdx.x];
  const float v = picked_value[threadIdx.x];
  int place = 0;
  for (int j = 0; j < k; ++j) place += picked_value[j] > v || (picked_value[j] == v && picked[j] < id);
  top_ids[blockIdx.x * kMaxTopLogprobs + place] = id;
  top_logprobs[blockIdx.x * kMaxTopLogprobs + place] = v - lse;
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

cudaError_t LaunchSampleRows(const bf16* logits, int64_t vocab, const SampleRow* rows, int64_t count,
                             const SamplePenalty* penalties, const uint64_t* masks, float* workspace, int32_t* out,
                             cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (vocab <= 0 || count > INT32_MAX) return cudaErrorInvalidValue;
  if (workspace != nullptr) {
    const cudaError_t e = LaunchKernel(PenalizeRowsKernel, dim3(static_cast<unsigned>(count)), dim3(kThreads), 0,
                                       stream, logits, vocab, rows, penalties, masks, workspace);
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(SampleRowsKernel, dim3(static_cast<unsigned>(count)), dim3(kThreads), 0, stream, logits, vocab,
                      rows, static_cast<const float*>(workspace), out);
}

cudaError_t LaunchLogprobs(const bf16* logits, int64_t vocab, const LogprobRow* rows, int64_t count, float* logprob,
                           int32_t* top_ids, float* top_logprobs, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (vocab <= 0 || count > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchKernel(LogprobsKernel, dim3(static_cast<unsigned>(count)), dim3(kThreads), 0, stream, logits, vocab,
                      rows, logprob, top_ids, top_logprobs);
}

cudaError_t LaunchFillRandom(bf16* out, int64_t n, uint64_t seed, uint64_t stream_id, float center, float half_width,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t key = SplitMix64Host(seed ^ stream_id);  // as RandomUniform: SplitMix64(SplitMix64(seed ^ stream) + i)
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 32));
  return LaunchKernel(FillRandomKernel, dim3(blocks), dim3(256), 0, stream, out, n, key, center, half_width);
}

}  // namespace ag::cuda
