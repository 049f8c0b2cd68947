// The weight-streaming tensor-core kernel for 2 <= M <= 64 rows of x (decode
// batches), included by linear_impl.cuh. Not a public header. The register-fed one: bf16 weights
// now go to the staged kernel (linear_skinny_staged.cuh, which shares this file's partial tile and
// ending); this one takes the quantized paths' dequantized rows, and bf16 with
// AUTOGLM_SKINNY_STAGED=0.
//
// The swap-AB arrangement: the weights are the mma's A operand (16 output
// features per warp) and the batch is its N (8 rows per n-tile, kNT tiles), so
// every weight byte is read once from memory whatever M is; x (at most 64 x K
// bf16) comes from L2 and L1. Loads are 16 bytes
// per lane in the permuted k order of mma_layout.h.
//
// Block: 4 warps, 64 output features. A short grid (few features: the N = 4096
// projections) splits K over a thread-block cluster of up to 8 blocks; each
// block leaves its fp32 partial tile in shared memory and the cluster sums the
// tiles through distributed shared memory, each block finishing a share of the
// output pairs with the usual epilogue. No global workspace, one launch.
//
// The RMSNorm prologue (bf16 rows, up to kSkinnyNormMaxRows rows: the one-tile instance): x enters
// the mma as bf16(norm_w * x) (four bf16x2 multiplies a load), each row's sum of squares is
// gathered from warp 0's loads (every warp loads the same x; the cluster adds its blocks' sums),
// and the ending multiplies the row's sums by rsqrt(mean + eps) -- the row's scale commutes with
// the product. No normalising launch before, and x is read once. Past one tile it measured slower
// than the normalising launch (linear_split.h).
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_SKINNY_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_SKINNY_CUH_

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/linear_split.h"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda {

constexpr int kSkinnyWarps = 4;
constexpr int kSkinnyThreads = 32 * kSkinnyWarps;
constexpr int kSkinnyFeatures = 16 * kSkinnyWarps;  // output features per block
constexpr int kSkinnyUnroll = 4;                    // 32-wide k chunks in flight per warp
constexpr int kSkinnyTileLd = kSkinnyFeatures + 4;  // floats per batch row of the partial tile

__device__ __forceinline__ unsigned Word(const int4& v, int i) {
  return static_cast<unsigned>(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}

// Where the skinny kernel's weight rows come from: rows [n_begin, n_begin + n) of the output, eight
// bf16 weights of a row at a time (Load8(row, k): inputs k..k+7, k % 8 == 0; Prefetch(row, k) pulls
// their line into L2). These are p.w's own
// rows; quant_linear_impl.cuh's QuantRows dequantizes a quantized segment's codes instead.
struct Bf16Rows {
  const bf16* w;
  int64_t k, n_begin, n;
  __device__ __forceinline__ int4 Load8(int64_t row, int64_t at) const {
    return __ldcs(reinterpret_cast<const int4*>(w + row * k + at));
  }
  __device__ __forceinline__ void Prefetch(int64_t row, int64_t at) const { PrefetchL2(w + row * k + at); }
};

// x's eight values times the norm's weights, in bf16 as the mma takes them (the exact product
// rounded once, as an fp32 product rounded to bf16 would be).
__device__ __forceinline__ int4 NormWeighted(const int4& xv, const Bf16x8& norm_w) {
  Bf16x8 x8;
  *reinterpret_cast<int4*>(&x8) = xv;
#pragma unroll
  for (int i = 0; i < 4; ++i) x8.h[i] = __hmul2(x8.h[i], norm_w.h[i]);
  return *reinterpret_cast<const int4*>(&x8);
}

// The sum of the squares of x's eight values, in fp32.
__device__ __forceinline__ float SumOfSquares(const int4& xv) {
  Bf16x8 x8;
  *reinterpret_cast<int4*>(&x8) = xv;
  float v[8];
  ToFloat8(x8, v);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += v[i] * v[i];
  return sum;
}

// The skinny kernels' accumulators (warp w: features 16 w .. 16 w + 15 by kNT n-tiles of 8 batch
// rows; C rows are features, columns batch rows) into the block's partial tile [batch row][feature].
template <int kNT>
__device__ __forceinline__ void StoreSkinnyAccumulators(float (*tile)[kSkinnyTileLd], const float (&acc)[kNT][4],
                                                        int warp, int lane) {
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const mma::At c = mma::CElement(lane, e);
      tile[8 * j + c.col][warp * 16 + c.row] = acc[j][e];
    }
  }
}

