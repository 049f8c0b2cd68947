#include "serve/json_fast.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ag::serve {
namespace {

using json = nlohmann::json;

// The first byte at or after `p` that a string cannot copy as it is: '"', '\\', a control
// character (< 0x20, which JSON forbids in strings) or the start of a multi-byte UTF-8 sequence
// (>= 0x80, to be validated); `end` if none.
const char* SkipPlain(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
  for (; end - p >= 16; p += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // A signed compare: bytes >= 0x80 are negative, so "< 0x20" also catches them.
    const __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                         _mm_cmplt_epi8(v, space));
    const int mask = _mm_movemask_epi8(special);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
  }
#endif
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) return p;
  }
  return end;
}

// Past JSON's whitespace from `p`.
const char* SkipSpaceIn(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
  return p;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  Parser(std::string_view text, int max_depth)
      : p_(text.data()), end_(text.data() + text.size()), max_depth_(max_depth) {}

  std::optional<json> Document() {
    json value;
    SkipSpace();
    if (!Value(&value, 0)) return std::nullopt;
    SkipSpace();
    if (p_ != end_) return std::nullopt;
    return value;
  }

 private:
  void SkipSpace() { p_ = SkipSpaceIn(p_, end_); }

  bool Value(json* out, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{':
        return Object(out, depth + 1);
      case '[':
        return Array(out, depth + 1);
      case '"': {
        std::string s;
        if (!String(&s)) return false;
        *out = std::move(s);
        return true;
      }
      case 't':
        return Literal("true", true, out);
      case 'f':
        return Literal("false", false, out);
      case 'n':
        return Literal("null", nullptr, out);
      default:
        return Number(out);
    }
  }

  bool Literal(std::string_view word, json value, json* out) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    *out = std::move(value);
    return true;
  }

  bool Object(json* out, int depth) {
    if (depth > max_depth_) return false;
    ++p_;
    *out = json::object();
    SkipSpace();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      std::string key;
      if (p_ == end_ || *p_ != '"' || !String(&key)) return false;
      SkipSpace();
      if (p_ == end_ || *p_ != ':') return false;
      ++p_;
      SkipSpace();
      json value;
      if (!Value(&value, depth)) return false;
      (*out)[std::move(key)] = std::move(value);  // a repeated key: the last wins, as in nlohmann
      SkipSpace();
      if (p_ == end_) return false;
      if (*p_ == '}') {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
      SkipSpace();
    }
  }

  bool Array(json* out, int depth) {
    if (depth > max_depth_) return false;
    ++p_;
    *out = json::array();
    json::array_t& items = out->get_ref<json::array_t&>();
    SkipSpace();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    for (;;) {
      if (!Value(&items.emplace_back(), depth)) return false;
      SkipSpace();
      if (p_ == end_) return false;
      if (*p_ == ']') {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
      SkipSpace();
    }
  }

  // At the opening quote.
  bool String(std::string* out) {
    ++p_;
    for (;;) {
      const char* run = p_;
      p_ = SkipPlain(p_, end_);
      out->append(run, p_);
      if (p_ == end_) return false;
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        if (!Escape(out)) return false;
      } else if (c < 0x20 || !Utf8Sequence(out)) {
        return false;
      }
    }
  }

  bool Escape(std::string* out) {
    if (end_ - p_ < 2) return false;
    const char e = p_[1];
    p_ += 2;
    switch (e) {
      case '"': out->push_back('"'); return true;
      case '\\': out->push_back('\\'); return true;
      case '/': out->push_back('/'); return true;
      case 'b': out->push_back('\b'); return true;
      case 'f': out->push_back('\f'); return true;
      case 'n': out->push_back('\n'); return true;
      case 'r': out->push_back('\r'); return true;
      case 't': out->push_back('\t'); return true;
      case 'u': return Unicode(out);
      default: return false;
    }
  }

  bool Hex4(uint32_t* value) {
    if (end_ - p_ < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = p_[i];
      int digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return false;
      }
      v = v << 4 | static_cast<uint32_t>(digit);
    }
    p_ += 4;
    *value = v;
    return true;
  }

  // After "\u": one code point, a surrogate pair only whole (a lone half is an error in nlohmann).
  bool Unicode(std::string* out) {
    uint32_t cp;
    if (!Hex4(&cp) || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t low;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
      p_ += 2;
      if (!Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(cp, out);
    return true;
  }

  // A well-formed UTF-8 sequence of 2-4 bytes (Unicode's table 3-7: no overlong forms, no
  // surrogates, nothing past U+10FFFF), copied.
  bool Utf8Sequence(std::string* out) {
    const auto b0 = static_cast<unsigned char>(p_[0]);
    int length;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (end_ - p_ < length) return false;
    const auto b1 = static_cast<unsigned char>(p_[1]);
    if (b1 < lo || b1 > hi) return false;
    for (int i = 2; i < length; ++i) {
      const auto b = static_cast<unsigned char>(p_[i]);
      if (b < 0x80 || b > 0xBF) return false;
    }
    out->append(p_, static_cast<size_t>(length));
    p_ += length;
    return true;
  }

  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }
  void SkipDigits() {
    while (p_ < end_ && IsDigit(*p_)) ++p_;
  }

  // JSON's number grammar; integers that fit 64 bits stay integers (nlohmann: unsigned without
  // a sign, signed with one), the rest as doubles, declined where strtod would give infinity
  // (nlohmann's error) or underflow (nlohmann's zero; strtod's and from_chars' roundings are
  // both correct, so every other double is the same).
  bool Number(json* out) {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_ || !IsDigit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;
    } else {
      SkipDigits();
    }
    bool integer = true;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return false;
      SkipDigits();
      integer = false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return false;
      SkipDigits();
      integer = false;
    }
    if (integer && negative) {
      json::number_integer_t v;
      const auto [ptr, ec] = std::from_chars(start, p_, v);
      if (ec == std::errc() && ptr == p_) {
        *out = v;
        return true;
      }
    } else if (integer) {
      json::number_unsigned_t v;
      const auto [ptr, ec] = std::from_chars(start, p_, v);
      if (ec == std::errc() && ptr == p_) {
        *out = v;
        return true;
      }
    }
    double d;
    const auto [ptr, ec] = std::from_chars(start, p_, d);
    if (ec != std::errc() || ptr != p_ || !std::isfinite(d)) return false;
    *out = d;
    return true;
  }

  const char* p_;
  const char* const end_;
  const int max_depth_;
};

