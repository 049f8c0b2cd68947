// The linear kernels' templates, included by one .cu per epilogue so that
// nvcc compiles the epilogues in parallel. Not a public header.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_IMPL_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_IMPL_CUH_

#include <cooperative_groups.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/linear_epilogue.cuh"
#include "kernels/cuda/linear_split.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda {

// Row tiles a GEMM grid's group goes down before its next column tile (GroupedGemmTile):
// kGemmTileGroup, or 1 (the old order) with AUTOGLM_GEMM_GROUPED=0. Defined in gemm_wgmma.cu.
int64_t GemmTileGroup();

// This block's output tile of a grid of (column tiles, row tiles[, K ranks]), in GroupedGemmTile's order.
__device__ __forceinline__ GemmTileAt GroupedTileOfBlock(int64_t m_group) {
  return GroupedGemmTile(blockIdx.x + int64_t{gridDim.x} * blockIdx.y, gridDim.x, gridDim.y, m_group);
}

// Sum of squares of x rows -> 1 / rms, for the norm prologue.
__device__ __forceinline__ float RowInvRms(const bf16* x, int64_t k, float eps, float* scratch) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * 8; i < k; i += blockDim.x * 8) {
    float v[8];
    ToFloat8(Load8(x + i), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += v[j] * v[j];
  }
  sum = WarpSum(sum);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += scratch[w];
  return rsqrtf(total / static_cast<float>(k) + eps);
}

// The float pair at `offset` in `tile`, summed over every block of the cluster
// (distributed shared memory), in rank order: the sum does not depend on timing. A block alone
// (no K split) reads its own shared memory directly, not through the cluster's address window.
__device__ __forceinline__ float2 ClusterSum2(const cooperative_groups::cluster_group& cluster, float* tile,
                                              int offset) {
  if (cluster.num_blocks() == 1) return *reinterpret_cast<const float2*>(tile + offset);
  float2 sum = make_float2(0.0f, 0.0f);
  for (unsigned q = 0; q < cluster.num_blocks(); ++q) {
    const float2 v = *reinterpret_cast<const float2*>(cluster.map_shared_rank(tile, q) + offset);
    sum.x += v.x;
    sum.y += v.y;
  }
  return sum;
}

// The GEMMs' ending: each block of the cluster holds its fp32 partial tile [kRows][ld] in shared
// memory; the cluster sums the tiles (each block finishing a share of the output pairs) and stores
// them through the op's epilogue, columns below n_end (p.n, or a quantized segment's end).
template <Epilogue kE, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void StoreClusterTile(const LinearParams& p, const cooperative_groups::cluster_group& cluster,
                                                 float* tile, int ld, int64_t block_m, int64_t block_n,
                                                 int64_t n_end) {
  const int rank = static_cast<int>(cluster.block_rank()), ranks = static_cast<int>(cluster.num_blocks());
  cluster.sync();  // every tile of the cluster is complete
  for (int i = rank * kThreads + static_cast<int>(threadIdx.x); i < kRows * kCols / 2; i += ranks * kThreads) {
    const int row = i / (kCols / 2), col = 2 * (i % (kCols / 2));
    const int64_t m = block_m + row, n = block_n + col;
    if (m >= p.m || n >= n_end) continue;
    const float2 sum = ClusterSum2(cluster, tile, row * ld + col);
    StorePair<kE>(p, m, n, sum.x, sum.y);
  }
  cluster.sync();  // peers may still be reading this block's tile
}

}  // namespace ag::cuda

#include "kernels/cuda/gemm_wgmma.cuh"     // needs the building blocks above
#include "kernels/cuda/linear_skinny.cuh"  // needs the building blocks above
#include "kernels/cuda/linear_skinny_staged.cuh"  // needs linear_skinny.cuh's tile and ending

