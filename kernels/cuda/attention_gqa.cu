// Decode attention on the tensor cores for grouped-query heads (attention.cuh's
// LaunchPagedAttention takes it for a bf16 cache, head_dim 64 or 128, 4-16 query
// heads a KV head; GLM-4-9B's and GLM-4.1V's decoders have 16).
//
// The slice kernel (attention_impl.cuh) gives each query head a warp and each
// key a lane: every head of a group reads the group's K and V again, and the
// products run on FMA units (ncu, batch 1 at 4096 keys: 28 us, 3% of the
// bandwidth). Here a group's query heads are the 16 rows of mma.m16n8k16's A
// (rows past the group are zeros): one block takes a query row, a KV head and a
// slice of the context (PlanGqaDecode: slices of whole 64-key tiles), streams the
// slice's keys in 64-key tiles through shared memory (cp.async, two stages), and
// warp w takes keys 16w..16w+15 of each tile with the flash kernel's arithmetic
// (flash_softmax.cuh). The four warps' running maxima, sums and O then merge
// through shared memory; the slices of a row merge the same way across the
// blocks of a cluster (up to 8 slices), or else through the slice kernel's
// partials and combine step.
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_impl.cuh"  // Params, SequenceOf
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_softmax.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda::attention_detail {
namespace {

constexpr int kGqaThreads = 128;  // 4 warps, 16 keys of each tile apiece
constexpr int kKeys = kGqaKeys;  // keys a tile
constexpr int kRows = 16;      // mma rows: the group's query heads, zeros past them
constexpr int kPad = 8;        // bf16 of padding a shared row: ldmatrix's rows in distinct banks

template <int kD>
constexpr size_t GqaSmemBytes() {
  // Q [16][kD + kPad], two stages of K and V [64][kD + kPad]; the merge reuses the stages:
  // O [4 warps][16][kD] fp32, each warp's row maxima and sums [4][16][2], then the block's
  // slice [16][kD] and its maxima and sums [16][2] (which the cluster's blocks read).
  constexpr size_t tiles = sizeof(bf16) * (kRows + 4 * kKeys) * (kD + kPad);
  constexpr size_t merge = sizeof(bf16) * kRows * (kD + kPad) +
                           sizeof(float) * (4 * kRows * kD + 4 * kRows * 2 + kRows * kD + kRows * 2);
  return std::max(tiles, merge);
}

// The slices of one row and KV head, one a block of a cluster, merged: each block leaves its answer
// (O relative to its maximum m, in log2 units, and its sum l) in `slice` [kRows][kD + 2], then
// block r of the cluster's S finishes the group's rows r, r + S, ... from every block's shared
// memory. Every thread of every block arrives at both cluster barriers; the second keeps each
// block's shared memory alive while the others read it. Slice 0 holds key 0: the total sum is > 0.
template <int kD>
__device__ __forceinline__ void FoldClusterSlices(float* slice, const float (&acc)[kD / 8], float m, float l,
                                                  int row, int col0, int group, bf16* out) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  float* slice_o = slice;                    // [kRows][kD]
  float* slice_ml = slice + kRows * kD;      // [kRows][2]
#pragma unroll
  for (int c = 0; c < kD / 8; c += 2) {
    *reinterpret_cast<float2*>(&slice_o[row * kD + col0 + c]) = make_float2(acc[c], acc[c + 1]);
  }
  if (col0 == 0) *reinterpret_cast<float2*>(&slice_ml[row * 2]) = make_float2(m, l);
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank()), slices = static_cast<int>(cluster.num_blocks());
  const int mine = GqaFoldRows(group, rank, slices);  // rows rank, rank + slices, ... below group
  for (int e = threadIdx.x; e < mine * kD; e += kGqaThreads) {
    const int r = rank + slices * (e / kD), col = e % kD;
    float most = -INFINITY;
    for (int s = 0; s < slices; ++s) most = fmaxf(most, cluster.map_shared_rank(slice_ml, s)[r * 2]);
    float sum = 0.0f, o = 0.0f;
    for (int s = 0; s < slices; ++s) {  // a slice past the row's keys has max -inf and sum 0
      const float* theirs = cluster.map_shared_rank(slice, s);
      const float ms = theirs[kRows * kD + r * 2];
      const float w = ms == -INFINITY ? 0.0f : exp2f(ms - most);
      sum += w * theirs[kRows * kD + r * 2 + 1];
      o += w * theirs[r * kD + col];
    }
    out[r * kD + col] = __float2bfloat16(__fdividef(o, sum));  // sum >= 1: the largest slice weighs 1
  }
  cluster.sync();
}

