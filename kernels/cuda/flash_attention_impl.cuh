// The flash attention kernel (flash_attention.cuh), included by one .cu per
// mask so that nvcc compiles them in parallel. Not a public header.
//
// Block: 4 warps, 64 query rows of one sequence (warp w: rows 16w..16w+15)
// and one query head. Shared memory: Q [64][D], then two stages of K and V
// [64][D], rows padded by 16 bytes so that ldmatrix's eight rows fall in
// distinct banks. A lane holds rows g and g + 8 of its warp's 16 (g = lane / 4)
// of S (a 64-key tile: 32 floats) and of O (D / 2 floats), and the two rows'
// running max and (partial) sum. An 8-bit cache's K and V tiles are dequantized
// on their way into shared memory (each key's code times its scale, rounded to
// bf16): plain loads, not cp.async, and the same tile loop after that.
#ifndef AUTOGLM_KERNELS_CUDA_FLASH_ATTENTION_IMPL_CUH_
#define AUTOGLM_KERNELS_CUDA_FLASH_ATTENTION_IMPL_CUH_

#include <cmath>

#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/flash_softmax.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda::flash_detail {

constexpr int kThreads = 128;  // 4 warps of 16 query rows
constexpr int kPad = 8;        // bf16 of padding a shared row

enum class Mask { kCausalPaged, kSegment };

struct Params {
  const bf16* q;
  bf16* out;
  const int32_t* offsets;  // [sequences + 1]: each sequence's (segment's) query rows
  int64_t sequences;
  int heads, group;  // query heads, and query heads a KV head
  float scale_log2;  // log2(e) / sqrt(head_dim): softmax in base 2
  // kCausalPaged: the cache and the sequences' contexts and block tables
  PagedKv cache;
  const int32_t* context_lens;
  const int32_t* block_tables;
  int64_t max_blocks;
  // kSegment: K and V rows beside Q's
  const bf16* k;
  const bf16* v;
  int64_t in_stride;  // kSegment: elements between rows of q, k and v (heads * head_dim, or 3x that packed)
};

template <int kD>
constexpr size_t SmemBytes() {
  return sizeof(bf16) * (kFlashRows + 4 * kFlashKeys) * (kD + kPad);
}

// Eight codes of an 8-bit cache row (8 bytes) times their key's scale, as bf16.
template <KvCode kCode>
__device__ __forceinline__ Bf16x8 DequantizeKv8(const unsigned char* codes, float scale) {
  float f[8];
  KvCodes8<kCode>(codes, f);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] *= scale;
  return FromFloat8(f);
}