namespace ag::cuda {

// ---- GEMV: one row of x (decode at batch 1) ----
//
// Block: 4 warps; warp w of pair group q computes the output pair n0 =
// 2 (4 q + w), n0 + 1. x (normalised by the prologue) is staged in shared
// memory as fp32, kGemvSmemFloats columns at a time; each lane streams 16-byte
// pieces of both weight rows, kUnroll pieces in flight per row. The grid is
// persistent (a few blocks per multiprocessor, each looping over pair
// groups), so x and the norm weight are read and normalised once per block --
// not once per pair group, which for the LM head meant 18,944 times per step.

constexpr int kGemvWarps = 4;
constexpr int kGemvThreads = 32 * kGemvWarps;
constexpr int kUnroll = 4;
constexpr int kGemvSmemFloats = kGemvStagedMaxK;  // 64 KB of staged x per block: every GLM K in one chunk

// The sandwich norm folded in front (LinearParams::pre), row m: h = residual + rms_norm(y) * w as
// rms_norm_residual's kernel computes it, rounded to bf16, into xs as floats (each thread its own
// columns: the staging loop's, which then normalises them in place) and, by block 0, to pre.out.
// Returns 1 / rms(h) with the norm prologue's eps, summed as RowInvRms sums a stored h.
__device__ __forceinline__ float PreNormRow(const LinearParams& p, int64_t m, float* xs, float* scratch) {
  const PreNorm& pre = p.pre;
  const float inv_rms_y = RowInvRms(pre.y + m * p.k, p.k, pre.eps, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * 8; i < p.k; i += kGemvThreads * 8) {
    float y[8], w[8], h[8];
    ToFloat8(Load8(pre.y + m * p.k + i), y);
    ToFloat8(Load8(pre.w + i), w);
    ToFloat8(Load8(pre.residual + m * p.k + i), h);
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] += w[j] * (y[j] * inv_rms_y);
    const Bf16x8 stored = FromFloat8(h);
    if (blockIdx.x == 0) Store8(pre.out + m * p.k + i, stored);
    ToFloat8(stored, h);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      xs[i + j] = h[j];
      sum += h[j] * h[j];
    }
  }
  return rsqrtf(BlockSum<kGemvWarps>(sum, scratch) / static_cast<float>(p.k) + p.eps);
}

template <Epilogue kE>
__global__ void __launch_bounds__(kGemvThreads) GemvKernel(LinearParams p) {
  extern __shared__ float xs[];  // [kc]
  __shared__ float scratch[kGemvWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t groups = (p.n + 2 * kGemvWarps - 1) / (2 * kGemvWarps);
  const bool one_chunk = p.k <= kGemvSmemFloats;
  AllowNextKernel();
  // Weights do not depend on the previous kernel: start pulling the first of them into L2 while it finishes.
  {
    const int64_t n0 = 2 * (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp);
    for (int64_t i = lane * 64; n0 + 1 < p.n && i < min(p.k, int64_t{1024}); i += 32 * 64) {
      PrefetchL2(p.w + n0 * p.k + i);
      PrefetchL2(p.w + (n0 + 1) * p.k + i);
    }
  }
  WaitForPreviousKernel();

  const bool pre = p.pre.y != nullptr;  // then x fits one chunk and has a norm (LaunchGemvFor)
  for (int64_t m = 0; m < p.m; ++m) {
    const bf16* x = p.x + m * p.k;
    const float inv_rms = pre                   ? PreNormRow(p, m, xs, scratch)
                          : p.norm_w != nullptr ? RowInvRms(x, p.k, p.eps, scratch)
                                                : 1.0f;
    for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
      const int64_t n0 = 2 * (group * kGemvWarps + warp);
      const bool active = n0 < p.n, has1 = n0 + 1 < p.n;
      const bf16* w0 = p.w + (active ? n0 : 0) * p.k;
      const bf16* w1 = p.w + (has1 ? n0 + 1 : 0) * p.k;
      float acc0 = 0.0f, acc1 = 0.0f;
      for (int64_t kc = 0; kc < p.k; kc += kGemvSmemFloats) {
        const int64_t len = min(int64_t{kGemvSmemFloats}, p.k - kc);
        if (!one_chunk || group == blockIdx.x) {  // the same for the whole block
          __syncthreads();  // the previous chunk (or row) is no longer read
          for (int64_t i = threadIdx.x * 8; i < len; i += kGemvThreads * 8) {
            float v[8];
            if (pre) {  // this thread's own h columns, from PreNormRow
              const float4 a = *reinterpret_cast<const float4*>(xs + i), b = *reinterpret_cast<const float4*>(xs + i + 4);
              v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
            } else {
              ToFloat8(Load8(x + kc + i), v);
            }
            if (p.norm_w != nullptr) {
              float nw[8];
              ToFloat8(Load8(p.norm_w + kc + i), nw);
#pragma unroll
              for (int j = 0; j < 8; ++j) v[j] = nw[j] * (v[j] * inv_rms);
            }
            *reinterpret_cast<float4*>(xs + i) = make_float4(v[0], v[1], v[2], v[3]);
            *reinterpret_cast<float4*>(xs + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
          }
          __syncthreads();
        }
        if (!active) continue;
        for (int64_t base = lane * 8; base < len; base += 256 * kUnroll) {
          Bf16x8 wa[kUnroll], wb[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t i = base + u * 256;
            if (i < len) {
              wa[u] = LoadStream8(w0 + kc + i);
              if (has1) wb[u] = LoadStream8(w1 + kc + i);
            }
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t i = base + u * 256;
            if (i >= len) break;
            float fa[8], fb[8] = {};
            ToFloat8(wa[u], fa);
            if (has1) ToFloat8(wb[u], fb);
            const float4 x0 = *reinterpret_cast<const float4*>(xs + i);
            const float4 x1 = *reinterpret_cast<const float4*>(xs + i + 4);
            const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              acc0 += fa[j] * xv[j];
              acc1 += fb[j] * xv[j];
            }
          }
        }
      }
      if (active) {
        const float a0 = WarpSum(acc0), a1 = WarpSum(acc1);
        if (lane == 0) StorePair<kE>(p, m, n0, a0, a1);
      }
    }
  }
}

