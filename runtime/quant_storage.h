// A quantized weight as the CUDA backend stores it (kernels/cuda/quant_linear.cuh),
// prepared on the host: each piece of this rank becomes a segment of rows with
// its codes packed along k (kernels/cuda/quant_pack.h), its scales (fp32 per
// row, bf16 per group) and zero points. Plain C++, so the layout is checked on
// every machine; the backend only copies the buffers to the device.
#ifndef AUTOGLM_RUNTIME_QUANT_STORAGE_H_
#define AUTOGLM_RUNTIME_QUANT_STORAGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"
#include "kernels/cuda/quant_pack.h"
#include "runtime/backend.h"

namespace ag::runtime {

// The code format a piece of this kind is stored in (kNone: a piece kept bf16, stored as kBf16 rows).
cuda::QuantCode QuantCodeOf(ir::QuantKind kind);

struct HostQuantSegment {
  cuda::QuantCode code = cuda::QuantCode::kInt4;
  int64_t group = 0;            // inputs per scale; 0: per row
  int64_t group_offset = 0;     // inputs of the first group before this rank's first (quant_pack.h)
  int64_t n_begin = 0, rows = 0, cols = 0;
  int64_t inputs = 0;           // x's width: cols, or fewer when a rank's act-order groups are padded
  std::vector<uint32_t> words;  // [rows, PackedRowWords(cols, bits)]; kBf16: two values a word
  std::vector<float> row_scales;       // [rows] when group is 0
  cuda::ScaleType scale_type = cuda::ScaleType::kBF16;
  std::vector<uint8_t> group_scales;   // [rows, SegmentGroups] of scale_type otherwise (little-endian)
  std::vector<uint8_t> zeros;          // [rows, groups] for asymmetric integer formats, else empty
  std::vector<int32_t> input_order;    // act order: stored input j is input input_order[j] (-1: padding); empty: in order
};

// This rank's segments of quantized weight `entry`, in row order (a piece kept
// unquantized becomes a kBf16 segment: its bf16 values, no scale). With
// `interleave` (the gate/up weight of a fused SiLU-mul), the rank's rows become
// one segment whose row 2j is gate row j and row 2j + 1 up row j. An act-order
// checkpoint's segment keeps each group's inputs together (input_order): the
// kernels read x in that order (a rank's slice of the inputs padded to whole
// groups, QuantizedRows). Unimplemented,
// naming the weight, where the kernels cannot take the layout: inputs not in
// whole 16-byte loads of codes (a rank's block must also start on a load
// boundary of its first group), gate and up in different formats, an odd
// segment before another (the kernels store column pairs), and what
// QuantizeForDevice refuses.
absl::StatusOr<std::vector<HostQuantSegment>> PrepareQuantSegments(const compiler::WeightEntry& entry,
                                                                   const WeightSource& source, RankInfo rank,
                                                                   bool interleave);

// Bytes the CUDA backend uploads for a segment: codes, scales, zero points and input order.
int64_t StoredBytes(const HostQuantSegment& segment);

// An upper bound on what a rank may store for `entry` beyond WeightEntry::DeviceBytes, which counts
// the format's own layout (bf16 group scales, the rank's inputs exactly), from the plan alone: a
// pre-quantized checkpoint's group scales kept as wide as fp32 (the narrowest of bf16, fp16 and
// fp32 that holds them, known only from the data), a rank's inputs padded by up to a group (or a
// 16-byte load of codes) at each end (PrepareQuantSegments), and an act-order input order. The
// memory check adds it so that an upload cannot outgrow what it approved.
int64_t QuantStorageSlack(const compiler::WeightEntry& entry, int32_t tp);

// The segment's weights, dequantized as the kernels do (row-major [rows, inputs],
// inputs in the weight's own order).
std::vector<float> DequantizeSegment(const HostQuantSegment& segment);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_QUANT_STORAGE_H_
