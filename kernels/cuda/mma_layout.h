// Where the operands of mma.sync.m16n8k16 (bf16 in, fp32 accumulate) live in a
// warp's registers, and the k permutation the weight-streaming kernel
// (linear_skinny.cuh) uses, as plain index functions: the kernel takes its
// register words from them and geometry_test.cc emulates the
// instruction on the CPU with them. No CUDA headers: host code includes this.
//
// PTX ISA, "Matrix fragments for mma.m16n8k16" (.bf16), with the lane's group
// g = lane / 4 and thread-in-group t = lane % 4:
//   A, 16 x 16 row-major: register r holds (row g + 8 (r % 2), cols 2t + 8 (r / 2) + {0, 1})
//   B, 16 x 8 (k x n):    register r holds (k 2t + 8 r + {0, 1}, col g)
//   C, 16 x 8:            element e is (row g + 8 (e / 2), col 2t + e % 2)
// A register packs two bf16: the lower k (or column) in the low 16 bits.
#ifndef AUTOGLM_KERNELS_CUDA_MMA_LAYOUT_H_
#define AUTOGLM_KERNELS_CUDA_MMA_LAYOUT_H_

#include <cstdint>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ag::cuda::mma {

struct At {
  int row, col;
};

// Element `half` (0: low, 1: high) of A register `reg` (0..3).
AG_HOST_DEVICE constexpr At AElement(int lane, int reg, int half) {
  return {lane / 4 + 8 * (reg % 2), 2 * (lane % 4) + 8 * (reg / 2) + half};
}
// Element `half` of B register `reg` (0..1), as (k, n).
AG_HOST_DEVICE constexpr At BElement(int lane, int reg, int half) {
  return {2 * (lane % 4) + 8 * reg + half, lane / 4};
}
// Accumulator element `e` (0..3), as (row, col).
AG_HOST_DEVICE constexpr At CElement(int lane, int e) { return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2}; }

// ---- the streaming permutation ----
//
// A dot product does not care in which order k is summed, as long as both
// operands agree. So instead of loading the mma's 4-byte fragments, lane
// (g, t) loads 16 bytes -- eight consecutive k at 8t of a 32-wide chunk --
// of weight rows g and g + 8 and of activation row g, and feeds two mma steps
// from them: step s takes words 2s and 2s + 1 (4 bytes each) of every load.
// The instruction's logical k then sits at this physical offset in the chunk:
AG_HOST_DEVICE constexpr int PhysicalK(int logical_k, int step) {
  return 8 * ((logical_k % 8) / 2) + 4 * step + 2 * (logical_k / 8) + logical_k % 2;
}
// The 16-byte word that feeds A register `reg` at `step`: of weight row
// g + 8 * (reg % 2), word AWord(step, reg).
AG_HOST_DEVICE constexpr int AWord(int step, int reg) { return 2 * step + reg / 2; }
// The word of the activation row's load that feeds B register `reg` at `step`.
AG_HOST_DEVICE constexpr int BWord(int step, int reg) { return 2 * step + reg; }

// ---- ldmatrix.x4 ----
//
// Lane 8j + i gives the address of row i of matrix j (eight b16 in a row).
// Register j of a lane then holds two elements of matrix j: (row lane / 4,
// cols 2 (lane % 4) + {0, 1}), or with .trans (rows 2 (lane % 4) + {0, 1},
// col lane / 4). The kernels point the lanes at their tiles as follows,
// (row, col) from the tile's corner:
AG_HOST_DEVICE constexpr At LdMatrixHolds(int lane, int half, bool trans) {
  return trans ? At{2 * (lane % 4) + half, lane / 4} : At{lane / 4, 2 * (lane % 4) + half};
}
// The A fragment of a 16 x 16 row-major tile (registers 0..3 in A's order).
AG_HOST_DEVICE constexpr At AFragmentRow(int lane) { return {lane % 16, 8 * (lane / 16)}; }
// B fragments of two n-tiles from a [n][k] tile (16 n x 16 k): registers 0, 1
// are n 0..7's, 2, 3 are n 8..15's.
AG_HOST_DEVICE constexpr At BPairRow(int lane) { return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)}; }
// B fragments of two n-tiles from a [k][n] tile (16 k x 16 n) through .trans:
// registers 0, 1 are n 0..7's, 2, 3 are n 8..15's.
AG_HOST_DEVICE constexpr At BPairTransRow(int lane) { return {lane % 16, 8 * (lane / 16)}; }