template <int kD, Mask kMask, KvCode kCode = KvCode::kBF16>
__global__ void __launch_bounds__(kThreads, 2) FlashKernel(Params p) {
  constexpr int kLd = kD + kPad, kPieces = kD / 8;  // 16-byte pieces of a row
  constexpr int kScoreTiles = kFlashKeys / 8, kOutTiles = kD / 8;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  bf16* qs = reinterpret_cast<bf16*>(flash_smem);  // [kFlashRows][kLd]
  bf16* ks = qs + kFlashRows * kLd;                 // [2][kFlashKeys][kLd]
  bf16* vs = ks + 2 * kFlashKeys * kLd;             // [2][kFlashKeys][kLd]
  __shared__ FlashTile shared_tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  AllowNextKernel();
  WaitForPreviousKernel();
  if (threadIdx.x == 0) shared_tile = FlashTileOf(p.offsets, p.sequences, blockIdx.x);
  __syncthreads();
  const FlashTile tile = shared_tile;
  if (tile.seq < 0) return;  // past the last tile: the whole block leaves

  const int h = blockIdx.y, kv_head = h / p.group;
  // Rows of out (and of q over the paged cache) are heads x kD apart; q, k and v within segments in_stride.
  const int64_t q_stride = static_cast<int64_t>(p.heads) * kD, seq_first = p.offsets[tile.seq];
  const int64_t in_stride = kMask == Mask::kSegment ? p.in_stride : q_stride;
  // The keys the tile's rows see: causal, 0..first_pos + row; a segment, all of it.
  int64_t keys, first_pos = 0;
  const int32_t* table = nullptr;
  const bf16* k_src;
  const bf16* v_src;
  if constexpr (kMask == Mask::kCausalPaged) {
    const int64_t count_new = p.offsets[tile.seq + 1] - seq_first;
    first_pos = p.context_lens[tile.seq] - count_new + (tile.first - seq_first);
    keys = first_pos + tile.rows;
    table = p.block_tables + tile.seq * p.max_blocks;
    k_src = static_cast<const bf16*>(p.cache.k);
    v_src = static_cast<const bf16*>(p.cache.v);
  } else {
    keys = p.offsets[tile.seq + 1] - seq_first;
    k_src = p.k;
    v_src = p.v;
  }
  auto key_row = [&](int64_t key) -> int64_t {  // where key's K (and V) row of this head starts
    if constexpr (kMask == Mask::kCausalPaged) {
      const int64_t bs = p.cache.block_size;
      return (PagedSlot(table, bs, key) * p.cache.kv_heads + kv_head) * kD;
    } else {
      return (seq_first + key) * in_stride + static_cast<int64_t>(kv_head) * kD;
    }
  };
  auto load_keys = [&](int stage, int64_t base) {  // keys past the end arrive as zeros
    bf16* kt = ks + stage * kFlashKeys * kLd;
    bf16* vt = vs + stage * kFlashKeys * kLd;
    if constexpr (kCode != KvCode::kBF16) {  // 8-bit codes (paged only): dequantized on the way in
      const auto* k_codes = static_cast<const unsigned char*>(p.cache.k);
      const auto* v_codes = static_cast<const unsigned char*>(p.cache.v);
      for (int i = threadIdx.x; i < kFlashKeys * kPieces; i += kThreads) {
        const int j = i / kPieces, c = (i % kPieces) * 8;
        const int64_t key = base + j;
        Bf16x8 kv, vv;
        *reinterpret_cast<int4*>(&kv) = make_int4(0, 0, 0, 0);
        *reinterpret_cast<int4*>(&vv) = make_int4(0, 0, 0, 0);
        if (key < keys) {
          const int64_t bs = p.cache.block_size;
          const int64_t head_row = PagedSlot(table, bs, key) * p.cache.kv_heads + kv_head;
          kv = DequantizeKv8<kCode>(k_codes + head_row * kD + c, p.cache.k_scale[head_row]);
          vv = DequantizeKv8<kCode>(v_codes + head_row * kD + c, p.cache.v_scale[head_row]);
        }
        Store8(kt + j * kLd + c, kv);
        Store8(vt + j * kLd + c, vv);
      }
    } else {
      for (int i = threadIdx.x; i < kFlashKeys * kPieces; i += kThreads) {
        const int j = i / kPieces, c = (i % kPieces) * 8;
        const int64_t key = base + j;
        const bool valid = key < keys;
        const int64_t at = valid ? key_row(key) + c : 0;
        CpAsync16(kt + j * kLd + c, k_src + at, valid);
        CpAsync16(vt + j * kLd + c, v_src + at, valid);
      }
    }
  };

  for (int i = threadIdx.x; i < kFlashRows * kPieces; i += kThreads) {
    const int r = i / kPieces, c = (i % kPieces) * 8;
    const bool valid = r < tile.rows;
    CpAsync16(qs + r * kLd + c, p.q + (valid ? (tile.first + r) * in_stride + static_cast<int64_t>(h) * kD + c : 0),
              valid);
  }
  const int64_t tiles = keys > 0 ? (keys + kFlashKeys - 1) / kFlashKeys : 0;
  if (tiles > 0) load_keys(0, 0);
  CpAsyncCommit();  // Q and the first keys

  const int warp_row = 16 * warp;
  float o[kOutTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const mma::At qa = mma::AFragmentRow(lane), kb = mma::BPairRow(lane), vb = mma::BPairTransRow(lane);
  for (int64_t kt = 0; kt < tiles; ++kt) {
    if (kt + 1 < tiles) load_keys(static_cast<int>((kt + 1) % 2), (kt + 1) * kFlashKeys);
    CpAsyncCommit();  // an empty group on the last tile: the wait below counts groups
    CpAsyncWait<1>();  // every group but the newest: tile kt (and Q) landed
    __syncthreads();   // ... for every thread
    const bf16* k_tile = ks + (kt % 2) * kFlashKeys * kLd;
    const bf16* v_tile = vs + (kt % 2) * kFlashKeys * kLd;

    // S = Q K^T: 16 rows x 64 keys a warp.
    float s[kScoreTiles][4] = {};
#pragma unroll
    for (int kk = 0; kk < kD; kk += 16) {
      unsigned a[4];
      LdMatrixX4(a, qs + (warp_row + qa.row) * kLd + kk + qa.col);
#pragma unroll
      for (int n = 0; n < kScoreTiles; n += 2) {
        unsigned b[4];
        LdMatrixX4(b, k_tile + (8 * n + kb.row) * kLd + kk + kb.col);
        Mma16816(s[n], a, b);
        Mma16816(s[n + 1], a, b + 2);
      }
    }

    // Mask, then the online softmax of rows g (half 0) and g + 8 (half 1).
    const int64_t key0 = kt * kFlashKeys;
    int64_t last_key[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      last_key[half] = kMask == Mask::kCausalPaged ? first_pos + warp_row + g + 8 * half : keys - 1;
    }
    OnlineSoftmaxTile<kScoreTiles, kOutTiles>(&s[0][0], &o[0][0], row_max, row_sum, key0, last_key, keys, p.scale_log2,
                                              t4);

    // O += P V: S's accumulators of score tiles 2c, 2c + 1 are P's A fragment of keys 16c..16c+15.
#pragma unroll
    for (int c = 0; c < kFlashKeys / 16; ++c) {
      unsigned a[4];
      ProbabilityFragment(&s[0][0], c, a);
#pragma unroll
      for (int d = 0; d < kOutTiles; d += 2) {
        unsigned b[4];
        LdMatrixX4Trans(b, v_tile + (16 * c + vb.row) * kLd + 8 * d + vb.col);
        Mma16816(o[d], a, b);
        Mma16816(o[d + 1], a, b + 2);
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }

  StoreFlashRows<kOutTiles>(&o[0][0], row_sum, warp_row, tile.rows, g, t4,
                            p.out + tile.first * q_stride + static_cast<int64_t>(h) * kD, q_stride);
}

template <int kD, Mask kMask, KvCode kCode>
cudaError_t LaunchFlash(const Params& p, int64_t rows, cudaStream_t stream) {
  constexpr size_t kSmem = SmemBytes<kD>();
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<FlashKernel<kD, kMask, kCode>>();
    if (e != cudaSuccess) return e;
  }
  const int64_t blocks = FlashGridTiles(rows, p.sequences);
  if (blocks > 0x7fffffff || p.heads > kMaxGridYZ) return cudaErrorInvalidValue;
  return LaunchKernel(FlashKernel<kD, kMask, kCode>, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(p.heads)),
                      dim3(kThreads), kSmem, stream, p);
}

template <Mask kMask, KvCode kCode = KvCode::kBF16>
cudaError_t LaunchFlashFor(const Params& p, int64_t head_dim, int64_t rows, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  switch (head_dim) {
    case 16:
      return LaunchFlash<16, kMask, kCode>(p, rows, stream);
    case 32:
      return LaunchFlash<32, kMask, kCode>(p, rows, stream);
    case 64:
      return LaunchFlash<64, kMask, kCode>(p, rows, stream);
    case 128:
      return LaunchFlash<128, kMask, kCode>(p, rows, stream);
  }
  return cudaErrorInvalidValue;
}

// The causal kernels over an 8-bit cache (flash_attention_paged8.cu).
cudaError_t LaunchFlashPagedCodes(const Params& p, KvCode code, int64_t head_dim, int64_t rows, cudaStream_t stream);


}  // namespace ag::cuda::flash_detail

#endif  // AUTOGLM_KERNELS_CUDA_FLASH_ATTENTION_IMPL_CUH_
