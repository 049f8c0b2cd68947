#include "runtime/json_schema_numbers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ag::runtime {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kBounds[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

absl::Status Error(std::string what) { return absl::InvalidArgumentError(std::move(what)); }

// Whether the bound `key` is a JSON number within +-kMaxBound.
absl::Status InRange(const Json& b, const char* key) {
  if (b.is_number() && std::fabs(b.get<double>()) <= static_cast<double>(JsonSchema::kMaxBound)) return absl::OkStatus();
  return Error(absl::StrCat("'", key, "' must be a number within +-10^15"));
}

// A double as the shortest decimal that reads back as it (what the schema's text said: 0.1, not
// 0.1000000000000000055...): digits * 10^exponent, the digits without trailing zeros.
bool Decimal(double d, int64_t* digits, int* exponent) {
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text), d, std::chars_format::scientific);
  if (r.ec != std::errc()) return false;
  const std::string_view t(text, static_cast<size_t>(r.ptr - text));  // [-]d[.ddd]e[+-]xx
  const size_t e = t.find('e');
  int exp = std::stoi(std::string(t.substr(e + 1)));
  int64_t v = 0;
  bool negative = false, seen_dot = false;
  for (const char c : t.substr(0, e)) {
    if (c == '-') {
      negative = true;
    } else if (c == '.') {
      seen_dot = true;
    } else {
      if (v > INT64_MAX / 10) return false;
      v = v * 10 + (c - '0');
      if (seen_dot) --exp;
    }
  }
  while (v != 0 && v % 10 == 0) {
    v /= 10;
    ++exp;
  }
  *digits = negative ? -v : v;
  *exponent = v == 0 ? 0 : exp;
  return true;
}

// multipleOf: a positive number of at most kMaxScale decimals, as digits * 10^exponent.
absl::Status MultipleOf(const Json& k, int64_t* digits, int* exponent) {
  if (!k.is_number() || !(k.get<double>() > 0) || k.get<double>() > static_cast<double>(JsonSchema::kMaxBound)) {
    return Error("'multipleOf' must be a positive number within 10^15");
  }
  if (!Decimal(k.get<double>(), digits, exponent) || -*exponent > JsonSchema::kMaxScale) {
    return Error(absl::StrCat("'multipleOf' may have at most ", JsonSchema::kMaxScale, " decimals (", k.dump(), " has more)"));
  }
  return absl::OkStatus();
}

// Values the multiples of k (in the node's units): without bounds, within +-kMaxBound (narrower:
// the magnitude the automaton counts stays exact), and some multiple must lie within them.
absl::Status Multiple(JsonSchema::Node& node, int64_t k) {
  if (k > JsonSchema::kMaxBound) return Error("'multipleOf' times 10^decimals must be within 10^15");
  node.multiple = k;
  node.lo = std::max(node.lo, -JsonSchema::kMaxBound);
  node.hi = std::min(node.hi, JsonSchema::kMaxBound);
  const int64_t low = node.lo + (node.lo_open ? 1 : 0), high = node.hi - (node.hi_open ? 1 : 0);
  const int64_t first = low >= 0 ? (low + k - 1) / k * k : -(-low / k * k);  // the least multiple >= low
  if (first > high) return Error("the bounds admit no multiple of 'multipleOf'");
  return absl::OkStatus();
}

}  // namespace

bool HasNumericBounds(const Json& s) {
  return s.contains("multipleOf") ||
         std::any_of(std::begin(kBounds), std::end(kBounds), [&](const char* k) { return s.contains(k); });
}

