// A forced function call (OpenAI's tool_choice "required" or a named function) in GLM-4's form:
// one of the functions' names, a newline, then the arguments as one JSON document their
// `parameters` schema validates (models/glm/tools.h). Enforced token by token like a schema: a
// token may come next when all of its bytes continue such a call -- a token may cross from the
// name into the arguments ("\n{" is one of GLM-4's).
#ifndef AUTOGLM_RUNTIME_TOOL_CALL_GRAMMAR_H_
#define AUTOGLM_RUNTIME_TOOL_CALL_GRAMMAR_H_

#include <memory>
#include <string>
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
  bool Complete() const { return tool_ >= 0 && arguments_.Complete(); }
  int tool() const { return tool_; }  // the function chosen, or -1 while its name is being written
  const std::string& name() const { return name_; }
  const SchemaState& arguments() const { return arguments_; }

 private:
  const ToolCallGrammar* grammar_ = nullptr;
  int tool_ = -1;
  std::string name_;  // the bytes of the name written so far (while tool_ < 0)
  SchemaState arguments_;
};

class ToolCallGrammar : public std::enable_shared_from_this<ToolCallGrammar> {
 public:
  struct Function {
    std::string name;  // written as it is: OpenAI's names are [a-zA-Z0-9_-]{1,64}
    std::shared_ptr<JsonSchemaGrammar> arguments;
  };
  // The functions, each name non-empty, none twice, every byte of it and the newline a token of
  // the vocabulary's own; the arguments' grammars over the same vocabulary.
  static absl::StatusOr<std::shared_ptr<ToolCallGrammar>> Create(std::vector<Function> functions,
                                                                 std::shared_ptr<JsonVocabulary> vocabulary);
  ToolCallGrammar(std::vector<Function> functions, std::shared_ptr<JsonVocabulary> vocabulary)
      : functions_(std::move(functions)), vocabulary_(std::move(vocabulary)) {}

  // The tokens that may follow `state` (thread-safe). Within the arguments, the function's schema
  // grammar answers from its own masks.
  Mask Allowed(const ToolCallState& state);
  ToolCallState Start() const { return ToolCallState(this); }
  const std::vector<Function>& functions() const { return functions_; }
  std::unique_ptr<TokenConstraint> NewConstraint();

 private:
  std::vector<Function> functions_;
  std::shared_ptr<JsonVocabulary> vocabulary_;
  MaskCache name_masks_{JsonVocabulary::kMaxCachedMasks};  // by the name written so far
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_TOOL_CALL_GRAMMAR_H_
