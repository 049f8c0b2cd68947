// The Hopper GEMM for prefill (M > 64 rows): wgmma with TMA loads and a
// warp-specialised producer/consumer pipeline, included by linear_impl.cuh.
// Not a public header.
//
// Block: 3 warpgroups. Warpgroup 0 is the producer: one thread issues the
// TMA loads of each k-tile (A: 128 rows x 64 k of x; B: 128, 192 or 256 rows x
// 64 k of W in boxes of 128 rows, or 64 for 192, all K-major with the 128-byte
// swizzle) into a ring of stages (WgTile), each stage guarded by two mbarriers
// (full: the bytes landed; empty: both consumers are done with it). Warpgroups
// 1 and 2 each multiply 64 rows of the tile by its 128, 192 or 256 columns with
// wgmma.m64nNk16 (operands straight from shared memory through matrix
// descriptors, fp32 accumulators in N / 2 registers a thread); the width is
// WgmmaTileColumns's choice for the shape (linear_split.h). The grid is
// persistent (WgTiles): a block a multiprocessor walks its output tiles in
// GroupedGemmTile's order, the ring of stages running on from one tile into
// the next, and each consumer stores its accumulators through StorePair (the
// op's epilogue) from its registers. A grid that would leave its waves partly
// empty splits K over a cluster instead (SplitWgmmaK): a block a tile, the
// accumulators into an fp32 tile over the pipeline's buffers, summed through
// distributed shared memory (the mma.sync GEMM's ending).
//
// A linear with an RMSNorm prologue gets x normalised into the scratch by a launch of its own
// first: a fourth warpgroup normalising x's tiles in shared memory made the GEMM half as fast
// (linear_split.h's measurements) and was taken out.
//
// AUTOGLM_WGMMA=0 sends every GEMM to the mma.sync kernel instead.
#ifndef AUTOGLM_KERNELS_CUDA_GEMM_WGMMA_CUH_
#define AUTOGLM_KERNELS_CUDA_GEMM_WGMMA_CUH_

#include <cooperative_groups.h>
#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/linear_split.h"
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/quant_gemm_layout.h"

