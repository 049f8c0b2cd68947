#include "ir/attrs.h"

#include <charconv>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ag::ir {

AttrKind KindOf(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }

absl::string_view AttrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt:
      return "int";
    case AttrKind::kFloat:
      return "float";
    case AttrKind::kString:
      return "string";
    case AttrKind::kIntList:
      return "int list";
  }
  return "?";
}

std::string AttrValueToString(const AttrValue& value) {
  switch (KindOf(value)) {
    case AttrKind::kInt:
      return absl::StrCat(std::get<int64_t>(value));
    case AttrKind::kFloat: {
      char buf[64];
      // Shortest representation that reads back to the same double.
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), std::get<double>(value));
      std::string s(buf, end);
      if (s.find_first_of(".eni") == std::string::npos) s += ".0";
      return s;
    }
    case AttrKind::kString:
      return absl::StrCat("\"", std::get<std::string>(value), "\"");
    case AttrKind::kIntList:
      return absl::StrCat("[", absl::StrJoin(std::get<std::vector<int64_t>>(value), ","), "]");
  }
  return "?";
}

namespace {

template <typename T>
absl::StatusOr<T> Get(const Attrs& attrs, absl::string_view name, AttrKind kind) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return absl::NotFoundError(absl::StrCat("missing attribute '", name, "'"));
  if (KindOf(it->second) != kind) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be ", AttrKindName(kind)));
  }
  return std::get<T>(it->second);
}

}  // namespace

absl::StatusOr<int64_t> GetInt(const Attrs& attrs, absl::string_view name) {
  return Get<int64_t>(attrs, name, AttrKind::kInt);
}
absl::StatusOr<double> GetFloat(const Attrs& attrs, absl::string_view name) {
  return Get<double>(attrs, name, AttrKind::kFloat);
}
absl::StatusOr<std::string> GetString(const Attrs& attrs, absl::string_view name) {
  return Get<std::string>(attrs, name, AttrKind::kString);
}
absl::StatusOr<std::vector<int64_t>> GetIntList(const Attrs& attrs, absl::string_view name) {
  return Get<std::vector<int64_t>>(attrs, name, AttrKind::kIntList);
}

}  // namespace ag::ir
