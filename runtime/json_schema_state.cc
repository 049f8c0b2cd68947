// The automaton of a compiled JSON Schema (json_schema.h), and its grammar over a vocabulary.
#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/json_schema.h"

namespace ag::runtime {
namespace {

using Node = JsonSchema::Node;
using Frame = SchemaState::Frame;

static_assert(sizeof(Frame) == 16 && std::has_unique_object_representations_v<Frame>,
              "paths are compared and keyed by their bytes");

// Each frame kind's phases.
enum DocumentPhase : uint8_t { kDocValue, kDocDone };
enum ObjectPhase : uint8_t { kObjStart, kFirstKey, kNextKey, kKey, kColon, kValue, kObjAfter, kFreeKey };
enum ArrayPhase : uint8_t { kArrStart, kFirstItem, kItem, kInItem, kArrAfter };
enum StringPhase : uint8_t { kStrStart, kBody, kEscape, kUnicode };
enum NumberPhase : uint8_t { kNumStart, kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

bool IsSpace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Counts (items, characters) only matter up to the bound a comparison needs.
uint32_t Saturated(uint32_t count, const Node& n) {  // (an array's count is exact through its prefix)
  const uint32_t cap = n.max != JsonSchema::kUnbounded ? n.max : std::max(n.min, static_cast<uint32_t>(n.prefix.size()));
  return std::min(count + 1, cap);
}

// A bounded integer's or number's integer part so far, as a magnitude (count: low 32 bits, pos:
// high), saturated past every bound: a value beyond kFar compares with the bounds as kFar does.
constexpr uint64_t kFar = 10 * static_cast<uint64_t>(JsonSchema::kMaxBound);
uint64_t Magnitude(const Frame& f) { return uint64_t{f.pos} << 32 | f.count; }
void SetMagnitude(Frame& f, uint64_t v) {
  v = std::min(v, kFar + 1);
  f.count = static_cast<uint32_t>(v);
  f.pos = static_cast<uint32_t>(v >> 32);
}

// A bounded node's bounds as they apply to the magnitude (the value with its sign taken off: x <= hi
// is |x| >= -hi for a negative x, and so on), each whole, INT64_MIN/MAX where there is none. An
// integer's are closed (exclusive ones were made inclusive when compiled), a number's open or not.
struct MagnitudeBounds {
  int64_t lo, hi;
  bool lo_open, hi_open;
  int64_t multiple;  // 0, or the magnitude must be a multiple of it
};
MagnitudeBounds ForMagnitude(const Node& n, bool negative) {
  if (!negative) return {n.lo, n.hi, n.lo_open, n.hi_open, n.multiple};
  return {n.hi == INT64_MAX ? INT64_MIN : -n.hi, n.lo == INT64_MIN ? INT64_MAX : -n.lo, n.hi_open, n.lo_open, n.multiple};
}

// Whether some real magnitude in [a, b) (whole ends, 0 <= a < b) lies within the bounds. For an
// integer (closed whole bounds) that is whether some whole magnitude in [a, b - 1] does; with a
// multiple, whether one of its multiples does (those are whole).
bool Meets(const MagnitudeBounds& m, int64_t a, int64_t b) {
  if (m.multiple != 0) {
    const int64_t low = std::max(a, m.lo_open ? m.lo + 1 : m.lo), high = std::min(b - 1, m.hi_open ? m.hi - 1 : m.hi);
    return low <= high && (low + m.multiple - 1) / m.multiple * m.multiple <= high;  // low >= a >= 0
  }
  const int64_t low = std::max(a, m.lo), high = std::min(b, m.hi);
  const bool low_closed = a > m.lo || !m.lo_open, high_closed = b > m.hi && !m.hi_open;
  return low < high || (low == high && low_closed && high_closed);
}

uint64_t Pow10(int k) {
  uint64_t p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

// Whether some value this prefix can still become -- its integer part's digits so far, `more` of
// them to come or not (after a leading 0 none), then for a number any fraction -- lies within the
// node's bounds: a digit is taken only then, so a bounded value never leaves a path without an end.
// Magnitudes count units of 10^-scale (JsonSchema::Node::scale); `unit`: what the digits still to
// come may add, at most (10^scale in the integer part, 10^(scale - k) after k decimals).
bool Reaches(const Node& n, const Frame& f, bool more, uint64_t unit) {
  const MagnitudeBounds m = ForMagnitude(n, f.left == 1);
  uint64_t low = Magnitude(f), high = low + unit;  // with j more digits (and a fraction): [v 10^j, (v + 1) 10^j)
  while (true) {
    if (Meets(m, static_cast<int64_t>(std::min(low, kFar)), static_cast<int64_t>(std::min(high, kFar + 1)))) return true;
    if (!more || low == 0 || low > kFar) return false;
    low *= 10;
    high *= 10;
  }
}

// Whether a bounded value may end here: its magnitude is its integer part plus a fraction that is
// zero, or (a number's hi 1: a digit other than 0 came) strictly between 0 and 1 -- all whole bounds
// can tell apart.
bool InBounds(const Node& n, const Frame& f) {
  const MagnitudeBounds m = ForMagnitude(n, f.left == 1);
  const int64_t v = static_cast<int64_t>(std::min(Magnitude(f), kFar));
  if (m.multiple != 0 && v % m.multiple != 0) return false;  // (no digit but 0 came past the scale then)
  if (f.phase == kFrac && f.hi == 1) return v >= m.lo && v < m.hi;
  return (v > m.lo || (v == m.lo && !m.lo_open)) && (v < m.hi || (v == m.hi && !m.hi_open));
}

// Takes a digit of a bounded number's fraction: the first `scale` are the magnitude's (lo counts
// them), each taken where the value can still land within the bounds; after them one other than 0
// only while the magnitude is below the largest allowed (at it, the rest may only be zeros).
bool TakeFractionDigit(const Node& n, Frame& f, uint8_t c) {
  if (f.lo < n.scale) {
    ++f.lo;
    const uint64_t unit = Pow10(n.scale - f.lo);
    SetMagnitude(f, Magnitude(f) + (c - '0') * unit);
    return Reaches(n, f, false, unit);
  }
  if (c == '0') return true;
  if (n.multiple != 0) return false;  // a multiple has nothing past the scale
  if (static_cast<int64_t>(std::min(Magnitude(f), kFar)) == ForMagnitude(n, f.left == 1).hi) return false;
  f.hi = 1;
  return true;
}

bool ByBytes(const SchemaState::Path& a, const SchemaState::Path& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(Frame)) < 0;
}

}  // namespace

SchemaState::SchemaState(const JsonSchema* schema) : schema_(schema) { paths_.push_back(Path{Frame{}}); }

bool SchemaState::Feed(uint8_t c) {
  Paths out;
  for (const Path& p : paths_) {
    Path q = p;
    Step(q, c, out);
  }
  if (out.size() > 1) {  // two alternatives that reached the same place are one
    std::sort(out.begin(), out.end(), ByBytes);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    // Every path can still be written to a whole document, so keeping some keeps a way to the end.
    if (out.size() > kMaxPaths) out.resize(kMaxPaths);
  }
  paths_ = std::move(out);
  return !paths_.empty();
}

bool SchemaState::Feed(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool SchemaState::PathComplete(const Path& p) const {
  if (p.size() == 1) return p[0].phase == kDocDone;
  if (p.size() != 2) return false;  // a number at the top ends with the text; anything else owes bytes
  const Node& n = schema_->node(p[1].node);
  const uint8_t ph = p[1].phase;
  return (n.kind == Node::kNumber || n.kind == Node::kInteger) && (ph == kZero || ph == kInt || ph == kFrac || ph == kExp) &&
         (!n.bounded() || InBounds(n, p[1]));
}

bool SchemaState::Complete() const {
  return std::any_of(paths_.begin(), paths_.end(), [&](const Path& p) { return PathComplete(p); });
}

std::string SchemaState::Key(uint32_t horizon, bool* counted) const {
  std::string key;
  *counted = false;
  for (const Path& p : paths_) {
    key += static_cast<char>(p.size());
    for (Frame f : p) {
      const Node* n = f.node >= 0 ? &schema_->node(f.node) : nullptr;
      // (An array still within its prefix keeps its exact count: its next items' nodes depend on it.)
      if (n != nullptr && (n->kind == Node::kString || n->kind == Node::kArray) &&
          (n->min > 0 || n->max != JsonSchema::kUnbounded) && f.count >= n->prefix.size()) {
        // The next `horizon` bytes add at most `horizon` to the count: they see it only through these.
        const uint32_t far = horizon + 1;
        const uint32_t to_min = n->min > f.count ? std::min(n->min - f.count, far) : 0;
        const uint32_t to_max = n->max == JsonSchema::kUnbounded ? far : std::min(n->max - f.count, far);
        f.count = to_min * (far + 1) + to_max;
        if (n->kind == Node::kArray) f.lo = 0;  // merged, not an exact count (arrays leave lo 0x80 otherwise)
        *counted = true;
      }
      key.append(reinterpret_cast<const char*>(&f), sizeof(Frame));
    }
  }
  return key;
}

std::optional<SchemaState::TextPlaces> SchemaState::InText() const {
  TextPlaces places;
  for (const Path& p : paths_) {
    const Frame& f = p.back();
    if (f.node < 0) return std::nullopt;
    const Node& n = schema_->node(f.node);
    if (n.kind != Node::kString || f.phase != kBody || f.left != 0) return std::nullopt;
    if (n.pattern >= 0) {
      places.push_back({.pattern = n.pattern, .state = f.pos});
    } else {  // the count saturates at maxLength (Saturated), so maxLength - count is the room left
      places.push_back({.room = n.max == JsonSchema::kUnbounded ? UINT32_MAX : n.max - std::min(f.count, n.max)});
    }
  }
  return places;
}

void SchemaState::Finish(Path& p, Paths& out) const {
  const Frame child = p.back();
  p.pop_back();
  ChildDone(p, *schema_);
  if (p.back().node >= 0 && schema_->node(p.back().node).unique) p.back().pos |= 1u << child.count;  // the value written
  out.push_back(std::move(p));
}

void SchemaState::ChildDone(Path& p, const JsonSchema& schema) {
  Frame& f = p.back();
  if (f.node < 0) {
    f.phase = kDocDone;
    return;
  }
  const Node& n = schema.node(f.node);
  if (n.kind == Node::kObject) {
    if (f.phase == kFreeKey) {
      f.phase = kColon;
    } else {
      f.phase = kObjAfter;
      if (!n.properties.empty()) ++f.count;
    }
  } else {  // an array
    f.phase = kArrAfter;
    f.count = Saturated(f.count, n);
  }
}

// Whether a value of `node` can still be written whole above `p`: frames opened on the way to
// a document are promises (a key promises its value, a comma an item), made only where they fit.
bool SchemaState::Fits(const Path& p, int32_t node) const {
  return p.size() + schema_->node(node).depth <= JsonSchema::kMaxDepth;
}

// A value of `node` begins with `c` below the top of `p` (whose phase already waits for it).
void SchemaState::Enter(Path& p, int32_t node, uint8_t c, Paths& out) const {
  const Node& n = schema_->node(node);
  if (n.kind == Node::kAnyOf) {
    for (const int32_t a : n.alternatives) {
      Path q = p;
      Enter(q, a, c, out);  // alternatives are never anyOf: one level
    }
    return;
  }
  if (!Fits(p, node)) return;
  if (n.kind == Node::kLiterals) {
    // An item of a uniqueItems array: none of the values written before (a bit each in its pos).
    const uint32_t used = p.back().node >= 0 && schema_->node(p.back().node).unique ? p.back().pos : 0;
    for (uint32_t k = 0; k < n.literals.size(); ++k) {
      if (static_cast<uint8_t>(n.literals[k][0]) != c || ((used >> k) & 1) != 0) continue;
      Path q = p;
      q.push_back(Frame{.node = node, .count = k, .pos = 1});
      if (n.literals[k].size() == 1) {
        Finish(q, out);
      } else {
        out.push_back(std::move(q));
      }
    }
    return;
  }
  p.push_back(Frame{.node = node});
  Step(p, c, out);
}

void SchemaState::Step(Path& p, uint8_t c, Paths& out) const {
  Frame& f = p.back();
  if (f.node < 0) {
    if (f.phase == kDocValue) Enter(p, schema_->root(), c, out);  // no whitespace around the document
    return;
  }
  const Node& n = schema_->node(f.node);
  switch (n.kind) {
    case Node::kObject:
      return StepObject(p, c, out);
    case Node::kArray:
      return StepArray(p, c, out);
    case Node::kString:
      return StepString(p, c, out);
    case Node::kNumber:
    case Node::kInteger:
      return StepNumber(p, c, out);
    case Node::kLiterals: {
      const std::string& literal = n.literals[f.count];
      if (c != static_cast<uint8_t>(literal[f.pos])) return;
      if (++f.pos == literal.size()) return Finish(p, out);
      out.push_back(std::move(p));
      return;
    }
    default:
      return;
  }
}

namespace {

// Whitespace between a container's tokens (phases that wait for one): taken as TakeJsonSpace allows.
// True when `c` was whitespace there (taken or refused); any other byte starts the run again.
bool SpaceBetweenTokens(SchemaState::Path& p, uint8_t c, bool waits, SchemaState::Paths& out) {
  Frame& f = p.back();
  if (!IsSpace(c)) {
    f.left = 0;
    return false;
  }
  if (!waits) return false;
  if (TakeJsonSpace(f.left, c)) out.push_back(std::move(p));
  return true;
}

}  // namespace

void SchemaState::StepObject(Path& p, uint8_t c, Paths& out) const {
  Frame& f = p.back();
  if (SpaceBetweenTokens(p, c, f.phase != kObjStart && f.phase != kKey && f.phase != kFreeKey, out)) return;
  const Node& n = schema_->node(f.node);
  const bool declared = !n.properties.empty();
  auto may_close = [&] {
    return std::none_of(n.properties.begin() + f.count, n.properties.end(), [](const auto& q) { return q.required; });
  };
  // The keys that may come next: any property from here up to the next required one, each while its
  // value fits (a key is a promise of its value); an object without properties, any key.
  auto candidates = [&] {
    std::vector<uint32_t> keys;
    if (!declared) {
      if (n.values >= 0 && Fits(p, schema_->key_node()) && Fits(p, n.values)) keys.push_back(0);
      return keys;
    }
    for (uint32_t j = f.count; j < n.properties.size(); ++j) {
      if (Fits(p, n.properties[j].node)) keys.push_back(j);
      if (n.properties[j].required) break;
    }
    return keys;
  };
  switch (f.phase) {
    case kObjStart:
      if (c != '{') return;
      f.phase = kFirstKey;
      break;
    case kFirstKey:
    case kNextKey: {
      if (c == '}' && f.phase == kFirstKey && may_close()) return Finish(p, out);
      if (c != '"') return;
      const std::vector<uint32_t> keys = candidates();
      if (!declared && !keys.empty()) {
        f.phase = kFreeKey;
        return Enter(p, schema_->key_node(), c, out);
      }
      for (const uint32_t j : keys) {  // one path each, until the key's bytes tell them apart
        Path q = p;
        q.back().phase = kKey;
        q.back().count = j;
        q.back().pos = 1;  // its opening quote
        out.push_back(std::move(q));
      }
      return;
    }
    case kKey: {
      const std::string& key = n.properties[f.count].key;
      if (c != static_cast<uint8_t>(key[f.pos])) return;
      if (++f.pos == key.size()) f.phase = kColon;
      break;
    }
    case kColon:
      if (c != ':') return;
      f.phase = kValue;
      break;
    case kValue:
      return Enter(p, declared ? n.properties[f.count].node : n.values, c, out);
    case kObjAfter:
      if (c == '}' && may_close()) return Finish(p, out);
      if (c != ',' || candidates().empty()) return;
      f.phase = kNextKey;
      break;
    default:
      return;
  }
  out.push_back(std::move(p));
}

void SchemaState::StepArray(Path& p, uint8_t c, Paths& out) const {
  Frame& f = p.back();
  if (SpaceBetweenTokens(p, c, f.phase != kArrStart && f.phase != kInItem, out)) return;
  const Node& n = schema_->node(f.node);
  switch (f.phase) {
    case kArrStart:
      if (c != '[') return;
      f.phase = kFirstItem;
      break;
    case kFirstItem:
    case kItem:
      if (c == ']') {
        if (f.phase == kFirstItem && n.min == 0) return Finish(p, out);
        return;
      }
      if (n.max == 0) return;
      f.phase = kInItem;
      return Enter(p, n.Item(f.count), c, out);
    case kArrAfter:
      if (c == ']' && f.count >= n.min) return Finish(p, out);
      if (c != ',' || f.count >= n.max || !Fits(p, n.Item(f.count))) return;  // a comma promises an item
      if (n.unique && std::popcount(f.pos) >= static_cast<int>(schema_->node(n.items).literals.size())) return;  // none left
      f.phase = kItem;
      break;
    default:
      return;
  }
  out.push_back(std::move(p));
}

void SchemaState::StepString(Path& p, uint8_t c, Paths& out) const {
  Frame& f = p.back();
  const Node& n = schema_->node(f.node);
  if (n.pattern >= 0) return StepPatternString(p, c, out);
  switch (f.phase) {
    case kStrStart:
      if (c != '"') return;
      f.phase = kBody;
      break;
    case kBody:
      if (f.left > 0) {  // inside a multi-byte character
        if (c < f.lo || c > f.hi) return;
        --f.left;
        f.lo = 0x80;
        f.hi = 0xBF;
        break;
      }
      if (c == '"') {
        if (f.count >= n.min) return Finish(p, out);
        return;
      }
      if (c < 0x20 || f.count >= n.max) return;  // a control character, or one character too many
      if (c == '\\') {
        f.phase = kEscape;
      } else if (c >= 0x80) {
        // UTF-8's lead bytes and the range of the byte after each (no overlong forms, no surrogates, <= U+10FFFF).
        if (c >= 0xC2 && c <= 0xDF) {
          f.left = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
          f.left = 2;
          if (c == 0xE0) f.lo = 0xA0;
          if (c == 0xED) f.hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
          f.left = 3;
          if (c == 0xF0) f.lo = 0x90;
          if (c == 0xF4) f.hi = 0x8F;
        } else {
          return;
        }
      }
      f.count = Saturated(f.count, n);
      break;
    case kEscape:
      if (c == 'u') {
        f.phase = kUnicode;
        f.left = 4;
        f.pos = 0;
      } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        f.phase = kBody;
      } else {
        return;
      }
      break;
    case kUnicode:
      if (!IsHex(c)) return;
      if (f.left == 4 && (c == 'd' || c == 'D')) f.pos = 1;  // \uD...: a surrogate if the next digit is 8-F
      if (f.left == 3 && f.pos == 1 && !(c >= '0' && c <= '7')) return;
      if (--f.left == 0) {
        f.phase = kBody;
        f.pos = 0;
      }
      break;
    default:
      return;
  }
  out.push_back(std::move(p));
}

// A string with a pattern (its lengths folded into the DFA; the frame's pos is the DFA's state and
// count the bits of a UTF-8 character begun): each character, escape or UTF-8,
// steps the DFA, whose states all reach a whole string; a character's first bytes are taken only
// where some character they begin leads to one, so no byte strands the writer.
void SchemaState::StepPatternString(Path& p, uint8_t c, Paths& out) const {
  Frame& f = p.back();
  const PatternDfa& dfa = schema_->pattern(schema_->node(f.node).pattern);
  static constexpr uint8_t kEscapes[] = {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'};
  static constexpr uint32_t kEscaped[] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
  PatternDfa::Cursor at{.state = f.pos, .cp = f.count, .left = f.left, .lo = f.lo, .hi = f.hi};
  switch (f.phase) {
    case kStrStart:
      if (c != '"') return;
      f.phase = kBody;
      at = {.state = dfa.start()};
      break;
    case kBody:
      if (at.left == 0 && c == '"') {
        if (!dfa.Accepting(at.state)) return;
        return Finish(p, out);
      }
      if (at.left == 0 && c == '\\') {
        if (std::none_of(std::begin(kEscaped), std::end(kEscaped), [&](uint32_t e) { return dfa.Next(at.state, e) != PatternDfa::kDead; })) {
          return;
        }
        f.phase = kEscape;
        break;
      }
      if (c < 0x20 || !dfa.Feed(at, c)) return;  // control characters are escaped in JSON
      break;
    case kEscape: {
      const auto* e = std::find(std::begin(kEscapes), std::end(kEscapes), c);
      if (e == std::end(kEscapes)) return;  // a u escape too: not in a pattern's string
      at.state = dfa.Next(at.state, kEscaped[e - std::begin(kEscapes)]);
      if (at.state == PatternDfa::kDead) return;
      f.phase = kBody;
      break;
    }
    default:
      return;
  }
  f.pos = at.state;
  f.count = at.cp;
  f.left = at.left;
  f.lo = at.lo;
  f.hi = at.hi;
  out.push_back(std::move(p));
}

void SchemaState::StepNumber(Path& p, uint8_t c, Paths& out) const {
  Frame& f = p.back();
  const Node& n = schema_->node(f.node);
  const bool integer = n.kind == Node::kInteger, bounded = n.bounded();
  switch (f.phase) {
    case kNumStart:
      if (c == '-') {  // -0 or a negative value
        if (bounded && !Meets(ForMagnitude(n, true), 0, kFar + 1)) return;
        f.phase = kMinus;
        if (bounded) f.left = 1;  // (an unbounded number's sign changes nothing after it: one key for both)
        break;
      }
      [[fallthrough]];
    case kMinus:
      if (!IsDigit(c)) return;
      f.phase = c == '0' ? kZero : kInt;
      if (bounded) {
        SetMagnitude(f, (c - '0') * Pow10(n.scale));
        if (!Reaches(n, f, f.phase == kInt, Pow10(n.scale))) return;
      }
      break;
    case kZero:
    case kInt:
    case kFrac:
    case kExp:
      if (IsDigit(c) && f.phase != kZero) {
        if (bounded && f.phase == kInt) {  // the integer part's digits
          SetMagnitude(f, Magnitude(f) * 10 + (c - '0') * Pow10(n.scale));
          if (!Reaches(n, f, true, Pow10(n.scale))) return;
        } else if (bounded && f.phase == kFrac && !TakeFractionDigit(n, f, c)) {
          return;
        }
        break;
      }
      if (c == '.' && (f.phase == kZero || f.phase == kInt) && !integer) {
        if (bounded && !Reaches(n, f, false, Pow10(n.scale))) return;  // the integer part is whole now
        f.phase = kDot;
        if (bounded) f.hi = 0, f.lo = 0;  // no digit other than 0 past the scale yet, no decimal counted
        break;
      }
      if ((c == 'e' || c == 'E') && f.phase != kExp && !integer && !bounded) {  // bounded: written plainly
        f.phase = kE;
        break;
      }
      if (bounded && !InBounds(n, f)) return;
      // The number ended before this byte, which is its container's.
      p.pop_back();
      ChildDone(p, *schema_);
      return Step(p, c, out);
    case kDot:
      if (!IsDigit(c)) return;
      f.phase = kFrac;
      if (bounded && !TakeFractionDigit(n, f, c)) return;
      break;
    case kE:
      if (c == '+' || c == '-') {
        f.phase = kESign;
        break;
      }
      [[fallthrough]];
    case kESign:
      if (!IsDigit(c)) return;
      f.phase = kExp;
      break;
    default:
      return;
  }
  out.push_back(std::move(p));
}

absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> JsonSchemaGrammar::Create(std::shared_ptr<const JsonSchema> schema,
                                                                             std::shared_ptr<JsonVocabulary> vocabulary) {
  for (const Node& n : schema->nodes()) {
    std::vector<const std::string*> texts;
    for (const JsonSchema::Property& p : n.properties) texts.push_back(&p.key);
    for (const std::string& l : n.literals) texts.push_back(&l);
    for (const std::string* t : texts) {
      for (const char c : *t) {
        if (!vocabulary->HasByteToken(static_cast<uint8_t>(c))) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "the tokenizer has no token for byte 0x%02X, which the schema's %s needs", static_cast<uint8_t>(c), *t));
        }
      }
    }
  }
  return std::make_shared<JsonSchemaGrammar>(std::move(schema), std::move(vocabulary));
}

