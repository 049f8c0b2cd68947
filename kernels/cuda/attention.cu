#include <algorithm>
#include <cfloat>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kAttentionTile;  // keys per shared-memory tile: one per lane
constexpr int kMaxPairs = 4;           // head_dim <= 256: a lane owns 2 * kMaxPairs channels of the output
constexpr int kKvPad = 8;              // bf16 per K/V row of padding: 16-byte row reads land in different banks

struct Params {
  const bf16* q;
  PagedKv cache;
  SeqBatch seqs;
  int heads, group, head_dim;
  int head_chunks, slices, slice_keys;
  float scale;
  float* partial_acc;  // [tokens, heads, slices, head_dim]
  float* partial_ml;   // [tokens, heads, slices, 2]: running max and sum
  int64_t row_base;    // the launch's first query row (grid z holds at most kMaxGridYZ rows)
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

// grid (slices, kv_heads * head_chunks, tokens). Warp w takes query heads w, w + 4, ... of the block's
// chunk of the group; lane j takes key j of each 32-key tile for the scores and the softmax (warp
// shuffles: no barrier), then output channels 2 lane + 64 i for P V. K and V tiles arrive through
// cp.async, double-buffered: one barrier a tile. Shared memory: K/V [2 stages][2][kTile][D + kKvPad]
// bf16, then q [4 * kHPW][D] fp32.
template <int kHPW>
__global__ void __launch_bounds__(kThreads, kHPW <= 4 ? 4 : 2) AttentionSliceKernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int G = p.group, D = p.head_dim, ld = D + kKvPad, pairs = (D + 63) / 64;
  bf16* kv = reinterpret_cast<bf16*>(smem_raw);
  float* qs = reinterpret_cast<float*>(kv + 4 * kTile * ld);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  AllowNextKernel();
  WaitForPreviousKernel();

  const int slice = blockIdx.x, g = blockIdx.y / p.head_chunks, chunk = blockIdx.y % p.head_chunks;
  const int head_lo = chunk * kWarps * kHPW, heads_here = min(kWarps * kHPW, G - head_lo);
  const int64_t t = p.row_base + blockIdx.z;
  const int s = SequenceOf(p.seqs.seq_offsets, static_cast<int>(p.seqs.num_seqs), t);
  const int64_t first = p.seqs.seq_offsets[s], count_new = p.seqs.seq_offsets[s + 1] - first;
  const int64_t visible = p.seqs.context_lens[s] - count_new + (t - first) + 1;  // keys 0..position
  const int64_t key_begin = static_cast<int64_t>(slice) * p.slice_keys;
  const int64_t key_end = min(visible, key_begin + p.slice_keys);
  const int32_t* table = p.seqs.block_tables + s * p.seqs.max_blocks;
  const int64_t bs = p.cache.block_size, kv_width = p.cache.kv_heads * D;
  const int64_t q_row = t * p.heads * D + (static_cast<int64_t>(g) * G + head_lo) * D;

