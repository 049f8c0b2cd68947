#include "serve/openai.h"

#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ag::serve {
namespace {

TEST(OpenAi, ParsesAChatRequest) {
  const ChatResult r = ParseChatRequest(R"({"model": "glm", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]}],
      "stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": -1, "seed": 3, "n": 2, "stop": ["\n\n", "END"], "logprobs": true, "top_logprobs": 2,
      "frequency_penalty": 0, "user": "u1", "min_p": 0.05})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const ChatRequest& c = std::get<ChatRequest>(r);
  EXPECT_EQ(c.options.model, "glm");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].role, "user");
  ASSERT_TRUE(c.messages[1].has_parts);  // the template decides how parts join (vLLM's content formats)
  ASSERT_EQ(c.messages[1].parts.size(), 2u);
  EXPECT_EQ(c.messages[1].parts[1].text, "lo");
  EXPECT_TRUE(c.options.stream);
  EXPECT_TRUE(c.options.include_usage);
  EXPECT_EQ(c.options.max_tokens, 7);
  EXPECT_EQ(c.options.sampling.temperature, 0.0f);
  EXPECT_EQ(c.options.sampling.top_p, 0.5f);
  EXPECT_EQ(c.options.sampling.top_k, 0);
  EXPECT_EQ(c.options.sampling.min_p, 0.05f);
  EXPECT_EQ(c.options.sampling.seed, 3u);
  EXPECT_EQ(c.options.n, 2);
  EXPECT_EQ(c.options.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(c.logprobs);
  EXPECT_EQ(c.top_logprobs, 2);
}

