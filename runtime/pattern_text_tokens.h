// A pattern's masks inside its text without feeding every token. At a character boundary of a
// string with a pattern (or of a guided_regex answer) nearly every token is a text token
// (JsonVocabulary::text_tokens: GLM-4 ~146,700 of 151,329), and feeding each byte by byte through
// the state cost ~15 ms a state. A text token's fate from a DFA state depends only on the classes of
// its characters (PatternDfa::Class; classes whose transitions agree in every state merged) and the
// bytes of a last character it leaves unfinished: the vocabulary's text tokens fall into a few
// hundred to a few thousand such groups for a typical pattern, and a state's mask walks each group
// once, then sets the bits of the groups that live.
#ifndef AUTOGLM_RUNTIME_PATTERN_TEXT_TOKENS_H_
#define AUTOGLM_RUNTIME_PATTERN_TEXT_TOKENS_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/json_constraint.h"
#include "runtime/json_pattern.h"

namespace ag::runtime {

class PatternTextTokens {
 public:
  // The vocabulary's text tokens grouped for `dfa` (which must outlive the table).
  static std::unique_ptr<const PatternTextTokens> Build(const PatternDfa& dfa, const JsonVocabulary& vocabulary);

  // Sets the bits of the text tokens whose characters the DFA takes from `state` (a character
  // boundary), as PatternDfa::Feed would byte by byte.
  void Set(uint32_t state, std::vector<uint64_t>& mask) const;
  size_t groups() const { return group_ids_.size() - 1; }

 private:
  explicit PatternTextTokens(const PatternDfa& dfa) : dfa_(dfa) {}

  const PatternDfa& dfa_;
  std::vector<uint32_t> classes_;       // group g's whole characters, as classes:
  std::vector<uint32_t> group_classes_{0};  //   classes_[group_classes_[g], group_classes_[g + 1])
  std::vector<uint32_t> tails_;         // group g's unfinished last character: its bytes, low first (0: none)
  std::vector<int32_t> ids_;            // the tokens, by group: ids_[group_ids_[g], group_ids_[g + 1])
  std::vector<uint32_t> group_ids_{0};
};

// A grammar's tables, one a pattern, built when a mask first needs one. A table holds every text
// token's id (~0.6 MB at GLM-4's vocabulary): past kMaxTables a grammar's further patterns get none
// and their masks feed every token, as before. Thread-safe.
class PatternTextTokenTables {
 public:
  static constexpr size_t kMaxTables = 8;
  explicit PatternTextTokenTables(size_t patterns) : tables_(patterns) {}
  const PatternTextTokens* Get(size_t pattern, const PatternDfa& dfa, const JsonVocabulary& vocabulary);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<const PatternTextTokens>> tables_;
  size_t built_ = 0;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_PATTERN_TEXT_TOKENS_H_
