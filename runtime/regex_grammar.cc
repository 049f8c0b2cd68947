#include "runtime/regex_grammar.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ag::runtime {

bool RegexState::Feed(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

std::string RegexState::Key() const {
  std::string key(sizeof(uint32_t) * 2 + 3, '\0');
  std::memcpy(key.data(), &at_.state, sizeof(uint32_t));
  std::memcpy(key.data() + sizeof(uint32_t), &at_.cp, sizeof(uint32_t));
  key[8] = static_cast<char>(at_.left);
  key[9] = static_cast<char>(at_.lo);
  key[10] = static_cast<char>(at_.hi);
  return key;
}

absl::StatusOr<std::shared_ptr<RegexGrammar>> RegexGrammar::Create(absl::string_view regex,
                                                                   std::shared_ptr<JsonVocabulary> vocabulary) {
  for (int b = 0; b < 256; ++b) {  // any byte may be the one a character needs: the writer must never be stuck
    if (!vocabulary->HasByteToken(static_cast<uint8_t>(b))) {
      return absl::FailedPreconditionError(
          absl::StrCat("a regular expression needs a token for every byte; this tokenizer has none for byte ", b));
    }
  }
  absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa =
      PatternDfa::Compile(regex, 0, PatternDfa::kUnbounded, /*search=*/false);
  if (!dfa.ok()) return dfa.status();
  return std::make_shared<RegexGrammar>(*std::move(dfa), std::move(vocabulary));
}

Mask RegexGrammar::Allowed(const RegexState& state) {
  return *masks_.Get(state.Key(), [&]() -> absl::StatusOr<Mask> {
    return std::make_shared<const std::vector<uint64_t>>(Compute(state));
  });
}

std::vector<uint64_t> RegexGrammar::Compute(const RegexState& state) {
  const std::optional<uint32_t> at = state.AtBoundary();
  if (!at) return vocabulary_->WalkEveryToken(state);
  // At a character boundary the text tokens come from the expression's table; the rest (quotes,
  // backslashes, control characters, broken UTF-8: all text here) are fed.
  std::vector<uint64_t> mask(static_cast<size_t>(vocabulary_->vocab()) / 64 + 1, 0);
  text_tokens_.Get(0, *dfa_, *vocabulary_)->Set(*at, mask);
  vocabulary_->WalkQuoted(state, mask);
  vocabulary_->WalkNonText(state, mask);
  return mask;
}

std::unique_ptr<TokenConstraint> RegexGrammar::NewConstraint() {
  return std::make_unique<AutomatonConstraint<RegexGrammar, RegexState>>(shared_from_this(), *vocabulary_, Start());
}

}  // namespace ag::runtime
