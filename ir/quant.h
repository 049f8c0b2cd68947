// Weight formats: how a linear weight [N, K] (N output rows, K inputs) is
// stored when it is not in the plan's dtype.
//
// Every format is row-local: row n is quantized on its own, in groups of
// `group` consecutive inputs (0: one group, the whole row, "per output
// channel"), each group with one scale s (and, asymmetric, a zero point z):
//   int:  W[n, k] = s[n, g] * (q[n, k] - z[n, g]),  q unsigned of `bits` bits,
//         z = 2^(bits-1) when symmetric;
//   fp8:  W[n, k] = s[n] * e4m3(q[n, k])   (per output channel only).
// Row-locality is what lets a fused weight (QKV, gate|up) mix formats by row
// range and lets column-parallel sharding take whole rows unchanged.
//
// A format may also quantize the linear's input (a W8A8 checkpoint's
// input_activations): each row of x (a token) is rounded through 8-bit codes
// with its own dynamic scale before the product, x <- s_x * c(x / s_x) — what
// compressed-tensors computes and vLLM's FP8/INT8 W8A8 kernels multiply.
#ifndef AUTOGLM_IR_QUANT_H_
#define AUTOGLM_IR_QUANT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ag::ir {

enum class QuantKind : uint8_t { kNone, kFp8E4M3, kInt8, kInt4 };

// How a linear's input rows are quantized (dynamically, one symmetric scale a row):
//   fp8:  s = amax / 448, x <- s * e4m3(x / s);
//   int8: s = amax / 127.5, x <- s * clamp(rne(x / s), -128, 127)   (255 steps, as compressed-tensors).
enum class ActQuant : uint8_t { kNone, kFp8, kInt8 };

struct QuantFormat {
  QuantKind kind = QuantKind::kNone;
  int32_t group = 0;       // inputs per scale; 0: the whole row
  bool symmetric = true;   // int formats: false stores a zero point per group
  ActQuant act = ActQuant::kNone;  // the input rows' quantization (quantized formats only)

  bool quantized() const { return kind != QuantKind::kNone; }
  int bits() const;  // bits per stored weight (the plan's dtype counts as 16)
  // Groups in a row of k inputs.
  int64_t Groups(int64_t k) const { return group == 0 ? 1 : k / group; }
  // "bf16"-like "none", "fp8e4m3", "int8", "int4:g128:asym", "int8:g64", "fp8e4m3:act-fp8", ...
  std::string ToString() const;
  // Bytes an [n, k] weight takes on a device: the codes, the scales (fp32 per
  // channel; bf16 per group, as the quantizer rounds them) and the zero points (one byte).
  int64_t DeviceBytes(int64_t n, int64_t k) const;
  // Whether a row of k inputs can be stored this way (the group divides it).
  absl::Status CheckRow(int64_t k) const;
  bool operator==(const QuantFormat&) const = default;
};

// How a pre-quantized checkpoint stores a linear's codes, scales and zero
// points (models/quant decodes each); kNone: the checkpoint holds the weight
// dense and the loader quantizes it when the piece has a format.
enum class QuantPacking : uint8_t {
  kNone,
  kGptq,    // qweight [K/pf, N] along K, qzeros [K/g, N/pf] holding z - 1, scales [K/g, N], g_idx [K]
  kGptqV2,  // the same with qzeros holding z (GPTQModel's checkpoint_format gptq_v2)
  kAwq,     // qweight [K, N/8] along N in AWQ's nibble order, qzeros [K/g, N/8] (z), scales [K/g, N]
  kCtInt,   // compressed-tensors pack-quantized: weight_packed [N, K/pf], weight_scale [N, G], zero points
  kCtFp8,   // compressed-tensors float-quantized: weight F8_E4M3 [N, K], weight_scale [N, 1] or [1]
  kCtInt8,  // compressed-tensors int-quantized (W8A8 int8): weight I8 [N, K], weight_scale [N, 1] or [1]
};
inline constexpr int kQuantPackingCount = 7;
absl::string_view QuantPackingName(QuantPacking packing);  // "gptq", "awq", "compressed-tensors", ...

// The group sizes a format may use (besides 0, per channel).
inline constexpr int32_t kQuantGroups[] = {32, 64, 128};
// Whether a format may have groups of `group` inputs (0: per channel).
inline bool IsQuantGroup(int64_t group) {
  for (int32_t g : kQuantGroups) {
    if (group == g) return true;
  }
  return group == 0;
}

// Parses "none" (or "bf16", "f16", "f32": kept in the plan's dtype), "fp8",
// "fp8e4m3", "int8" (per channel, symmetric), "int4" (group 128, asymmetric),
// and options after ':' — "g32"/"g64"/"g128"/"channel", "sym"/"asym",
// "act-fp8"/"act-int8" (the input rows quantized too): "int4:g64:sym",
// "int8:g128:asym", "fp8e4m3:act-fp8", "int8:channel:sym:act-int8".
absl::StatusOr<QuantFormat> ParseQuantFormat(absl::string_view text);

}  // namespace ag::ir

#endif  // AUTOGLM_IR_QUANT_H_
