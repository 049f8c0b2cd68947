#include "runtime/json_pattern.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace ag::runtime {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kMaxRepeat = 1000;      // {n,m}: larger counts are refused
constexpr size_t kMaxNfaStates = 1 << 16;  // Thompson states of the expanded repeats
constexpr size_t kMaxWork = 4'000'000;     // NFA states visited by the subset construction (a hostile pattern's bound)
constexpr int kMaxGroupDepth = 64;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive code point ranges

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Complement(const Ranges& normalized) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

const Ranges kDigits = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262's WhiteSpace and LineTerminator.
const Ranges kSpace = Normalize({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                 {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
// '.': every character but the line terminators.
const Ranges kDot = Complement(Normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));

struct Re {
  enum Kind : uint8_t { kSet, kConcat, kAlt, kRepeat };
  Kind kind = kConcat;
  Ranges set;             // kSet
  std::vector<Re> parts;  // kConcat, kAlt; kRepeat: its one part
  uint32_t min = 0, max = 0;  // kRepeat (max kUnbounded: none)
};

Re Set(Ranges r) { return Re{.kind = Re::kSet, .set = Normalize(std::move(r))}; }

Re AnyRun() {  // what an unanchored end matches: any characters
  Re r{.kind = Re::kRepeat, .min = 0, .max = PatternDfa::kUnbounded};
  r.parts.push_back(Set({{0, kMaxCodePoint}}));
  return r;
}

bool IsHex(uint32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t HexValue(uint32_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

// Recursive descent over the pattern's code points, to a tree of sets, sequences, alternatives and repeats.
class Parser {
 public:
  explicit Parser(std::vector<uint32_t> text) : s_(std::move(text)) {}

  // Top-level alternatives each carry their own anchors: "^a|b$" is (^a)|(b$). Not searching, every
  // end is anchored.
  absl::StatusOr<Re> Top(bool search) {
    Re alt{.kind = Re::kAlt};
    while (true) {
      const bool anchored_start = Take('^');
      Re body = Concat(0);
      if (!status_.ok()) return status_;
      const bool anchored_end = Take('$');
      Re a{.kind = Re::kConcat};
      if (!anchored_start && search) a.parts.push_back(AnyRun());
      a.parts.push_back(std::move(body));
      if (!anchored_end && search) a.parts.push_back(AnyRun());
      alt.parts.push_back(std::move(a));
      if (AtEnd()) return alt;
      if (!Take('|')) return Fail("an unmatched ')'");
    }
  }

 private:
  bool AtEnd() const { return pos_ >= s_.size(); }
  uint32_t Peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : UINT32_MAX; }
  bool Take(uint32_t c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  absl::Status Fail(absl::string_view what) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(what, " (at character ", pos_, ")"));
    return status_;
  }

  Re Alternation(int depth) {
    Re alt{.kind = Re::kAlt};
    do {
      alt.parts.push_back(Concat(depth));
    } while (status_.ok() && Take('|'));
    return alt;
  }

  Re Concat(int depth) {
    Re seq{.kind = Re::kConcat};
    while (status_.ok() && !AtEnd() && Peek() != '|' && Peek() != ')') {
      // '$' ends a top-level alternative; anywhere else it is refused below.
      if (depth == 0 && Peek() == '$' && (Peek(1) == '|' || Peek(1) == UINT32_MAX)) break;
      Re atom = Atom(depth);
      if (!status_.ok()) break;
      Quantified(atom);
      seq.parts.push_back(std::move(atom));
    }
    return seq;
  }

  // {n}, {n,} or {n,m} at the cursor: taken into min/max; false (nothing taken) when it is not one.
  bool Braces(uint32_t* min, uint32_t* max) {
    size_t i = pos_ + 1;
    auto number = [&](uint32_t* out) {
      const size_t from = i;
      uint64_t v = 0;
      while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') v = std::min<uint64_t>(v * 10 + (s_[i++] - '0'), UINT32_MAX - 1);
      *out = static_cast<uint32_t>(v);
      return i > from;
    };
    if (Peek() != '{' || !number(min)) return false;
    *max = *min;
    if (i < s_.size() && s_[i] == ',') {
      ++i;
      if (!number(max)) *max = PatternDfa::kUnbounded;
    }
    if (i >= s_.size() || s_[i] != '}') return false;
    pos_ = i + 1;
    return true;
  }

  void Quantified(Re& atom) {
    uint32_t min = 0, max = 0;
    if (Take('*')) {
      max = PatternDfa::kUnbounded;
    } else if (Take('+')) {
      min = 1;
      max = PatternDfa::kUnbounded;
    } else if (Take('?')) {
      max = 1;
    } else if (!Braces(&min, &max)) {
      return;
    }
    if (max != PatternDfa::kUnbounded && min > max) return (void)Failed("a {n,m} with n > m");
    if (min > kMaxRepeat || (max != PatternDfa::kUnbounded && max > kMaxRepeat)) {
      return (void)Failed(absl::StrCat("a repeat count over ", kMaxRepeat));
    }
    Take('?');  // lazy: the same strings
    uint32_t a = 0, b = 0;
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || (Peek() == '{' && Braces(&a, &b))) {
      return (void)Failed("a quantifier after a quantifier");
    }
    Re r{.kind = Re::kRepeat, .min = min, .max = max};
    r.parts.push_back(std::move(atom));
    atom = std::move(r);
  }

  Re Atom(int depth) {
    const uint32_t c = s_[pos_++];
    switch (c) {
      case '(': {
        if (depth >= kMaxGroupDepth) return Failed("groups nested too deep");
        if (Take('?')) {
          if (Take(':')) {
          } else if (Peek() == '<' && Peek(1) != '=' && Peek(1) != '!') {  // a named group
            while (!AtEnd() && Peek() != '>') ++pos_;
            if (!Take('>')) return Failed("an unclosed group name");
          } else {
            return Failed("lookaround is not supported");
          }
        }
        Re inner = Alternation(depth + 1);
        if (status_.ok() && !Take(')')) return Failed("an unclosed group");
        return inner;
      }
      case '[':
        return Class();
      case '.':
        return Set(kDot);
      case '\\':
        return Escape(false);
      case '^':
      case '$':
        return Failed("anchors ('^', '$') are supported only at the start and end");
      case '*':
      case '+':
      case '?':
        return Failed("nothing to repeat");
      case '{': {
        --pos_;
        uint32_t a = 0, b = 0;
        if (Braces(&a, &b)) return Failed("nothing to repeat");
        ++pos_;
        return Set({{c, c}});
      }
      default:
        return Set({{c, c}});
    }
  }

  Re Failed(absl::string_view what) {
    Fail(what).IgnoreError();  // kept in status_
    return Re{};
  }

  // After a backslash. In a class, \b is a backspace; \d and its kind are sets there too.
  Re Escape(bool in_class) {
    if (AtEnd()) return Failed("a pattern that ends in a backslash");
    const uint32_t c = s_[pos_++];
    switch (c) {
      case 'd': return Set(kDigits);
      case 'D': return Set(Complement(kDigits));
      case 'w': return Set(kWord);
      case 'W': return Set(Complement(Normalize(kWord)));
      case 's': return Set(kSpace);
      case 'S': return Set(Complement(kSpace));
      case 't': return Set({{'\t', '\t'}});
      case 'n': return Set({{'\n', '\n'}});
      case 'v': return Set({{'\v', '\v'}});
      case 'f': return Set({{'\f', '\f'}});
      case 'r': return Set({{'\r', '\r'}});
      case '0':
        if (Peek() >= '0' && Peek() <= '9') return Failed("an octal escape is not supported");
        return Set({{0, 0}});
      case 'b':
        if (in_class) return Set({{8, 8}});
        return Failed("\\b (a word boundary) is not supported");
      case 'x':
      case 'u': {
        const size_t digits = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (size_t i = 0; i < digits; ++i) {
          if (!IsHex(Peek())) return Failed(c == 'x' ? "\\x needs two hex digits" : "\\u needs four hex digits");
          v = v * 16 + HexValue(s_[pos_++]);
        }
        return Set({{v, v}});
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
          return Failed(absl::StrCat("the escape \\", std::string(1, static_cast<char>(c)), " is not supported"));
        }
        return Set({{c, c}});  // an escaped syntax character, or any other one as itself
    }
  }

  // After '['.
  Re Class() {
    const bool negated = Take('^');
    Ranges ranges;
    while (status_.ok()) {
      if (AtEnd()) return Failed("an unclosed '['");
      if (Take(']')) break;
      Re first = ClassAtom();
      if (!status_.ok()) break;
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != UINT32_MAX) {
        ++pos_;
        Re last = ClassAtom();
        if (!status_.ok()) break;
        if (first.set.size() != 1 || last.set.size() != 1 || first.set[0].first != first.set[0].second ||
            last.set[0].first != last.set[0].second) {
          return Failed("a range in a class between class escapes");
        }
        if (first.set[0].first > last.set[0].first) return Failed("a range out of order in a class");
        ranges.emplace_back(first.set[0].first, last.set[0].first);
        continue;
      }
      ranges.insert(ranges.end(), first.set.begin(), first.set.end());
    }
    ranges = Normalize(std::move(ranges));
    return Set(negated ? Complement(ranges) : ranges);
  }

  Re ClassAtom() {
    const uint32_t c = s_[pos_++];
    if (c == '\\') return Escape(true);
    return Set({{c, c}});
  }

  std::vector<uint32_t> s_;
  size_t pos_ = 0;
  absl::Status status_;
};

