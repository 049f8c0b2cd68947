// Which linear kernel takes how many rows, and how the tensor-core linear
// kernels split K over a thread-block cluster when their grid is short. Plain functions of the shape (no CUDA headers), so
// that geometry_test.cc checks them on the CPU: every rank gets work, the ranks cover K.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_SPLIT_H_
#define AUTOGLM_KERNELS_CUDA_LINEAR_SPLIT_H_

#include <cstdint>
#include <initializer_list>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ag::cuda {

// Rows of x up to which the GEMV path runs, and the skinny tensor-core path; the GEMM above.
inline constexpr int64_t kGemvMaxRows = 1;
// The GEMV stages x in shared memory as floats, up to this many columns at a time (every GLM K in
// one go); a folded sandwich norm (LinearParams::pre) needs x in one go.
inline constexpr int64_t kGemvStagedMaxK = 16384;
inline constexpr int64_t kSkinnyMaxRows = 64;
// One row of x over at most this many output features goes to the staged skinny kernel instead of
// the GEMV (GLM-4-9B's QKV, o_proj and down_proj; not gate/up nor the LM head, where the GEMV
// measured 89 % and 99 % of bandwidth). Why, from run 3's profile of a batch-1 step: at these N
// the GEMV's block has one pair group a warp, and its time is a chain of round trips -- the norm's
// pass over x, x staged into shared memory, then the weights in batches of four 16-byte loads a
// lane with nothing in flight between batches (4 batches at K = 4096, 14 at 13,696): down_proj
// 37.5 us a layer against a 25 us floor, QKV 19 against 8.5, o_proj 15 against 7.5. The staged
// kernel issues its first four k-tiles of weights and x at once, splits K over a cluster (8 ways
// on 528 slots: 8 to 27 k-tiles a block) and keeps 32 KB a block in flight. A prediction until the
// device measures BM_Gemv against BM_Linear at one row.
inline constexpr int64_t kStagedOneRowMaxN = 8192;
// Rows up to which the skinny path takes the staged kernel (linear_skinny_staged.cuh): all of them.
inline constexpr int64_t kStagedSkinnyMaxRows = kSkinnyMaxRows;
// Rows past which LaunchLinear sends a skinny batch to the wgmma GEMM where Hopper's runs, when the
// staged skinny kernel is switched off: its 128-row tiles waste rows but stream the weights faster
// than the register-fed skinny kernel. Measured on the H200 (2026-12-04,
// BM_GemmSmallM against BM_Linear, GLM-4-9B's projections, norm launches included): at 64 rows
// gate/up 97.0 us against 136.6, down 59.9 against 96.0, o_proj 27.6 against 36.2, QKV 30.8
// against 39.2, the LM head 409 against 576; at 32 rows the skinny kernel wins but for down (gate/up
// 99.1 against 115.2, the LM head 466 against 562, down 73.4 against 62.9).
inline constexpr int64_t kSkinnyPreferredMaxRows = 32;
// Rows of x up to which the bf16 linear kernels apply an RMSNorm prologue themselves by default:
// the GEMV and the staged skinny kernel (linear_skinny_staged.cuh) always; past them the wgmma
// GEMM takes x normalised by a launch of its own (and with AUTOGLM_SKINNY_STAGED=0 so does the
// register-fed skinny kernel past kSkinnyNormMaxRows).
inline constexpr int64_t kLinearNormMaxRows = kStagedSkinnyMaxRows;
// Rows of x up to which the register-fed skinny kernel applies the norm itself (linear_skinny.cuh);
// more rows, and the GEMMs, take x normalised into the scratch by a launch of its own. Measured on
// the H200 (2026-12-04, BM_Linear against BM_LinearNormApart, GLM-4-9B's normed projections): in
// the kernel is as fast to 8 rows (gate_up 88.8 us against 92.9, qkv 22.5 against 25.1) and slower
// past them (16 rows: 123.7 against 98.1; 64 rows: 353.5 against 136.4; the wgmma GEMM's norm
// warpgroup at 512 rows: 545 against 287), the norm's own launch costing about 4 us.
inline constexpr int64_t kSkinnyNormMaxRows = 8;
// Rows of x up to which the backend takes the quantized decode path: up to 16 the codes kernel (8
// rows a block, CUDA cores), then the skinny tensor-core kernel (linear_skinny.cuh) on weights
// dequantized to bf16 in registers (bench/RESULTS.md, "Quantized decode"), past 64 rows one launch
// per 64-row chunk, which dequantize the codes again but mostly read them from L2. More rows
// dequantize the whole weight into the scratch for the GEMM: 4.5 bytes a weight of traffic, which
// the chunks' repeated dequantization beats to about 128 rows (predicted, not measured).
inline constexpr int64_t kQuantLinearMaxRows = 128;
// Rows of x up to which a block of the codes kernel takes 8 of them; the skinny kernel the rest.
inline constexpr int64_t kQuantCodesMaxRows = 16;

