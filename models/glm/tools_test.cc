#include "models/glm/tools.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "models/glm/chat.h"
#include "tests/testing/vocab.h"

namespace ag::glm {
namespace {

using nlohmann::ordered_json;

// Python's json.dumps(value, indent=4, ensure_ascii=False) of the same values (CPython 3.11).
TEST(PythonJsonDumps, WritesWhatPythonWrites) {
  const ordered_json function = ordered_json::parse(
      "{\"name\":\"get_weather\",\"description\":\"天气 \\\"quoted\\\" \\\\ back\\nline\\ttab\\u0001\x7f\","
      "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
      "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1.5e-05}},\"required\":[\"city\"]},\"strict\":true}");
  EXPECT_EQ(PythonJsonDumps(function, 4),
            "{\n    \"name\": \"get_weather\",\n    \"description\": \"天气 \\\"quoted\\\" \\\\ back\\nline\\ttab\\u0001\x7f\",\n"
            "    \"parameters\": {\n        \"type\": \"object\",\n        \"properties\": {\n            \"city\": {\n"
            "                \"type\": \"string\"\n            },\n            \"n\": {\n                \"type\": \"integer\",\n"
            "                \"minimum\": 0,\n                \"maximum\": 1.5e-05\n            }\n        },\n"
            "        \"required\": [\n            \"city\"\n        ]\n    },\n    \"strict\": true\n}");
  const ordered_json values = ordered_json::parse(
      "[1, 2.0, -0.0, 1e16, 1.5e300, 123456789.125, 0.0001, 0.00001, 3.14, [], {}, null, false, 18446744073709551615, -5, "
      "1e-7, 100.0, 12345678901234567.0]");
  EXPECT_EQ(PythonJsonDumps(values, 4),
            "[\n    1,\n    2.0,\n    -0.0,\n    1e+16,\n    1.5e+300,\n    123456789.125,\n    0.0001,\n    1e-05,\n"
            "    3.14,\n    [],\n    {},\n    null,\n    false,\n    18446744073709551615,\n    -5,\n    1e-07,\n    100.0,\n"
            "    1.2345678901234568e+16\n]");
  EXPECT_EQ(PythonJsonDumps(ordered_json::parse(R"({"b": 1, "a": [true]})"), 2), "{\n  \"b\": 1,\n  \"a\": [\n    true\n  ]\n}")
      << "the client's key order, not sorted";
}

TEST(ParseToolCall, ReadsANameLineAndJsonArguments) {
  const std::vector<std::string> names = {"get_weather", "get"};
  std::optional<ToolCall> call = ParseToolCall("get_weather\n{\"city\": \"Paris\"}", names);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(call->arguments, "{\"city\": \"Paris\"}");
  call = ParseToolCall("get\n  {}\n ", names);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->name, "get");
  EXPECT_EQ(call->arguments, "{}");
  for (const char* reply : {"\nget\n{}", "\nThe weather is fine.", "get_weather", "get_weather {\"city\": 1}",
                            "get_weathe\n{}", "get\n[1]", "get\n{\"a\": 1", "get\n{} extra", ""}) {
    EXPECT_FALSE(ParseToolCall(reply, names).has_value()) << reply;
  }
  for (const char* maybe : {"", "g", "get_w", "get", "get_weather\n{\"ci", "  get", "get_weather ", " get_weather \t"}) {
    EXPECT_TRUE(MayBecomeToolCall(maybe, names)) << maybe;
  }
  // Whitespace after a name's start ends it: "get_w " can no longer become "get_weather".
  for (const char* not_a_call : {"\n", "\nget", "x", "get_weather2", "geta\n", "get_w ", "get_weather x"}) {
    EXPECT_FALSE(MayBecomeToolCall(not_a_call, names)) << not_a_call;
  }
}

// The chat with tools, a call and its result, as glm-4-9b-chat's template renders it when the
// functions ride on a system message at the front (its OpenAI server's way): checked against
// jinja2 rendering that template as transformers does (trim_blocks, lstrip_blocks, its tojson).
TEST(ToolsChat, RendersAsGlm4ChatsTemplate) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("autoglm_tools_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  testing::WriteTiktoken((dir / "tokenizer.model").string(), testing::SyntheticRanks());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<ToolFunction> tools = {
      {"get_weather", ordered_json::parse(R"({"name": "get_weather", "description": "Current weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})")},
      {"now", ordered_json::parse(R"({"name": "now"})")}};
  std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Weather in Paris?"}, {"assistant", ""},
                                       {"observation", "{\"temp\": 21}"}, {"user", ""}};
  messages[2].tool_calls = {{"get_weather", "{\"city\": \"Paris\"}"}};
  absl::StatusOr<std::vector<int32_t>> ids = EncodeChat(**t, messages, ChatOptions{}, tools);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*(*t)->Decode(*ids),
            "[gMASK]<sop><|system|>\n你是一个名为 ChatGLM 的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 模型开发的，"
            "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具\n## get_weather\n\n{\n    \"name\": "
            "\"get_weather\",\n    \"description\": \"Current weather\",\n    \"parameters\": {\n        \"type\": \"object\",\n"
            "        \"properties\": {\n            \"city\": {\n                \"type\": \"string\"\n            }\n"
            "        },\n        \"required\": [\n            \"city\"\n        ]\n    }\n}\n在调用上述函数时，请使用 Json "
            "格式表示调用的参数。\n## now\n\n{\n    \"name\": \"now\"\n}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
            "<|system|>\nBe brief.<|user|>\nWeather in Paris?<|assistant|>get_weather\n{\"city\": \"Paris\"}"
            "<|observation|>\n{\"temp\": 21}<|assistant|>");
  // Without tools, the same turns; GLM-4.1V's template renders none of it.
  ids = EncodeChat(**t, {{"user", "hi"}}, ChatOptions{}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*(*t)->Decode(*ids), "[gMASK]<sop><|user|>\nhi<|assistant|>");
  ChatOptions glm4v;
  glm4v.chat_template = ChatTemplate::kGlm4v;
  EXPECT_FALSE(EncodeChat(**t, {{"user", "hi"}}, glm4v, tools).ok());
  EXPECT_FALSE(EncodeChat(**t, messages, glm4v, {}).ok()) << "a call GLM-4.1V's template cannot show";
  messages[1].tool_calls = {{"now", "{}"}};  // a user message with calls
  EXPECT_FALSE(EncodeChat(**t, messages, ChatOptions{}, tools).ok());

  // GLM-4-0414's template (the tool part of GLM-Z1-0414's, verbatim): its own wording, the system
  // turns first, an empty turn rendered; jinja2 again.
  ChatOptions glm4_0414;
  glm4_0414.chat_template = ChatTemplate::kGlm4_0414;
  const std::vector<ToolFunction> two = {
      {"get_weather", ordered_json::parse(R"({"name": "get_weather", "parameters": {"type": "object"}})")},
      {"now", ordered_json::parse(R"({"name": "now"})")}};
  messages = {{"user", "Weather?"}, {"system", "Be brief."}, {"assistant", ""}, {"observation", "21"}, {"user", ""}};
  messages[2].tool_calls = {{"get_weather", "{}"}};
  ids = EncodeChat(**t, messages, glm4_0414, two);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*(*t)->Decode(*ids),
            "[gMASK]<sop><|system|>\n你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
            "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具\n## get_weather\n\n{\n    \"name\": "
            "\"get_weather\",\n    \"parameters\": {\n        \"type\": \"object\"\n    }\n}\n在调用上述函数时，请使用 Json "
            "格式表示调用的参数。\n## now\n\n{\n    \"name\": \"now\"\n}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
            "<|system|>\nBe brief.<|user|>\nWeather?<|assistant|>get_weather\n{}<|observation|>\n21<|user|>\n<|assistant|>");
}

}  // namespace
}  // namespace ag::glm