Mask JsonSchemaGrammar::Allowed(const SchemaState& state) {
  bool counted = false;
  const std::string key = state.Key(JsonVocabulary::kShortToken, &counted);
  Mask mask = *masks_.Get(key, [&]() -> absl::StatusOr<Mask> {
    return std::make_shared<const std::vector<uint64_t>>(Compute(state));
  });
  if (!counted) return mask;
  // The cached mask may be another state's with the same key: right for every short token.
  auto exact = std::make_shared<std::vector<uint64_t>>(*mask);
  vocabulary_->RedoLongTokens(state, *exact);
  return exact;
}

std::vector<uint64_t> JsonSchemaGrammar::Compute(const SchemaState& state) {
  const std::optional<SchemaState::TextPlaces> places = state.InText();
  if (!places) return vocabulary_->WalkEveryToken(state);
  // Inside strings' text the text tokens come from sets (a plain string's, by room) and tables (a
  // pattern's); only the tokens with a quote or backslash, which may end the string or escape, are fed.
  std::vector<uint64_t> mask(static_cast<size_t>(vocabulary_->vocab()) / 64 + 1, 0);
  for (const SchemaState::TextPlace& place : *places) {
    if (place.pattern < 0) {
      vocabulary_->SetTextTokens(place.room, mask);
      continue;
    }
    const PatternTextTokens* tokens =
        pattern_tokens_.Get(static_cast<size_t>(place.pattern), schema_->pattern(place.pattern), *vocabulary_);
    if (tokens == nullptr) return vocabulary_->WalkEveryToken(state);
    tokens->Set(place.state, mask);
  }
  vocabulary_->WalkQuoted(state, mask);
  return mask;
}