// ---- the staged skinny kernel's stages (linear_skinny_staged.cuh) ----
//
// A stage is rows of 64 k: the block's 64 weight rows, x's rows from `x_row0`, norm_w's row. Piece c
// (16 bytes) of a region is its row c / 8, columns 8 (c % 8) .. + 7: the cp.async loads and the
// norm pass go by it.
AG_HOST_DEVICE constexpr At StagedPiece(int c) { return {c / 8, 8 * (c % 8)}; }
// Where `lane` of warp `warp` points ldmatrix.x4 for its A fragment at k-step column kk: weight rows
// 16 warp .. 16 warp + 15.
AG_HOST_DEVICE constexpr At StagedARow(int warp, int lane, int kk) {
  return {16 * warp + AFragmentRow(lane).row, kk + AFragmentRow(lane).col};
}
// Where `lane` points ldmatrix for the B fragments of n-tiles j and j + 1 (x rows 8 j .. 8 j + 15),
// or with one n-tile (ldmatrix.x2: lanes 0..15 read) n-tile j's alone, the others kept in its rows.
AG_HOST_DEVICE constexpr At StagedBRow(int x_row0, int j, int lane, int kk, bool one_tile) {
  return {x_row0 + 8 * j + (one_tile ? BPairRow(lane).row % 8 : BPairRow(lane).row), kk + BPairRow(lane).col};
}

// The accumulators of n-tiles 2c and 2c + 1 (16 x 8 each) are the A fragment
// of k-chunk c of the next product (P V in attention): A register r is C
// element pair 2 (r % 2) of n-tile 2c + r / 2.
AG_HOST_DEVICE constexpr int AFromCTile(int reg) { return reg / 2; }
AG_HOST_DEVICE constexpr int AFromCElement(int reg) { return 2 * (reg % 2); }

// ---- wgmma's shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") ----
//
// bits 0-13 the start address >> 4, 16-29 the leading dimension byte offset >> 4, 32-45 the
// stride dimension byte offset >> 4, 49-51 the base offset, 62-63 the swizzle (1: 128 bytes). A
// K-major tile with the 128-byte swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B boxes 64 bf16 wide):
// rows of 128 bytes, groups of 8 rows 1024 bytes apart (the stride); the leading offset is not
// used with this swizzle (1 by convention); base offset 0 for tiles on 1024-byte boundaries.
AG_HOST_DEVICE constexpr uint64_t Sw128KMajorDescriptor(uint32_t smem_address) {
  return ((smem_address & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
// The start address field advances 16 bytes a unit: k-step s of 16 bf16 within the 128-byte row.
AG_HOST_DEVICE constexpr uint64_t DescriptorAtK(uint64_t descriptor, int k16_step) {
  return descriptor + static_cast<uint64_t>(2 * k16_step);
}

// An MN-major operand (wgmma's B with imm-trans-b 1: a [k][n] tile, n contiguous) with the
// 128-byte swizzle, as TMA writes a [k][n] matrix in boxes 64 bf16 wide: rows of 128 bytes are
// k, each box holds n 64j .. 64j + 63. In 16-byte units the layout is ((8, n), (8, k)) :
// ((1, LBO), (8, SBO)) (cute's canonical GMMA MN-major SW128 layout): the leading byte offset is
// the distance between boxes (64 columns of n), the stride byte offset 1024 between groups of 8
// rows of k. A k16 step advances the start by 16 rows (2048 bytes).
AG_HOST_DEVICE constexpr uint64_t Sw128MnMajorDescriptor(uint32_t smem_address, uint32_t box_bytes) {
  return ((smem_address & 0x3FFFFu) >> 4) | (uint64_t{(box_bytes >> 4) & 0x3FFFu} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
// Where, from a descriptor's start (before the swizzle, which XORs address bits 4-6 with 7-9),
// wgmma reads bf16 element (k, n) of an MN-major SW128 operand, and element (row, k) (k < 64) of
// a K-major one: the canonical layouts above, for geometry_test.cc to hold TMA's boxes against.
AG_HOST_DEVICE constexpr uint32_t Sw128MnMajorOffset(int k, int n, uint32_t box_bytes) {
  return static_cast<uint32_t>((n / 64) * box_bytes + (k / 8) * 1024 + (k % 8) * 128 + (n % 64) * 2);
}
AG_HOST_DEVICE constexpr uint32_t Sw128KMajorOffset(int row, int k) {
  return static_cast<uint32_t>((row / 8) * 1024 + (row % 8) * 128 + k * 2);
}

// Where TMA put bf16 element (row, col) of a [rows][128] tile it wrote as two boxes 64 columns wide
// (`box_bytes` each) with the 128-byte swizzle: 16-byte chunk (col % 64) / 8 of a row at chunk
// ^ (row % 8), so eight rows reading the same chunk hit eight different banks. The wgmma flash
// kernel reads Q's register fragments from there once.
AG_HOST_DEVICE constexpr uint32_t Sw128BoxedOffset(int row, int col, uint32_t box_bytes) {
  const uint32_t linear = static_cast<uint32_t>(row * 128 + (col % 64) * 2);
  return static_cast<uint32_t>(col / 64) * box_bytes + (linear ^ (((linear >> 7) & 7u) << 4));
}

}  // namespace ag::cuda::mma

#undef AG_HOST_DEVICE

#endif  // AUTOGLM_KERNELS_CUDA_MMA_LAYOUT_H_
