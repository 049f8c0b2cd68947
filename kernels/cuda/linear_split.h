// Which linear kernel takes how many rows, and how the tensor-core linear
// kernels split K over a thread-block cluster when their grid is short. Plain functions of the shape (no CUDA headers), so
// that geometry_test.cc checks them on the CPU: every rank gets work, the ranks cover K.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_SPLIT_H_
#define AUTOGLM_KERNELS_CUDA_LINEAR_SPLIT_H_

#include <cstdint>

namespace ag::cuda {

// Rows of x up to which the GEMV path runs, and the skinny tensor-core path; the GEMM above.
inline constexpr int64_t kGemvMaxRows = 1;
inline constexpr int64_t kSkinnyMaxRows = 64;
// Rows of x up to which the backend takes the quantized decode path: up to 16 the codes kernel (8
// rows a block, CUDA cores), then the skinny tensor-core kernel (linear_skinny.cuh) on weights
// dequantized to bf16 in registers (bench/RESULTS.md, "Quantized decode"), past 64 rows one launch
// per 64-row chunk, which dequantize the codes again but mostly read them from L2. More rows
// dequantize the whole weight into the scratch for the GEMM: 4.5 bytes a weight of traffic, which
// the chunks' repeated dequantization beats to about 128 rows (predicted, not measured).
inline constexpr int64_t kQuantLinearMaxRows = 128;

// Launches of the skinny kernel for m rows (one per 64-row chunk).
inline constexpr int64_t SkinnyLaunches(int64_t m) { return m <= kSkinnyMaxRows ? 1 : (m + kSkinnyMaxRows - 1) / kSkinnyMaxRows; }

struct KSplit {
  int ranks = 1;           // blocks of a cluster along K, a power of two
  int64_t k_per_rank = 0;  // a multiple of the kernel's k-tile; the last rank may get less
};

// Doubles the ranks (up to `max_ranks`) while `tiles` output tiles times the
// ranks stays within `target_blocks` (more would start another wave) and
// every rank keeps at least `min_k_tiles` k-tiles of `k_tile` columns.
inline KSplit SplitK(int64_t tiles, int64_t k, int64_t k_tile, int64_t target_blocks, int max_ranks,
                     int64_t min_k_tiles) {
  const int64_t k_tiles = (k + k_tile - 1) / k_tile;
  int ranks = 1;
  while (ranks < max_ranks && tiles * ranks * 2 <= target_blocks && k_tiles >= 2 * ranks * min_k_tiles) ranks *= 2;
  return {ranks, (k_tiles + ranks - 1) / ranks * k_tile};
}

// The skinny (M = 2..64) kernel: 64 output features a block, 32-wide k chunks,
// four blocks per multiprocessor wanted in flight, clusters of up to 8.
inline KSplit SplitSkinnyK(int64_t n, int64_t k, int multiprocessors) {
  return SplitK((n + 63) / 64, k, 32, int64_t{4} * multiprocessors, 8, 1);
}

// The GEMM (M > 64): 128 x 128 tiles, 32-wide k-tiles, two blocks per
// multiprocessor, clusters of up to 4, at least four k-tiles a rank so that
// its 4-stage pipeline fills.
inline KSplit SplitGemmK(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  return SplitK(((m + 127) / 128) * ((n + 127) / 128), k, 32, int64_t{2} * multiprocessors, 4, 4);
}

// The wgmma GEMM (M > 64 on Hopper): 128 x 128 tiles, 64-wide k-tiles (TMA boxes: a rank's K
// range must start on one), one block per multiprocessor, clusters of up to 4, at least four
// k-tiles a rank.
inline KSplit SplitWgmmaK(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  return SplitK(((m + 127) / 128) * ((n + 127) / 128), k, 64, multiprocessors, 4, 4);
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_SPLIT_H_
