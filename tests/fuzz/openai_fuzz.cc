// Fuzz target: OpenAI request bodies for every endpoint that parses one (chat
// and text completions, tokenize, detokenize). A body is a request or an
// OpenAI-shaped error whose JSON must itself parse. Each input is also tried
// nested deep inside each endpoint's fields (its length picks the depth, up
// to ~65,000 levels), so the depth bound is reached without huge inputs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace {

void CheckError(const ag::serve::ApiError& e) {
  const nlohmann::json j = nlohmann::json::parse(e.ToJson(), nullptr, false);
  if (j.is_discarded() || !j.contains("error") || e.http_status < 400 || e.http_status > 599) __builtin_trap();
}

template <typename Result>
void Check(const Result& r) {
  if (const auto* e = std::get_if<ag::serve::ApiError>(&r)) CheckError(*e);
}

void ParseEverywhere(std::string_view body) {
  const ag::serve::ChatResult chat = ag::serve::ParseChatRequest(body);
  Check(chat);
  if (const auto* req = std::get_if<ag::serve::ChatRequest>(&chat)) {  // what the prompt and a grammar take of the tools
    for (const ag::glm::ToolFunction& f : req->tools) {
      if (ag::glm::PythonJsonDumps(f.object, 4).empty() || ag::serve::ToolParametersSchema(f).empty()) __builtin_trap();
    }
  }
  Check(ag::serve::ParseCompletionRequest(body));
  Check(ag::serve::ParseTokenizeRequest(body));
  Check(ag::serve::ParseDetokenizeRequest(body, 300));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  ParseEverywhere(body);
  const size_t depth = 60 + size * 16 % 65536;
  for (const char* field : {"stop", "messages", "prompt", "tokens", "stream_options", "logit_bias", "stop_token_ids",
                            "response_format", "tools", "tool_choice"}) {
    const std::string nested = std::string(R"({"model": "m", ")") + field + "\": " + std::string(depth, '[') +
                               std::string(body) + std::string(depth, ']') + "}";
    ParseEverywhere(nested);
  }
  return 0;
}