namespace ag::cuda {

constexpr int kWgBM = 128, kWgBN = 128, kWgBK = 64;  // a k-tile row is 128 bytes: one swizzle atom wide
constexpr int kWgThreads = 384;  // producer + two consumer warpgroups

// A tile of kWgBM rows by kBN columns: 128 (the quantized GEMMs share it), 192 or 256, where each
// wgmma reads 16 rows of x for more columns (linear_split.h, WgmmaTileColumns).
template <int kBN>
struct WgTile {
  static_assert(kBN == 128 || kBN == 192 || kBN == 256, "wgmma.m64n128, m64n192 or m64n256");
  static constexpr int kStages = kBN == 256 ? 4 : 5;
  static constexpr int kTileLd = kBN + 4;
  static constexpr int kWBoxRows = kBN % 128 == 0 ? 128 : 64;  // W's TMA box: 128 rows, or 64 for 192
  static constexpr int kBoxes = kBN / kWBoxRows;                // W's boxes a k-tile
  static constexpr size_t kABytes = sizeof(bf16) * kWgBM * kWgBK;       // x's box
  static constexpr size_t kWBoxBytes = sizeof(bf16) * kWBoxRows * kWgBK;
  static constexpr size_t kStageBytes = kABytes + kBoxes * kWBoxBytes;
  // Stages, then the barriers; 1 KB of slack to align the stages to the swizzle's 1024-byte period.
  static constexpr size_t kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * sizeof(uint64_t);
  static_assert(kStages * kStageBytes >= sizeof(float) * kWgBM * kTileLd, "the epilogue tile reuses the stages");
  static_assert(kSmemBytes <= 227 * 1024, "within Hopper's shared memory a block");
};
constexpr int kWgStages = WgTile<kWgBN>::kStages;
constexpr int kWgTileLd = WgTile<kWgBN>::kTileLd;
constexpr size_t kWgStageBytes = WgTile<kWgBN>::kStageBytes;
constexpr size_t kWgSmemBytes = WgTile<kWgBN>::kSmemBytes;
static_assert(kWgBM == kWgBN, "x's and W's boxes, half a stage each");

// d (64 x 128 fp32, 64 registers a thread) += A (64 x 16) B (16 x 128), both K-major in shared memory.
__device__ __forceinline__ void Wgmma64x128(float* d, uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, accumulate, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
// d (64 x 256 fp32, 128 registers a thread) += A (64 x 16) B (16 x 256): the wide tile's instruction.
__device__ __forceinline__ void Wgmma64x256(float* d, uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, accumulate, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

// d (64 x 192 fp32, 96 registers a thread) += A (64 x 16) B (16 x 192): the 192-wide tile's instruction.
__device__ __forceinline__ void Wgmma64x192(float* d, uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred accumulate;\n setp.ne.b32 accumulate, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, accumulate, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <int kBN>
__device__ __forceinline__ void Wgmma64xN(float* d, uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kBN == 128) {
    Wgmma64x128(d, desc_a, desc_b);
  } else if constexpr (kBN == 192) {
    Wgmma64x192(d, desc_a, desc_b);
  } else {
    Wgmma64x256(d, desc_a, desc_b);
  }
}

// The accumulators as the compiler must see them after wgmma.wait_group: written.
template <int kCount = 64>
__device__ __forceinline__ void FenceAccumulators(float* d) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The producer thread of a TMA pipeline of kStages stages: k-tile t's box of x (rows from
// block_m; `box_bytes`) and kBoxes boxes of the weight (rows from block_n, kWBoxRows more each;
// kWBoxRows / 128 of box_bytes each) into stage (first + t) % kStages at k coordinate k_begin + t *
// k_tile, once both consumers have freed the stage (`empty`). `first`: the k-tiles this block's
// ring has carried before (a persistent block's earlier output tiles), so stages and barrier
// phases run on across tiles. Whole boxes: out of bounds is zeros, and counts toward the stage's
// bytes (a wide tile's boxes past the weight's last row included).
template <int kStages, int kBoxes = 1, int kWBoxRows = kWgBM>
__device__ __forceinline__ void ProduceTiles(unsigned char* a_stages, unsigned char* b_stages, unsigned box_bytes,
                                             const CUtensorMap* a_map, const CUtensorMap* w_map, int64_t k_begin,
                                             int k_tile, int tiles, int64_t block_m, int64_t block_n, uint64_t* full,
                                             uint64_t* empty, int first = 0) {
  const unsigned w_box_bytes = box_bytes / kWgBM * kWBoxRows;
  for (int t = 0; t < tiles; ++t) {
    const int g = first + t, s = g % kStages;
    if (g >= kStages) BarrierWait(&empty[s], ((g / kStages) - 1) & 1);
    BarrierExpectBytes(&full[s], box_bytes + kBoxes * w_box_bytes);
    const int k0 = static_cast<int>(k_begin + static_cast<int64_t>(t) * k_tile);
    TmaLoad2d(a_stages + s * box_bytes, a_map, k0, static_cast<int>(block_m), &full[s]);
#pragma unroll
    for (int b = 0; b < kBoxes; ++b) {
      TmaLoad2d(b_stages + (s * kBoxes + b) * w_box_bytes, w_map, k0, static_cast<int>(block_n + b * kWBoxRows),
                &full[s]);
    }
  }
}

// A consumer warpgroup's k-tiles: rows 64 half .. 64 half + 63 of each stage's x tile times the
// stage's weight tile into d (64 x 128 fp32), waiting for the stage's bytes (`full`) and, when
// `ready` is not null, for the weight tile another warpgroup writes; each stage freed on `empty`.
// One k-tile's wgmma group stays in flight while the next is waited for and issued (waiting for
// all of them each k-tile left the tensor cores idle through every wait: o_proj at 4096 rows ran
// at 446 TFLOP/s, cuBLAS 662); a stage is freed once the group after its own has been issued.
// `first` as ProduceTiles's.
template <int kStages, int kBN = kWgBN>
__device__ __forceinline__ void ConsumeTiles(float* d, const bf16* a_stages, const bf16* b_stages, int tiles, int half,
                                             uint64_t* full, uint64_t* ready, uint64_t* empty, int first = 0) {
  for (int t = 0; t < tiles; ++t) {
    const int s = (first + t) % kStages, phase = ((first + t) / kStages) & 1;
    BarrierWait(&full[s], phase);
    if (ready != nullptr) BarrierWait(&ready[s], phase);
    const uint64_t desc_a = SmemDescriptor(a_stages + s * kWgBM * kWgBK + half * 64 * kWgBK);
    const uint64_t desc_b = SmemDescriptor(b_stages + s * kBN * kWgBK);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kWgBK / 16; ++kk) {
      Wgmma64xN<kBN>(d, mma::DescriptorAtK(desc_a, kk), mma::DescriptorAtK(desc_b, kk));
    }
    WgmmaCommit();
    WgmmaWait<1>();  // the previous k-tile's group is done: its stage is free
    if (t > 0) BarrierArrive(&empty[(first + t - 1) % kStages]);
  }
  WgmmaWaitAll();
  FenceAccumulators<kBN / 2>(d);
  if (tiles > 0) BarrierArrive(&empty[(first + tiles - 1) % kStages]);
}

// A consumer warpgroup's accumulators (rows 64 half .. 64 half + 63 of the tile) into the fp32
// tile. wgmma's accumulator layout: warp w of the group holds rows 16w..16w+15, and for each 8
// columns j the mma.m16n8 C fragment: d[4j + e] at (row g + 8 (e / 2), column 8j + 2t + e % 2).
template <int kBN = kWgBN>
__device__ __forceinline__ void StoreWgmmaAccumulators(const float* d, int half, int warp_in_wg, int lane,
                                                       float (*tile)[WgTile<kBN>::kTileLd]) {
  const int row0 = 64 * half + 16 * warp_in_wg + lane / 4, col0 = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<float2*>(&tile[row0 + 8 * h][8 * j + col0]) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    }
  }
}