TEST(OpenAi, ParsesCompletionPromptsAsTextOrIds) {
  CompletionResult r = ParseCompletionRequest(R"({"model": "glm", "prompt": "hi", "echo": true, "logprobs": 2})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<std::string>(std::get<CompletionRequest>(r).prompt), "hi");
  EXPECT_EQ(std::get<CompletionRequest>(r).options.max_tokens, 16) << "OpenAI's default";
  EXPECT_EQ(std::get<CompletionRequest>(r).options.sampling.temperature, 1.0f) << "OpenAI's default";
  r = ParseCompletionRequest(R"({"model": "glm", "prompt": [5, 17, 42], "return_token_ids": true, "ignore_eos": true})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<std::vector<int32_t>>(std::get<CompletionRequest>(r).prompt), (std::vector<int32_t>{5, 17, 42}));
  EXPECT_TRUE(std::get<CompletionRequest>(r).return_token_ids);
  EXPECT_TRUE(std::get<CompletionRequest>(r).options.ignore_eos);
}

// OpenAI's logit_bias: token ids as decimal keys, biases in [-100, 100], on both endpoints; an
// empty object or null is no bias; more ids than the limit are refused.
TEST(OpenAi, ParsesLogitBias) {
  const ChatResult r = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"151329": -100, "0": 2.5, "42": 100}})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const std::vector<runtime::SamplingParams::Bias>& bias = std::get<ChatRequest>(r).options.sampling.logit_bias;
  ASSERT_EQ(bias.size(), 3u);
  std::map<int32_t, float> got;
  for (const auto& b : bias) got[b.id] = b.bias;
  EXPECT_EQ(got, (std::map<int32_t, float>{{0, 2.5f}, {42, 100.0f}, {151329, -100.0f}}));
  EXPECT_TRUE(std::get<ChatRequest>(r).options.sampling.HasPenalty());
  for (const char* none : {R"({})", "null"}) {
    const CompletionResult c = ParseCompletionRequest(absl::StrCat(R"({"model": "m", "prompt": "x", "logit_bias": )", none, "}"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(c)) << none;
    EXPECT_TRUE(std::get<CompletionRequest>(c).options.sampling.logit_bias.empty()) << none;
  }
  const CompletionResult c = ParseCompletionRequest(R"({"model": "m", "prompt": "x", "logit_bias": {"5": -1}})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(c));
  ASSERT_EQ(std::get<CompletionRequest>(c).options.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(std::get<CompletionRequest>(c).options.sampling.logit_bias[0].id, 5);
  RequestLimits limits;
  limits.max_logit_bias = 2;
  const CompletionResult many =
      ParseCompletionRequest(R"({"model": "m", "prompt": "x", "logit_bias": {"1": 1, "2": 1, "3": 1}})", limits);
  ASSERT_TRUE(std::holds_alternative<ApiError>(many));
  EXPECT_EQ(std::get<ApiError>(many).param, "logit_bias");
}

// vLLM's stop extensions (extra_body): stop ids, stop text and special tokens shown, min_tokens.
TEST(OpenAi, ParsesVllmStopExtensions) {
  const CompletionResult r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "stop_token_ids": [151329, 151336, 151338], "include_stop_str_in_output": true,
          "skip_special_tokens": false, "spaces_between_special_tokens": true, "min_tokens": 4})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const GenerationOptions& o = std::get<CompletionRequest>(r).options;
  EXPECT_EQ(o.stop_token_ids, (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_TRUE(o.include_stop_str_in_output);
  EXPECT_FALSE(o.skip_special_tokens);
  EXPECT_EQ(o.min_tokens, 4);
  const ChatResult plain = ParseChatRequest(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(plain));
  const GenerationOptions& d = std::get<ChatRequest>(plain).options;
  EXPECT_TRUE(d.stop_token_ids.empty());
  EXPECT_FALSE(d.include_stop_str_in_output);
  EXPECT_TRUE(d.skip_special_tokens) << "vLLM's default";
  EXPECT_EQ(d.min_tokens, 0);
  for (const char* bad : {R"("stop_token_ids": 5)", R"("stop_token_ids": [-1])", R"("stop_token_ids": [1.5])",
                          R"("stop_token_ids": [2147483648])", R"("skip_special_tokens": "no")",
                          R"("include_stop_str_in_output": 1)", R"("spaces_between_special_tokens": false)",
                          R"("min_tokens": -1)", R"("min_tokens": 17)", R"("min_tokens": 5, "max_tokens": 4)"}) {
    const CompletionResult e = ParseCompletionRequest(absl::StrCat(R"({"model": "m", "prompt": "x", )", bad, "}"));
    ASSERT_TRUE(std::holds_alternative<ApiError>(e)) << bad;
    const std::string& param = std::get<ApiError>(e).param;
    EXPECT_TRUE(absl::StrContains(bad, absl::StrCat("\"", param, "\""))) << bad << " named " << param;
  }
  RequestLimits limits;
  limits.max_stop_token_ids = 2;
  EXPECT_TRUE(std::holds_alternative<ApiError>(
      ParseChatRequest(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop_token_ids": [1, 2, 3]})",
                       limits)));
}

// OpenAI's JSON mode and JSON schemas on both endpoints (the schema's text keeps the client's order
// of properties); other shapes, and either beside what would keep the answer going past its
// document (ignore_eos, min_tokens), are 400s naming the field.
TEST(OpenAi, ParsesResponseFormat) {
  const ChatResult chat = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(chat)) << std::get<ApiError>(chat).message;
  EXPECT_TRUE(std::get<ChatRequest>(chat).options.json_object);
  const CompletionResult text =
      ParseCompletionRequest(R"({"model": "m", "prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(text));
  EXPECT_FALSE(std::get<CompletionRequest>(text).options.json_object);
  const CompletionResult json =
      ParseCompletionRequest(R"({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(json));
  EXPECT_TRUE(std::get<CompletionRequest>(json).options.json_object);
  const ChatResult schema = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
          "json_schema": {"name": "step", "strict": true, "schema": {"type": "object",
          "properties": {"thought": {"type": "string"}, "action": {"type": "string"}}}}}})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(schema)) << std::get<ApiError>(schema).message;
  EXPECT_FALSE(std::get<ChatRequest>(schema).options.json_object);
  EXPECT_EQ(std::get<ChatRequest>(schema).options.json_schema,
            R"({"type":"object","properties":{"thought":{"type":"string"},"action":{"type":"string"}}})");
  const CompletionResult any =
      ParseCompletionRequest(R"({"model": "m", "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}})");
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(any));
  EXPECT_EQ(std::get<CompletionRequest>(any).options.json_schema, "true");
  EXPECT_FALSE(std::get<CompletionRequest>(text).options.json_schema);
  // vLLM's guided_json (an object or its text), guided_choice and structured_outputs.
  for (const char* guided : {R"("guided_json": {"type": "object", "properties": {"z": {}, "a": {}}})",
                             R"("guided_json": "{\"type\": \"object\", \"properties\": {\"z\": {}, \"a\": {}}}")",
                             R"("structured_outputs": {"json": {"type": "object", "properties": {"z": {}, "a": {}}}})"}) {
    const CompletionResult g = ParseCompletionRequest(absl::StrCat(R"({"model": "m", "prompt": "x", )", guided, "}"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(g)) << guided << std::get<ApiError>(g).message;
    EXPECT_EQ(std::get<CompletionRequest>(g).options.json_schema, R"({"type":"object","properties":{"z":{},"a":{}}})") << guided;
  }
  for (const char* guided : {R"("guided_choice": ["yes", "no"])", R"("structured_outputs": {"choice": ["yes", "no"]})"}) {
    const ChatResult g = ParseChatRequest(
        absl::StrCat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )", guided, "}"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(g)) << guided << std::get<ApiError>(g).message;
    EXPECT_EQ(std::get<ChatRequest>(g).options.choice, (std::vector<std::string>{"yes", "no"})) << guided;
  }
  for (const char* guided : {R"("guided_regex": "\\d{3}")", R"("structured_outputs": {"regex": "\\d{3}"})"}) {
    const CompletionResult g = ParseCompletionRequest(absl::StrCat(R"({"model": "m", "prompt": "x", )", guided, "}"));
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(g)) << guided << std::get<ApiError>(g).message;
    EXPECT_EQ(std::get<CompletionRequest>(g).options.regex, R"(\d{3})") << guided;
    EXPECT_TRUE(std::get<CompletionRequest>(g).options.structured()) << guided;
  }
  const struct {
    const char* fields;
    const char* param;
  } bad[] = {
      {R"("response_format": {"type": "json_schema"})", "response_format"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "extra": 1}})",
       "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": "yes"}})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "{}"}})",
       "response_format.json_schema.schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}}, "ignore_eos": true)", "ignore_eos"},
      {R"("response_format": {"type": "json_object", "json_schema": {"name": "x"}})", "response_format"},
      {R"("guided_regex": "")", "guided_regex"},
      {R"("guided_regex": 3)", "guided_regex"},
      {R"("guided_regex": "a", "guided_choice": ["a"])", "guided_regex"},
      {R"("guided_regex": "a", "ignore_eos": true)", "ignore_eos"},
      {R"("guided_grammar": "root ::= x")", "guided_grammar"},
      {R"("guided_json": "{nope")", "guided_json"},
      {R"("guided_json": 3)", "guided_json"},
      {R"("guided_choice": [])", "guided_choice"},
      {R"("guided_choice": ["a", ""])", "guided_choice"},
      {R"("guided_choice": "a")", "guided_choice"},
      {R"("guided_choice": ["a"], "guided_json": {})", "guided_choice"},
      {R"("guided_choice": ["a"], "response_format": {"type": "json_object"})", "guided_choice"},
      {R"("structured_outputs": {"grammar": "a"})", "structured_outputs"},
      {R"("structured_outputs": {"regex": 1})", "structured_outputs"},
      {R"("structured_outputs": {"json": {}, "choice": ["a"]})", "structured_outputs"},
      {R"("structured_outputs": {"choice": ["a"]}, "guided_json": {})", "structured_outputs"},
      {R"("guided_choice": ["a"], "min_tokens": 1)", "min_tokens"},
      {R"("response_format": "json_object")", "response_format"},
      {R"("response_format": {"type": "yaml"})", "response_format"},
      {R"("response_format": {})", "response_format"},
      {R"("response_format": {"type": "json_object", "schema": {}})", "response_format"},
      {R"("response_format": {"type": "json_object"}, "ignore_eos": true)", "ignore_eos"},
      {R"("response_format": {"type": "json_object"}, "min_tokens": 2)", "min_tokens"},
  };
  for (const auto& c : bad) {
    const CompletionResult e = ParseCompletionRequest(absl::StrCat(R"({"model": "m", "prompt": "x", )", c.fields, "}"));
    ASSERT_TRUE(std::holds_alternative<ApiError>(e)) << c.fields;
    EXPECT_EQ(std::get<ApiError>(e).param, c.param) << c.fields;
    EXPECT_EQ(std::get<ApiError>(e).http_status, 400) << c.fields;
  }
}

