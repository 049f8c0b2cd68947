// Decode attention on the tensor cores for grouped-query heads (attention.cuh's
// LaunchPagedAttention takes it for a bf16 cache, head_dim 64 or 128, 4-16 query
// heads a KV head; GLM-4-9B's and GLM-4.1V's decoders have 16).
//
// The slice kernel (attention_impl.cuh) gives each query head a warp and each
// key a lane: every head of a group reads the group's K and V again, and the
// products run on FMA units (ncu, batch 1 at 4096 keys: 28 us, 3% of the
// bandwidth). Here a group's query heads are the 16 rows of mma.m16n8k16's A
// (rows past the group are zeros): one block takes a query row, a KV head and a
// slice of the context (PlanAttention's slices, so the combine step and its
// workspace are the slice kernel's), streams the slice's keys in 64-key tiles
// through shared memory (cp.async, two stages), and warp w takes keys 16w..16w+15
// of each tile with the flash kernel's arithmetic (flash_softmax.cuh). The four
// warps' running maxima, sums and O then merge through shared memory.
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

// Fewer query heads a KV head leave most of the 16 mma rows empty: the slice kernel takes them.
constexpr int64_t kGqaMinGroup = 4;
constexpr int kGqaThreads = 128;  // 4 warps, 16 keys of each tile apiece
constexpr int kKeys = 64;      // keys a tile
constexpr int kRows = 16;      // mma rows: the group's query heads, zeros past them
constexpr int kPad = 8;        // bf16 of padding a shared row: ldmatrix's rows in distinct banks

template <int kD>
constexpr size_t GqaSmemBytes() {
  // Q [16][kD + kPad], two stages of K and V [64][kD + kPad]; the merge reuses the stages:
  // O [4 warps][16][kD] fp32, then each warp's row maxima and sums [4][16][2].
  constexpr size_t tiles = sizeof(bf16) * (kRows + 4 * kKeys) * (kD + kPad);
  constexpr size_t merge = sizeof(bf16) * kRows * (kD + kPad) + sizeof(float) * (4 * kRows * kD + 4 * kRows * 2);
  return std::max(tiles, merge);
}

template <int kD>
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
      const int64_t at = valid ? ((static_cast<int64_t>(table[key / bs]) * bs + key % bs) * kv_heads + kv_head) * kD + c : 0;
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
  const int row = threadIdx.x / 8, col0 = (threadIdx.x % 8) * (kD / 8);
  if (row >= p.group) return;
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
  const int64_t head_row = t * p.heads + head0 + row;
  float acc[kD / 8];
#pragma unroll
  for (int c = 0; c < kD / 8; ++c) {
    acc[c] = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) acc[c] += weight[w] * merged_o[(w * kRows + row) * kD + col0 + c];
  }
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

template <int kD>
cudaError_t LaunchGqa(const Params& p, dim3 grid, cudaStream_t stream) {
  constexpr size_t kSmem = GqaSmemBytes<kD>();
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<GqaDecodeKernel<kD>>();
    if (e != cudaSuccess) return e;
  }
  return LaunchKernel(GqaDecodeKernel<kD>, grid, dim3(kGqaThreads), kSmem, stream, p);
}

}  // namespace

bool GqaDecodeTakes(int64_t head_dim, int64_t group, KvCode code) {
  static const bool enabled = SwitchedOn("AUTOGLM_GQA_DECODE");
  return enabled && code == KvCode::kBF16 && (head_dim == 64 || head_dim == 128) && group >= kGqaMinGroup &&
         group <= kRows;
}

cudaError_t LaunchGqaDecode(const Params& p, dim3 grid, cudaStream_t stream) {
  return p.head_dim == 128 ? LaunchGqa<128>(p, grid, stream) : LaunchGqa<64>(p, grid, stream);
}

}  // namespace ag::cuda::attention_detail
