#include "runtime/tool_call_grammar.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ag::runtime {

bool ToolCallState::Feed(uint8_t c) {
  if (grammar_ == nullptr) return false;
  if (free_) return true;
  if (tool_ >= 0) return arguments_.Feed(c);
  if (FeedName(c)) return true;
  if (!grammar_->optional()) return false;
  free_ = true;  // a reply, not a call
  name_.clear();
  return true;
}

// The name's bytes, then its newline; false where the line stops being a call's. Optional calls
// take whitespace around the name, as glm::ParseToolCall trims the line.
bool ToolCallState::FeedName(uint8_t c) {
  const std::vector<ToolCallGrammar::Function>& functions = grammar_->functions();
  const auto named = [&] {
    return std::find_if(functions.begin(), functions.end(), [&](const auto& f) { return f.name == name_; });
  };
  if (c == '\n') {
    const auto f = named();
    if (f == functions.end()) return false;
    tool_ = static_cast<int>(f - functions.begin());
    arguments_ = f->arguments->Start();
    name_.clear();
    return true;
  }
  if (grammar_->optional() && absl::ascii_isspace(c)) {  // before the name, or after a whole one
    if (name_.empty()) return true;
    spaced_ = true;
    return named() != functions.end();
  }
  if (spaced_) return false;
  name_ += static_cast<char>(c);
  for (const ToolCallGrammar::Function& f : functions) {
    if (f.name.starts_with(name_)) return true;
  }
  return false;
}

bool ToolCallState::Feed(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<ToolCallGrammar>> ToolCallGrammar::Create(std::vector<Function> functions,
                                                                         std::shared_ptr<JsonVocabulary> vocabulary,
                                                                         Call call, std::shared_ptr<MaskCache> name_masks) {
  if (functions.empty()) return absl::InvalidArgumentError("a tool call needs at least one function");
  if (!vocabulary->HasByteToken('\n')) {
    return absl::FailedPreconditionError("the tokenizer has no token for the newline a tool call needs");
  }
  absl::flat_hash_set<std::string> seen;
  for (const Function& f : functions) {
    if (f.name.empty() || !seen.insert(f.name).second || f.arguments == nullptr ||
        &f.arguments->vocabulary() != vocabulary.get()) {
      return absl::InvalidArgumentError(
          absl::StrCat("function '", f.name, "' is unnamed, named twice, or has no arguments' grammar over this vocabulary"));
    }
    for (const char c : f.name) {
      if (c == '\n' || !vocabulary->HasByteToken(static_cast<uint8_t>(c))) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the tokenizer has no token for byte 0x%02X, which function '%s' needs", static_cast<uint8_t>(c), f.name));
      }
    }
  }
  if (name_masks == nullptr) name_masks = std::make_shared<MaskCache>(JsonVocabulary::kMaxCachedMasks);
  return std::make_shared<ToolCallGrammar>(std::move(functions), std::move(vocabulary), call, std::move(name_masks));
}

std::string ToolCallGrammar::NameMasksKey(Call call, const std::vector<std::pair<std::string, std::string>>& names_and_schemas) {
  std::string key(1, call == Call::kForced ? 'f' : 'o');
  for (const auto& [name, schema] : names_and_schemas) absl::StrAppend(&key, name.size(), ":", name, schema.size(), ":", schema);
  return key;
}

Mask ToolCallGrammar::Allowed(const ToolCallState& state) {
  if (state.tool() >= 0) return functions_[static_cast<size_t>(state.tool())].arguments->Allowed(state.arguments());
  // While the name is written every token is walked in full (a long one may reach into the
  // arguments), so a name's prefix alone decides the mask; a released state's is every token
  // (a newline: no name's key).
  return *name_masks_->Get(state.Released() ? "\n" : state.NameKey(), [&]() -> absl::StatusOr<Mask> {
    return std::make_shared<const std::vector<uint64_t>>(vocabulary_->Walk(state));
  });
}

std::unique_ptr<TokenConstraint> ToolCallGrammar::NewConstraint() {
  return std::make_unique<AutomatonConstraint<ToolCallGrammar, ToolCallState>>(shared_from_this(), *vocabulary_, Start());
}

}  // namespace ag::runtime
