// The op table: the one place an op is defined.
//
// Each row gives the op's name, operand and result counts, attribute schema,
// properties and its type rule (which is also its verifier rule: it rejects
// operand types or attributes the op cannot take). Every other per-op table in
// the project (reference kernels, CUDA kernels, test cases) is an array indexed
// by OpId and checked with a static_assert, so adding an op here without
// adding it there fails to compile.
#ifndef AUTOGLM_IR_OP_TABLE_H_
#define AUTOGLM_IR_OP_TABLE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "ir/attrs.h"
#include "ir/types.h"

namespace ag::ir {

// Builder-level ops (the vision tower's from scatter_rows), then ops made by
// lower-kv-cache, then fused ops, then the collectives of tensor parallelism
// (made by shard; fused ones by fuse), then the vision tower's fused ops, then
// the sandwich norm's fold (new ops go last, so that the kernel ids plan files
// store keep their values).
#define AG_IR_OPS(X)        \
  X(embedding)              \
  X(rms_norm)               \
  X(linear)                 \
  X(rotary)                 \
  X(attention)              \
  X(add)                    \
  X(mul)                    \
  X(silu)                   \
  X(slice)                  \
  X(gather_rows)            \
  X(argmax)                 \
  X(scatter_rows)           \
  X(layer_norm)             \
  X(gelu)                   \
  X(vision_pos_embed)       \
  X(vision_rotary)          \
  X(segment_attention)      \
  X(merge_rows)             \
  X(kv_cache_write)         \
  X(paged_attention)        \
  X(norm_qkv_rope_kv_write) \
  X(norm_gate_up_silu)      \
  X(linear_residual)        \
  X(rms_norm_residual)      \
  X(add_rms_norm)           \
  X(norm_linear)            \
  X(all_reduce)             \
  X(all_gather)             \
  X(all_reduce_residual)    \
  X(all_reduce_norm_residual) \
  X(vision_qkv_rotary)      \
  X(packed_segment_attention) \
  X(residual_norm_gate_up_silu)

enum class OpId : uint8_t {
#define AG_OP_ENUM_(name) k_##name,
  AG_IR_OPS(AG_OP_ENUM_)
#undef AG_OP_ENUM_
};

inline constexpr int kOpCount = 0
#define AG_OP_COUNT_(name) +1
    AG_IR_OPS(AG_OP_COUNT_)
#undef AG_OP_COUNT_
    ;

enum OpProperty : uint32_t {
  kElementwise = 1u << 0,
  kCommutative = 1u << 1,
  kSideEffect = 1u << 2,  // writes state (the KV cache): never removed, never reordered
  kFused = 1u << 3,       // made by a pass, never by the builder
  kCollective = 1u << 4,  // communicates across the tensor-parallel group: every rank runs it, in plan order
};

// Ranges of the numeric attributes a compiler can produce from a model's
// config (the config parser enforces the same bounds): a norm's eps and a
// rotary's theta. Anything else (inf, a denormal theta) is a corrupt plan.
inline constexpr double kMaxNormEps = 1.0;
inline constexpr double kMinRopeTheta = 1.0;
inline constexpr double kMaxRopeTheta = 1e12;

struct AttrSpec {
  absl::string_view name;
  AttrKind kind;
  bool optional = false;  // may be absent (rotary's mrope_section: text models have none)
};

using InferFn = absl::StatusOr<std::vector<TensorType>> (*)(std::span<const TensorType> operands,
                                                            const Attrs& attrs);

struct OpInfo {
  OpId id;
  absl::string_view name;
  int min_operands;
  int max_operands;  // operands past min_operands are optional (a bias)
  int num_results;
  std::span<const AttrSpec> attrs;  // required unless marked optional
  uint32_t properties;
  int state_operand;    // index of the operand that must be a state value, or -1
  int inplace_operand;  // result 0 may share this operand's buffer when it dies here, or -1
  InferFn infer;
  // The operand that is a linear weight W [N, K] (y = x W^T), or -1: the only
  // place a weight stored in a quantized format (ir/quant.h) may be read.
  int matrix_operand = -1;

  bool Has(OpProperty p) const { return (properties & p) != 0; }
};

const OpInfo& GetOpInfo(OpId op);

// The ops whose matrix operand is a gate/up weight [2I, K] (gate rows, then up rows) feeding
// silu(gate) * up: the CUDA backend stores it with the halves' rows interleaved.
inline bool IsGateUpOp(OpId op) {
  return op == OpId::k_norm_gate_up_silu || op == OpId::k_residual_norm_gate_up_silu;
}
std::optional<OpId> ParseOpName(absl::string_view name);
inline absl::string_view OpName(OpId op) { return GetOpInfo(op).name; }

// Checks the operand count and attribute schema, then runs the type rule.
absl::StatusOr<std::vector<TensorType>> InferResultTypes(OpId op, std::span<const TensorType> operands,
                                                         const Attrs& attrs);

// Index helper for per-op tables elsewhere: table[i].op must equal OpId(i).
template <typename Row, size_t N>
constexpr bool RowsCoverAllOps(const std::array<Row, N>& rows) {
  if (N != static_cast<size_t>(kOpCount)) return false;
  for (size_t i = 0; i < N; ++i) {
    if (static_cast<size_t>(rows[i].op) != i) return false;
  }
  return true;
}

}  // namespace ag::ir

#endif  // AUTOGLM_IR_OP_TABLE_H_