// A batch row's sum of squares over the block's K range (the norm prologue) in the tile's padding:
// column kSkinnyFeatures, a zero beside it for the pair sum.
__device__ __forceinline__ void StoreRowSquares(float (*tile)[kSkinnyTileLd], int row, float squares) {
  tile[row][kSkinnyFeatures] = squares;
  tile[row][kSkinnyFeatures + 1] = 0.0f;
}

// The skinny kernels' ending, once each block's partial tile (and with the norm its rows' sums of
// squares) is in shared memory: the cluster sums the tiles through distributed shared memory, each
// block finishing a share of the output pairs, scaled by the row's 1 / rms with the norm, and
// stores them through the epilogue at columns n_begin + feature0 + f (features below n).
template <Epilogue kE, bool kCanNorm>
__device__ __forceinline__ void FinishSkinnyTile(const LinearParams& p,
                                                 const cooperative_groups::cluster_group& cluster, float* tile,
                                                 int64_t feature0, int64_t n, int64_t n_begin, bool norm) {
  const int rank = static_cast<int>(cluster.block_rank()), ranks = static_cast<int>(cluster.num_blocks());
  cluster.sync();  // every block's tile is complete
  const int pairs = static_cast<int>(p.m) * (kSkinnyFeatures / 2);
  for (int i = rank * kSkinnyThreads + static_cast<int>(threadIdx.x); i < pairs; i += ranks * kSkinnyThreads) {
    const int m = i / (kSkinnyFeatures / 2), f = 2 * (i % (kSkinnyFeatures / 2));
    const float2 sum = ClusterSum2(cluster, tile, m * kSkinnyTileLd + f);
    float scale = 1.0f;
    if constexpr (kCanNorm) {
      if (norm) {
        const float squares_sum = ClusterSum2(cluster, tile, m * kSkinnyTileLd + kSkinnyFeatures).x;
        scale = rsqrtf(squares_sum / static_cast<float>(p.k) + p.eps);
      }
    }
    if (feature0 + f < n) StorePair<kE>(p, m, n_begin + feature0 + f, scale * sum.x, scale * sum.y);
  }
  cluster.sync();  // peers may still be reading this block's tile
}

