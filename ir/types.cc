#include "ir/types.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/checked_math.h"

namespace ag::ir {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  int64_t size;
};

constexpr std::array<DTypeInfo, kDTypeCount> kDTypes = {{
    {DType::kF32, "f32", 4},
    {DType::kBF16, "bf16", 2},
    {DType::kF16, "f16", 2},
    {DType::kI8, "i8", 1},
    {DType::kI32, "i32", 4},
    {DType::kF8E4M3, "f8e4m3", 1},
    {DType::kI64, "i64", 8},
}};

constexpr bool DTypeTableIsComplete() {
  for (int i = 0; i < kDTypeCount; ++i) {
    if (static_cast<int>(kDTypes[i].dtype) != i || kDTypes[i].name.empty()) return false;
  }
  return true;
}
static_assert(DTypeTableIsComplete(), "kDTypes must have one row per DType, in order");

}  // namespace

absl::string_view DTypeName(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }

std::optional<DType> ParseDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

int64_t DTypeSize(DType dtype) { return kDTypes[static_cast<int>(dtype)].size; }

absl::StatusOr<int64_t> Dim::Resolve(const SymbolBindings& bindings) const {
  if (!is_symbolic()) return offset_;
  auto it = bindings.find(symbol_);
  if (it == bindings.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unbound dimension symbol '", symbol_, "'"));
  }
  int64_t value = 0;
  if (__builtin_add_overflow(it->second, offset_, &value) || value < -kMaxSize || value > kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat("dimension ", ToString(), " is out of range"));
  }
  return value;
}

std::string Dim::ToString() const {
  if (!is_symbolic()) return absl::StrCat(offset_);
  if (offset_ == 0) return symbol_;
  return absl::StrCat(symbol_, offset_ > 0 ? "+" : "", offset_);
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat(
      "[", absl::StrJoin(shape, ",", [](std::string* out, const Dim& d) { out->append(d.ToString()); }),
      "]");
}

std::string TensorType::ToString() const { return absl::StrCat(DTypeName(dtype), ShapeToString(shape)); }

absl::StatusOr<int64_t> TensorType::NumElements(const SymbolBindings& bindings) const {
  int64_t n = 1;
  for (const Dim& d : shape) {
    absl::StatusOr<int64_t> v = d.Resolve(bindings);
    if (!v.ok()) return v.status();
    if (*v < 0) return absl::InvalidArgumentError(absl::StrCat("negative dimension in ", ToString()));
    std::optional<int64_t> product = CheckedMul(n, *v);
    if (!product) return absl::InvalidArgumentError(absl::StrCat(ToString(), " has too many elements"));
    n = *product;
  }
  return n;
}

absl::StatusOr<int64_t> TensorType::ByteSize(const SymbolBindings& bindings) const {
  absl::StatusOr<int64_t> n = NumElements(bindings);
  if (!n.ok()) return n.status();
  std::optional<int64_t> bytes = CheckedMul(*n, DTypeSize(dtype));
  if (!bytes) return absl::InvalidArgumentError(absl::StrCat(ToString(), " is too large"));
  return *bytes;
}

std::string ShardSpec::ToString() const {
  if (!sharded()) return "whole";
  return absl::StrCat(axis == 0 ? "rows" : "cols", "/", parts);
}

}  // namespace ag::ir
