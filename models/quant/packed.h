// Reading the linears of a pre-quantized checkpoint (ir::QuantPacking): the
// header check a plan check runs, and the exact dequantization the loader
// runs, W[n, k] = s * (q - z) (or s * e4m3(q)) in fp32, as the checkpoint's
// own library computes it (QUANT_NOTES.md section 1, section 4).
#ifndef AUTOGLM_MODELS_QUANT_PACKED_H_
#define AUTOGLM_MODELS_QUANT_PACKED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "ir/quant.h"
#include "models/glm/safetensors.h"

namespace ag::quant {

// The module of a packed linear, from the logical tensor name the plan
// records ("model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj").
inline absl::string_view PackedModule(absl::string_view weight_tensor) {
  absl::ConsumeSuffix(&weight_tensor, ".weight");
  return weight_tensor;
}

// Checks that the tensors of the linear `module` (its "<module>.qweight",
// ".scales", ... per packing) exist with the dtypes and shapes a logical
// [n, k] weight in `format` needs; headers only. Returns the tensors' names.
absl::StatusOr<std::vector<std::string>> CheckPacked(const glm::Checkpoint& checkpoint, ir::QuantPacking packing,
                                                     const ir::QuantFormat& format, absl::string_view module,
                                                     int64_t n, int64_t k);

// A packed linear's stored numbers, unpacked but not multiplied out: what a
// device that computes on codes stores (runtime/quant_storage.h).
struct UnpackedWeight {
  int64_t n = 0, k = 0, groups = 0;
  bool fp8 = false;              // codes are E4M3 bytes, one scale per row (groups 1)
  std::vector<uint8_t> codes;    // [n, k]: unsigned integers of format.bits(), or E4M3 bytes
  std::vector<float> scales;     // [n, groups], the checkpoint's values (exact in fp32)
  std::vector<int32_t> zeros;    // [n, groups]; integer formats only (GPTQ v1's z - 1 already + 1)
  std::vector<int32_t> group_of; // [k]: each input's group (act order: g_idx; else input / group)

  // W[r, j] = s * (q - z) (or s * e4m3(q)), in fp32, as the checkpoint's library computes it.
  float Value(int64_t r, int64_t j) const;
};

// The [n, k] weight of `module` unpacked. Scales that are not finite, act-order
// indices out of range and a shape tensor that disagrees are errors naming the tensor.
absl::StatusOr<UnpackedWeight> UnpackPacked(const glm::Checkpoint& checkpoint, ir::QuantPacking packing,
                                            const ir::QuantFormat& format, absl::string_view module, int64_t n,
                                            int64_t k);

// The whole [n, k] weight of `module`, dequantized into `out` (UnpackPacked, then Value).
absl::Status DecodePacked(const glm::Checkpoint& checkpoint, ir::QuantPacking packing, const ir::QuantFormat& format,
                          absl::string_view module, int64_t n, int64_t k, float* out);

}  // namespace ag::quant

#endif  // AUTOGLM_MODELS_QUANT_PACKED_H_