// kUnroll: 32-wide k chunks of each weight row in flight a warp.
template <int kNT, Epilogue kE, class Rows, int kUnroll = kSkinnyUnroll>
__global__ void __launch_bounds__(kSkinnyThreads, 4) SkinnyKernel(LinearParams p, Rows rows, const bf16* x,
                                                               int64_t k_per_rank) {
  __shared__ __align__(16) float tile[8 * kNT][kSkinnyTileLd];  // [batch row][feature]: this block's partial sums
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t feature0 = static_cast<int64_t>(blockIdx.x) * kSkinnyFeatures;
  const int64_t ra = feature0 + warp * 16 + g, rb = ra + 8;
  const bool va = ra < rows.n, vb = rb < rows.n;
  const int64_t k_begin = rank * k_per_rank, k_end = min(p.k, k_begin + k_per_rank);
  constexpr bool kCanNorm = 8 * kNT <= kSkinnyNormMaxRows;
  const bool norm = kCanNorm && p.norm_w != nullptr;
  float squares[kNT] = {};  // the norm prologue's sums of squares of this lane's rows (warp 0)
  AllowNextKernel();
  // The weights do not depend on the previous kernel: the first chunks' lines are fetched into L2
  // while it finishes (as the GEMV does); x is read only after the wait.
  if (t == 0) {
    for (int u = 0; u < kUnroll; u += 2) {  // 64 bf16 a 128-byte line
      const int64_t k = k_begin + 32 * u;
      if (k >= k_end) break;
      if (va) rows.Prefetch(ra, k);
      if (vb) rows.Prefetch(rb, k);
    }
  }
  WaitForPreviousKernel();

  float acc[kNT][4] = {};
  for (int64_t k0 = k_begin; k0 < k_end; k0 += 32 * kUnroll) {
    int4 a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + 32 * u + 8 * t;  // k % 8 == 0 and K % 8 == 0: a piece is wholly in or out
      a[u] = va && k < k_end ? rows.Load8(ra, k) : make_int4(0, 0, 0, 0);
      b[u] = vb && k < k_end ? rows.Load8(rb, k) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k0 + 32 * u >= k_end) break;  // the same for the whole warp
      const int64_t k = k0 + 32 * u + 8 * t;
      Bf16x8 norm_w{};
      if constexpr (kCanNorm) {
        if (norm && k < k_end) norm_w = Load8(p.norm_w + k);
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const int64_t row = 8 * j + g;
        // A plain load (x was written by the kernel before: not for the read-only path); L1 keeps it
        // for the block's other warps.
        int4 xv = row < p.m && k < k_end ? *reinterpret_cast<const int4*>(x + row * p.k + k) : make_int4(0, 0, 0, 0);
        if constexpr (kCanNorm) {
          if (norm) {
            if (warp == 0) squares[j] += SumOfSquares(xv);  // the other warps load the same x
            xv = NormWeighted(xv, norm_w);
          }
        }
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          unsigned af[4], bfrag[2];
#pragma unroll
          for (int r = 0; r < 4; ++r) af[r] = Word(r % 2 == 0 ? a[u] : b[u], mma::AWord(s, r));
#pragma unroll
          for (int r = 0; r < 2; ++r) bfrag[r] = Word(xv, mma::BWord(s, r));
          Mma16816(acc[j], af, bfrag);
        }
      }
    }
  }
  StoreSkinnyAccumulators<kNT>(tile, acc, warp, lane);
  if constexpr (kCanNorm) {
    if (norm && warp == 0) {  // lanes t = 0..3 of row group g loaded their rows' k in turn
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        squares[j] += __shfl_xor_sync(0xffffffffu, squares[j], 1);
        squares[j] += __shfl_xor_sync(0xffffffffu, squares[j], 2);
        if (t == 0) StoreRowSquares(tile, 8 * j + g, squares[j]);
      }
    }
  }
  FinishSkinnyTile<kE, kCanNorm>(p, cluster, &tile[0][0], feature0, rows.n, rows.n_begin, norm);
}

template <int kNT, Epilogue kE, class Rows = Bf16Rows, int kUnroll = kSkinnyUnroll>
cudaError_t LaunchSkinnyTile(const LinearParams& p, const Rows& rows, const bf16* x, cudaStream_t stream) {
  if (p.norm_w != nullptr && 8 * kNT > kSkinnyNormMaxRows) return cudaErrorInvalidValue;  // it would skip the norm
  const int sms = MultiprocessorCount();
  const KSplit split = SplitSkinnyK(rows.n, p.k, sms > 0 ? sms : 132);
  const dim3 grid(static_cast<unsigned>((rows.n + kSkinnyFeatures - 1) / kSkinnyFeatures),
                  static_cast<unsigned>(split.ranks));
  return LaunchKernelInCluster(SkinnyKernel<kNT, kE, Rows, kUnroll>, grid, dim3(kSkinnyThreads), 0, stream,
                               dim3(1, static_cast<unsigned>(split.ranks), 1), p, rows, x, split.k_per_rank);
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_SKINNY_CUH_