// Past the string starting at `p` (its opening quote), or nullptr.
const char* SkipString(const char* p, const char* end) {
  for (++p;;) {
    p = SkipPlain(p, end);
    if (p == end) return nullptr;
    if (*p == '"') return p + 1;
    p += *p == '\\' ? 2 : 1;  // an escape's two bytes (a \uXXXX's hex digits are plain), or one other byte
    if (p > end) return nullptr;
  }
}

// Past the value starting at `p`, or nullptr.
const char* SkipValue(const char* p, const char* end) {
  if (p == end) return nullptr;
  if (*p == '"') return SkipString(p, end);
  if (*p != '{' && *p != '[') {
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') ++p;
    return p;
  }
  int depth = 0;
  while (p < end) {
    const char c = *p;
    if (c == '"') {
      p = SkipString(p, end);
      if (p == nullptr) return nullptr;
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    if ((c == '}' || c == ']') && --depth == 0) return p + 1;
    ++p;
  }
  return nullptr;
}

}  // namespace

std::optional<std::string_view> FindMemberText(std::string_view object, std::string_view key) {
  const char* p = SkipSpaceIn(object.data(), object.data() + object.size());
  const char* const end = object.data() + object.size();
  if (p == end || *p != '{') return std::nullopt;
  p = SkipSpaceIn(p + 1, end);
  std::optional<std::string_view> found;
  if (p < end && *p == '}') return std::nullopt;
  for (;;) {
    if (p == end || *p != '"') return std::nullopt;
    const char* const key_end = SkipString(p, end);
    if (key_end == nullptr) return std::nullopt;
    const std::string_view raw(p + 1, static_cast<size_t>(key_end - 1 - (p + 1)));
    if (raw.find('\\') != std::string_view::npos) return std::nullopt;
    p = SkipSpaceIn(key_end, end);
    if (p == end || *p != ':') return std::nullopt;
    p = SkipSpaceIn(p + 1, end);
    const char* const value_end = SkipValue(p, end);
    if (value_end == nullptr || value_end == p) return std::nullopt;
    if (raw == key) found = std::string_view(p, static_cast<size_t>(value_end - p));
    p = SkipSpaceIn(value_end, end);
    if (p < end && *p == ',') {
      p = SkipSpaceIn(p + 1, end);
      continue;
    }
    if (p < end && *p == '}') return found;
    return std::nullopt;
  }
}

std::optional<nlohmann::json> ParseJsonFast(std::string_view text, int max_depth) {
  return Parser(text, max_depth).Document();
}

}  // namespace ag::serve
