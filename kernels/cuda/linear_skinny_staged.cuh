// The skinny kernel fed through shared memory, for 2..64 rows of x and bf16 weights: included by
// linear_impl.cuh after linear_skinny.cuh (its tile, its ending). Not a public header.
//
// Why a second one: the register-fed SkinnyKernel issues a warp's loads of kUnroll chunks, waits
// for them, multiplies, and only then issues the next; between the batches nothing of the warp is
// in flight. Run 3 measured it at 57-51 % of bandwidth (gate/up at 8 / 32 rows: 89 / 99 us where
// cuBLAS takes 57 and the GEMV at one row 56), and the wgmma GEMM that took 33-64 rows at 27-52 %
// (its 128-row tiles). Here a cp.async pipeline, as the mma.sync GEMM's, keeps all stages but one
// in flight a block while its warps multiply the oldest: 32 KB of weights a block (24 KB at 64
// rows, whose larger x rows leave room for four stages), three or four blocks a multiprocessor. The
// first stages' weights are issued before griddepcontrol.wait (they do not depend on the previous
// kernel), x's after it.
//
// A stage holds the block's 64 weight rows and the batch's 8 kNT rows of x, 64 k wide, in 144-byte
// rows (the 16 bytes of padding put ldmatrix's eight rows in distinct bank groups), and norm_w's
// 64 values as one more row when the op has an RMSNorm prologue. The warps read their fragments
// with ldmatrix as the GEMM does (warp w: features 16 w .. 16 w + 15 as A, the x rows as B), so C
// is the skinny kernel's [feature][batch row] tile and its ending is shared: K split over a
// cluster summed through distributed shared memory, the norm's row scale applied there.
//
// The norm prologue, at every instance: after a stage lands, the block's threads take x's 16-byte
// pieces (8 a row: 64 to 512 pieces, one to four a thread), add their squares to the row's sum and
// write them back multiplied by norm_w's piece, before the warps read the stage. Unlike the
// register-fed kernel's (where every warp multiplied every x value again, measured up to 2.6x
// slower past 8 rows) this is once a value a block, so the norm takes no launch of its own to 64
// rows (kStagedSkinnyMaxRows).
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_SKINNY_STAGED_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_SKINNY_STAGED_CUH_

#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/cuda/linear_split.h"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda {

constexpr int kStagedBK = kStagedSkinnyKTile;  // k a stage
constexpr int kStagedLd = kStagedBK + 8;       // bf16 a stage row
// Stages: five, four for 64 rows (three or four blocks a multiprocessor either way).
template <int kNT>
constexpr int StagedStages() {
  return kNT == 8 ? 4 : 5;
}
// Rows of a stage: the weights', x's, and norm_w's.
template <int kNT>
constexpr int StagedRows() {
  return kSkinnyFeatures + 8 * kNT + 1;
}
template <int kNT>
constexpr size_t StagedSmemBytes() {
  return std::max(sizeof(bf16) * StagedStages<kNT>() * StagedRows<kNT>() * kStagedLd,
                  sizeof(float) * 8 * kNT * kSkinnyTileLd);
}