// kFold: the grid's x is one cluster of p.slices blocks (2 .. kGqaFoldMaxSlices), which merge their
// slices in shared memory; otherwise more than one slice writes partials for the combine step.
template <int kD, bool kFold>
__global__ void __launch_bounds__(kGqaThreads) GqaDecodeKernel(Params p) {
  constexpr int kLd = kD + kPad, kPieces = kD / 8, kOutTiles = kD / 8;
  extern __shared__ __align__(16) unsigned char gqa_smem[];
  bf16* qs = reinterpret_cast<bf16*>(gqa_smem);  // [kRows][kLd]
  bf16* ks = qs + kRows * kLd;                    // [2][kKeys][kLd]
  bf16* vs = ks + 2 * kKeys * kLd;                // [2][kKeys][kLd]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  AllowNextKernel();
  WaitForPreviousKernel();
  const float scale_log2 = p.scale * 1.4426950408889634f;  // log2(e): the softmax in base 2

  const int slice = blockIdx.x, kv_head = blockIdx.y;
  const int64_t t = p.row_base + blockIdx.z;
  const SeqBatch& seqs = p.seqs;
  const int s = seqs.row_seqs != nullptr ? seqs.row_seqs[t]
                                         : attention_detail::SequenceOf(seqs.seq_offsets, static_cast<int>(seqs.num_seqs), t);
  const int64_t first = seqs.seq_offsets[s], count_new = seqs.seq_offsets[s + 1] - first;
  const int64_t visible = seqs.context_lens[s] - count_new + (t - first) + 1;  // keys 0..position
  const int64_t key_begin = static_cast<int64_t>(slice) * p.slice_keys;
  const int64_t key_end = min(visible, key_begin + p.slice_keys);
  const int32_t* table = seqs.block_tables + s * seqs.max_blocks;
  const int64_t bs = p.cache.block_size, kv_heads = p.cache.kv_heads;
  const bf16* k_cache = static_cast<const bf16*>(p.cache.k);
  const bf16* v_cache = static_cast<const bf16*>(p.cache.v);
  const int64_t head0 = static_cast<int64_t>(kv_head) * p.group;  // the group's first query head
  const bf16* q = p.q + (t * p.heads + head0) * kD;

  auto load_keys = [&](int stage, int64_t base) {  // keys past the slice arrive as zeros
    bf16* kt = ks + stage * kKeys * kLd;
    bf16* vt = vs + stage * kKeys * kLd;
    for (int i = threadIdx.x; i < kKeys * kPieces; i += kGqaThreads) {
      const int j = i / kPieces, c = (i % kPieces) * 8;
      const int64_t key = base + j;
      const bool valid = key < key_end;
      const int64_t at = valid ? (PagedSlot(table, bs, key) * kv_heads + kv_head) * kD + c : 0;
      CpAsync16(kt + j * kLd + c, k_cache + at, valid);
      CpAsync16(vt + j * kLd + c, v_cache + at, valid);
    }
  };
  for (int i = threadIdx.x; i < kRows * kPieces; i += kGqaThreads) {  // the group's heads, zeros past them
    const int r = i / kPieces, c = (i % kPieces) * 8;
    CpAsync16(qs + r * kLd + c, q + (r < p.group ? r * kD + c : 0), r < p.group);
  }
  const int64_t tiles = key_end > key_begin ? (key_end - key_begin + kKeys - 1) / kKeys : 0;
  if (tiles > 0) load_keys(0, key_begin);
  CpAsyncCommit();

  float o[kOutTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const mma::At qa = mma::AFragmentRow(lane), kb = mma::BPairRow(lane), vb = mma::BPairTransRow(lane);
  const int64_t last_key[2] = {visible - 1, visible - 1};
  for (int64_t kt = 0; kt < tiles; ++kt) {
    if (kt + 1 < tiles) load_keys(static_cast<int>((kt + 1) % 2), key_begin + (kt + 1) * kKeys);
    CpAsyncCommit();   // an empty group on the last tile: the wait counts groups
    CpAsyncWait<1>();  // tile kt (and Q) landed
    __syncthreads();
    const bf16* k_tile = ks + (kt % 2) * kKeys * kLd + 16 * warp * kLd;  // this warp's 16 keys
    const bf16* v_tile = vs + (kt % 2) * kKeys * kLd + 16 * warp * kLd;

    // S = Q K^T: the 16 head rows by the warp's 16 keys.
    float sc[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD; kk += 16) {
      unsigned a[4], b[4];
      LdMatrixX4(a, qs + qa.row * kLd + kk + qa.col);
      LdMatrixX4(b, k_tile + kb.row * kLd + kk + kb.col);
      Mma16816(sc[0], a, b);
      Mma16816(sc[1], a, b + 2);
    }
    OnlineSoftmaxTile<2, kOutTiles>(&sc[0][0], &o[0][0], row_max, row_sum, key_begin + kt * kKeys + 16 * warp,
                                    last_key, key_end, scale_log2, t4);
    // O += P V over the warp's 16 keys.
    unsigned a[4];
    ProbabilityFragment(&sc[0][0], 0, a);
#pragma unroll
    for (int d = 0; d < kOutTiles; d += 2) {
      unsigned b[4];
      LdMatrixX4Trans(b, v_tile + vb.row * kLd + 8 * d + vb.col);
      Mma16816(o[d], a, b);
      Mma16816(o[d + 1], a, b + 2);
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }

  // The four warps' partial answers, merged: O and the row maxima and (quad-summed) sums into
  // shared memory over the stages, then thread i finishes row i / 8, columns (i % 8) kD / 8 ...
  float* merged_o = reinterpret_cast<float*>(gqa_smem + sizeof(bf16) * kRows * kLd);  // [4][kRows][kD]
  float* merged_ml = merged_o + 4 * kRows * kD;                                        // [4][kRows][2]
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = g + 8 * half;
    if (t4 == 0) {
      merged_ml[(warp * kRows + row) * 2] = row_max[half];
      merged_ml[(warp * kRows + row) * 2 + 1] = sum;
    }
#pragma unroll
    for (int d = 0; d < kOutTiles; ++d) {
      *reinterpret_cast<float2*>(&merged_o[(warp * kRows + row) * kD + 8 * d + 2 * t4]) =
          make_float2(o[d][2 * half], o[d][2 * half + 1]);
    }
  }
  __syncthreads();
  // Thread i: row i / 8 (a query head of the group, or a zero row past it), columns (i % 8) kD / 8 ...
  const int row = threadIdx.x / 8, col0 = (threadIdx.x % 8) * (kD / 8);
  float m = -INFINITY;
#pragma unroll
  for (int w = 0; w < 4; ++w) m = fmaxf(m, merged_ml[(w * kRows + row) * 2]);
  float weight[4], l = 0.0f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {  // a warp that saw no key has max -inf and sum 0
    const float mw = merged_ml[(w * kRows + row) * 2];
    weight[w] = mw == -INFINITY ? 0.0f : exp2f(mw - m);
    l += weight[w] * merged_ml[(w * kRows + row) * 2 + 1];
  }
  const int64_t group_row = t * p.heads + head0;  // the group's first head row of q and out
  float acc[kD / 8];
#pragma unroll
  for (int c = 0; c < kD / 8; ++c) {
    acc[c] = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) acc[c] += weight[w] * merged_o[(w * kRows + row) * kD + col0 + c];
  }
  if constexpr (kFold) {
    FoldClusterSlices<kD>(merged_ml + 4 * kRows * 2, acc, m, l, row, col0, p.group, p.out + group_row * kD);
    return;
  }
  if (row >= p.group) return;
  const int64_t head_row = group_row + row;
  if (p.slices == 1) {  // key 0 is always visible: l > 0
    const float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < kD / 8; c += 2) {
      *reinterpret_cast<__nv_bfloat162*>(p.out + head_row * kD + col0 + c) =
          __floats2bfloat162_rn(acc[c] * inv, acc[c + 1] * inv);
    }
    return;
  }
  // The slice kernel's partial layout (CombineKernel): O relative to the maximum in natural units.
  const int64_t at = head_row * p.slices + slice;