// Each bad body is a 400 naming the field at fault.
// OpenAI's tools: the functions in the client's key order, tool_choice, calls and results in the history.
TEST(OpenAi, ParsesTools) {
  const char* tools = R"("tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"zip": {"type": "string"}, "city": {"type": "string"}}, "required": ["city"]},
          "description": "Weather", "strict": true}},
      {"type": "function", "function": {"name": "now"}}])";
  const std::string history = R"("messages": [{"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "21 C"}]}])";
  ChatResult r = ParseChatRequest(absl::StrCat("{\"model\": \"m\", ", history, ", ", tools, ", \"parallel_tool_calls\": false}"));
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const ChatRequest& c = std::get<ChatRequest>(r);
  EXPECT_EQ(c.tool_choice, ToolChoice::kAuto);
  ASSERT_EQ(c.tools.size(), 2u);
  EXPECT_EQ(c.tools[0].name, "get_weather");
  EXPECT_EQ(c.tools[0].object.dump(), R"({"name":"get_weather","parameters":{"type":"object","properties":{"zip":{"type":"string"},)"
                                      R"("city":{"type":"string"}},"required":["city"]},"description":"Weather","strict":true})")
      << "the client's order";
  EXPECT_EQ(ToolParametersSchema(c.tools[0]),
            R"({"type":"object","properties":{"zip":{"type":"string"},"city":{"type":"string"}},"required":["city"]})");
  EXPECT_EQ(ToolParametersSchema(c.tools[1]), R"({"type":"object","additionalProperties":false})");
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_TRUE(c.messages[1].content.empty());
  ASSERT_EQ(c.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(c.messages[1].tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(c.messages[2].role, "observation");
  // tool_choice: none shows no tools; a named function is the only one shown.
  r = ParseChatRequest(absl::StrCat("{\"model\": \"m\", ", history, ", ", tools, R"(, "tool_choice": "none"})"));
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  EXPECT_EQ(std::get<ChatRequest>(r).tool_choice, ToolChoice::kNone);
  EXPECT_TRUE(std::get<ChatRequest>(r).tools.empty());
  r = ParseChatRequest(absl::StrCat("{\"model\": \"m\", ", history, ", ", tools, R"(, "tool_choice": {"type": "function", "function": {"name": "now"}}})"));
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  EXPECT_EQ(std::get<ChatRequest>(r).tool_choice, ToolChoice::kFunction);
  ASSERT_EQ(std::get<ChatRequest>(r).tools.size(), 1u);
  EXPECT_EQ(std::get<ChatRequest>(r).tools[0].name, "now");
  r = ParseChatRequest(absl::StrCat("{\"model\": \"m\", ", history, ", ", tools, R"(, "tool_choice": "required"})"));
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  EXPECT_EQ(std::get<ChatRequest>(r).tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(std::get<ChatRequest>(r).tools.size(), 2u);
  // An empty list is no tools.
  r = ParseChatRequest(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [], "tool_choice": "none"})");
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  EXPECT_EQ(std::get<ChatRequest>(r).tool_choice, ToolChoice::kNone);

  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const struct {
    std::string body;
    const char* param;
  } bad[] = {
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": {}})"), "tools"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "code_interpreter"}]})"), "tools[0]"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "function", "function": {"name": "a b"}}]})"), "tools[0].function.name"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "function", "function": {}}]})"), "tools[0].function.name"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "function", "function": {"name": ")", std::string(65, 'a'), R"("}}]})"),
       "tools[0].function.name"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "function", "function": {"name": "a", "parameters": "{}"}}]})"),
       "tools[0].function.parameters"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "function", "function": {"name": "a", "returns": 1}}]})"),
       "tools[0].function.returns"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tools": [{"type": "function", "function": {"name": "a"}},
                                              {"type": "function", "function": {"name": "a"}}]})"), "tools[1].function.name"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "tool_choice": "auto"})"), "tool_choice"},
      {absl::StrCat("{\"model\": \"m\", ", user, ", ", tools, R"(, "tool_choice": "any"})"), "tool_choice"},
      {absl::StrCat("{\"model\": \"m\", ", user, ", ", tools, R"(, "tool_choice": {"type": "function", "function": {"name": "later"}}})"), "tool_choice"},
      {absl::StrCat("{\"model\": \"m\", ", user, ", ", tools, R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})"), "tool_choice"},
      {absl::StrCat("{\"model\": \"m\", ", user, ", ", tools, R"(, "tool_choice": "required", "ignore_eos": true})"), "tool_choice"},
      {absl::StrCat("{\"model\": \"m\", ", user, R"(, "parallel_tool_calls": 1})"), "parallel_tool_calls"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls"},
      {R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}}]}]})",
       "messages[0].tool_calls"},
      {R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]})", "messages[0].tool_calls"},
      {R"({"model": "m", "messages": [{"role": "assistant", "content": null}]})", "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "tool", "tool_call_id": 5, "content": "x"}]})", "messages[0].tool_call_id"},
      {R"({"model": "m", "messages": [{"role": "function", "content": "x"}]})", "messages[0].role"},
  };
  for (const auto& c : bad) {
    const ChatResult e = ParseChatRequest(c.body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(e)) << c.body;
    EXPECT_EQ(std::get<ApiError>(e).param, c.param) << c.body << " -> " << std::get<ApiError>(e).message;
  }
  // /tokenize renders a chat with its tools too.
  const std::variant<TokenizeRequest, ApiError> t =
      ParseTokenizeRequest(absl::StrCat("{\"model\": \"m\", ", user, ", ", tools, "}"));
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t)) << std::get<ApiError>(t).message;
  EXPECT_EQ(std::get<TokenizeRequest>(t).tools.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<ApiError>(ParseTokenizeRequest(absl::StrCat("{\"prompt\": \"x\", ", tools, "}"))));
  RequestLimits few;
  few.max_tools = 1;
  const ChatResult e = ParseChatRequest(absl::StrCat("{\"model\": \"m\", ", user, ", ", tools, "}"), few);
  ASSERT_TRUE(std::holds_alternative<ApiError>(e));
  EXPECT_EQ(std::get<ApiError>(e).param, "tools");
}

