// The linear layer over a weight stored quantized (issue 18): y = x W^T with
// the epilogues of kernels/cuda/linear.cuh, W = s * (q - z) (int4, int8) or
// s * e4m3(q) (fp8) as quant_pack.h packs it, a scale per group of inputs or
// per row (and a zero point per group for asymmetric integer formats).
//
// A weight may hold several segments of rows in different formats (a 4-bit
// body's QKV keeps its K/V rows at 8 bits, a GPTQ checkpoint's q, k and v
// their own act orders): each is launched on its own over its columns of y,
// the epilogue seeing the whole weight's column indices.
//
// Two paths, the backend choosing by M:
//   decode (M up to kQuantLinearMaxRows)  the codes cross the memory bus at 4
//       or 8 bits and are dequantized in registers (q - z by a float trick, no
//       convert; the scale multiplies each load's partial sum, not each weight,
//       so the result differs from the CPU's only in rounding); one warp per pair of
//       output columns, 8 rows of x per block, the blocks of one column pair
//       adjacent in the grid so that the row chunks after the first find the
//       codes in L2; from 17 rows the skinny tensor-core kernel instead, its
//       weights dequantized to bf16 in registers as they stream in;
//   more rows  on Hopper, LaunchQuantGemm: the wgmma GEMM, its weight tiles
//       TMA'd as codes and dequantized to bf16 in shared memory by a warpgroup
//       of their own; elsewhere, and for act-order segments (gathered inputs),
//       LaunchDequantize expands the weight to bf16 in a scratch and the bf16
//       tensor-core GEMM (linear.cuh) runs on it. The skinny kernel, the GEMM's
//       tiles and the scratch round s * (q - z) to bf16 the same way: there, and
//       only there, a quantized plan's weights are not the CPU oracle's exact values.
#ifndef AUTOGLM_KERNELS_CUDA_QUANT_LINEAR_CUH_
#define AUTOGLM_KERNELS_CUDA_QUANT_LINEAR_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/input_quant.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/quant_pack.h"

namespace ag::cuda {

// Rows [n_begin, n_begin + n) of a quantized weight [N, k], on the device.
struct QuantSegment {
  const uint32_t* codes = nullptr;  // [n, PackedRowWords(k, bits)] (quant_pack.h); fp8: E4M3 bytes, packed as int8
  // Per row (group 0): fp32 [n]; per group: [n, groups] of scale_type (bf16 for what this engine
  // quantizes, as ir::QuantFormat::DeviceBytes counts them; a checkpoint's may be fp16 or fp32).
  const void* scales = nullptr;
  const uint8_t* zeros = nullptr;   // [n, groups], or null: symmetric (z = 2^(bits-1)); unused for fp8
  QuantCode code = QuantCode::kInt4;
  int64_t group = 0;         // inputs per scale; 0: the whole row
  int64_t group_offset = 0;  // inputs of the first group before this block's first (quant_pack.h)
  int64_t n_begin = 0, n = 0;
  ScaleType scale_type = ScaleType::kBF16;
  // An act-order checkpoint's codes keep each group's inputs together: stored input j is input
  // input_order[j] of x ([k] on the device; null: in order). LaunchQuantLinear then wants x in that
  // order (LaunchOrderInputs), and LaunchDequantize writes each weight back to its own input.
  const int32_t* input_order = nullptr;
  // Codes a row when a rank's slice of an act-order weight's inputs is padded to whole groups
  // (input_order -1: a code worth zero); 0: the linear's k. LaunchOrderInputs widens x to it.
  int64_t stored_k = 0;
};

// Codes a row of segment s of a linear with k inputs.
constexpr int64_t StoredK(const QuantSegment& s, int64_t k) { return s.stored_k > 0 ? s.stored_k : k; }

// The decode path over one segment: p as for LaunchLinear, but p.w is not read
// (the segment is the weight), p.norm_w must be null (normalise x first) unless p.m
// is 1 and the segment reads x in input order (the kernel then applies the norm), and
// p.n is the whole weight's rows. cudaErrorInvalidValue when k is not a
// multiple of 128 / bits, a 16-byte load of codes would span two groups,
// the segment lies outside [0, p.n), or is odd and not the last (the kernel stores
// column pairs) or, for a pair epilogue, odd at all.
cudaError_t LaunchQuantLinear(const LinearParams& p, const QuantSegment& segment, cudaStream_t stream);

// The prefill path over one segment on Hopper (quant_gemm.cuh): the wgmma GEMM with the weight's
// tiles dequantized in shared memory as they arrive, p as for LaunchQuantLinear. QuantGemmTakes:
// whether it can take the segment in a linear of k inputs here (a Hopper device, AUTOGLM_WGMMA and
// AUTOGLM_QUANT_GEMM not 0, 16-byte aligned codes, not an act-order segment: QuantGemmTakesShape);
// QuantGemmUsable: and
// p too (no norm prologue: normalise x first; 16-byte aligned x). LaunchQuantGemm returns
// cudaErrorNotSupported where it is not usable, cudaErrorInvalidValue for the shapes
// LaunchQuantLinear refuses.
bool QuantGemmTakes(const QuantSegment& segment, int64_t k);
bool QuantGemmUsable(const LinearParams& p, const QuantSegment& segment);
cudaError_t LaunchQuantGemm(const LinearParams& p, const QuantSegment& segment, cudaStream_t stream);

// A W8A8 weight's prefill on Hopper (w8a8_gemm.cuh): the product of x's codes, as
// LaunchQuantizeInputCodes left them in `x_codes` for p.m rows of p.k, with the segment's own,
// on the 8-bit tensor cores. p as for LaunchQuantLinear (p.x is not read; p.norm_w must be null:
// the codes kernel normalised). W8A8GemmTakes: whether it can take the segment for inputs rounded
// to `act` codes here (a Hopper device, AUTOGLM_WGMMA and AUTOGLM_W8A8_GEMM not 0, 16-byte aligned
// codes, W8A8GemmTakesShape). LaunchW8A8Gemm returns cudaErrorNotSupported where it cannot.
bool W8A8GemmTakes(const QuantSegment& segment, InputQuantCode act, int64_t k);
cudaError_t LaunchW8A8Gemm(const LinearParams& p, const QuantSegment& segment, InputQuantCode act,
                           const void* x_codes, cudaStream_t stream);

// Rows [n_begin, n_begin + n) of w [N, k] bf16 <- the segment's dequantized
// values rounded to bf16 (the prefill path's weight; a padded act-order
// segment's stored_k codes a row land on its k inputs).
cudaError_t LaunchDequantize(const QuantSegment& segment, int64_t k, __nv_bfloat16* w, cudaStream_t stream);

// y[r, j] = x[r, order[j]] (0 where order[j] is -1) for the m rows of x [m, k] and y [m, y_k]: x in
// an act-order segment's input order (y_k: its stored_k, or k).
cudaError_t LaunchOrderInputs(const __nv_bfloat16* x, int64_t m, int64_t k, const int32_t* order, __nv_bfloat16* y,
                              int64_t y_k, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_QUANT_LINEAR_CUH_
