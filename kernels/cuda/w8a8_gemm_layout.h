// The W8A8 prefill GEMM's host-visible shapes (w8a8_gemm.cuh), as plain
// functions so that geometry_test.cc checks them on the CPU: which segments it
// takes, its stages, and where the input-codes kernel leaves x's codes, scales
// and code sums in the linear scratch.
//
// A W8A8 weight (compressed-tensors input_activations, dynamic per token) has
// its input rows rounded through 8-bit codes before the product. Past
// kQuantLinearMaxRows rows on Hopper the product then runs on the codes
// themselves: x's codes (e4m3, or int8) times the weight's (e4m3, or int8
// stored biased as uint8) on wgmma's 8-bit tensor cores -- twice the bf16 rate,
// and half the shared-memory and L2 traffic a k element -- and the scales come
// after the sums:
//   fp8   y = s_x[r] s_w[n] sum_k c_x c_w     (fp32; each 128-k tile's sum
//         promoted into fp32 registers, as Hopper's e4m3 accumulation keeps
//         fewer bits than fp32)
//   int8  y = s_x[r] s_w[n] (sum_k c_x q_w - z_n sum_k c_x)   (exact in int32)
// Each stage holds x's and W's k-tiles of 128 codes (128 bytes a row, the
// 128-byte swizzle: byte for byte the bf16 GEMM's 64-element tiles).
#ifndef AUTOGLM_KERNELS_CUDA_W8A8_GEMM_LAYOUT_H_
#define AUTOGLM_KERNELS_CUDA_W8A8_GEMM_LAYOUT_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/quant_pack.h"

namespace ag::cuda {

inline constexpr int kW8BM = 128, kW8BN = 128, kW8BK = 128;  // a k-tile row: 128 one-byte codes
inline constexpr int kW8Stages = 5;
inline constexpr int kW8Threads = 384;  // TMA producer, two consumer warpgroups
inline constexpr size_t kW8StageBytes = size_t{kW8BM + kW8BN} * kW8BK;
inline constexpr size_t kW8SmemBytes = 1024 + kW8Stages * kW8StageBytes + 2 * kW8Stages * sizeof(uint64_t);

// Where the input-codes kernel leaves a W8A8 linear's x in the scratch: codes [m][k] (one byte
// each), then from `scales` (16-byte aligned) m fp32 scales, then from `sums` m int32 sums of
// each row's codes (int8 only; the zero points' correction). Within the m * k bf16 the scratch
// holds for the bf16 path whenever k >= 16.
struct W8A8Scratch {
  size_t scales = 0, sums = 0, bytes = 0;
};
constexpr W8A8Scratch W8A8ScratchLayout(int64_t m, int64_t k) {
  W8A8Scratch l;
  l.scales = (static_cast<size_t>(m * k) + 15) / 16 * 16;
  l.sums = l.scales + static_cast<size_t>(m) * 4;
  l.bytes = l.sums + static_cast<size_t>(m) * 4;
  return l;
}

// Whether the W8A8 GEMM can take a segment of a linear with k inputs whose rows are rounded to
// `act_fp8` (true: e4m3, false: int8) codes, by its shape alone: the weight's own codes of the same
// kind (e4m3 with fp8 inputs, int8 with int8), one scale (and zero point) a row -- a group's
// scale would have to be applied inside the k loop -- in input order, and k whole 16-byte rows of
// codes for TMA's row pitch.
constexpr bool W8A8GemmTakesShape(QuantCode code, bool act_fp8, int64_t k, int64_t group, bool input_order,
                                  int64_t stored_k) {
  const bool same_kind = act_fp8 ? code == QuantCode::kFp8 : code == QuantCode::kInt8;
  return same_kind && group == 0 && !input_order && (stored_k == 0 || stored_k == k) && k >= 16 && k % 16 == 0;
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_W8A8_GEMM_LAYOUT_H_