// Thompson's construction: states with code point ranges and empty moves.
struct Nfa {
  struct Edge {
    uint32_t lo, hi;
    int to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<std::vector<int>> empty;
  bool overflow = false;

  int Add() {
    if (edges.size() >= kMaxNfaStates) overflow = true;
    edges.emplace_back();
    empty.emplace_back();
    return static_cast<int>(edges.size()) - 1;
  }
  // The fragment's entry and exit.
  std::pair<int, int> Build(const Re& r) {
    if (overflow) return {0, 0};
    switch (r.kind) {
      case Re::kSet: {
        const int s = Add(), a = Add();
        for (const auto& [lo, hi] : r.set) edges[s].push_back({lo, hi, a});
        return {s, a};
      }
      case Re::kConcat: {
        const int s = Add();
        int at = s;
        for (const Re& part : r.parts) {
          const auto [ps, pa] = Build(part);
          if (overflow) return {0, 0};
          empty[at].push_back(ps);
          at = pa;
        }
        return {s, at};
      }
      case Re::kAlt: {
        const int s = Add(), a = Add();
        for (const Re& part : r.parts) {
          const auto [ps, pa] = Build(part);
          if (overflow) return {0, 0};
          empty[s].push_back(ps);
          empty[pa].push_back(a);
        }
        return {s, a};
      }
      case Re::kRepeat: {
        const int s = Add();
        int at = s;
        for (uint32_t i = 0; i < r.min && !overflow; ++i) {
          const auto [ps, pa] = Build(r.parts[0]);
          if (overflow) return {0, 0};
          empty[at].push_back(ps);
          at = pa;
        }
        const int a = Add();
        if (r.max == PatternDfa::kUnbounded) {
          const auto [ps, pa] = Build(r.parts[0]);
          if (overflow) return {0, 0};
          empty[at].push_back(ps);
          empty[pa].push_back(at);
          empty[at].push_back(a);
          return {s, a};
        }
        for (uint32_t i = r.min; i < r.max && !overflow; ++i) {
          const auto [ps, pa] = Build(r.parts[0]);
          if (overflow) return {0, 0};
          empty[at].push_back(a);
          empty[at].push_back(ps);
          at = pa;
        }
        empty[at].push_back(a);
        return {s, a};
      }
    }
    return {0, 0};
  }

