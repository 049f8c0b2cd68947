// The paged attention slice kernel (attention.cuh), included by one .cu per
// cache format (bf16 in attention.cu, fp8 and int8 beside it) so that nvcc
// compiles them in parallel. Not a public header.
//
// An 8-bit cache is read as codes: the K and V tiles arrive in shared memory
// at one byte a value with each key's two scales beside them, and the scales
// are applied once a key, not once a value: a key's K scale multiplies its
// score, its V scale its row of V.
#ifndef AUTOGLM_KERNELS_CUDA_ATTENTION_IMPL_CUH_
#define AUTOGLM_KERNELS_CUDA_ATTENTION_IMPL_CUH_

#include <cfloat>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"

namespace ag::cuda::attention_detail {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kAttentionTile;  // keys per shared-memory tile: one per lane
constexpr int kMaxPairs = 4;           // head_dim <= 256: a lane owns 2 * kMaxPairs channels of the output
constexpr int kRowPad = 16;            // bytes per K/V row of padding: 16-byte row reads land in different banks

struct Params {
  const bf16* q;
  PagedKv cache;
  SeqBatch seqs;
  int heads, group, head_dim;
  int head_chunks, slices, slice_keys;
  float scale;
  float* partial_acc;  // [tokens, heads, slices, head_dim]
  float* partial_ml;   // [tokens, heads, slices, 2]: running max and sum
  bf16* out;           // with one slice the slice is the answer: written here, no combine step
  int64_t row_base;    // the launch's first query row (grid z holds at most kMaxGridYZ rows)
};

// Bytes of a K or V row in shared memory, and of one pipeline stage (K and V tiles, then for an
// 8-bit cache the tile's K and V scales).
constexpr int RowBytes(int head_dim, KvCode code) { return head_dim * KvCodeBytes(code) + kRowPad; }
constexpr int StageBytes(int head_dim, KvCode code) {
  return 2 * kTile * RowBytes(head_dim, code) + (code == KvCode::kBF16 ? 0 : 2 * kTile * 4);
}
// Dynamic shared memory of a launch: two stages, then q [kWarps * heads_per_warp][D] fp32.
inline size_t SliceSmemBytes(int head_dim, KvCode code, int heads_per_warp) {
  return 2 * static_cast<size_t>(StageBytes(head_dim, code)) + sizeof(float) * kWarps * heads_per_warp * head_dim;
}

// The sequence owning query row t: the last s with seq_offsets[s] <= t.
__device__ __forceinline__ int SequenceOf(const int32_t* offsets, int num_seqs, int64_t t) {
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

// Eight values of a K row in shared memory (unscaled codes for an 8-bit cache).
template <KvCode kCode>
__device__ __forceinline__ void Load8Values(const unsigned char* row, float* f) {
  if constexpr (kCode == KvCode::kBF16) {
    ToFloat8(Load8(reinterpret_cast<const bf16*>(row)), f);
  } else {
    KvCodes8<kCode>(row, f);
  }
}

// Channels (d, d + 1) of a V row in shared memory (unscaled codes for an 8-bit cache).
template <KvCode kCode>
__device__ __forceinline__ float2 LoadPair(const unsigned char* row, int d) {
  if constexpr (kCode == KvCode::kBF16) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + 2 * d));
  } else {
    return KvCodePair<kCode>(*reinterpret_cast<const uint16_t*>(row + d));
  }
}

