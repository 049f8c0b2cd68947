// JSON Schema's "pattern" on a string: an ECMA-262 regular expression compiled to a DFA over code
// points, which SchemaState steps a character at a time (runtime/json_schema.h). The keyword
// searches -- "a" takes any string with an "a" in it -- unless anchored, as the specification says.
//
// Taken: any character but the syntax ones (or escaped), '.', classes [...] and [^...] with ranges,
// \d \D \w \W \s \S inside and outside them, \t \n \v \f \r \0 \xHH \uHHHH, groups (...), (?:...),
// (?<name>...), alternation, the quantifiers *, +, ?, {n}, {n,}, {n,m} (their lazy forms alike: they
// take the same strings), '^' at the start of a top-level alternative and '$' at its end. Refused,
// naming what: lookaround, backreferences, \b \B \c \p, anchors anywhere else, a pattern that
// matches no string (within the string's lengths), and one whose DFA would pass kMaxStates.
#ifndef AUTOGLM_RUNTIME_JSON_PATTERN_H_
#define AUTOGLM_RUNTIME_JSON_PATTERN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ag::runtime {

class PatternDfa {
 public:
  static constexpr uint32_t kDead = UINT32_MAX;
  static constexpr uint32_t kUnbounded = UINT32_MAX;
  static constexpr size_t kMaxStates = 4096;       // of the pattern's DFA, and of it times the lengths
  static constexpr size_t kMaxTransitions = 1 << 19;  // states x character classes (2 MB)

  // `min_chars`..`max_chars` (kUnbounded: none): the string's minLength and maxLength, folded into
  // the states (a state is the pattern's and the count's), so that from every state some string of
  // those lengths that the pattern takes is still reachable: a writer is never stuck.
  // `search` false: the whole text must match (vLLM's guided_regex), as if the pattern were anchored.
  // `budget` (optional): the work a schema's patterns may still take together (NFA states built and
  // visited, product states times classes); the compile takes its own from it, and fails naming
  // the schema when it would run out -- a schema of thousands of costly patterns is refused in
  // bounded time, not compiled for a minute.
  static absl::StatusOr<std::shared_ptr<const PatternDfa>> Compile(absl::string_view pattern, uint32_t min_chars = 0,
                                                                   uint32_t max_chars = kUnbounded, bool search = true,
                                                                   size_t* budget = nullptr);

  // The strings both take (a schema's pattern beside an enforced format): the product of the two,
  // its dead states removed. An error when it would pass kMaxStates, or no string is in both.
  static absl::StatusOr<std::shared_ptr<const PatternDfa>> Intersect(const PatternDfa& a, const PatternDfa& b,
                                                                     size_t* budget = nullptr);

  // Where a UTF-8 text is in the DFA: its state, and the character being written (its bits so far,
  // the continuation bytes owed, the next one's range).
  struct Cursor {
    uint32_t state = 0;
    uint32_t cp = 0;
    uint8_t left = 0, lo = 0x80, hi = 0xBF;
  };
  // One byte of UTF-8 text (no JSON escaping here): false when no whole text continues so. A
  // character's first bytes are taken only where some character they begin leads to a live state.
  bool Feed(Cursor& at, uint8_t byte) const;

  uint32_t start() const { return start_; }
  // The state after code point `cp`, or kDead when no whole string follows.
  uint32_t Next(uint32_t state, uint32_t cp) const;
  // Whether some code point in [lo, hi] leads to a live state (the first bytes of a UTF-8 character).
  bool AnyLive(uint32_t state, uint32_t lo, uint32_t hi) const;
  // The string may close here.
  bool Accepting(uint32_t state) const { return accepting_[state] != 0; }
  size_t states() const { return accepting_.size(); }
  size_t transitions() const { return next_.size(); }
  // The code points the pattern tells apart: class i is [bounds[i], bounds[i + 1]), Class(cp) its index
  // (cp <= U+10FFFF), Step the state after any code point of the class (kDead: no whole string follows).
  size_t classes() const { return bounds_.size() - 1; }
  size_t Class(uint32_t cp) const;
  uint32_t Step(uint32_t state, size_t cls) const { return next_[size_t{state} * classes() + cls]; }

 private:
  friend class PatternCompiler;

  std::vector<uint32_t> bounds_;  // character class i: the code points [bounds_[i], bounds_[i + 1])
  std::vector<uint32_t> next_;    // [state * classes + class]: a live state or kDead
  std::vector<uint8_t> accepting_;
  uint32_t start_ = 0;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_JSON_PATTERN_H_
