// The shared-memory layout of the quantized prefill GEMM (quant_gemm.cuh) as
// plain functions, so that geometry_test.cc checks them on the CPU: the
// swizzle TMA and wgmma agree on, the stage sizes, and which segments the
// kernel takes.
//
// Each pipeline stage holds the k-tile of x (128 rows x 64 bf16, 16 KB), the
// weight's tile in bf16 (128 rows x 64, 16 KB, what wgmma reads) and, for an
// integer or fp8 segment, that tile's codes as TMA brought them (128 rows x
// 64 codes: 32 bytes a row at 4 bits, 64 at 8). The dequantizing warpgroup
// turns the codes into the bf16 tile; a bf16 segment's rows are TMA'd straight
// into it. Every tile and stage starts on a 1024-byte boundary, so the
// swizzles below, which TMA applies to shared-memory address bits, are
// functions of the offset within the tile.
#ifndef AUTOGLM_KERNELS_CUDA_QUANT_GEMM_LAYOUT_H_
#define AUTOGLM_KERNELS_CUDA_QUANT_GEMM_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/quant_pack.h"

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ag::cuda {

// The byte at `offset` of a tile whose rows TMA wrote with the swizzle of `span` bytes (32, 64
// or 128: CU_TENSOR_MAP_SWIZZLE_32B/64B/128B; 16: none): the 16-byte chunk index within the
// span is XORed with the offset's bits 7 and up (cute's Swizzle<1|2|3, 4, 3>). With 128-byte rows
// and the 128-byte span, chunk c of row r sits at chunk c ^ (r % 8); with 32-byte rows and the
// 32-byte span, at c ^ ((r / 4) % 2); with 64-byte rows and the 64-byte span, at c ^ ((r / 2) % 4).
// Either way eight consecutive rows reading or writing the same chunk hit eight different banks.
AG_HOST_DEVICE constexpr uint32_t SwizzledOffset(uint32_t offset, int span) {
  const uint32_t bits = span == 128 ? 3u : span == 64 ? 2u : span == 32 ? 1u : 0u;
  return offset ^ (((offset >> 7) & ((1u << bits) - 1u)) << 4);
}

// Where the dequantizing warpgroup's thread `row` reads 16-byte load `load` of its row's codes in
// a stage (rows of `row_bytes`, swizzled as wide), and where it writes chunk `chunk` (8 bf16:
// inputs 8 chunk .. 8 chunk + 7 of the k-tile) of its row in the bf16 tile wgmma reads.
AG_HOST_DEVICE constexpr uint32_t CodeLoadOffset(int row, int load, int row_bytes) {
  return SwizzledOffset(static_cast<uint32_t>(row * row_bytes + 16 * load), row_bytes);
}
AG_HOST_DEVICE constexpr uint32_t TileChunkOffset(int row, int chunk) {
  return SwizzledOffset(static_cast<uint32_t>(row * 128 + 16 * chunk), 128);
}

inline constexpr int kQuantGemmBM = 128, kQuantGemmBN = 128, kQuantGemmBK = 64;
inline constexpr int kQuantGemmThreads = 512;  // TMA producer, two consumer warpgroups, the dequantizing one
// Dynamic shared memory a block may take on sm_90 (227 KB).
inline constexpr size_t kSm90MaxDynamicSmem = 232448;

// Bytes of one weight row's codes in a k-tile (the codes box's width): 0 for a bf16 segment,
// whose rows go straight into the bf16 tile.
AG_HOST_DEVICE constexpr int QuantGemmCodeRowBytes(QuantCode code) {
  return code == QuantCode::kBf16 ? 0 : kQuantGemmBK * QuantCodeBits(code) / 8;
}
AG_HOST_DEVICE constexpr size_t QuantGemmStageBytes(QuantCode code) {
  return 2 * (kQuantGemmBM + kQuantGemmBN) * kQuantGemmBK + size_t{kQuantGemmBN} * QuantGemmCodeRowBytes(code);
}
// As many stages as fit (6 at most: the ring only has to cover TMA's latency), after the
// 1024 bytes of alignment slack and three barriers a stage.
AG_HOST_DEVICE constexpr int QuantGemmStages(QuantCode code) {
  const size_t fit = (kSm90MaxDynamicSmem - 1024) / (QuantGemmStageBytes(code) + 3 * sizeof(uint64_t));
  return fit < 6 ? static_cast<int>(fit) : 6;
}
AG_HOST_DEVICE constexpr size_t QuantGemmSmemBytes(QuantCode code) {
  return 1024 + QuantGemmStages(code) * (QuantGemmStageBytes(code) + 3 * sizeof(uint64_t));
}

// Whether the in-load GEMM can take a segment of a linear with k inputs, by its shape alone
// (the device, the switches and pointer alignment are the launcher's): not an act-order one
// (its inputs are gathered, which TMA's boxes cannot do: those keep the dequantized scratch),
// k whole 16-byte rows of x for TMA's row pitch, and a code row a whole number of 16-byte loads.
constexpr bool QuantGemmTakesShape(QuantCode code, int64_t k, bool input_order, int64_t stored_k) {
  return !input_order && (stored_k == 0 || stored_k == k) && k > 0 && k % 8 == 0 &&
         k % CodesPerLoad(QuantCodeBits(code)) == 0;
}

}  // namespace ag::cuda

#undef AG_HOST_DEVICE

#endif  // AUTOGLM_KERNELS_CUDA_QUANT_GEMM_LAYOUT_H_