  // The set and every state its empty moves reach, sorted; `work` counts the states visited.
  void Close(std::vector<int>& set, size_t* work) {
    if (mark.size() != edges.size()) mark.assign(edges.size(), 0);
    ++generation;
    for (const int s : set) mark[static_cast<size_t>(s)] = generation;
    for (size_t i = 0; i < set.size(); ++i) {
      for (const int t : empty[static_cast<size_t>(set[i])]) {
        if (mark[static_cast<size_t>(t)] != generation) {
          mark[static_cast<size_t>(t)] = generation;
          set.push_back(t);
        }
      }
    }
    *work += set.size();
    std::sort(set.begin(), set.end());
  }
  std::vector<uint32_t> mark;  // Close's visited states: those marked with the current generation
  uint32_t generation = 0;
};

bool DecodeUtf8(absl::string_view text, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    size_t n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > text.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    out->push_back(cp);
    i += n;
  }
  return true;
}

// A schema's patterns ran past the compile work they share (PatternDfa::Compile's budget).
absl::Status BudgetSpent() { return absl::InvalidArgumentError("the schema's patterns together take too much work to compile"); }

}  // namespace

class PatternCompiler {
 public:
  static absl::StatusOr<std::shared_ptr<const PatternDfa>> Compile(absl::string_view pattern, uint32_t min_chars,
                                                                   uint32_t max_chars, bool search, size_t* budget);
  // The automaton of states 0..n-1 (0 the start) over the classes `bounds` tells apart, `next(s, c)`
  // a state or SIZE_MAX, keeping only the live states: reachable from the start, and some whole
  // string reachable from them. `nothing`: the error when the start is not live.
  template <class Next, class Accepting>
  static absl::StatusOr<std::shared_ptr<const PatternDfa>> Live(size_t n, std::vector<uint32_t> bounds, Next next,
                                                                Accepting accepting, const char* nothing);
};

