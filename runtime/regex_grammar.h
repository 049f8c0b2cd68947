// vLLM's guided_regex (and structured_outputs {"regex": ...}): the whole answer is a text the
// regular expression matches from its first character to its last (runtime/json_pattern.h's
// subset, anchored at both ends), enforced token by token like JSON mode: a token may come next
// when all of its bytes continue such a text, and the sequence may end where the text is whole.
#ifndef AUTOGLM_RUNTIME_REGEX_GRAMMAR_H_
#define AUTOGLM_RUNTIME_REGEX_GRAMMAR_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/json_constraint.h"
#include "runtime/json_pattern.h"
#include "runtime/pattern_text_tokens.h"

namespace ag::runtime {

// Where a byte stream is in the expression's DFA. Small and copied freely.
class RegexState {
 public:
  RegexState() = default;  // for arrays of states; Feed fails until assigned
  explicit RegexState(const PatternDfa* dfa) : dfa_(dfa) { at_.state = dfa->start(); }
  bool Feed(uint8_t c) { return dfa_ != nullptr && dfa_->Feed(at_, c); }
  bool Feed(absl::string_view bytes);
  // The text matches whole: the sequence may end here (and may go on, where the expression allows).
  bool Complete() const { return dfa_ != nullptr && at_.left == 0 && dfa_->Accepting(at_.state); }
  // Everything that decides what may follow, as bytes (the mask cache's key).
  std::string Key() const;
  // The DFA's state at a character boundary; empty inside a character.
  std::optional<uint32_t> AtBoundary() const {
    if (dfa_ == nullptr || at_.left != 0) return std::nullopt;
    return at_.state;
  }

 private:
  const PatternDfa* dfa_ = nullptr;
  PatternDfa::Cursor at_;
};

// An expression compiled over a vocabulary, with the masks of the states met so far. Thread-safe.
class RegexGrammar : public std::enable_shared_from_this<RegexGrammar> {
 public:
  // An expression the subset does not take, or that matches nothing, is an InvalidArgument naming why.
  static absl::StatusOr<std::shared_ptr<RegexGrammar>> Create(absl::string_view regex,
                                                              std::shared_ptr<JsonVocabulary> vocabulary);
  Mask Allowed(const RegexState& state);
  // A state's mask computed afresh (what Allowed caches).
  std::vector<uint64_t> Compute(const RegexState& state);
  RegexState Start() const { return RegexState(dfa_.get()); }
  std::unique_ptr<TokenConstraint> NewConstraint();

  RegexGrammar(std::shared_ptr<const PatternDfa> dfa, std::shared_ptr<JsonVocabulary> vocabulary)
      : dfa_(std::move(dfa)), vocabulary_(std::move(vocabulary)) {}

 private:
  std::shared_ptr<const PatternDfa> dfa_;
  std::shared_ptr<JsonVocabulary> vocabulary_;
  MaskCache masks_{JsonVocabulary::kMaxCachedMasks};
  PatternTextTokenTables text_tokens_{1};
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_REGEX_GRAMMAR_H_
