// Fuzz target: OpenAI request bodies (chat and completions). A body is a
// request or an OpenAI-shaped error whose JSON must itself parse.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace {

void CheckError(const ag::serve::ApiError& e) {
  const nlohmann::json j = nlohmann::json::parse(e.ToJson(), nullptr, false);
  if (j.is_discarded() || !j.contains("error") || e.http_status < 400 || e.http_status > 599) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const ag::serve::ChatResult chat = ag::serve::ParseChatRequest(body);
  if (const auto* e = std::get_if<ag::serve::ApiError>(&chat)) CheckError(*e);
  const ag::serve::CompletionResult completion = ag::serve::ParseCompletionRequest(body);
  if (const auto* e = std::get_if<ag::serve::ApiError>(&completion)) CheckError(*e);
  return 0;
}