template <class Next, class Accepting>
absl::StatusOr<std::shared_ptr<const PatternDfa>> PatternCompiler::Live(size_t n, std::vector<uint32_t> bounds, Next next,
                                                                        Accepting accepting, const char* nothing) {
  const size_t classes = bounds.size() - 1;
  std::vector<uint8_t> reached(n, 0), whole(n, 0);
  std::vector<std::vector<uint32_t>> into(n);
  std::vector<size_t> stack = {0};
  reached[0] = 1;
  while (!stack.empty()) {
    const size_t s = stack.back();
    stack.pop_back();
    for (size_t c = 0; c < classes; ++c) {
      const size_t t = next(s, c);
      if (t == SIZE_MAX) continue;
      into[t].push_back(static_cast<uint32_t>(s));
      if (!reached[t]) {
        reached[t] = 1;
        stack.push_back(t);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (reached[s] && accepting(s)) {
      whole[s] = 1;
      stack.push_back(s);
    }
  }
  while (!stack.empty()) {
    const size_t s = stack.back();
    stack.pop_back();
    for (const uint32_t f : into[s]) {
      if (!whole[f]) {
        whole[f] = 1;
        stack.push_back(f);
      }
    }
  }
  if (!whole[0]) return absl::InvalidArgumentError(nothing);

  auto dfa = std::make_shared<PatternDfa>();
  std::vector<uint32_t> renumber(n, PatternDfa::kDead);
  uint32_t live = 0;
  for (size_t s = 0; s < n; ++s) {
    if (whole[s]) renumber[s] = live++;
  }
  dfa->bounds_ = std::move(bounds);
  dfa->next_.assign(size_t{live} * classes, PatternDfa::kDead);
  dfa->accepting_.assign(live, 0);
  for (size_t s = 0; s < n; ++s) {
    if (!whole[s]) continue;
    dfa->accepting_[renumber[s]] = accepting(s) ? 1 : 0;
    for (size_t c = 0; c < classes; ++c) {
      const size_t t = next(s, c);
      if (t != SIZE_MAX) dfa->next_[size_t{renumber[s]} * classes + c] = renumber[t];
    }
  }
  dfa->start_ = renumber[0];
  return std::shared_ptr<const PatternDfa>(std::move(dfa));
}

absl::StatusOr<std::shared_ptr<const PatternDfa>> PatternDfa::Compile(absl::string_view pattern, uint32_t min_chars,
                                                                      uint32_t max_chars, bool search, size_t* budget) {
  return PatternCompiler::Compile(pattern, min_chars, max_chars, search, budget);
}

absl::StatusOr<std::shared_ptr<const PatternDfa>> PatternCompiler::Compile(absl::string_view pattern, uint32_t min_chars,
                                                                           uint32_t max_chars, bool search, size_t* budget) {
  std::vector<uint32_t> text;
  if (!DecodeUtf8(pattern, &text)) return absl::InvalidArgumentError("the pattern is not UTF-8");
  absl::StatusOr<Re> re = Parser(std::move(text)).Top(search);
  if (!re.ok()) return re.status();
  Nfa nfa;
  const auto [entry, exit] = nfa.Build(*re);
  if (nfa.overflow) return absl::InvalidArgumentError("the pattern is too large (its repeats expand past 65,536 states)");

  // The character classes: code points no edge tells apart.
  std::vector<uint32_t> bounds = {0, kMaxCodePoint + 1};
  for (const auto& es : nfa.edges) {
    for (const Nfa::Edge& e : es) {
      bounds.push_back(e.lo);
      bounds.push_back(e.hi + 1);
    }
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const size_t classes = bounds.size() - 1;
  const auto class_of = [&](uint32_t cp) {
    return static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), cp) - bounds.begin()) - 1;
  };

  // Subset construction; transitions to the empty set are kDead.
  std::map<std::vector<int>, uint32_t> ids;
  std::vector<std::vector<int>> sets;
  std::vector<uint32_t> next;
  std::vector<uint8_t> accepting;
  std::vector<int> first = {entry};
  size_t work = nfa.edges.size();  // the NFA's states built, then those the subsets visit
  const size_t most = budget != nullptr ? std::min(kMaxWork, *budget) : kMaxWork;
  nfa.Close(first, &work);
  ids.emplace(first, 0);
  sets.push_back(first);
  const auto too_large = absl::InvalidArgumentError(
      absl::StrCat("the pattern is too large (over ", PatternDfa::kMaxStates, " states or ", PatternDfa::kMaxTransitions,
                   " transitions)"));
  for (size_t d = 0; d < sets.size(); ++d) {
    if (work > most && most < kMaxWork) {
      return BudgetSpent();
    }
    if (sets.size() > PatternDfa::kMaxStates || sets.size() * classes > PatternDfa::kMaxTransitions || work > kMaxWork) {
      return too_large;
    }
    std::vector<std::vector<int>> moves(classes);
    for (const int s : sets[d]) {
      for (const Nfa::Edge& e : nfa.edges[static_cast<size_t>(s)]) {
        for (size_t c = class_of(e.lo); c < classes && bounds[c] <= e.hi; ++c, ++work) moves[c].push_back(e.to);
      }
    }
    accepting.push_back(std::binary_search(sets[d].begin(), sets[d].end(), exit));
    for (size_t c = 0; c < classes; ++c) {
      if (moves[c].empty()) {
        next.push_back(PatternDfa::kDead);
        continue;
      }
      std::sort(moves[c].begin(), moves[c].end());
      moves[c].erase(std::unique(moves[c].begin(), moves[c].end()), moves[c].end());
      nfa.Close(moves[c], &work);
      const auto [it, added] = ids.emplace(moves[c], static_cast<uint32_t>(sets.size()));
      if (added) sets.push_back(moves[c]);
      next.push_back(it->second);
    }
  }

  // The lengths folded in: state (s, k) after k characters (k saturated at min_chars when there is no
  // maximum), whole when s is and min_chars <= k <= max_chars.
  const size_t counts = max_chars != PatternDfa::kUnbounded ? size_t{max_chars} + 1 : size_t{min_chars} + 1;
  const size_t n = sets.size() * counts;
  if (n > PatternDfa::kMaxStates || n * classes > PatternDfa::kMaxTransitions) {
    return absl::InvalidArgumentError(absl::StrCat("the pattern with these lengths is too large (", sets.size(), " states times ",
                                                   counts, " counts)"));
  }
  const auto product_next = [&](size_t state, size_t c) -> size_t {
    const size_t s = state / counts, k = state % counts;
    const uint32_t t = next[s * classes + c];
    if (t == PatternDfa::kDead) return SIZE_MAX;
    size_t k2 = k + 1;
    if (k2 >= counts) {
      if (max_chars != PatternDfa::kUnbounded) return SIZE_MAX;
      k2 = counts - 1;
    }
    return size_t{t} * counts + k2;
  };
  const auto product_accepting = [&](size_t state) { return accepting[state / counts] && state % counts >= min_chars; };

  work += n * classes;  // the length product's pass
  if (work > most && most < kMaxWork) return BudgetSpent();
  if (budget != nullptr) *budget -= std::min(*budget, work);
  return Live(n, std::move(bounds), product_next, product_accepting, "no string of the allowed lengths matches the pattern");
}

