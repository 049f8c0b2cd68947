// The OpenAI API's request bodies, parsed and validated completely before
// anything runs: POST /v1/chat/completions and POST /v1/completions. A bad
// body is an ApiError shaped like OpenAI's ({"error": {message, type, param,
// code}}) with the HTTP status to answer with, naming the field at fault.
// The HTTP server (issue 9) and its fuzz target build on this.
#ifndef AUTOGLM_SERVE_OPENAI_H_
#define AUTOGLM_SERVE_OPENAI_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/glm/chat.h"
#include "runtime/sampler.h"

namespace ag::serve {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the field at fault, or empty
  std::string code;   // empty, or a machine-readable code
  // {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
  std::string ToJson() const;
};

// JSON text of a response: bytes a client sent that are not UTF-8 (echoed
// prompts, token pieces) become U+FFFD instead of an exception.
std::string JsonText(const nlohmann::json& j);

// Limits on what one request may ask for.
struct RequestLimits {
  int64_t max_tokens = 1 << 20;    // a completion's length
  int max_choices = 16;            // n
  int max_stop_strings = 4;        // as OpenAI
  int max_top_logprobs = 20;       // as OpenAI
  size_t max_logit_bias = 1024;     // biased ids (each goes down with every step's row)
  size_t max_stop_token_ids = 64;
  size_t max_prompt_ids = 1 << 20;  // a prompt given as ids
  size_t max_tools = 128;           // functions a request offers, as OpenAI
};

// What both endpoints share.
struct GenerationOptions {
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<int64_t> max_tokens;
  runtime::SamplingParams sampling;  // temperature 1 by default, as OpenAI
  std::vector<std::string> stop;
  int n = 1;
  bool ignore_eos = false;  // vLLM's extension
  // vLLM's stop extensions: ids that end a choice (their text not shown), stop strings, stop ids and
  // end-of-sequence text kept in the answer, special tokens shown, and a least length before any
  // of them may end it.
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int64_t min_tokens = 0;
  // OpenAI's JSON mode (response_format {"type": "json_object"}): the answer is one JSON object.
  bool json_object = false;
  // response_format {"type": "json_schema"}: the schema's text, its objects' properties in the
  // client's order; the answer is one document it validates.
  std::optional<std::string> json_schema;
  // vLLM's guided_choice (or structured_outputs.choice): the answer is exactly one of these strings.
  std::vector<std::string> choice;
  // vLLM's guided_regex (or structured_outputs.regex): the whole answer matches this expression.
  std::optional<std::string> regex;
  bool structured() const { return json_object || json_schema || !choice.empty() || regex; }
  // Where the structured output came from ("response_format", "guided_json", ...): errors name it.
  std::string structured_param;
};

// OpenAI's tool_choice: no call (the tools are not shown to the model), a call or a reply as the
// model chooses, some call, or a call to the one function named.
enum class ToolChoice { kNone, kAuto, kRequired, kFunction };
// Whether the answer must be a call (a grammar then enforces it).
inline bool ForcesACall(ToolChoice choice) { return choice == ToolChoice::kRequired || choice == ToolChoice::kFunction; }

struct ChatRequest {
  GenerationOptions options;
  std::vector<glm::ChatMessage> messages;  // role "tool" is read as GLM's "observation"
  bool logprobs = false;
  int top_logprobs = 0;
  // The functions the prompt lists (models/glm/tools.h): all of `tools`, only the one tool_choice
  // names, or none for "none". Each one's object is in the client's key order.
  std::vector<glm::ToolFunction> tools;
  ToolChoice tool_choice = ToolChoice::kNone;
};

// The JSON Schema of a function's arguments, as text in the client's order: its `parameters`, or,
// without them, an object with no properties (OpenAI: no parameters).
std::string ToolParametersSchema(const glm::ToolFunction& function);
// Whether the function asks for its arguments to follow its schema exactly (OpenAI's "strict": true).
bool IsStrict(const glm::ToolFunction& function);

struct CompletionRequest {
  GenerationOptions options;
  std::variant<std::string, std::vector<int32_t>> prompt;  // text, or token ids
  bool echo = false;
  std::optional<int> logprobs;       // 0-5: this many alternatives per token
  bool return_token_ids = false;     // vLLM's extension
};

// JSON nesting deeper than any valid request needs. Bodies are refused before
// parsing past it: copying or printing a deeply nested value recurses, and
// 60,000 levels overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// The body as a JSON object: a 400 ApiError if it is not valid JSON (or not
// UTF-8), nested deeper than kMaxJsonDepth, or not an object.
std::variant<nlohmann::json, ApiError> ParseJsonObject(std::string_view body);

// POST /tokenize: {"prompt": text} or {"messages": [...], "tools"?: [...]}; POST /detokenize:
// {"tokens": [ids]}.
struct TokenizeRequest {
  std::optional<std::string> prompt;       // set, or
  std::vector<glm::ChatMessage> messages;  // the chat to render,
  std::vector<glm::ToolFunction> tools;    // with these functions shown (as a chat's tool_choice "auto")
};
struct DetokenizeRequest {
  std::vector<int32_t> tokens;
};
std::variant<TokenizeRequest, ApiError> ParseTokenizeRequest(std::string_view body, const RequestLimits& limits = {});
// `vocab_size` bounds the ids.
std::variant<DetokenizeRequest, ApiError> ParseDetokenizeRequest(std::string_view body, int64_t vocab_size);

using ChatResult = std::variant<ChatRequest, ApiError>;
using CompletionResult = std::variant<CompletionRequest, ApiError>;

ChatResult ParseChatRequest(std::string_view body, const RequestLimits& limits = {});
CompletionResult ParseCompletionRequest(std::string_view body, const RequestLimits& limits = {});

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_OPENAI_H_
