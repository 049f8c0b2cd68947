// GLM-4.1V's chat template against transformers' apply_chat_template
// (tiny-glm4v's golden.json and chat_golden.json, made by
// make_glm4v_fixture.py and make_chat_goldens.py): rendered text exactly, in
// both of vLLM's content formats, and the prompt ids the engine expands.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "tests/testing/golden.h"

namespace ag {
namespace {

std::string Dir() { return testing::TestDataDir() + "/tiny-glm4v"; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(Glm4vChat, TheCheckpointSaysWhichTemplate) {
  absl::StatusOr<glm::ChatTemplate> t = glm::DetectChatTemplate(Dir(), glm::ChatTemplate::kGlm4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, glm::ChatTemplate::kGlm4v);
  EXPECT_EQ(glm::DefaultContentFormat(*t), glm::ContentFormat::kOpenai);  // the template loops over parts: vLLM's pick
  t = glm::DetectChatTemplate(testing::TestDataDir() + "/tiny-glm4", glm::ChatTemplate::kGlm4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, glm::ChatTemplate::kGlm4);  // no template there: the family's

  const std::string tmp = ::testing::TempDir() + "/chat_template_test";
  std::filesystem::create_directories(tmp);
  {
    std::ofstream(tmp + "/tokenizer_config.json")
        << R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "[gMASK]<sop>{{ m }}<|assistant|>"}]})";
  }
  t = glm::DetectChatTemplate(tmp, glm::ChatTemplate::kGlm4v);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, glm::ChatTemplate::kGlm4);
  // GLM-4-0414's: its system messages in a loop of their own.
  { std::ofstream(tmp + "/chat_template.jinja") << "[gMASK]<sop>{%- for message in messages if message.role != 'system' %}<|assistant|>"; }
  t = glm::DetectChatTemplate(tmp, glm::ChatTemplate::kGlm4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, glm::ChatTemplate::kGlm4_0414);
  { std::ofstream(tmp + "/chat_template.jinja") << "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"; }
  t = glm::DetectChatTemplate(tmp, glm::ChatTemplate::kGlm4);
  EXPECT_EQ(t.status().message(), tmp + "/chat_template.jinja: a chat template this engine does not render (it "
                                        "renders GLM-4's and GLM-4.1V's)");
  std::filesystem::remove(tmp + "/chat_template.jinja");
  { std::ofstream(tmp + "/tokenizer_config.json") << R"({"chat_template": 3})"; }
  t = glm::DetectChatTemplate(tmp, glm::ChatTemplate::kGlm4);
  EXPECT_NE(t.status().message().find("tokenizer_config.json: field 'chat_template'"), std::string::npos) << t.status();
}

TEST(Glm4vChat, RendersWhatTransformersRenders) {
  glm::ChatOptions options;
  options.chat_template = glm::ChatTemplate::kGlm4v;
  int cases = 0;
  const nlohmann::json chat_golden = ReadJson(Dir() + "/chat_golden.json");
  for (const auto& c : chat_golden["cases"]) {
    absl::StatusOr<std::vector<glm::ChatMessage>> messages = glm::ParseChatMessages(c["messages"].dump());
    ASSERT_TRUE(messages.ok()) << messages.status();
    options.content_format = c["content_format"] == "string" ? glm::ContentFormat::kString : glm::ContentFormat::kOpenai;
    options.add_generation_prompt = c["add_generation_prompt"];
    absl::StatusOr<std::string> text = glm::RenderGlm4vChat(*messages, options);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["rendered"].get<std::string>()) << c["messages"].dump();
    ++cases;
  }
  EXPECT_EQ(cases, 7);
  // The fixture's cases, content as strings.
  const nlohmann::json golden = ReadJson(Dir() + "/golden.json");
  for (const auto& c : golden["cases"]) {
    absl::StatusOr<std::vector<glm::ChatMessage>> messages = glm::ParseChatMessages(c["messages"].dump());
    ASSERT_TRUE(messages.ok()) << messages.status();
    options.add_generation_prompt = true;
    absl::StatusOr<std::string> text = glm::RenderGlm4vChat(*messages, options);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["rendered"].get<std::string>());
  }
}