absl::StatusOr<std::shared_ptr<const PatternDfa>> PatternDfa::Intersect(const PatternDfa& a, const PatternDfa& b,
                                                                        size_t* budget) {
  // The classes both tell apart, and the pairs of states reachable from the starts.
  std::vector<uint32_t> bounds;
  std::set_union(a.bounds_.begin(), a.bounds_.end(), b.bounds_.begin(), b.bounds_.end(), std::back_inserter(bounds));
  const size_t classes = bounds.size() - 1;
  std::vector<std::pair<size_t, size_t>> of_class(classes);
  for (size_t c = 0; c < classes; ++c) of_class[c] = {a.Class(bounds[c]), b.Class(bounds[c])};
  absl::flat_hash_map<uint64_t, uint32_t> ids;
  std::vector<std::pair<uint32_t, uint32_t>> pairs = {{a.start_, b.start_}};
  ids[uint64_t{a.start_} << 32 | b.start_] = 0;
  std::vector<uint32_t> next;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (budget != nullptr && (i + 1) * classes > *budget) {
      return BudgetSpent();
    }
    if (pairs.size() > kMaxStates || (i + 1) * classes > kMaxTransitions) {
      return absl::InvalidArgumentError(absl::StrCat("the two expressions together are too large (over ", kMaxStates,
                                                     " states or ", kMaxTransitions, " transitions)"));
    }
    for (size_t c = 0; c < classes; ++c) {
      const uint32_t sa = a.Step(pairs[i].first, of_class[c].first), sb = b.Step(pairs[i].second, of_class[c].second);
      if (sa == kDead || sb == kDead) {
        next.push_back(kDead);
        continue;
      }
      const auto [it, added] = ids.try_emplace(uint64_t{sa} << 32 | sb, static_cast<uint32_t>(pairs.size()));
      if (added) pairs.emplace_back(sa, sb);
      next.push_back(it->second);
    }
  }
  if (budget != nullptr) *budget -= std::min(*budget, pairs.size() * classes);
  return PatternCompiler::Live(
      pairs.size(), std::move(bounds),
      [&](size_t s, size_t c) { return next[s * classes + c] == kDead ? SIZE_MAX : size_t{next[s * classes + c]}; },
      [&](size_t s) { return a.Accepting(pairs[s].first) && b.Accepting(pairs[s].second); },
      "no string matches both expressions");
}

