#include <algorithm>
#include <cfloat>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 16;          // keys per shared-memory tile
constexpr int kMinSliceKeys = 32;  // keys per context slice, at least
constexpr int kMaxSlices = 64;     // slices per (token, KV head), at most
constexpr int kTargetBlocks = 264; // two blocks per multiprocessor of an H200

struct Geometry {
  int slices;
  int slice_keys;
};

// Few query rows (decode) split the context into many slices so that the GPU
// fills; many rows (prefill) need no split.
Geometry SliceContext(int64_t tokens, int64_t kv_heads, int64_t max_context) {
  const int64_t ctx = std::max<int64_t>(max_context, 1);
  const int64_t rows = std::max<int64_t>(tokens * kv_heads, 1);
  const int64_t wanted = std::clamp<int64_t>((kTargetBlocks + rows - 1) / rows, 1, kMaxSlices);
  int64_t keys = std::max<int64_t>(kMinSliceKeys, (ctx + wanted - 1) / wanted);
  keys = (keys + kTile - 1) / kTile * kTile;
  return {static_cast<int>((ctx + keys - 1) / keys), static_cast<int>(keys)};
}

struct Params {
  const bf16* q;
  PagedKv cache;
  SeqBatch seqs;
  int heads, group, head_dim;
  int slices, slice_keys;
  float scale;
  float* partial_acc;  // [tokens, heads, slices, head_dim]
  float* partial_ml;   // [tokens, heads, slices, 2]: running max and sum
};

// The sequence owning query row t: the last s with seq_offsets[s] <= t.
__device__ int SequenceOf(const int32_t* offsets, int num_seqs, int64_t t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// grid (slices, kv_heads, tokens). Shared memory (floats): q [G][D], k [kTile][D+1],
// v [kTile][D+1], p [G][kTile], acc [G][D], m [G], l [G], correction [G]. K and V
// rows are padded by one float so that threads reading different keys hit different banks.
__global__ void __launch_bounds__(kThreads) SliceKernel(Params p) {
  extern __shared__ float smem[];
  const int G = p.group, D = p.head_dim, DP = D + 1;
  float* qs = smem;
  float* ks = qs + G * D;
  float* vs = ks + kTile * DP;
  float* ps = vs + kTile * DP;
  float* acc = ps + G * kTile;
  float* ms = acc + G * D;
  float* ls = ms + G;
  float* corr = ls + G;
  AllowNextKernel();
  WaitForPreviousKernel();

  const int slice = blockIdx.x, g = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int s = SequenceOf(p.seqs.seq_offsets, static_cast<int>(p.seqs.num_seqs), t);
  const int64_t first = p.seqs.seq_offsets[s], count_new = p.seqs.seq_offsets[s + 1] - first;
  const int64_t visible = p.seqs.context_lens[s] - count_new + (t - first) + 1;  // keys 0..position
  const int64_t key_begin = static_cast<int64_t>(slice) * p.slice_keys;
  const int64_t key_end = min(visible, key_begin + p.slice_keys);
  const int32_t* table = p.seqs.block_tables + s * p.seqs.max_blocks;
  const int64_t bs = p.cache.block_size, kv_width = p.cache.kv_heads * D;

  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    qs[i] = __bfloat162float(p.q[t * p.heads * D + static_cast<int64_t>(g) * G * D + i]);
    acc[i] = 0.0f;
  }
  for (int h = threadIdx.x; h < G; h += kThreads) {
    ms[h] = -FLT_MAX;
    ls[h] = 0.0f;
  }
  for (int64_t base = key_begin; base < key_end; base += kTile) {
    __syncthreads();  // the previous tile is no longer read
    for (int i = threadIdx.x; i < kTile * D / 8; i += kThreads) {
      const int j = i / (D / 8), d = (i % (D / 8)) * 8;
      const int64_t key = base + j;
      float kf[8] = {}, vf[8] = {};
      if (key < key_end) {
        const int64_t slot = static_cast<int64_t>(table[key / bs]) * bs + key % bs;
        const int64_t at = slot * kv_width + static_cast<int64_t>(g) * D + d;
        ToFloat8(Load8(p.cache.k + at), kf);
        ToFloat8(Load8(p.cache.v + at), vf);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        ks[j * DP + d + e] = kf[e];
        vs[j * DP + d + e] = vf[e];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * kTile; i += kThreads) {
      const int h = i / kTile, j = i % kTile;
      float dot = -FLT_MAX;
      if (base + j < key_end) {
        dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qs[h * D + d] * ks[j * DP + d];
        dot *= p.scale;
      }
      ps[i] = dot;
    }
    __syncthreads();
    for (int h = threadIdx.x; h < G; h += kThreads) {
      float tile_max = -FLT_MAX;
      for (int j = 0; j < kTile; ++j) tile_max = fmaxf(tile_max, ps[h * kTile + j]);
      const float m_new = fmaxf(ms[h], tile_max);
      const float c = __expf(ms[h] - m_new);  // 0 when ms[h] was -FLT_MAX
      float sum = 0.0f;
      for (int j = 0; j < kTile; ++j) {
        const bool valid = base + j < key_end;
        const float e = valid ? __expf(ps[h * kTile + j] - m_new) : 0.0f;
        ps[h * kTile + j] = e;
        sum += e;
      }
      ls[h] = ls[h] * c + sum;
      ms[h] = m_new;
      corr[h] = c;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += kThreads) {
      const int h = i / D, d = i % D;
      float a = acc[i] * corr[h];
      for (int j = 0; j < kTile; ++j) a += ps[h * kTile + j] * vs[j * DP + d];
      acc[i] = a;
    }
  }
  __syncthreads();
  const int64_t head0 = static_cast<int64_t>(g) * G;
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int h = i / D, d = i % D;
    p.partial_acc[((t * p.heads + head0 + h) * p.slices + slice) * D + d] = acc[i];
  }
  for (int h = threadIdx.x; h < G; h += kThreads) {
    float* ml = p.partial_ml + ((t * p.heads + head0 + h) * p.slices + slice) * 2;
    ml[0] = ms[h];
    ml[1] = ls[h];
  }
}