template <Epilogue kE>
cudaError_t LaunchGemvFor(const LinearParams& p, cudaStream_t stream) {
  if (p.pre.y != nullptr && (p.norm_w == nullptr || p.k > kGemvSmemFloats)) return cudaErrorInvalidValue;
  const int64_t kc = std::min<int64_t>(kGemvSmemFloats, (p.k + 255) / 256 * 256);
  const size_t smem = sizeof(float) * static_cast<size_t>(kc);
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<GemvKernel<kE>>();
    if (e != cudaSuccess) return e;
  }
  int per_sm = 0;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, GemvKernel<kE>, kGemvThreads, smem);
  if (e != cudaSuccess) return e;
  const int64_t groups = (p.n + 2 * kGemvWarps - 1) / (2 * kGemvWarps);
  const int64_t resident = static_cast<int64_t>(std::max(per_sm, 1)) * std::max(MultiprocessorCount(), 1);
  const unsigned blocks = static_cast<unsigned>(std::min(groups, resident));
  return LaunchKernel(GemvKernel<kE>, dim3(blocks), dim3(kGemvThreads), smem, stream, p);
}

// ---- GEMM: tensor cores, mma.sync m16n8k16 bf16 -> fp32 (prefill, M > 64) ----
//
// Block tile 128 x 128 x 32, 8 warps as 2 (M) x 4 (N), warp tile 64 x 32;
// a 4-stage cp.async pipeline; shared rows padded to 40 bf16 (80 bytes) so
// ldmatrix reads are conflict-free. Two blocks per multiprocessor (at most 128
// registers a thread). The epilogue goes through shared memory: the
// accumulators land in an fp32 tile (over the pipeline's buffers) and the
// block's threads walk its output pairs in order -- one copy of the epilogue
// code, not 32 inlined ones, and coalesced stores. A grid that would leave its
// waves partly empty (SplitGemmK: the N = 4096 projections of a 512-token
// prefill fill 128 tiles of 264 slots) splits K over a cluster
// of 2 or 4 blocks that sum their tiles through distributed shared memory, as
// the skinny kernel does.

constexpr int kBM = 128, kBN = 128, kBK = 32, kPad = 8, kLd = kBK + kPad;
constexpr int kGemmThreads = 256;
constexpr int kStages = 4;
constexpr int kGemmTileLd = kBN + 4;  // floats per row of the fp32 output tile
constexpr size_t kGemmPipelineBytes = sizeof(bf16) * kStages * (kBM + kBN) * kLd;
constexpr size_t kGemmSmemBytes = std::max(kGemmPipelineBytes, sizeof(float) * kBM * kGemmTileLd);