  auto load_tile = [&](int stage, int64_t base) {
    bf16* ks = kv + 2 * stage * kTile * ld;
    bf16* vs = ks + kTile * ld;
    for (int i = threadIdx.x; i < kTile * (D / 8); i += kThreads) {
      const int j = i / (D / 8), d = (i % (D / 8)) * 8;
      const int64_t key = base + j;
      const bool valid = key < key_end;
      const int64_t at =
          valid ? (static_cast<int64_t>(table[key / bs]) * bs + key % bs) * kv_width + static_cast<int64_t>(g) * D + d
                : 0;
      CpAsync16(ks + j * ld + d, p.cache.k + at, valid);  // invalid keys: zeros
      CpAsync16(vs + j * ld + d, p.cache.v + at, valid);
    }
  };
  const int64_t tiles = key_end > key_begin ? (key_end - key_begin + kTile - 1) / kTile : 0;
  if (tiles > 0) load_tile(0, key_begin);
  CpAsyncCommit();
  for (int i = threadIdx.x * 8; i < heads_here * D; i += kThreads * 8) {
    float v[8];
    ToFloat8(Load8(p.q + q_row + i), v);
    *reinterpret_cast<float4*>(qs + i) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(qs + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
  }

  float m_run[kHPW], l_run[kHPW], acc[kHPW][2 * kMaxPairs] = {};
#pragma unroll
  for (int hi = 0; hi < kHPW; ++hi) {
    m_run[hi] = -FLT_MAX;
    l_run[hi] = 0.0f;
  }
  for (int64_t tile = 0; tile < tiles; ++tile) {
    CpAsyncWait<0>();
    __syncthreads();  // the tile (and q) visible to all; the other stage no longer read
    if (tile + 1 < tiles) load_tile(static_cast<int>((tile + 1) % 2), key_begin + (tile + 1) * kTile);
    CpAsyncCommit();
    const bf16* ks = kv + 2 * (tile % 2) * kTile * ld;
    const bf16* vs = ks + kTile * ld;
    const bool valid = key_begin + tile * kTile + lane < key_end;

    // Scores: lane = key; 16-byte reads of its K row (rows padded: no bank conflicts), q broadcast.
    float score[kHPW] = {};
    for (int d = 0; d < D; d += 8) {
      float kf[8];
      ToFloat8(Load8(ks + lane * ld + d), kf);
#pragma unroll
      for (int hi = 0; hi < kHPW; ++hi) {
        const int h = warp + kWarps * hi;
        if (h >= heads_here) break;
        const float4 q0 = *reinterpret_cast<const float4*>(qs + h * D + d);
        const float4 q1 = *reinterpret_cast<const float4*>(qs + h * D + d + 4);
        score[hi] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] +
                     q1.z * kf[6] + q1.w * kf[7];
      }
    }
    // Online softmax per head, across the warp; e = this lane's key's weight.
    float e[kHPW], correction[kHPW];
#pragma unroll
    for (int hi = 0; hi < kHPW; ++hi) {
      const float sc = valid ? score[hi] * p.scale : -INFINITY;
      const float m_new = fmaxf(m_run[hi], WarpMax(sc));  // lane 0's key is always valid: finite
      correction[hi] = __expf(m_run[hi] - m_new);          // 0 on the first tile (m_run = -FLT_MAX)
      e[hi] = valid ? __expf(sc - m_new) : 0.0f;
      l_run[hi] = l_run[hi] * correction[hi] + WarpSum(e[hi]);
      m_run[hi] = m_new;
    }
    // P V: lane owns channels 2 lane + 64 i; V rows read once for all the warp's heads.
#pragma unroll
    for (int hi = 0; hi < kHPW; ++hi) {
#pragma unroll
      for (int c = 0; c < 2 * kMaxPairs; ++c) acc[hi][c] *= correction[hi];
    }
    for (int j = 0; j < kTile; ++j) {
      float2 v[kMaxPairs] = {};
#pragma unroll
      for (int i = 0; i < kMaxPairs; ++i) {
        if (i >= pairs) break;
        const int d = 2 * lane + 64 * i;
        v[i] = d < D ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * ld + d)) : float2{};
      }
#pragma unroll
      for (int hi = 0; hi < kHPW; ++hi) {
        const float pj = __shfl_sync(0xffffffffu, e[hi], j);
#pragma unroll
        for (int i = 0; i < kMaxPairs; ++i) {
          if (i >= pairs) break;
          acc[hi][2 * i] += pj * v[i].x;
          acc[hi][2 * i + 1] += pj * v[i].y;
        }
      }
    }
  }
#pragma unroll
  for (int hi = 0; hi < kHPW; ++hi) {
    const int h = warp + kWarps * hi;
    if (h >= heads_here) break;
    const int64_t row = (t * p.heads + static_cast<int64_t>(g) * G + head_lo + h) * p.slices + slice;
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const int d = 2 * lane + 64 * i;
      if (d < D) *reinterpret_cast<float2*>(p.partial_acc + row * D + d) = make_float2(acc[hi][2 * i], acc[hi][2 * i + 1]);
    }
    if (lane == 0) *reinterpret_cast<float2*>(p.partial_ml + row * 2) = make_float2(m_run[hi], l_run[hi]);
  }
}