JsonSchemaGrammars::JsonSchemaGrammars(std::shared_ptr<JsonVocabulary> vocabulary, size_t capacity)
    : vocabulary_(std::move(vocabulary)), grammars_(capacity) {}

absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> JsonSchemaGrammars::Build(
    absl::StatusOr<std::shared_ptr<const JsonSchema>> schema) const {
  if (!schema.ok()) return schema.status();
  return JsonSchemaGrammar::Create(*std::move(schema), vocabulary_);
}

absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> JsonSchemaGrammars::Get(const std::string& schema_text) {
  return grammars_.Get(schema_text, [&] { return Build(JsonSchema::Compile(schema_text)); });
}

absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> JsonSchemaGrammars::GetChoice(const std::vector<std::string>& choices) {
  std::string key(1, '\0');  // no schema's text starts so
  for (const std::string& c : choices) absl::StrAppend(&key, c.size(), ":", c);
  return grammars_.Get(key, [&] { return Build(JsonSchema::Choice(choices)); });
}

std::unique_ptr<TokenConstraint> JsonSchemaGrammar::NewConstraint() {
  return std::make_unique<AutomatonConstraint<JsonSchemaGrammar, SchemaState>>(shared_from_this(), *vocabulary_, Start());
}

}  // namespace ag::runtime