// grid (heads, tokens): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void __launch_bounds__(kThreads) CombineKernel(const float* partial_acc, const float* partial_ml, int heads,
                                                          int slices, int head_dim, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const float* ml = partial_ml + (t * heads + h) * slices * 2;
  float m = -FLT_MAX;
  for (int s = 0; s < slices; ++s) m = fmaxf(m, ml[2 * s]);
  float denom = 0.0f;
  for (int s = 0; s < slices; ++s) denom += ml[2 * s + 1] * __expf(ml[2 * s] - m);
  const float* acc = partial_acc + (t * heads + h) * slices * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kThreads) {
    float num = 0.0f;
    for (int s = 0; s < slices; ++s) num += acc[s * head_dim + d] * __expf(ml[2 * s] - m);
    out[(t * heads + h) * head_dim + d] = __float2bfloat16(num / denom);
  }
}

}  // namespace

int64_t PagedAttentionWorkspace(const AttentionShape& shape, int64_t kv_heads, int64_t head_dim) {
  // The most any row count up to shape.tokens needs: fewer rows may use more slices.
  int64_t most = 0;
  for (int64_t t = 1; t <= shape.tokens; ++t) {
    most = std::max<int64_t>(most, t * SliceContext(t, kv_heads, shape.max_context).slices);
  }
  return most * shape.heads * (head_dim + 2);
}

cudaError_t LaunchPagedAttention(const bf16* q, const AttentionShape& shape, const PagedKv& cache,
                                 const SeqBatch& seqs, float* workspace, bf16* out, cudaStream_t stream) {
  if (shape.tokens == 0) return cudaSuccess;
  const int64_t D = cache.head_dim;
  if (D % 8 != 0 || D > 256 || cache.kv_heads <= 0 || shape.heads % cache.kv_heads != 0 || seqs.num_seqs <= 0) {
    return cudaErrorInvalidValue;
  }
  const Geometry geo = SliceContext(shape.tokens, cache.kv_heads, shape.max_context);
  const int group = static_cast<int>(shape.heads / cache.kv_heads);
  Params p;
  p.q = q;
  p.cache = cache;
  p.seqs = seqs;
  p.heads = static_cast<int>(shape.heads);
  p.group = group;
  p.head_dim = static_cast<int>(D);
  p.slices = geo.slices;
  p.slice_keys = geo.slice_keys;
  p.scale = 1.0f / sqrtf(static_cast<float>(D));
  p.partial_acc = workspace;
  p.partial_ml = workspace + shape.tokens * shape.heads * geo.slices * D;
  const size_t smem =
      sizeof(float) * static_cast<size_t>(2 * group * D + 2 * kTile * (D + 1) + group * kTile + 3 * group);
  if (smem > 200 * 1024) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<SliceKernel>();
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(geo.slices), static_cast<unsigned>(cache.kv_heads),
                  static_cast<unsigned>(shape.tokens));
  const cudaError_t e = LaunchKernel(SliceKernel, grid, dim3(kThreads), smem, stream, p);
  if (e != cudaSuccess) return e;
  return LaunchKernel(CombineKernel, dim3(static_cast<unsigned>(shape.heads), static_cast<unsigned>(shape.tokens)),
                      dim3(kThreads), 0, stream, p.partial_acc, p.partial_ml, p.heads, geo.slices, p.head_dim, out);
}

}  // namespace ag::cuda