template <Epilogue kE>
__global__ void __launch_bounds__(kGemmThreads, 2)
    GemmKernel(LinearParams p, const bf16* a_matrix, int64_t k_per_rank, int64_t m_group) {
  extern __shared__ __align__(16) unsigned char gemm_smem[];
  auto as = reinterpret_cast<bf16 (*)[kBM][kLd]>(gemm_smem);                     // [kStages][kBM][kLd]
  auto bs = reinterpret_cast<bf16 (*)[kBN][kLd]>(gemm_smem + sizeof(bf16) * kStages * kBM * kLd);
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = (warp / 4) * 64, warp_n = (warp % 4) * 32;
  const GemmTileAt at = GroupedTileOfBlock(m_group);
  const int64_t block_m = at.m * kBM, block_n = at.n * kBN;
  const int64_t k_begin = rank * k_per_rank, k_end = min(p.k, k_begin + k_per_rank);
  AllowNextKernel();
  WaitForPreviousKernel();

  // Each thread copies two 16-byte pieces of A and two of B per stage.
  auto load_stage = [&](int stage, int64_t k0) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int chunk = tid + c * kGemmThreads;  // 512 chunks: 128 rows x 4 pieces
      const int row = chunk / 4, col = (chunk % 4) * 8;
      const int64_t gm = block_m + row, gn = block_n + row, gk = k0 + col;
      const bool kin = gk < k_end;
      CpAsync16(&as[stage][row][col], a_matrix + (gm < p.m && kin ? gm * p.k + gk : 0), gm < p.m && kin);
      CpAsync16(&bs[stage][row][col], p.w + (gn < p.n && kin ? gn * p.k + gk : 0), gn < p.n && kin);
    }
  };

  float acc[4][4][4] = {};
  const int64_t tiles = k_end > k_begin ? (k_end - k_begin + kBK - 1) / kBK : 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) load_stage(s, k_begin + s * kBK);
    CpAsyncCommit();  // empty groups too: the wait below counts groups
  }
  for (int64_t t = 0; t < tiles; ++t) {
    CpAsyncWait<kStages - 2>();  // tile t has landed
    __syncthreads();             // ... for every thread; and tile t - 1's stage is no longer read
    const int64_t next = t + kStages - 1;
    if (next < tiles) load_stage(static_cast<int>(next % kStages), k_begin + next * kBK);
    CpAsyncCommit();
    const int stage = static_cast<int>(t % kStages);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned af[4][4], bfrag[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        LdMatrixX4(af[mi], &as[stage][warp_m + mi * 16 + lane % 16][kk + (lane / 16) * 8]);
      }
#pragma unroll
      for (int nj = 0; nj < 4; nj += 2) {
        unsigned r[4];
        LdMatrixX4(r, &bs[stage][warp_n + nj * 8 + (lane % 8) + (lane / 16) * 8][kk + ((lane / 8) % 2) * 8]);
        bfrag[nj][0] = r[0];
        bfrag[nj][1] = r[1];
        bfrag[nj + 1][0] = r[2];
        bfrag[nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) Mma16816(acc[mi][nj], af[mi], bfrag[nj]);
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline's buffers become the output tile
  auto tile = reinterpret_cast<float (*)[kGemmTileLd]>(gemm_smem);
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // elements (0, 1) and (2, 3): adjacent columns of one row
        const mma::At c = mma::CElement(lane, 2 * half);
        *reinterpret_cast<float2*>(&tile[warp_m + mi * 16 + c.row][warp_n + nj * 8 + c.col]) =
            make_float2(acc[mi][nj][2 * half], acc[mi][nj][2 * half + 1]);
      }
    }
  }
  StoreClusterTile<kE, kBM, kBN, kGemmThreads>(p, cluster, &tile[0][0], kGemmTileLd, block_m, block_n, p.n);
}

template <Epilogue kE>
cudaError_t LaunchGemmTiles(const LinearParams& p, const bf16* a, cudaStream_t stream) {
  const cudaError_t e = AllowLargeSharedMemory<GemmKernel<kE>>();
  if (e != cudaSuccess) return e;
  const int sms = MultiprocessorCount();
  const KSplit split = SplitGemmK(p.m, p.n, p.k, sms > 0 ? sms : 132);
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN), static_cast<unsigned>((p.m + kBM - 1) / kBM),
                  static_cast<unsigned>(split.ranks));
  return LaunchKernelInCluster(GemmKernel<kE>, grid, dim3(kGemmThreads), kGemmSmemBytes, stream,
                               dim3(1, 1, static_cast<unsigned>(split.ranks)), p, a, split.k_per_rank, GemmTileGroup());
}

cudaError_t NormRowsInto(const LinearParams& p, cudaStream_t stream);  // linear.cu

// The rows the tensor-core paths multiply: x, or x normalised into p.scratch
// once (bf16, as the mma takes it) when the op has a norm prologue.
inline cudaError_t TensorCoreInput(const LinearParams& p, cudaStream_t stream, const bf16** a) {
  *a = p.x;
  if (p.norm_w == nullptr) return cudaSuccess;
  if (p.scratch == nullptr) return cudaErrorInvalidValue;
  *a = p.scratch;
  return NormRowsInto(p, stream);
}