// A consumer warpgroup's accumulators (rows block_m + 64 half .. + 63, columns from block_n)
// straight into y through the op's epilogue, pair by pair as the fp32 tile's ending would: the
// persistent grid's ending, which leaves the stages to the producer, already loading the block's
// next tile.
template <Epilogue kE, int kBN>
__device__ __forceinline__ void StoreWgmmaPairs(const LinearParams& p, const float* d, int64_t block_m, int64_t block_n,
                                                int half, int warp_in_wg, int lane) {
  const int64_t row0 = block_m + 64 * half + 16 * warp_in_wg + lane / 4, col0 = block_n + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = row0 + 8 * h, n = col0 + 8 * j;
      if (m < p.m && n < p.n) StorePair<kE>(p, m, n, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    }
  }
}

// StoreWgmmaPairs for kQkvRope: a thread's two rows' positions and cache slots loaded once (not
// again at each of its kBN / 4 pairs after every store), each column's bias once for both rows,
// and the channel within the head stepped along the columns rather than divided out at each pair.
// The same fp32 operations as StorePair's, so the same bits.
template <int kBN>
__device__ __forceinline__ void StoreWgmmaQkvPairs(const LinearParams& p, const float* d, int64_t block_m,
                                                   int64_t block_n, int half, int warp_in_wg, int lane) {
  const int64_t row0 = block_m + 64 * half + 16 * warp_in_wg + lane / 4;
  const int col0 = static_cast<int>(block_n) + 2 * (lane % 4), n = static_cast<int>(p.n);
  const int head_dim = p.qkv.head_dim;
  const bool in[2] = {row0 < p.m, row0 + 8 < p.m};
  QkvRowValues rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (in[h]) rows[h] = QkvRowOf(p.qkv, row0 + 8 * h);
  }
  int channel = static_cast<int>(static_cast<uint32_t>(col0) % static_cast<uint32_t>(head_dim));
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int n0 = col0 + 8 * j;
    if (n0 < n) {
      const float b0 = p.bias != nullptr ? __bfloat162float(p.bias[n0]) : 0.0f;
      const float b1 = p.bias != nullptr ? __bfloat162float(p.bias[n0 + 1]) : 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (in[h]) StoreQkvPair(p, row0 + 8 * h, rows[h], n0, channel, d[4 * j + 2 * h], d[4 * j + 2 * h + 1], b0, b1);
      }
    }
    channel += 8;  // the next column's channel (heads of fewer than 8 channels: the remainder)
    if (channel >= head_dim) channel = head_dim >= 8 ? channel - head_dim : channel % head_dim;
  }
}