// grid (slices, kv_heads * head_chunks, tokens). Warp w takes query heads w, w + 4, ... of the block's
// chunk of the group; lane j takes key j of each 32-key tile for the scores and the softmax (warp
// shuffles: no barrier), then output channels 2 lane + 64 i for P V. K and V tiles arrive through
// cp.async, double-buffered: one barrier a tile. Shared memory: two stages of K and V tiles
// [kTile][RowBytes] (and an 8-bit cache's scales [2][kTile] fp32), then q [4 * kHPW][D] fp32.
template <int kHPW, KvCode kCode>
__global__ void __launch_bounds__(kThreads, kHPW <= 4 ? 4 : 2) AttentionSliceKernel(Params p) {
  constexpr bool k8Bit = kCode != KvCode::kBF16;
  constexpr int kBytes = KvCodeBytes(kCode), kPerCopy = 16 / kBytes;  // values a 16-byte cp.async moves
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int G = p.group, D = p.head_dim, ld = RowBytes(D, kCode), stage_bytes = StageBytes(D, kCode);
  const int pairs = (D + 63) / 64;
  float* qs = reinterpret_cast<float*>(smem_raw + 2 * stage_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  AllowNextKernel();
  WaitForPreviousKernel();

  const int slice = blockIdx.x, g = blockIdx.y / p.head_chunks, chunk = blockIdx.y % p.head_chunks;
  const int head_lo = chunk * kWarps * kHPW, heads_here = min(kWarps * kHPW, G - head_lo);
  const int64_t t = p.row_base + blockIdx.z;
  const int s = p.seqs.row_seqs != nullptr ? p.seqs.row_seqs[t]
                                           : SequenceOf(p.seqs.seq_offsets, static_cast<int>(p.seqs.num_seqs), t);
  const int64_t first = p.seqs.seq_offsets[s], count_new = p.seqs.seq_offsets[s + 1] - first;
  const int64_t visible = p.seqs.context_lens[s] - count_new + (t - first) + 1;  // keys 0..position
  const int64_t key_begin = static_cast<int64_t>(slice) * p.slice_keys;
  const int64_t key_end = min(visible, key_begin + p.slice_keys);
  const int32_t* table = p.seqs.block_tables + s * p.seqs.max_blocks;
  const int64_t bs = p.cache.block_size, kv_heads = p.cache.kv_heads;
  const int64_t q_row = t * p.heads * D + (static_cast<int64_t>(g) * G + head_lo) * D;
  const auto* k_cache = static_cast<const unsigned char*>(p.cache.k);
  const auto* v_cache = static_cast<const unsigned char*>(p.cache.v);

  auto load_tile = [&](int stage, int64_t base) {
    unsigned char* ks = smem_raw + stage * stage_bytes;
    unsigned char* vs = ks + kTile * ld;
    for (int i = threadIdx.x; i < kTile * (D / kPerCopy); i += kThreads) {
      const int j = i / (D / kPerCopy), d = (i % (D / kPerCopy)) * kPerCopy;
      const int64_t key = base + j;
      const bool valid = key < key_end;
      const int64_t at =
          valid ? (PagedSlot(table, bs, key) * kv_heads + g) * D + d : 0;
      CpAsync16(ks + j * ld + d * kBytes, k_cache + at * kBytes, valid);  // invalid keys: zeros
      CpAsync16(vs + j * ld + d * kBytes, v_cache + at * kBytes, valid);
    }
    if constexpr (k8Bit) {  // the tile's scales: thread i < kTile K's of key i, the next kTile V's
      if (threadIdx.x < 2 * kTile) {
        const int j = threadIdx.x % kTile;
        const int64_t key = base + j;
        const float* scales = threadIdx.x < kTile ? p.cache.k_scale : p.cache.v_scale;
        reinterpret_cast<float*>(vs + kTile * ld)[threadIdx.x] =
            key < key_end ? scales[PagedSlot(table, bs, key) * kv_heads + g] : 0.0f;
      }
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
    __syncthreads();  // the tile (and q, and the scales) visible to all; the other stage no longer read
    if (tile + 1 < tiles) load_tile(static_cast<int>((tile + 1) % 2), key_begin + (tile + 1) * kTile);
    CpAsyncCommit();
    const unsigned char* ks = smem_raw + (tile % 2) * stage_bytes;
    const unsigned char* vs = ks + kTile * ld;
    const float* scales = reinterpret_cast<const float*>(vs + kTile * ld);  // 8-bit: [K, V][kTile]
    const bool valid = key_begin + tile * kTile + lane < key_end;

    // Scores: lane = key; 16-byte (8-byte for codes) reads of its K row (rows padded: no bank
    // conflicts), q broadcast.
    float score[kHPW] = {};
    for (int d = 0; d < D; d += 8) {
      float kf[8];
      Load8Values<kCode>(ks + lane * ld + d * kBytes, kf);
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
    const float key_scale = k8Bit ? scales[lane] * p.scale : p.scale;
    // Online softmax per head, across the warp; e = this lane's key's weight.
    float e[kHPW], correction[kHPW];
#pragma unroll
    for (int hi = 0; hi < kHPW; ++hi) {
      const float sc = valid ? score[hi] * key_scale : -INFINITY;
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
      const float v_scale = k8Bit ? scales[kTile + j] : 1.0f;  // a broadcast read
#pragma unroll
      for (int i = 0; i < kMaxPairs; ++i) {
        if (i >= pairs) break;
        const int d = 2 * lane + 64 * i;
        v[i] = d < D ? LoadPair<kCode>(vs + j * ld, d) : float2{};
        if constexpr (k8Bit) v[i] = make_float2(v[i].x * v_scale, v[i].y * v_scale);
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
    const int64_t head_row = t * p.heads + static_cast<int64_t>(g) * G + head_lo + h;
    if (p.slices == 1) {
      const float inv = 1.0f / l_run[hi];  // key 0 is always visible: l_run >= 1
#pragma unroll
      for (int i = 0; i < kMaxPairs; ++i) {
        const int d = 2 * lane + 64 * i;
        if (d < D) {
          *reinterpret_cast<__nv_bfloat162*>(p.out + head_row * D + d) =
              __floats2bfloat162_rn(acc[hi][2 * i] * inv, acc[hi][2 * i + 1] * inv);
        }
      }
      continue;
    }
    const int64_t row = head_row * p.slices + slice;
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const int d = 2 * lane + 64 * i;
      if (d < D) *reinterpret_cast<float2*>(p.partial_acc + row * D + d) = make_float2(acc[hi][2 * i], acc[hi][2 * i + 1]);
    }
    if (lane == 0) *reinterpret_cast<float2*>(p.partial_ml + row * 2) = make_float2(m_run[hi], l_run[hi]);
  }
}

template <int kHPW, KvCode kCode>
cudaError_t LaunchSlices(const Params& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<AttentionSliceKernel<kHPW, kCode>>();
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(AttentionSliceKernel<kHPW, kCode>, grid, dim3(kThreads), smem, stream, p);
}

// Decode attention on the tensor cores for grouped-query heads (attention_gqa.cu): the group's
// query heads as the rows of one mma, K and V read once a group; PlanGqaDecode's slices, merged in
// a cluster (`fold`: grid x is p.slices, 2 .. kGqaFoldMaxSlices) or through the slice kernel's
// partials and combine step. Whether it takes a launch (a bf16 cache, head_dim 64 or 128, 4-16
// query heads a KV head; AUTOGLM_GQA_DECODE=0 switches it off), and the launch over grid
// (slices, kv_heads, rows of this launch).
bool GqaDecodeTakes(int64_t head_dim, int64_t group, KvCode code);
cudaError_t LaunchGqaDecode(const Params& p, dim3 grid, bool fold, cudaStream_t stream);

// The slice kernels of one cache format, by heads per warp; defined in attention[_<code>].cu.
template <KvCode kCode>
cudaError_t LaunchSlicesFor(const Params& p, int heads_per_warp, dim3 grid, size_t smem, cudaStream_t stream);

#define AG_INSTANTIATE_ATTENTION(C)                                                                         \
  template <>                                                                                               \
  cudaError_t LaunchSlicesFor<C>(const Params& p, int heads_per_warp, dim3 grid, size_t smem,               \
                                 cudaStream_t stream) {                                                     \
    switch (heads_per_warp) {                                                                               \
      case 1:                                                                                               \
        return LaunchSlices<1, C>(p, grid, smem, stream);                                                   \
      case 2:                                                                                               \
        return LaunchSlices<2, C>(p, grid, smem, stream);                                                   \
      case 4:                                                                                               \
        return LaunchSlices<4, C>(p, grid, smem, stream);                                                   \
      case 8:                                                                                               \
        return LaunchSlices<8, C>(p, grid, smem, stream);                                                   \
    }                                                                                                       \
    return cudaErrorInvalidValue;                                                                           \
  }

}  // namespace ag::cuda::attention_detail

#endif  // AUTOGLM_KERNELS_CUDA_ATTENTION_IMPL_CUH_
