// Element types, dimensions and tensor types of the IR.
//
// A dimension is either an integer or a named symbol plus a constant offset
// (`T`, `S+1`): symbols are the batch-dependent sizes of one step, bound to
// their maxima when memory is planned and to actual values at run time.
#ifndef AUTOGLM_IR_TYPES_H_
#define AUTOGLM_IR_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ag::ir {

// kF8E4M3: OCP FP8 E4M3 ("fn"), in checkpoints that store FP8 weights.
enum class DType : uint8_t { kF32, kBF16, kF16, kI8, kI32, kF8E4M3, kI64 };
inline constexpr int kDTypeCount = 7;

absl::string_view DTypeName(DType dtype);
std::optional<DType> ParseDType(absl::string_view name);
int64_t DTypeSize(DType dtype);
inline bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// Symbol name -> value, e.g. {T: 512, S: 16}.
using SymbolBindings = absl::flat_hash_map<std::string, int64_t>;

class Dim {
 public:
  Dim() = default;
  Dim(int64_t value) : offset_(value) {}  // NOLINT: integers are dims
  static Dim Sym(std::string symbol, int64_t offset = 0) {
    Dim d;
    d.symbol_ = std::move(symbol);
    d.offset_ = offset;
    return d;
  }

  bool is_symbolic() const { return !symbol_.empty(); }
  const std::string& symbol() const { return symbol_; }
  // The integer value of a static dim, or the constant offset of a symbolic one.
  int64_t offset() const { return offset_; }
  absl::StatusOr<int64_t> Resolve(const SymbolBindings& bindings) const;
  std::string ToString() const;

  friend bool operator==(const Dim& a, const Dim& b) {
    return a.symbol_ == b.symbol_ && a.offset_ == b.offset_;
  }

 private:
  std::string symbol_;
  int64_t offset_ = 0;
};

using Shape = std::vector<Dim>;

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  // "f32[T,64]".
  std::string ToString() const;
  absl::StatusOr<int64_t> NumElements(const SymbolBindings& bindings) const;
  absl::StatusOr<int64_t> ByteSize(const SymbolBindings& bindings) const;
  int rank() const { return static_cast<int>(shape.size()); }
  friend bool operator==(const TensorType& a, const TensorType& b) {
    return a.dtype == b.dtype && a.shape == b.shape;
  }
};

std::string ShapeToString(const Shape& shape);

// The largest tensor-parallel degree the IR accepts (one node of 8 GPUs is the
// usual unit; 64 leaves room for several nodes).
inline constexpr int32_t kMaxTensorParallel = 64;

// Tensor parallelism: a checkpoint parameter split along `axis` (0: rows,
// 1: columns) into `parts` equal pieces; rank r of a group of tp ranks holds
// piece r * parts / tp (parts divides tp: parts < tp replicates a piece over
// tp / parts ranks, as KV heads are when the degree exceeds them).
struct ShardSpec {
  int32_t axis = -1;  // -1: whole, on every rank
  int32_t parts = 1;

  bool sharded() const { return axis >= 0; }
  // Well formed (whole, or rows/cols in parts >= 1) with parts dividing the degree `tp`.
  bool Fits(int32_t tp) const { return sharded() ? axis <= 1 && parts >= 1 && tp % parts == 0 : axis == -1 && parts == 1; }
  bool operator==(const ShardSpec&) const = default;
  std::string ToString() const;  // "rows/4", "cols/2"
};

}  // namespace ag::ir

#endif  // AUTOGLM_IR_TYPES_H_