// How a wgmma GEMM's blocks walk its output tiles (GroupedGemmTile's order, block i taking tiles
// i, i + gridDim.x, ...). Persistent (`smem_ending` 0): a block a multiprocessor loops over its
// tiles, the producer running on into the next tile's stages while the consumers store the last
// one from their registers -- a grid of a block a tile paid each tile's start (launch, barriers,
// the pipeline's first loads) and its ending through shared memory with the tensor cores idle,
// about 8 us a tile by run 3's numbers against 22 of a 4096-deep k loop (bench/RESULTS.md). A
// grid splitting K over a cluster (and AUTOGLM_GEMM_PERSISTENT=0) keeps a block a tile and the
// ending through shared memory, where the cluster sums its partial tiles.
struct WgTiles {
  int64_t n_tiles;  // column tiles
  int64_t m_tiles;  // row tiles
  int64_t m_group;  // GroupedGemmTile's group
  bool smem_ending;  // one tile a block, ended through shared memory (StoreClusterTile)
};

template <Epilogue kE, int kBN>
__global__ void __launch_bounds__(kWgThreads, 1)
    WgmmaGemmKernel(LinearParams p, const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap w_map,
                    int64_t k_per_rank, WgTiles walk) {
  using Tile = WgTile<kBN>;
  constexpr int kStages = Tile::kStages;
  extern __shared__ __align__(16) unsigned char wg_smem_raw[];
  unsigned char* smem = wg_smem_raw + ((1024 - SmemAddress(wg_smem_raw) % 1024) % 1024);
  bf16* a_stages = reinterpret_cast<bf16*>(smem);                    // [kStages][kWgBM][kWgBK]
  bf16* b_stages = a_stages + kStages * kWgBM * kWgBK;               // [kStages][kBN][kWgBK]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * Tile::kStageBytes);
  uint64_t* empty = full + kStages;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x % 128) / 32;
  const int64_t k_begin = rank * k_per_rank, k_end = min(p.k, k_begin + k_per_rank);
  const int tiles = k_end > k_begin ? static_cast<int>((k_end - k_begin + kWgBK - 1) / kWgBK) : 0;
  const int64_t count = walk.n_tiles * walk.m_tiles;  // output tiles
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], 1);         // the producer's expect-bytes arrival
      BarrierInit(&empty[s], 2 * 128);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  AllowNextKernel();
  WaitForPreviousKernel();  // A is the previous kernel's output

  auto tile = reinterpret_cast<float (*)[Tile::kTileLd]>(smem);  // the output tile, over the stages at the end
  if (wg == 0) {
    if (threadIdx.x == 0) {
      int first = 0;
      for (int64_t i = blockIdx.x; i < count; i += gridDim.x, first += tiles) {
        const GemmTileAt at = GroupedGemmTile(i, walk.n_tiles, walk.m_tiles, walk.m_group);
        ProduceTiles<kStages, Tile::kBoxes, Tile::kWBoxRows>(reinterpret_cast<unsigned char*>(a_stages),
                                                             reinterpret_cast<unsigned char*>(b_stages), Tile::kABytes,
                                                             &a_map, &w_map, k_begin, kWgBK, tiles, at.m * kWgBM,
                                                             at.n * kBN, full, empty, first);
      }
    }
  } else {
    int first = 0;
    for (int64_t i = blockIdx.x; i < count; i += gridDim.x, first += tiles) {
      // Only in the consumers: live across another warpgroup's loop it would cost its registers.
      float d[kBN / 2] = {};
      ConsumeTiles<kStages, kBN>(d, a_stages, b_stages, tiles, wg - 1, full, nullptr, empty, first);
      if (!walk.smem_ending) {
        const GemmTileAt at = GroupedGemmTile(i, walk.n_tiles, walk.m_tiles, walk.m_group);
        if constexpr (kE == Epilogue::kQkvRope) {
          StoreWgmmaQkvPairs<kBN>(p, d, at.m * kWgBM, at.n * kBN, wg - 1, warp_in_wg, lane);
        } else {
          StoreWgmmaPairs<kE, kBN>(p, d, at.m * kWgBM, at.n * kBN, wg - 1, warp_in_wg, lane);
        }
        continue;
      }
      // Both consumers past their last wgmma: every stage has been read, so the stages become the tile.
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      StoreWgmmaAccumulators<kBN>(d, wg - 1, warp_in_wg, lane, tile);
    }
  }
  if (!walk.smem_ending) return;
  __syncthreads();  // one tile a block: blockIdx.x's
  const GemmTileAt at = GroupedGemmTile(blockIdx.x, walk.n_tiles, walk.m_tiles, walk.m_group);
  StoreClusterTile<kE, kWgBM, kBN, kWgThreads>(p, cluster, &tile[0][0], Tile::kTileLd, at.m * kWgBM, at.n * kBN, p.n);
}

