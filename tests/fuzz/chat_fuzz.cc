// Fuzz target: chat-template input (a JSON list of messages) and raw prompt
// text, with a synthetic vocabulary. Any text must round-trip through Encode
// and Decode, special tokens allowed or not, and encode to the same ids with
// the tokenizer's remembered runs (kept across inputs) as without them.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/testing/vocab.h"

namespace {

std::unique_ptr<ag::glm::Tokenizer> LoadSynthetic() {
  const std::string path = (ag::fuzz::ScratchDir() / "synthetic.model").string();
  ag::testing::WriteTiktoken(path, ag::testing::SyntheticRanks());
  return std::move(*ag::glm::Tokenizer::LoadTiktoken(path));
}

// Remembering runs (the default), with a small budget so that runs are evicted too.
const ag::glm::Tokenizer& Synthetic() {
  static const std::unique_ptr<ag::glm::Tokenizer> tokenizer = [] {
    std::unique_ptr<ag::glm::Tokenizer> t = LoadSynthetic();
    t->KeepEncodedRuns(64 << 10);
    return t;
  }();
  return *tokenizer;
}

const ag::glm::Tokenizer& RemembersNothing() {
  static const std::unique_ptr<ag::glm::Tokenizer> tokenizer = [] {
    std::unique_ptr<ag::glm::Tokenizer> t = LoadSynthetic();
    t->KeepEncodedRuns(0);
    return t;
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ag::glm::Tokenizer& tokenizer = Synthetic();
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<ag::glm::ChatMessage>> messages = ag::glm::ParseChatMessages(text);
  if (messages.ok()) {
    absl::StatusOr<std::vector<int32_t>> ids = ag::glm::EncodeChat(tokenizer, *messages);
    if (ids.ok() && !tokenizer.Decode(*ids).ok()) __builtin_trap();
    // GLM-4.1V's template in both content formats: the rendered text is the ids' text.
    for (const ag::glm::ContentFormat format : {ag::glm::ContentFormat::kString, ag::glm::ContentFormat::kOpenai}) {
      ag::glm::ChatOptions options;
      options.chat_template = ag::glm::ChatTemplate::kGlm4v;
      options.content_format = format;
      absl::StatusOr<std::string> rendered = ag::glm::RenderGlm4vChat(*messages, options);
      absl::StatusOr<std::vector<int32_t>> v = ag::glm::EncodeChat(tokenizer, *messages, options);
      if (rendered.ok() != v.ok()) __builtin_trap();
      if (!v.ok()) continue;
      absl::StatusOr<std::string> back = tokenizer.Decode(*v);
      if (!back.ok() || *back != *rendered) __builtin_trap();
    }
  }
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tokenizer.Encode(text, special);
    absl::StatusOr<std::string> back = tokenizer.Decode(ids);
    if (!back.ok() || *back != text) __builtin_trap();
    if (ids != RemembersNothing().Encode(text, special)) __builtin_trap();
  }
  return 0;
}
