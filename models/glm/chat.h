// GLM-4's chat template and streaming text output.
//
// glm-4-9b-chat renders `[gMASK]<sop>`, then for each message `<|role|>`, a
// newline and the content (no token closes a turn), then `<|assistant|>` when
// a reply is wanted. Role markers are special tokens; the newline and the
// content are ordinary text (special-token text inside content stays text).
#ifndef AUTOGLM_MODELS_GLM_CHAT_H_
#define AUTOGLM_MODELS_GLM_CHAT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/glm/tokenizer.h"

namespace ag::glm {

struct ChatMessage {
  std::string role;  // system, user, assistant or observation
  std::string content;
};

// A JSON array of {"role": ..., "content": ...}.
absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(absl::string_view json_text);

absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt = true);

// Turns generated ids into text as they come: emits bytes once they form
// whole UTF-8 characters, holding back a character split across tokens.
// Bytes that can never become valid UTF-8 are passed through, so the
// concatenated output always equals Decode() of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // The text that is complete after this token (may be empty).
  absl::StatusOr<std::string> Next(int32_t id);
  // Whatever is still held back.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_CHAT_H_