// Launches of the skinny kernel for m rows (one per 64-row chunk).
inline constexpr int64_t SkinnyLaunches(int64_t m) { return m <= kSkinnyMaxRows ? 1 : (m + kSkinnyMaxRows - 1) / kSkinnyMaxRows; }

struct KSplit {
  int ranks = 1;           // blocks of a cluster along K, a power of two
  int64_t k_per_rank = 0;  // a multiple of the kernel's k-tile; the last rank may get less
};

// The skinny kernel's split: doubles the ranks (up to `max_ranks`) while `tiles` output tiles
// times the ranks stays within `target_blocks` (more would start another wave) and every rank
// keeps at least `min_k_tiles` k-tiles of `k_tile` columns.
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

// The predicted time of a GEMM's grid whose `tiles` output tiles each take `k_tiles` k-tiles of
// work, split `ranks` ways along K, `slots` blocks at a time (a wave): whole waves, each as long
// as one block's k-tiles plus its ending, `epilogue` k-tiles' worth, and one more for every rank
// beyond the first (the cluster's sum through distributed shared memory). In k-tiles.
inline constexpr int64_t WaveCost(int64_t tiles, int64_t k_tiles, int ranks, int64_t slots, int64_t epilogue) {
  const int64_t waves = (tiles * ranks + slots - 1) / slots;
  return waves * ((k_tiles + ranks - 1) / ranks + epilogue + ranks - 1);
}

// The GEMMs' split: the ranks (a power of two up to `max_ranks`, each keeping at least
// `min_k_tiles` k-tiles) whose grid WaveCost predicts shortest. A grid that leaves most of its
// last wave empty (GLM-4-9B's QKV at 512 tokens: 144 tiles on 132 SMs, two waves 55 % full)
// splits so that the waves fill (288 blocks, three waves of half the work: -19 %); a short grid
// splits up to filling one wave; a larger split must win by more than 3 % (the model is coarse,
// the reduction real).
inline KSplit SplitForWaves(int64_t tiles, int64_t k, int64_t k_tile, int64_t slots, int max_ranks, int64_t min_k_tiles,
                            int64_t epilogue) {
  const int64_t k_tiles = (k + k_tile - 1) / k_tile;
  int best = 1;
  int64_t best_cost = WaveCost(tiles, k_tiles, 1, slots, epilogue);
  for (int ranks = 2; ranks <= max_ranks && k_tiles >= int64_t{ranks} * min_k_tiles; ranks *= 2) {
    const int64_t cost = WaveCost(tiles, k_tiles, ranks, slots, epilogue);
    if (cost * 100 < best_cost * 97) {
      best = ranks;
      best_cost = cost;
    }
  }
  return {best, (k_tiles + best - 1) / best * k_tile};
}

// The staged skinny kernel (linear_skinny_staged.cuh: 2..64 rows, and one row over narrow bf16
// weights): 64 output features a block, 64-wide k-tiles, `slots` blocks resident at once (three or
// four a multiprocessor: its shared memory decides), clusters of up to 8, at least four k-tiles a rank;
// an ending worth about two k-tiles. Memory-bound, yet a grid of 428 blocks (gate/up) on 396 slots
// would leave most of the second wave's slots empty while its last blocks stream their rows: a
// 2-way split halves those blocks' length.
inline constexpr int64_t kStagedSkinnyKTile = 64;
inline KSplit SplitStagedSkinnyK(int64_t n, int64_t k, int64_t slots) {
  return SplitForWaves((n + 63) / 64, k, kStagedSkinnyKTile, slots, 8, 4, 2);
}

// The GEMM (M > 64): 128 x 128 tiles, 32-wide k-tiles, two blocks per multiprocessor, clusters
// of up to 4, at least four k-tiles a rank so that its 4-stage pipeline fills; an ending worth
// about six k-tiles.
inline KSplit SplitGemmK(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  return SplitForWaves(((m + 127) / 128) * ((n + 127) / 128), k, 32, int64_t{2} * multiprocessors, 4, 4, 6);
}

// The wgmma GEMM (M > 64 on Hopper): 128 x `tile_n` tiles (128 or 256 columns), 64-wide k-tiles
// (TMA boxes: a rank's K range must start on one), one block per multiprocessor, clusters of up to
// 4, at least four k-tiles a rank; an ending worth about three k-tiles (~1.5 us for a 128-wide
// tile: the fp32 tile through shared memory, two cluster barriers, 32 KB of bf16 stores).
inline KSplit SplitWgmmaK(int64_t m, int64_t n, int64_t k, int multiprocessors, int64_t tile_n = 128) {
  return SplitForWaves(((m + 127) / 128) * ((n + tile_n - 1) / tile_n), k, 64, multiprocessors, 4, 4, 3);
}