template <int kNT, Epilogue kE>
__global__ void __launch_bounds__(kSkinnyThreads) StagedSkinnyKernel(LinearParams p, int64_t k_per_rank) {
  extern __shared__ __align__(16) unsigned char staged_smem[];
  using StageRows = bf16 (*)[kStagedLd];
  auto stage_at = [](int s) {
    return reinterpret_cast<StageRows>(staged_smem + sizeof(bf16) * s * StagedRows<kNT>() * kStagedLd);
  };
  constexpr int kXRow = kSkinnyFeatures, kNormRow = kSkinnyFeatures + 8 * kNT, kStages = StagedStages<kNT>();
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t feature0 = static_cast<int64_t>(blockIdx.x) * kSkinnyFeatures;
  const int64_t k_begin = rank * k_per_rank, k_end = min(p.k, k_begin + k_per_rank);
  const bool norm = p.norm_w != nullptr;
  // The norm pass's pieces: thread tid takes tid + 128 i while below x's 8 kNT rows x 8 pieces.
  constexpr int kXPieces = 8 * kNT * 8, kPiecesAThread = (kXPieces + kSkinnyThreads - 1) / kSkinnyThreads;
  // A stage: 8 pieces of 16 bytes a row. K % 8 == 0 and the ranks' ranges start on a k-tile, so a
  // piece is wholly in K or out (zero-filled, as are rows past N and past M). Thread tid copies the
  // pieces tid + 128 i (StagedPiece): rows tid / 8 + kPieceRows i, all at column col. Their sources and
  // destinations are fixed but for k0 and the stage, so they are computed here once: recomputed a
  // piece a stage in 64-bit arithmetic they were ~70 % of the loop's instructions, enough to make
  // the kernel issue-bound rather than memory-bound at one row.
  constexpr int kWPieces = kSkinnyFeatures * 8 / kSkinnyThreads;
  constexpr int kPieceRows = kSkinnyThreads / 8;  // rows from a thread's piece i to i + 1 (geometry_test)
  static_assert(kSkinnyThreads % 8 == 0, "a thread's pieces share their column");
  constexpr unsigned kStageBytes = sizeof(bf16) * StagedRows<kNT>() * kStagedLd;
  constexpr unsigned kPieceRowsBytes = sizeof(bf16) * kPieceRows * kStagedLd;
  const int col = mma::StagedPiece(tid).col, row0 = mma::StagedPiece(tid).row;
  const unsigned smem0 = static_cast<unsigned>(__cvta_generic_to_shared(staged_smem));
  const unsigned w_dst = smem0 + sizeof(bf16) * (row0 * kStagedLd + col);
  const unsigned x_dst = w_dst + sizeof(bf16) * kXRow * kStagedLd;
  const unsigned norm_dst = smem0 + sizeof(bf16) * (kNormRow * kStagedLd + col);
  const int64_t piece_stride = kPieceRows * p.k;  // from piece i to i + 1, in W and in x
  const bf16* w_src = p.w + (feature0 + row0 < p.n ? (feature0 + row0) * p.k : 0) + col;
  const bf16* x_src = p.x + (row0 < p.m ? row0 * p.k : 0) + col;
  auto load_weights = [&](int s, int64_t k0) {
    const bool k_in = col < k_end - k0;
#pragma unroll
    for (int i = 0; i < kWPieces; ++i) {
      const bool valid = k_in && feature0 + row0 + kPieceRows * i < p.n;
      CpAsync16(w_dst + s * kStageBytes + i * kPieceRowsBytes, valid ? w_src + i * piece_stride + k0 : p.w, valid);
    }
  };
  auto load_activations = [&](int s, int64_t k0) {  // x's rows, and norm_w's with the norm
    const bool k_in = col < k_end - k0;
#pragma unroll
    for (int i = 0; i < kPiecesAThread; ++i) {
      if (kXPieces % kSkinnyThreads == 0 || tid + i * kSkinnyThreads < kXPieces) {
        const bool valid = k_in && row0 + kPieceRows * i < p.m;
        CpAsync16(x_dst + s * kStageBytes + i * kPieceRowsBytes, valid ? x_src + i * piece_stride + k0 : p.x, valid);
      }
    }
    if (norm && tid < 8) CpAsync16(norm_dst + s * kStageBytes, p.norm_w + (k_in ? k0 + col : 0), k_in);
  };

  const int64_t tiles = k_end > k_begin ? (k_end - k_begin + kStagedBK - 1) / kStagedBK : 0;
  AllowNextKernel();
  // The weights do not depend on the previous kernel: the first stages' weights are on their way
  // while it finishes (with programmatic dependent launch), x only after the wait. Those copies
  // join the first commit group, so k-tile 0's wait covers every prologue stage's weights, and
  // group s holds stage s's x.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_weights(s, k_begin + s * kStagedBK);
  }
  WaitForPreviousKernel();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_activations(s, k_begin + s * kStagedBK);
    CpAsyncCommit();  // empty groups too: the wait below counts groups
  }
  float acc[kNT][4] = {};
  float squares[kPiecesAThread] = {};  // with the norm: the sums of squares of x rows (tid + 128 i) / 8
  // k-tile t sits in stage t % kStages, k-tile t + kStages - 1 goes to the stage before it.
  for (int64_t t = 0, stage = 0; t < tiles; ++t, stage = stage + 1 == kStages ? 0 : stage + 1) {
    CpAsyncWait<kStages - 2>();  // k-tile t has landed
    __syncthreads();             // ... for every thread; and k-tile t - 1's stage is no longer read
    const int64_t next = t + kStages - 1;
    if (next < tiles) {
      const int next_stage = static_cast<int>(stage == 0 ? kStages - 1 : stage - 1);
      load_weights(next_stage, k_begin + next * kStagedBK);
      load_activations(next_stage, k_begin + next * kStagedBK);
    }
    CpAsyncCommit();
    const StageRows st = stage_at(static_cast<int>(stage));
    if (norm) {  // the same for the whole block
#pragma unroll
      for (int i = 0; i < kPiecesAThread; ++i) {
        const int c = tid + i * kSkinnyThreads;
        const mma::At at = mma::StagedPiece(c);
        if (kXPieces % kSkinnyThreads == 0 || c < kXPieces) {
          int4* piece = reinterpret_cast<int4*>(&st[kXRow + at.row][at.col]);
          Bf16x8 norm_w;
          *reinterpret_cast<int4*>(&norm_w) = *reinterpret_cast<const int4*>(&st[kNormRow][at.col]);
          const int4 xv = *piece;
          squares[i] += SumOfSquares(xv);
          *piece = NormWeighted(xv, norm_w);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < kStagedBK; kk += 16) {
      unsigned af[4], bfrag[kNT][2];
      const mma::At a_at = mma::StagedARow(warp, lane, kk);
      LdMatrixX4(af, &st[a_at.row][a_at.col]);
      if constexpr (kNT == 1) {
        const mma::At b_at = mma::StagedBRow(kXRow, 0, lane, kk, true);
        LdMatrixX2(bfrag[0], &st[b_at.row][b_at.col]);
      } else {
#pragma unroll
        for (int j = 0; j < kNT; j += 2) {
          const mma::At b_at = mma::StagedBRow(kXRow, j, lane, kk, false);
          unsigned r[4];
          LdMatrixX4(r, &st[b_at.row][b_at.col]);
          bfrag[j][0] = r[0];
          bfrag[j][1] = r[1];
          bfrag[j + 1][0] = r[2];
          bfrag[j + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) Mma16816(acc[j], af, bfrag[j]);
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline's buffers become the partial tile
  auto tile = reinterpret_cast<float (*)[kSkinnyTileLd]>(staged_smem);
  StoreSkinnyAccumulators<kNT>(tile, acc, warp, lane);
  if (norm) {  // eight consecutive lanes a row; every lane of every warp takes part in the shuffles
#pragma unroll
    for (int i = 0; i < kPiecesAThread; ++i) {
      float sum = squares[i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      const int c = tid + i * kSkinnyThreads;
      if (c < kXPieces && c % 8 == 0) StoreRowSquares(tile, mma::StagedPiece(c).row, sum);
    }
  }
  FinishSkinnyTile<kE, true>(p, cluster, &tile[0][0], feature0, p.n, 0, norm);
}

template <int kNT, Epilogue kE>
cudaError_t LaunchStagedSkinnyTile(const LinearParams& p, cudaStream_t stream) {
  static_assert(kNT == 1 || kNT % 2 == 0, "x's fragments come two n-tiles an ldmatrix.x4");
  constexpr auto kKernel = StagedSkinnyKernel<kNT, kE>;
  constexpr size_t kSmem = StagedSmemBytes<kNT>();
  cudaError_t e = AllowLargeSharedMemory<kKernel>();
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kSkinnyThreads, kSmem);
  if (e != cudaSuccess) return e;
  const int sms = MultiprocessorCount();
  const KSplit split = SplitStagedSkinnyK(p.n, p.k, int64_t{std::max(per_sm, 1)} * (sms > 0 ? sms : 132));
  const dim3 grid(static_cast<unsigned>((p.n + kSkinnyFeatures - 1) / kSkinnyFeatures),
                  static_cast<unsigned>(split.ranks));
  return LaunchKernelInCluster(kKernel, grid, dim3(kSkinnyThreads), kSmem, stream,
                               dim3(1, static_cast<unsigned>(split.ranks), 1), p, split.k_per_rank);
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_SKINNY_STAGED_CUH_