// M > 64: the wgmma GEMM where it can run (gemm_wgmma.cuh), else the mma.sync one; `mma_sync`
// asks for the latter (tests and benchmarks compare the two), `tile_n` for the wgmma GEMM with
// that tile width (0: chosen by the shape). A norm prologue is a launch of its own into the
// scratch (kSkinnyNormMaxRows: the wgmma kernel's norm warpgroup was half as fast).
template <Epilogue kE>
cudaError_t LaunchGemmFor(const LinearParams& p, cudaStream_t stream, bool mma_sync = false, int tile_n = 0) {
  const bf16* a = nullptr;
  if (tile_n != 0 && !WgmmaGemmUsable(p, p.norm_w != nullptr ? p.scratch : p.x)) return cudaErrorNotSupported;
  const cudaError_t e = TensorCoreInput(p, stream, &a);
  if (e != cudaSuccess) return e;
  if (!mma_sync && WgmmaGemmUsable(p, a)) return LaunchWgmmaTiles<kE>(p, a, stream, tile_n);
  return LaunchGemmTiles<kE>(p, a, stream);
}

bool StagedSkinnyEnabled();  // linear.cu: AUTOGLM_SKINNY_STAGED

// 2..64 rows: the staged skinny kernel (linear_skinny_staged.cuh), which applies a norm prologue
// itself, unless `registers` or AUTOGLM_SKINNY_STAGED=0 asks for the register-fed one; that one
// applies the norm itself to kSkinnyNormMaxRows rows: past them x is normalised into the scratch
// first (measured faster there).
template <Epilogue kE>
cudaError_t LaunchSkinnyFor(const LinearParams& p, cudaStream_t stream, bool registers = false) {
  if (p.m > kSkinnyMaxRows) return cudaErrorInvalidValue;
  if (!registers && p.m <= kStagedSkinnyMaxRows && StagedSkinnyEnabled()) {
    if (p.m <= 8) return LaunchStagedSkinnyTile<1, kE>(p, stream);
    if (p.m <= 16) return LaunchStagedSkinnyTile<2, kE>(p, stream);
    if (p.m <= 32) return LaunchStagedSkinnyTile<4, kE>(p, stream);
    return LaunchStagedSkinnyTile<8, kE>(p, stream);
  }
  const Bf16Rows rows{p.w, p.k, 0, p.n};
  LinearParams q = p;
  if (p.m > kSkinnyNormMaxRows && p.norm_w != nullptr) {
    const cudaError_t e = TensorCoreInput(p, stream, &q.x);
    if (e != cudaSuccess) return e;
    q.norm_w = nullptr;
  }
  if (p.m <= 8) return LaunchSkinnyTile<1, kE>(q, rows, q.x, stream);
  if (p.m <= 16) return LaunchSkinnyTile<2, kE>(q, rows, q.x, stream);
  if (p.m <= 32) return LaunchSkinnyTile<4, kE>(q, rows, q.x, stream);
  return LaunchSkinnyTile<8, kE>(q, rows, q.x, stream);
}

enum class LinearPath { kGemv, kSkinny, kSkinnyRegisters, kGemm, kGemmMmaSync, kGemmNarrow, kGemm192, kGemmWide };

// The three paths for one epilogue; defined in linear_<epilogue>.cu.
template <Epilogue kE>
cudaError_t LaunchLinearFor(const LinearParams& p, cudaStream_t stream, LinearPath path);

#define AG_INSTANTIATE_LINEAR(E)                                                                \
  template <>                                                                                   \
  cudaError_t LaunchLinearFor<E>(const LinearParams& p, cudaStream_t stream, LinearPath path) {  \
    switch (path) {                                                                             \
      case LinearPath::kGemv:                                                                   \
        return LaunchGemvFor<E>(p, stream);                                                     \
      case LinearPath::kSkinny:                                                                 \
        return LaunchSkinnyFor<E>(p, stream);                                                   \
      case LinearPath::kSkinnyRegisters:                                                        \
        return LaunchSkinnyFor<E>(p, stream, true);                                             \
      case LinearPath::kGemm:                                                                   \
        return LaunchGemmFor<E>(p, stream);                                                     \
      case LinearPath::kGemmMmaSync:                                                            \
        return LaunchGemmFor<E>(p, stream, true);                                               \
      case LinearPath::kGemmNarrow:                                                             \
        return LaunchGemmFor<E>(p, stream, false, 128);                                         \
      case LinearPath::kGemm192:                                                                \
        return LaunchGemmFor<E>(p, stream, false, 192);                                         \
      case LinearPath::kGemmWide:                                                               \
        return LaunchGemmFor<E>(p, stream, false, 256);                                         \
    }                                                                                           \
    return cudaErrorInvalidValue;                                                               \
  }

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_IMPL_CUH_
