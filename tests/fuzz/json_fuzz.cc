// Fuzz target: the fast JSON parser (serve/json_fast.h) against nlohmann. Whatever the fast parser
// takes, nlohmann must take too and give the same value, types included (unsigned and signed
// integers, doubles bit for bit). What it declines goes to nlohmann in the server, so a decline
// is never wrong, only slower; the unit tests check that ordinary bodies are taken. FindMemberText,
// where it finds a member, must find the text of the value the parsers give for it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/json_fast.h"

namespace {

using json = nlohmann::json;

bool Same(const json& a, const json& b) {
  if (a.type() != b.type() || a.size() != b.size()) return false;
  switch (a.type()) {
    case json::value_t::object:
      for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
        if (ia.key() != ib.key() || !Same(ia.value(), ib.value())) return false;
      }
      return true;
    case json::value_t::array:
      for (size_t i = 0; i < a.size(); ++i) {
        if (!Same(a[i], b[i])) return false;
      }
      return true;
    case json::value_t::number_float: {
      const double x = a.get<double>(), y = b.get<double>();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    default:
      return a == b;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int max_depth = size == 0 ? 64 : 1 + data[0] % 64;
  const std::optional<json> fast = ag::serve::ParseJsonFast(text, max_depth);
  if (!fast) return 0;
  const json slow = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (slow.is_discarded() || !Same(*fast, slow)) __builtin_trap();
  // A member's text found without parsing the rest is that member's (when found at all).
  if (slow.is_object()) {
    for (const auto& [key, value] : slow.items()) {
      const std::optional<std::string_view> member = ag::serve::FindMemberText(text, key);
      if (!member) continue;
      const json parsed = json::parse(member->begin(), member->end(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !Same(parsed, value)) __builtin_trap();
    }
  }
  return 0;
}