// The W8A8 GEMM: the wgmma GEMM's tiles and ending, its k-tiles 128 codes wide (each the bytes
// and, at twice the rate, the tensor-core time of the bf16 GEMM's 64-wide k-tile).
inline KSplit SplitW8A8K(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  return SplitForWaves(((m + 127) / 128) * ((n + 127) / 128), k, 128, multiprocessors, 4, 4, 3);
}

// What a k-tile of a tile `tile_n` columns wide costs, in tenths of a 128-wide one's. Why not in
// proportion to the columns: both operands of wgmma come from shared memory, which serves 128 bytes
// a clock a SM. At full tensor rate a 128 x 128 tile asks for about 160 (each consumer warpgroup's
// 64 x 16 slice of x and the 16 x 128 slice of W every 64 clocks, plus TMA writing the next stages),
// so it tops out near 80 % of peak; 128 x 192 asks about 137 (~93 %), 128 x 256 about 128 (x read
// once for more columns). 1.5x the work at 0.93 against 0.8: 12.9 tenths, rounded to 13; 2x at
// 1.0: 16. cuBLAS's 650 TFLOP/s against our 390-510 on the same shapes (bench/RESULTS.md,
// 2026-12-04) is consistent with the narrow tile's ceiling. A prediction until the device measures
// BM_GemmNarrowTiles against BM_GemmWideTiles.
inline constexpr int64_t WgmmaKTileTenths(int64_t tile_n) { return tile_n == 128 ? 10 : tile_n == 192 ? 13 : 16; }

// The predicted time of the wgmma GEMM in 128 x tile_n tiles at its best split, in tenths of a
// narrow k-tile.
inline int64_t WgmmaTileCost(int64_t m, int64_t n, int64_t k, int multiprocessors, int64_t tile_n) {
  const KSplit split = SplitWgmmaK(m, n, k, multiprocessors, tile_n);
  const int64_t tiles = ((m + 127) / 128) * ((n + tile_n - 1) / tile_n);
  return WgmmaKTileTenths(tile_n) * WaveCost(tiles, (k + 63) / 64, split.ranks, multiprocessors, 3);
}

// The wgmma GEMM's tile width for a shape: of 128, 192 and 256 columns, the one WgmmaTileCost
// predicts fastest, a wider one only when at least 3 % faster than the narrowest so far; always 128
// at 64 rows or fewer (there the weight stream is the cost, measured with 128-wide tiles).
inline int64_t WgmmaTileColumns(int64_t m, int64_t n, int64_t k, int multiprocessors) {
  if (m <= 64) return 128;
  int64_t best = 128, best_cost = WgmmaTileCost(m, n, k, multiprocessors, 128);
  for (int64_t tile_n : {192, 256}) {
    const int64_t cost = WgmmaTileCost(m, n, k, multiprocessors, tile_n);
    if (cost * 100 < best_cost * 97) {
      best = tile_n;
      best_cost = cost;
    }
  }
  return best;
}

// Which output tile a GEMM block computes. The hardware starts a grid's blocks in the order of
// blockIdx.x + gridDim.x * blockIdx.y, so with x the column tile, as the grids were, the blocks in
// flight at once shared one band of x's rows and each read a different tile of W: a W larger than
// L2 (GLM-4-9B's gate/up, 224 MB; down_proj, 112 MB) was read from memory once for every 128 rows
// of x -- 4 times at a 512-token prompt (~900 MB, ~200 us a layer at 4.45 TB/s, against 146 us of
// tensor-core work), 32 times at 4,096 (~7.2 GB: 1.6 ms a layer against 1.16). Grouped instead:
// the blocks go down `group` row tiles before moving one column tile right, so the ~132 blocks in
// flight are `group` row tiles by ~16 column tiles, and each tile of W streams once into L2 for
// all of them: W is read once per `group` row tiles (once in all up to 1,024 rows), x's band
// (group x 128 rows: 8 MB at K = 4096, 28 MB at 13,696) is what stays in L2 between them. A
// group of 1 is the old order. `block` is that linear index; the tiles of the last group, when
// m_tiles is not a multiple of `group`, go down its fewer rows.
struct GemmTileAt {
  int64_t m, n;  // the row tile and the column tile
};
inline constexpr int64_t kGemmTileGroup = 8;
AG_HOST_DEVICE constexpr GemmTileAt GroupedGemmTile(int64_t block, int64_t n_tiles, int64_t m_tiles, int64_t group) {
  const int64_t first_m = block / (group * n_tiles) * group;
  const int64_t rows = m_tiles - first_m < group ? m_tiles - first_m : group;
  const int64_t within = block - first_m * n_tiles;
  return {first_m + within % rows, within / rows};
}

}  // namespace ag::cuda

#undef AG_HOST_DEVICE

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_SPLIT_H_