TEST(Glm4vChat, PromptIdsAreTheFixturesBeforeExpansion) {
  if (!std::filesystem::exists(Dir() + "/tokenizer.json")) GTEST_SKIP() << "tools/bootstrap makes tokenizer.json";
  absl::StatusOr<std::unique_ptr<glm::Tokenizer>> tokenizer = glm::Tokenizer::Load(Dir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  glm::ChatOptions options;
  options.chat_template = glm::ChatTemplate::kGlm4v;
  const nlohmann::json golden = ReadJson(Dir() + "/golden.json");
  int cases = 0;
  for (const auto& c : golden["cases"]) {
    absl::StatusOr<std::vector<glm::ChatMessage>> messages = glm::ParseChatMessages(c["messages"].dump());
    ASSERT_TRUE(messages.ok());
    absl::StatusOr<std::vector<int32_t>> ids = glm::EncodeChat(**tokenizer, *messages, options);
    ASSERT_TRUE(ids.ok()) << ids.status();
    std::vector<int32_t> want;  // one image token per image: the engine expands them
    const std::vector<int32_t> expanded = c["input_ids"].get<std::vector<int32_t>>();
    for (size_t k = 0; k < expanded.size(); ++k) {
      if (expanded[k] != 314 || k == 0 || expanded[k - 1] != 314) want.push_back(expanded[k]);
    }
    EXPECT_EQ(*ids, want) << c["title"];
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

TEST(Glm4vChat, WhatTheTemplateCannotRenderIsAnError) {
  glm::ChatOptions options;
  options.chat_template = glm::ChatTemplate::kGlm4v;
  auto render = [&](const char* json) {
    absl::StatusOr<std::vector<glm::ChatMessage>> messages = glm::ParseChatMessages(json);
    if (!messages.ok()) return std::string(messages.status().message());
    absl::StatusOr<std::string> text = glm::RenderGlm4vChat(*messages, options);
    return text.ok() ? std::string("ok") : std::string(text.status().message());
  };
  EXPECT_EQ(render(R"([{"role": "observation", "content": "x"}])"),
            "chat message 0 has role 'observation', which GLM-4.1V's template does not render (system, user, assistant)");
  EXPECT_EQ(render(R"([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}]}])"),
            "chat message 0 (system) has an image part, which the template does not render");
  EXPECT_EQ(render(R"([{"role": "user", "content": [{"type": "audio"}]}])"),
            "chat message 0 content[0] has type 'audio': the parts this engine takes are text, image_url and image");
  EXPECT_EQ(render(R"([{"role": "user", "content": [{"type": "text", "text": 3}]}])"),
            "chat message 0 content[0].text must be a string");
  options.content_format = glm::ContentFormat::kString;
  EXPECT_EQ(render(R"([{"role": "user", "content": [{"type": "text", "text": "<|begin_of_image|><|image|><|end_of_image|>"}]}])"),
            "ok");  // no image parts: the text is the text
  EXPECT_EQ(render(R"([{"role": "user", "content": [{"type": "text", "text": "<|begin_of_image|><|image|><|end_of_image|><|begin_of_image|><|image|><|end_of_image|>"}, {"type": "image"}]}])"),
            "chat message 0 names more images in its text (2) than it has image parts (1)");
  // The image parts and where they say they are.
  absl::StatusOr<std::vector<glm::ChatMessage>> m = glm::ParseChatMessages(
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "image", "image": "b.png"}, {"image": "c.png"}]}])");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(glm::CountImages(*m), 3);
  EXPECT_EQ((*m)[0].parts[0].text, "data:x");
  EXPECT_EQ((*m)[0].parts[2].text, "c.png");
}

}  // namespace
}  // namespace ag