absl::Status CompileIntegerBounds(const Json& s, JsonSchema::Node& node) {
  for (const char* key : kBounds) {
    if (!s.contains(key)) continue;
    const Json& b = s[key];
    if (absl::Status st = InRange(b, key); !st.ok()) return st;
    const std::string k = key;
    const bool whole = b.is_number_integer();
    const double d = b.get<double>();
    const int64_t v = whole ? b.get<int64_t>() : 0;
    if (k == "minimum") node.lo = std::max(node.lo, whole ? v : static_cast<int64_t>(std::ceil(d)));
    if (k == "exclusiveMinimum") node.lo = std::max(node.lo, whole ? v + 1 : static_cast<int64_t>(std::floor(d)) + 1);
    if (k == "maximum") node.hi = std::min(node.hi, whole ? v : static_cast<int64_t>(std::floor(d)));
    if (k == "exclusiveMaximum") node.hi = std::min(node.hi, whole ? v - 1 : static_cast<int64_t>(std::ceil(d)) - 1);
  }
  if (node.lo > node.hi) return Error("the bounds admit no integer");
  if (!s.contains("multipleOf")) return absl::OkStatus();
  // An integer is a multiple of d 10^e when it is one of d / gcd(d, 10^-e).
  int64_t k = 0;
  int exponent = 0;
  if (absl::Status st = MultipleOf(s["multipleOf"], &k, &exponent); !st.ok()) return st;
  for (int e = exponent; e > 0 && k <= JsonSchema::kMaxBound; --e) k *= 10;
  for (int e = exponent; e < 0; ++e) k /= k % 10 == 0 ? 10 : k % 2 == 0 ? 2 : k % 5 == 0 ? 5 : 1;
  return Multiple(node, k);
}

absl::Status CompileNumberBounds(const Json& s, JsonSchema::Node& node) {
  struct Bound {
    const char* key;
    int64_t digits;  // the bound is digits * 10^exponent
    int exponent;
  };
  std::vector<Bound> bounds;
  for (const char* key : kBounds) {
    if (!s.contains(key)) continue;
    const Json& b = s[key];
    if (absl::Status st = InRange(b, key); !st.ok()) return st;
    Bound bound{.key = key};
    if (!Decimal(b.get<double>(), &bound.digits, &bound.exponent) || -bound.exponent > JsonSchema::kMaxScale) {
      return Error(absl::StrCat("'", key, "' on a number may have at most ", JsonSchema::kMaxScale, " decimals (", b.dump(),
                                " has more)"));
    }
    node.scale = static_cast<uint8_t>(std::max<int>(node.scale, -bound.exponent));
    bounds.push_back(bound);
  }
  int64_t k = 0;
  int k_exponent = 0;
  if (s.contains("multipleOf")) {
    if (absl::Status st = MultipleOf(s["multipleOf"], &k, &k_exponent); !st.ok()) return st;
    node.scale = static_cast<uint8_t>(std::max<int>(node.scale, -k_exponent));
  }
  for (const Bound& b : bounds) {
    int64_t v = b.digits;
    for (int e = b.exponent + node.scale; e > 0; --e) {
      if (v > JsonSchema::kMaxBound / 10 || v < -JsonSchema::kMaxBound / 10) {
        return Error(absl::StrCat("with ", static_cast<int>(node.scale), " decimals, '", b.key, "' times 10^",
                                  static_cast<int>(node.scale), " must be within +-10^15"));
      }
      v *= 10;
    }
    const std::string key = b.key;
    const bool open = key.starts_with("exclusive");
    if (key == "minimum" || key == "exclusiveMinimum") {
      if (v > node.lo || (v == node.lo && open)) node.lo = v, node.lo_open = open;
    } else if (v < node.hi || (v == node.hi && open)) {
      node.hi = v, node.hi_open = open;
    }
  }
  if (node.lo > node.hi || (node.lo == node.hi && (node.lo_open || node.hi_open))) return Error("the bounds admit no number");
  if (!s.contains("multipleOf")) return absl::OkStatus();
  // In the bounds' units; a number so bounded has no digit past the scale but 0.
  for (int e = k_exponent + node.scale; e > 0 && k <= JsonSchema::kMaxBound; --e) k *= 10;
  return Multiple(node, k);
}

}  // namespace ag::runtime
