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
  // piece is wholly in K or out (zero-filled, as are rows past N and past M).
  auto load_weights = [&](int s, int64_t k0) {
    const StageRows st = stage_at(s);
#pragma unroll
    for (int i = 0; i < kSkinnyFeatures * 8 / kSkinnyThreads; ++i) {
      const mma::At at = mma::StagedPiece(tid + i * kSkinnyThreads);
      const int64_t n = feature0 + at.row, k = k0 + at.col;
      const bool valid = n < p.n && k < k_end;
      CpAsync16(&st[at.row][at.col], p.w + (valid ? n * p.k + k : 0), valid);
    }
  };
  auto load_activations = [&](int s, int64_t k0) {  // x's rows, and norm_w's with the norm
    const StageRows st = stage_at(s);
    for (int c = tid; c < kXPieces; c += kSkinnyThreads) {
      const mma::At at = mma::StagedPiece(c);
      const int64_t k = k0 + at.col;
      const bool valid = at.row < p.m && k < k_end;
      CpAsync16(&st[kXRow + at.row][at.col], p.x + (valid ? at.row * p.k + k : 0), valid);
    }
    if (norm && tid < 8) {
      const int64_t k = k0 + 8 * tid;
      CpAsync16(&st[kNormRow][8 * tid], p.norm_w + (k < k_end ? k : 0), k < k_end);
    }
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
  for (int64_t t = 0; t < tiles; ++t) {
    CpAsyncWait<kStages - 2>();  // k-tile t has landed
    __syncthreads();             // ... for every thread; and k-tile t - 1's stage is no longer read
    const int64_t next = t + kStages - 1;
    if (next < tiles) {
      load_weights(static_cast<int>(next % kStages), k_begin + next * kStagedBK);
      load_activations(static_cast<int>(next % kStages), k_begin + next * kStagedBK);
    }
    CpAsyncCommit();
    const StageRows st = stage_at(static_cast<int>(t % kStages));
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