bool WgmmaPersistentEnabled();  // gemm_wgmma.cu: AUTOGLM_GEMM_PERSISTENT

// Host side (gemm_wgmma.cu): whether the wgmma GEMM may take a launch (a Hopper device,
// AUTOGLM_WGMMA not 0, 16-byte aligned operands, the driver's tensor-map encoder found), and the
// tensor map of a K-major [rows, k] bf16 matrix in box_rows x 64 boxes with the 128-byte swizzle.
bool WgmmaGemmUsable(const LinearParams& p, const bf16* a);
cudaError_t EncodeTileMap(const bf16* matrix, int64_t rows, int64_t k, CUtensorMap* map, int box_rows = kWgBM);

// `tile_n`: 128, 192 or 256 columns a block (0: WgmmaTileColumns's choice for the shape).
template <Epilogue kE, int kBN>
cudaError_t LaunchWgmmaTilesOf(const LinearParams& p, const bf16* a, cudaStream_t stream) {
  constexpr size_t kSmem = WgTile<kBN>::kSmemBytes;
  CUtensorMap a_map, w_map;
  cudaError_t e = EncodeTileMap(a, p.m, p.k, &a_map);
  if (e == cudaSuccess) e = EncodeTileMap(p.w, p.n, p.k, &w_map, WgTile<kBN>::kWBoxRows);
  if (e == cudaSuccess) e = AllowLargeSharedMemory<WgmmaGemmKernel<kE, kBN>, kSmem>();
  if (e != cudaSuccess) return e;
  const int counted = MultiprocessorCount(), sms = counted > 0 ? counted : 132;
  const KSplit split = SplitWgmmaK(p.m, p.n, p.k, sms, kBN);
  const WgTiles walk{(p.n + kBN - 1) / kBN, (p.m + kWgBM - 1) / kWgBM, GemmTileGroup(),
                     split.ranks > 1 || !WgmmaPersistentEnabled()};
  const int64_t tiles = walk.n_tiles * walk.m_tiles;
  const int64_t blocks = walk.smem_ending ? tiles : std::min<int64_t>(tiles, sms);  // one block a SM
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks), 1, static_cast<unsigned>(split.ranks));
  return LaunchKernelInCluster(WgmmaGemmKernel<kE, kBN>, grid, dim3(kWgThreads), kSmem, stream,
                               dim3(1, 1, static_cast<unsigned>(split.ranks)), p, a_map, w_map, split.k_per_rank, walk);
}

bool WgmmaWideEnabled();  // gemm_wgmma.cu: AUTOGLM_WGMMA_WIDE

template <Epilogue kE>
cudaError_t LaunchWgmmaTiles(const LinearParams& p, const bf16* a, cudaStream_t stream, int tile_n = 0) {
  if (tile_n == 0) {
    const int sms = MultiprocessorCount();
    tile_n = WgmmaWideEnabled() ? WgmmaTileColumns(p.m, p.n, p.k, sms > 0 ? sms : 132) : kWgBN;
  }
  if (tile_n == 128) return LaunchWgmmaTilesOf<kE, 128>(p, a, stream);
  if (tile_n == 192) return LaunchWgmmaTilesOf<kE, 192>(p, a, stream);
  if (tile_n == 256) return LaunchWgmmaTilesOf<kE, 256>(p, a, stream);
  return cudaErrorInvalidValue;
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_GEMM_WGMMA_CUH_