#pragma unroll
  for (int c = 0; c < kD / 8; c += 2) {
    *reinterpret_cast<float2*>(p.partial_acc + at * kD + col0 + c) = make_float2(acc[c], acc[c + 1]);
  }
  if (col0 == 0) {
    const float m_natural = m == -INFINITY ? -FLT_MAX : m * 0.6931471805599453f;  // log2 units to natural
    *reinterpret_cast<float2*>(p.partial_ml + at * 2) = make_float2(m_natural, l);
  }
}

template <int kD, bool kFold>
cudaError_t LaunchGqa(const Params& p, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmem = GqaSmemBytes<kD>();
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<GqaDecodeKernel<kD, kFold>>();
    if (e != cudaSuccess) return e;
  }
  const dim3 cluster(kFold ? grid.x : 1, 1, 1);
  return LaunchKernelInCluster(GqaDecodeKernel<kD, kFold>, grid, dim3(kGqaThreads), kSmem, stream, cluster, p);
}

}  // namespace

bool GqaDecodeTakes(int64_t head_dim, int64_t group, KvCode code) {
  static const bool enabled = SwitchedOn("AUTOGLM_GQA_DECODE");
  static_assert(kRows == 16, "GqaDecodeShape's largest group is the mma's rows");
  return enabled && code == KvCode::kBF16 && GqaDecodeShape(head_dim, group);
}

cudaError_t LaunchGqaDecode(const Params& p, dim3 grid, bool fold, cudaStream_t stream) {
  if (fold && (p.slices < 2 || p.slices > kGqaFoldMaxSlices || grid.x != static_cast<unsigned>(p.slices))) {
    return cudaErrorInvalidValue;
  }
  if (p.head_dim == 128) return fold ? LaunchGqa<128, true>(p, grid, stream) : LaunchGqa<128, false>(p, grid, stream);
  return fold ? LaunchGqa<64, true>(p, grid, stream) : LaunchGqa<64, false>(p, grid, stream);
}

}  // namespace ag::cuda::attention_detail