// grid (heads, tokens from row_base): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void __launch_bounds__(kThreads) CombineKernel(const float* partial_acc, const float* partial_ml, int heads,
                                                          int slices, int head_dim, int64_t row_base, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int h = blockIdx.x;
  const int64_t t = row_base + blockIdx.y;
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
  const int sms = MultiprocessorCount();
  const int64_t group = kv_heads > 0 ? std::max<int64_t>(shape.heads / kv_heads, 1) : 1;
  int64_t most = 0;
  for (int64_t t = 1; t <= shape.tokens; ++t) {
    most = std::max<int64_t>(most, t * PlanAttention(t, kv_heads, group, shape.max_context, sms).slices);
  }
  return most * shape.heads * (head_dim + 2);
}

template <int kHPW>
cudaError_t LaunchSlices(const Params& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<AttentionSliceKernel<kHPW>>();
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(AttentionSliceKernel<kHPW>, grid, dim3(kThreads), smem, stream, p);
}

cudaError_t LaunchPagedAttention(const bf16* q, const AttentionShape& shape, const PagedKv& cache,
                                 const SeqBatch& seqs, float* workspace, bf16* out, cudaStream_t stream) {
  if (shape.tokens == 0) return cudaSuccess;
  const int64_t D = cache.head_dim;
  if (D % 8 != 0 || D > 64 * kMaxPairs || cache.kv_heads <= 0 || shape.heads % cache.kv_heads != 0 ||
      seqs.num_seqs <= 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t group = shape.heads / cache.kv_heads;
  const AttentionGeometry geo = PlanAttention(shape.tokens, cache.kv_heads, group, shape.max_context, MultiprocessorCount());
  Params p;
  p.q = q;
  p.cache = cache;
  p.seqs = seqs;
  p.heads = static_cast<int>(shape.heads);
  p.group = static_cast<int>(group);
  p.head_dim = static_cast<int>(D);
  p.head_chunks = geo.head_chunks;
  p.slices = geo.slices;
  p.slice_keys = geo.slice_keys;
  p.scale = 1.0f / sqrtf(static_cast<float>(D));
  p.partial_acc = workspace;
  p.partial_ml = workspace + shape.tokens * shape.heads * geo.slices * D;
  const size_t smem = sizeof(bf16) * 4 * kTile * (D + kKvPad) + sizeof(float) * kWarps * geo.heads_per_warp * D;
  // Query rows go on grid z (and y for the combine step): at most kMaxGridYZ a launch.
  for (int64_t chunk = 0; chunk < RowChunks(shape.tokens); ++chunk) {
    p.row_base = chunk * kMaxGridYZ;
    const unsigned rows = static_cast<unsigned>(RowChunkSize(shape.tokens, chunk));
    const dim3 grid(static_cast<unsigned>(geo.slices), static_cast<unsigned>(cache.kv_heads * geo.head_chunks), rows);
    cudaError_t e = cudaErrorInvalidValue;
    switch (geo.heads_per_warp) {
      case 1:
        e = LaunchSlices<1>(p, grid, smem, stream);
        break;
      case 2:
        e = LaunchSlices<2>(p, grid, smem, stream);
        break;
      case 4:
        e = LaunchSlices<4>(p, grid, smem, stream);
        break;
      case 8:
        e = LaunchSlices<8>(p, grid, smem, stream);
        break;
    }
    if (e != cudaSuccess) return e;
    e = LaunchKernel(CombineKernel, dim3(static_cast<unsigned>(shape.heads), rows), dim3(kThreads), 0, stream,
                     p.partial_acc, p.partial_ml, p.heads, geo.slices, p.head_dim, p.row_base, out);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace ag::cuda
