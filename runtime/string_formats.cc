#include "runtime/string_formats.h"

#include "absl/strings/str_cat.h"

namespace ag::runtime {
namespace {

// RFC 3339's full-date: the days each month has (February 28).
constexpr const char* kDate =
    R"(\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8])))";
// RFC 3339's full-time: an offset always, seconds to 59, at most 9 digits of fraction.
constexpr const char* kTime = R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
// RFC 3339 appendix A's duration: years, months, days, then a time part; or weeks alone.
constexpr const char* kDurationTime = R"(T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S))";
// A DNS label (letters, digits, inner hyphens), at most 41 characters here.
constexpr const char* kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,39}[A-Za-z0-9])?";
// RFC 5322's atext: a dot-atom's characters.
constexpr const char* kAtom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
constexpr const char* kOctet = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
constexpr const char* kHex = "[0-9a-fA-F]{1,4}";

std::string Ipv6() {
  const std::string h = kHex;
  const std::string g = "(?:" + h + ":)", t = "(?::" + h + ")";
  return absl::StrCat(g, "{7}", h, "|", g, "{1,7}:|", g, "{1,6}:", h, "|", g, "{1,5}", t, "{1,2}|", g, "{1,4}", t,
                      "{1,3}|", g, "{1,3}", t, "{1,4}|", g, "{1,2}", t, "{1,5}|", h, ":", t, "{1,6}|:(?:", t, "{1,7}|:)");
}

std::optional<std::string> Expression(absl::string_view format) {
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return absl::StrCat(kDate, "T", kTime);
  if (format == "duration") {
    return absl::StrCat(R"(P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:)", kDurationTime, ")?|", kDurationTime,
                        R"(|\d+W))");
  }
  if (format == "hostname") return absl::StrCat(kLabel, R"((?:\.)", kLabel, "){0,5}");
  if (format == "email") return absl::StrCat(kAtom, R"((?:\.)", kAtom, ")*@", kLabel, R"((?:\.)", kLabel, "){1,5}");
  if (format == "ipv4") return absl::StrCat(R"((?:)", kOctet, R"(\.){3})", kOctet);
  if (format == "ipv6") return Ipv6();
  if (format == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> FormatExpression(absl::string_view format) {
  std::optional<std::string> e = Expression(format);
  if (e) *e = "(?:" + *e + ")";  // alternatives and all: matched whole
  return e;
}

}  // namespace ag::runtime
