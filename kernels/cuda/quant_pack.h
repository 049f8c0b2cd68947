// How the CUDA kernels store an integer-quantized weight [n, k] (plain C++:
// the loader packs with it and the CPU tests check it). Each row's codes are
// packed little-endian into 32-bit words along k: code j of a row sits in
// word j / (32 / bits), at bit bits * (j % (32 / bits)). A row is k * bits / 32
// words, so a 16-byte load gives a thread 32 int4 or 16 int8 codes of one row,
// all of one group (groups are 32, 64 or 128 inputs, or the whole row).
#ifndef AUTOGLM_KERNELS_CUDA_QUANT_PACK_H_
#define AUTOGLM_KERNELS_CUDA_QUANT_PACK_H_

#include <cstdint>

#include "kernels/cuda/linear_split.h"  // kQuantCodesMaxRows, kQuantLinearMaxRows

namespace ag::cuda {

// The code formats the quantized kernels read (quant_linear.cuh). kBf16: rows a quantized weight
// keeps unquantized (a policy's `*.q_proj: bf16` under an int4 body), stored as bf16 "codes" with
// no scale, so that one weight's segments run through one kernel family.
enum class QuantCode : int { kInt4, kInt8, kFp8, kBf16 };

inline constexpr int QuantCodeBits(QuantCode code) {
  return code == QuantCode::kInt4 ? 4 : code == QuantCode::kBf16 ? 16 : 8;
}

// Whether the backend lets the codes kernel apply a linear's RMSNorm prologue itself at one row of
// x (the kernel can for every code, but not for x reordered by act order). Not for int4: at one
// row its kernel is about as bound by instructions as by the bus, and the prologue's ~1.5
// instructions a weight would cost about what the normalising launch does (bench/RESULTS.md).
inline constexpr bool QuantKernelNormalises(QuantCode code, bool reordered) {
  return !reordered && code != QuantCode::kInt4;
}
// Whether the decode path over m rows of x applies a linear's RMSNorm prologue itself: the codes
// kernel at one row (QuantKernelNormalises); not the codes kernel's 8-row blocks, nor the skinny
// tensor-core kernel past 16 rows, where the bf16 one's in-kernel norm measured slower than a
// normalising launch (kSkinnyNormMaxRows). Otherwise the backend normalises x by a launch first.
inline constexpr bool QuantLinearNormalises(int64_t m, QuantCode code, bool reordered) {
  return m == 1 && QuantKernelNormalises(code, reordered);
}

// How a segment's group scales are stored (per-row scales are always fp32): bf16 for the
// weights this engine quantizes (ref::QuantizeRows rounds them so); a pre-quantized
// checkpoint's in the narrowest of bf16, fp16 and fp32 that holds every one exactly.
enum class ScaleType : int { kBF16, kF16, kF32 };

inline constexpr int ScaleBytes(ScaleType type) { return type == ScaleType::kF32 ? 4 : 2; }

// Codes a 16-byte load carries.
inline constexpr int64_t CodesPerLoad(int bits) { return 128 / bits; }
// Words of one packed row; the kernels need k to be a multiple of CodesPerLoad(bits).
inline constexpr int64_t PackedRowWords(int64_t k, int bits) { return k * bits / 32; }

// A tensor-parallel rank's block of a row may start inside a group (GLM-4-9B's
// down_proj at tp 4: 3,424 inputs a rank, groups of 128): `offset` inputs of
// its first group lie before it, so its scales cover SegmentGroups groups and
// input j belongs to group GroupOf(j). Offset 0 for a whole row.
inline constexpr int64_t SegmentGroups(int64_t k, int64_t group, int64_t offset) {
  return group == 0 ? 1 : (offset + k + group - 1) / group;
}
inline constexpr int64_t GroupOf(int64_t j, int64_t group, int64_t offset) { return group == 0 ? 0 : (j + offset) / group; }

// codes [n, k], one byte each (ref::QuantizeRows' layout), into words [n, PackedRowWords(k, bits)].
inline void PackQuantCodes(const uint8_t* codes, int64_t n, int64_t k, int bits, uint32_t* words) {
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n * k / per_word; ++i) {
    uint32_t w = 0;
    for (int j = 0; j < per_word; ++j) w |= (codes[i * per_word + j] & mask) << (bits * j);
    words[i] = w;
  }
}

// The code of row r, input j of a packed weight.
inline uint8_t PackedCode(const uint32_t* words, int64_t k, int bits, int64_t r, int64_t j) {
  const int per_word = 32 / bits;
  const uint32_t word = words[r * PackedRowWords(k, bits) + j / per_word];
  return static_cast<uint8_t>((word >> (bits * (j % per_word))) & ((1u << bits) - 1));
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_QUANT_PACK_H_