size_t PatternDfa::Class(uint32_t cp) const {
  return static_cast<size_t>(std::upper_bound(bounds_.begin(), bounds_.end(), cp) - bounds_.begin()) - 1;
}

uint32_t PatternDfa::Next(uint32_t state, uint32_t cp) const {
  if (cp > kMaxCodePoint) return kDead;
  return next_[size_t{state} * (bounds_.size() - 1) + Class(cp)];
}

bool PatternDfa::AnyLive(uint32_t state, uint32_t lo, uint32_t hi) const {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return false;
  const size_t classes = bounds_.size() - 1;
  for (size_t c = Class(lo), last = Class(hi); c <= last; ++c) {
    if (next_[size_t{state} * classes + c] != kDead) return true;
  }
  return false;
}

bool PatternDfa::Feed(Cursor& at, uint8_t c) const {
  const auto step = [&](uint32_t cp) {
    const uint32_t next = Next(at.state, cp);
    if (next == kDead) return false;
    at.state = next;
    return true;
  };
  if (at.left > 0) {  // inside a multi-byte character
    if (c < at.lo || c > at.hi) return false;
    at.cp = (at.cp << 6) | (c & 0x3F);
    at.lo = 0x80;
    at.hi = 0xBF;
    if (--at.left == 0) {
      if (!step(at.cp)) return false;
      at.cp = 0;
      return true;
    }
    return AnyLive(at.state, at.cp << (6 * at.left), ((at.cp + 1) << (6 * at.left)) - 1);
  }
  if (c < 0x80) return step(c);
  // UTF-8's lead bytes (no overlong forms, no surrogates, <= U+10FFFF), the range of the byte after
  // each, and the code points they may begin.
  if (c >= 0xC2 && c <= 0xDF) {
    at.left = 1;
    at.cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    at.left = 2;
    at.cp = c & 0x0F;
    if (c == 0xE0) at.lo = 0xA0;
    if (c == 0xED) at.hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    at.left = 3;
    at.cp = c & 0x07;
    if (c == 0xF0) at.lo = 0x90;
    if (c == 0xF4) at.hi = 0x8F;
  } else {
    return false;
  }
  const uint32_t shift = 6 * at.left;
  const uint32_t lo = (at.cp << shift) + ((at.lo - 0x80u) << (shift - 6));
  const uint32_t hi = ((at.cp + 1) << shift) - 1 - ((0xBFu - at.hi) << (shift - 6));
  return AnyLive(at.state, lo, hi);
}

}  // namespace ag::runtime
