// A function call in GLM-4's form: one of the functions' names, a newline, then the arguments as
// one JSON document their `parameters` schema validates (models/glm/tools.h). Enforced token by
// token like a schema: a token may come next when all of its bytes continue such a call -- a token
// may cross from the name into the arguments ("\n{" is one of GLM-4's).
//
// Forced (OpenAI's tool_choice "required" or a named function), the reply is the call, its name
// written exactly. Optional (tool_choice "auto"), the reply is a call or anything else, told apart
// as GLM-4's parser tells them (glm::ParseToolCall): a first line that is a function's name, give
// or take whitespace, makes it a call, whose arguments are then enforced; a first line that can no
// longer be one frees the reply for good (ToolCallState::Released: the engine drops the
// constraint, so a plain reply costs a step or two of sampling on the host).
#ifndef AUTOGLM_RUNTIME_TOOL_CALL_GRAMMAR_H_
#define AUTOGLM_RUNTIME_TOOL_CALL_GRAMMAR_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"

namespace ag::runtime {

class ToolCallGrammar;

// Where a byte stream is in a call: the name so far, then (once its newline came) the arguments.
class ToolCallState {
 public:
  ToolCallState() = default;
  explicit ToolCallState(const ToolCallGrammar* grammar) : grammar_(grammar) {}
  bool Feed(uint8_t c);
  bool Feed(absl::string_view bytes);
  bool Complete() const { return free_ || (tool_ >= 0 && arguments_.Complete()); }
  // An optional call's reply is not one: any byte may follow, and the reply may end anywhere.
  bool Released() const { return free_; }
  int tool() const { return tool_; }  // the function chosen, or -1 while its name is being written
  // Everything that decides what may follow while the name is written (the name masks' key).
  std::string NameKey() const { return spaced_ ? name_ + ' ' : name_; }
  const SchemaState& arguments() const { return arguments_; }

 private:
  bool FeedName(uint8_t c);

  const ToolCallGrammar* grammar_ = nullptr;
  int tool_ = -1;
  bool free_ = false;    // optional: the first line can no longer be a name
  bool spaced_ = false;  // optional: whitespace followed a whole name (only more, or the newline, may come)
  std::string name_;     // the name's bytes written so far (while tool_ < 0)
  SchemaState arguments_;
};

class ToolCallGrammar : public std::enable_shared_from_this<ToolCallGrammar> {
 public:
  struct Function {
    std::string name;  // written as it is: OpenAI's names are [a-zA-Z0-9_-]{1,64}
    std::shared_ptr<JsonSchemaGrammar> arguments;
  };
  enum class Call { kForced, kOptional };
  // The functions, each name non-empty, none twice, every byte of it and the newline a token of
  // the vocabulary's own; the arguments' grammars over the same vocabulary. `name_masks`: where the
  // name states' masks are kept, shared by every grammar of the same call, names and arguments'
  // schemas (NameMasksKey; a client sends the same tools with every request: its name states are
  // walked once, not once a request); null: the grammar's own.
  static absl::StatusOr<std::shared_ptr<ToolCallGrammar>> Create(std::vector<Function> functions,
                                                                 std::shared_ptr<JsonVocabulary> vocabulary,
                                                                 Call call = Call::kForced,
                                                                 std::shared_ptr<MaskCache> name_masks = nullptr);
  // What the name masks depend on: the call, and each function's name and arguments' schema text.
  static std::string NameMasksKey(Call call, const std::vector<std::pair<std::string, std::string>>& names_and_schemas);
  ToolCallGrammar(std::vector<Function> functions, std::shared_ptr<JsonVocabulary> vocabulary, Call call,
                  std::shared_ptr<MaskCache> name_masks)
      : functions_(std::move(functions)), vocabulary_(std::move(vocabulary)), call_(call), name_masks_(std::move(name_masks)) {}

  // The tokens that may follow `state` (thread-safe). Within the arguments, the function's schema
  // grammar answers from its own masks.
  Mask Allowed(const ToolCallState& state);
  ToolCallState Start() const { return ToolCallState(this); }
  const std::vector<Function>& functions() const { return functions_; }
  bool optional() const { return call_ == Call::kOptional; }
  std::unique_ptr<TokenConstraint> NewConstraint();

 private:
  std::vector<Function> functions_;
  std::shared_ptr<JsonVocabulary> vocabulary_;
  Call call_;
  std::shared_ptr<MaskCache> name_masks_;  // by NameKey, and a released state's
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_TOOL_CALL_GRAMMAR_H_
