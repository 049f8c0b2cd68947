// GLM-4's function calling, as glm-4-9b-chat was trained on it and its own OpenAI server speaks it.
//
// The functions a model may call are one system turn at the front of the chat: a fixed preamble,
// then for each function `## name`, the function object as Python's json.dumps(indent=4,
// ensure_ascii=False) writes it (the client's key order kept), and a line asking for JSON
// arguments -- what the checkpoint's template renders for a message carrying `tools`. The model
// calls one by writing, right after `<|assistant|>`, the function's name, a newline and the
// arguments as JSON, then `<|observation|>` (an end-of-sequence id); a plain reply starts with the
// newline instead. A call the client sends back is the same turn; the result is an
// `<|observation|>` turn.
#ifndef AUTOGLM_MODELS_GLM_TOOLS_H_
#define AUTOGLM_MODELS_GLM_TOOLS_H_

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"

namespace ag::glm {

// One function a request offers (OpenAI's tools[i].function).
struct ToolFunction {
  std::string name;
  nlohmann::ordered_json object;  // the whole function object, keys in the client's order
};

// A call, as the model writes one and as a client sends it back (tool_calls[i].function).
struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text
};

// json.dumps(value, indent=indent, ensure_ascii=False) as Python writes it: ", " and ": " become
// ",\n" and ": " with the indentation, floats as Python's repr, only the escapes Python makes.
std::string PythonJsonDumps(const nlohmann::ordered_json& value, int indent);

// The wording of the tool turn: glm-4-9b-chat's, or the GLM-4-0414 templates' (the same turn,
// its preamble naming the company: "基于智谱 AI 公司训练的").
enum class ToolsWording { kGlm4Chat, kGlm4_0414 };

// The text of the system turn that lists `tools` (what follows `<|system|>`).
std::string ToolsSystemText(const std::vector<ToolFunction>& tools, ToolsWording wording = ToolsWording::kGlm4Chat);

// The call `text` (a reply, the end-of-sequence token not in it) makes, or nullopt when it is not
// one: its first line is one of `names` exactly and the rest, trimmed of whitespace, is one JSON
// object (what GLM-4's server takes as a call; anything else is the reply's content).
std::optional<ToolCall> ParseToolCall(absl::string_view text, const std::vector<std::string>& names);

// Whether `text`, a reply still being written, may yet turn out to be a call to one of `names`
// (a stream holds its text back while it may).
bool MayBecomeToolCall(absl::string_view text, const std::vector<std::string>& names);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_TOOLS_H_
