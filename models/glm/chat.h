// The GLM chat templates and streaming text output.
//
// glm-4-9b-chat renders `[gMASK]<sop>`, then for each message `<|role|>`, a
// newline and the content (no token closes a turn), then `<|assistant|>` when
// a reply is wanted. Role markers are special tokens; the newline and the
// content are ordinary text (special-token text inside content stays text).
//
// GLM-4.1V's template (../shared/GLM4V_SPEC.md section 5.1) renders the same
// turns (system, user and assistant only) with an image placeholder
// `<|begin_of_image|><|image|><|end_of_image|>` per image part, and ends in
// `<|assistant|>\n`. Its rendered text is tokenized as transformers and vLLM
// do: special-token text anywhere in it is the special token.
#ifndef AUTOGLM_MODELS_GLM_CHAT_H_
#define AUTOGLM_MODELS_GLM_CHAT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/glm/tokenizer.h"
#include "models/glm/tools.h"

namespace ag::glm {

// One part of a message's content (OpenAI's content list).
struct ContentPart {
  enum class Type { kText, kImage };
  Type type = Type::kText;
  std::string text;  // kText: the text; kImage: where the image is (a URL or path), if the caller said
};

struct ChatMessage {
  std::string role;  // system, user, assistant or observation
  std::string content;             // the content, when it is a string
  std::vector<ContentPart> parts;  // the content, when it is a list (has_parts)
  bool has_parts = false;
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made, each a turn after its content (tools.h)
};

// The chat templates this engine renders: glm-4-9b-chat's (the GLM-4 family's when a checkpoint
// has none), GLM-4-0414's (system turns first, then the others, an empty one too; its tool turn's
// own wording), GLM-4.1V's.
enum class ChatTemplate { kGlm4, kGlm4_0414, kGlm4v };
// How a content list reaches the template (vLLM's --chat-template-content-format):
// kString flattens it first (image placeholders in front, then the texts, each
// joined by a newline: vLLM's rule); kOpenai renders the parts in place.
enum class ContentFormat { kString, kOpenai };

struct ChatOptions {
  ChatTemplate chat_template = ChatTemplate::kGlm4;
  ContentFormat content_format = ContentFormat::kString;
  bool add_generation_prompt = true;
};

// The template a checkpoint or tokenizer directory defines (chat_template.jinja,
// chat_template.json or tokenizer_config.json's chat_template), or `fallback`
// when it has none; a template that is neither GLM-4's nor GLM-4.1V's is an
// error naming the file.
absl::StatusOr<ChatTemplate> DetectChatTemplate(const std::string& dir, ChatTemplate fallback);
// vLLM's choice for the template: kOpenai for one that loops over content parts (GLM-4.1V's).
ContentFormat DefaultContentFormat(ChatTemplate chat_template);

// A JSON array of {"role": ..., "content": ...}; content is a string or a list
// of {"type": "text", "text": ...} and image parts ({"type": "image_url",
// "image_url": {"url": ...}}, {"type": "image", "image": ...}).
absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(absl::string_view json_text);

// The image parts of the messages, in order.
int64_t CountImages(const std::vector<ChatMessage>& messages);

// GLM-4.1V's template rendered to text (before tokenization).
absl::StatusOr<std::string> RenderGlm4vChat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// The chat as prompt ids: each image is one image token (the engine expands it). `tools`, when
// any, are a system turn in front (GLM-4's templates only: GLM-4.1V's renders none). As
// glm-4-9b-chat's template does, a turn whose content is empty is left out there.
absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                const ChatOptions& options = {},
                                                const std::vector<ToolFunction>& tools = {});
absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt);

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
