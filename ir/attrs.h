// Node attributes: a sorted map from name to an int, float, string or int list.
#ifndef AUTOGLM_IR_ATTRS_H_
#define AUTOGLM_IR_ATTRS_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"

namespace ag::ir {

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;
using Attrs = std::map<std::string, AttrValue, std::less<>>;

enum class AttrKind : uint8_t { kInt, kFloat, kString, kIntList };

AttrKind KindOf(const AttrValue& value);
absl::string_view AttrKindName(AttrKind kind);

// Text form used by the IR printer and error messages: `3`, `1e-05`, `"x"`, `[1,2]`.
// Floats always carry a '.', 'e', "inf" or "nan" so that they parse back as floats.
std::string AttrValueToString(const AttrValue& value);

absl::StatusOr<int64_t> GetInt(const Attrs& attrs, absl::string_view name);
absl::StatusOr<double> GetFloat(const Attrs& attrs, absl::string_view name);
absl::StatusOr<std::string> GetString(const Attrs& attrs, absl::string_view name);
absl::StatusOr<std::vector<int64_t>> GetIntList(const Attrs& attrs, absl::string_view name);

}  // namespace ag::ir

#endif  // AUTOGLM_IR_ATTRS_H_