TEST(OpenAi, BadBodiesNameTheField) {
  const struct {
    const char* body;
    const char* param;
  } chat_cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}]})", "model"},
      {R"({"model": "m"})", "messages"},
      {R"({"model": "m", "messages": []})", "messages"},
      {R"({"model": "m", "messages": [{"role": "root", "content": "x"}]})", "messages[0].role"},
      {R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1})", "max_tokens"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1e400})", ""},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 18446744073709551615})",
       "max_tokens"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "min_p": 1.5})", "min_p"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "min_p": "0.1"})", "min_p"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 1000})", "n"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})", "stop"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "top_logprobs"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {}})", "stream_options"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "frequency_penalty": 2.5})",
       "frequency_penalty"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temprature": 1})", "temprature"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": [1]})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"-1": 5}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"+1": 5}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"x": 5}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"": 5}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"2147483648": 5}})",
       "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": 100.5}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": "5"}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": null}})", "logit_bias"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logit_bias": {"7": 1, "007": 2}})",
       "logit_bias"},
      {R"([1, 2])", ""},
      {"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}", ""},
  };
  for (const auto& c : chat_cases) {
    const ChatResult r = ParseChatRequest(c.body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << c.body;
    const ApiError& e = std::get<ApiError>(r);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    const nlohmann::json j = nlohmann::json::parse(e.ToJson());
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"].is_null(), e.param.empty());
    EXPECT_TRUE(j["error"]["code"].is_null());
  }
  for (const char* body : {R"({"model": "m"})", R"({"model": "m", "prompt": []})", R"({"model": "m", "prompt": [-1]})",
                           R"({"model": "m", "prompt": [4294967296]})", R"({"model": "m", "prompt": ["a", "b"]})",
                           R"({"model": "m", "prompt": "x", "logprobs": 6})",
                           R"({"model": "m", "prompt": "x", "suffix": "y"})"}) {
    const CompletionResult r = ParseCompletionRequest(body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    EXPECT_FALSE(std::get<ApiError>(r).param.empty()) << body;
  }
}

}  // namespace
}  // namespace ag::serve
