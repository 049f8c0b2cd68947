#include "models/glm/chat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm/read_file.h"

namespace ag::glm {

namespace {

constexpr char kImagePlaceholder[] = "<|begin_of_image|><|image|><|end_of_image|>";

// A content part: text, or an image given the ways OpenAI and transformers write one.
absl::StatusOr<ContentPart> ParsePart(const nlohmann::json& p, const std::string& where) {
  if (!p.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
  const std::string type = p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
  if (type == "text") {
    if (!p.contains("text") || !p["text"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".text must be a string"));
    }
    return ContentPart{ContentPart::Type::kText, p["text"].get<std::string>()};
  }
  if (type == "image_url" || type == "image" || (type.empty() && p.contains("image"))) {
    ContentPart part{ContentPart::Type::kImage, ""};
    const nlohmann::json* url = p.contains("image_url") ? &p["image_url"] : p.contains("image") ? &p["image"] : nullptr;
    if (url != nullptr && url->is_object() && url->contains("url")) url = &(*url)["url"];
    if (url != nullptr && url->is_string()) part.text = url->get<std::string>();
    return part;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, " has type '", type, "': the parts this engine takes are text, image_url and image"));
}

// vLLM's string content format: the texts joined by newlines, and an image
// placeholder in front for each image the text does not already name.
absl::StatusOr<std::string> FlattenContent(const ChatMessage& m, size_t index) {
  std::string text;
  int64_t images = 0;
  bool first = true;
  for (const ContentPart& part : m.parts) {
    if (part.type == ContentPart::Type::kImage) {
      ++images;
      continue;
    }
    absl::StrAppend(&text, first ? "" : "\n", part.text);
    first = false;
  }
  if (images == 0) return text;
  int64_t named = 0;
  for (size_t at = text.find(kImagePlaceholder); at != std::string::npos; at = text.find(kImagePlaceholder, at + 1)) {
    ++named;
  }
  if (named > images) {
    return absl::InvalidArgumentError(absl::StrCat("chat message ", index, " names more images in its text (", named,
                                                   ") than it has image parts (", images, ")"));
  }
  std::string out;
  for (int64_t i = named; i < images; ++i) absl::StrAppend(&out, kImagePlaceholder, "\n");
  return absl::StrCat(out, text);
}

// The message's content as the template sees it in `format`.
absl::StatusOr<std::string> ContentText(const ChatMessage& m, size_t index, ContentFormat format, bool images_in_place) {
  if (!m.has_parts) return m.content;
  if (format == ContentFormat::kString || !images_in_place) {
    if (!images_in_place) {
      for (const ContentPart& part : m.parts) {
        if (part.type == ContentPart::Type::kImage) {
          return absl::InvalidArgumentError(
              absl::StrCat("chat message ", index, " (", m.role, ") has an image part, which the template does not render"));
        }
      }
    }
    return FlattenContent(m, index);
  }
  std::string out;
  for (const ContentPart& part : m.parts) {
    absl::StrAppend(&out, part.type == ContentPart::Type::kImage ? absl::string_view(kImagePlaceholder) : part.text);
  }
  return out;
}

absl::StatusOr<ChatTemplate> ClassifyTemplate(absl::string_view text, const std::string& source) {
  if (absl::StrContains(text, "<|begin_of_image|>") && absl::StrContains(text, "<|assistant|>")) {
    return ChatTemplate::kGlm4v;
  }
  if (absl::StrContains(text, "[gMASK]") && absl::StrContains(text, "<|assistant|>")) {
    // GLM-4-0414's renders the system messages in a loop of their own, and names the company.
    const bool glm4_0414 = absl::StrContains(text, "message.role != 'system'") || absl::StrContains(text, "智谱 AI 公司");
    return glm4_0414 ? ChatTemplate::kGlm4_0414 : ChatTemplate::kGlm4;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": a chat template this engine does not render (it renders GLM-4's and GLM-4.1V's)"));
}

}  // namespace

absl::StatusOr<ChatTemplate> DetectChatTemplate(const std::string& dir, ChatTemplate fallback) {
  const std::string jinja = dir + "/chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(jinja));
    return ClassifyTemplate(text, jinja);
  }
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) continue;
    ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
    if (!j.contains("chat_template")) continue;
    const nlohmann::json& t = j["chat_template"];
    if (t.is_string()) return ClassifyTemplate(t.get<std::string>(), path);
    if (t.is_array()) {  // named templates: the default one
      for (const nlohmann::json& named : t) {
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
            named["template"].is_string()) {
          return ClassifyTemplate(named["template"].get<std::string>(), path);
        }
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": field 'chat_template' is neither a template nor a list "
                                                         "holding one named 'default'"));
  }
  return fallback;
}

ContentFormat DefaultContentFormat(ChatTemplate chat_template) {
  return chat_template == ChatTemplate::kGlm4v ? ContentFormat::kOpenai : ContentFormat::kString;
}

absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(absl::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("chat input must be a JSON array of {\"role\", \"content\"} objects");
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !(m["content"].is_string() || m["content"].is_array())) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat message ", i, " needs a string 'role' and a 'content' string or list of parts"));
    }
    ChatMessage message{m["role"].get<std::string>(), "", {}, false};
    if (m["content"].is_string()) {
      message.content = m["content"].get<std::string>();
    } else {
      message.has_parts = true;
      for (size_t k = 0; k < m["content"].size(); ++k) {
        ASSIGN_OR_RETURN(ContentPart part, ParsePart(m["content"][k], absl::StrCat("chat message ", i, " content[", k, "]")));
        message.parts.push_back(std::move(part));
      }
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

int64_t CountImages(const std::vector<ChatMessage>& messages) {
  int64_t n = 0;
  for (const ChatMessage& m : messages) {
    for (const ContentPart& part : m.parts) n += part.type == ContentPart::Type::kImage;
  }
  return n;
}

absl::StatusOr<std::string> RenderGlm4vChat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  std::string out = "[gMASK]<sop>";
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has role '", m.role,
                                                     "', which GLM-4.1V's template does not render (system, user, "
                                                     "assistant)"));
    }
    if (!m.tool_calls.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has tool calls, which GLM-4.1V's template does "
                                                     "not render"));
    }
    ASSIGN_OR_RETURN(const std::string content, ContentText(m, i, options.content_format, m.role == "user"));
    absl::StrAppend(&out, "<|", m.role, "|>\n", content);
  }
  if (options.add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt) {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return EncodeChat(tokenizer, messages, options);
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                const ChatOptions& options, const std::vector<ToolFunction>& tools) {
  if (options.chat_template == ChatTemplate::kGlm4v) {
    if (!tools.empty()) return absl::InvalidArgumentError("GLM-4.1V's chat template renders no tools");
    ASSIGN_OR_RETURN(const std::string text, RenderGlm4vChat(messages, options));
    return tokenizer.Encode(text, /*allow_special=*/true);
  }
  auto special = [&](const std::string& text) -> absl::StatusOr<int32_t> {
    const int32_t id = tokenizer.SpecialId(text);
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("the tokenizer has no special token ", text));
    return id;
  };
  std::vector<int32_t> ids;
  for (const char* prefix : {"[gMASK]", "<sop>"}) {
    ASSIGN_OR_RETURN(const int32_t id, special(prefix));
    ids.push_back(id);
  }
  // A turn: `<|role|>`, then the metadata (a call's function name), a newline and the content as text.
  auto turn = [&](const std::string& role, absl::string_view metadata, absl::string_view content) -> absl::Status {
    ASSIGN_OR_RETURN(const int32_t marker, special(absl::StrCat("<|", role, "|>")));
    ids.push_back(marker);
    const std::vector<int32_t> body = tokenizer.Encode(absl::StrCat(metadata, "\n", content));
    ids.insert(ids.end(), body.begin(), body.end());
    return absl::OkStatus();
  };
  const bool glm4_0414 = options.chat_template == ChatTemplate::kGlm4_0414;
  if (!tools.empty()) {
    RETURN_IF_ERROR(turn("system", "", ToolsSystemText(tools, glm4_0414 ? ToolsWording::kGlm4_0414 : ToolsWording::kGlm4Chat)));
  }
  std::vector<size_t> order(messages.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (glm4_0414) {  // its template: the system turns, then the others
    std::stable_partition(order.begin(), order.end(), [&](size_t i) { return messages[i].role == "system"; });
  }
  for (const size_t i : order) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "observation") {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has unknown role '", m.role,
                                                     "' (system, user, assistant, observation)"));
    }
    if (!m.tool_calls.empty() && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " (", m.role, ") has tool calls"));
    }
    // GLM-4 takes no images: a list of parts must be all text.
    ASSIGN_OR_RETURN(const std::string content, ContentText(m, i, ContentFormat::kString, /*images_in_place=*/false));
    if (!content.empty() || (glm4_0414 && m.tool_calls.empty())) RETURN_IF_ERROR(turn(m.role, "", content));
    for (const ToolCall& call : m.tool_calls) RETURN_IF_ERROR(turn("assistant", call.name, call.arguments));
  }
  if (options.add_generation_prompt) {
    ASSIGN_OR_RETURN(const int32_t assistant, special("<|assistant|>"));
    ids.push_back(assistant);
  }
  return ids;
}

namespace {

// How many bytes at the end of `s` start a UTF-8 character that is not complete yet.
size_t IncompleteTail(const std::string& s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
    return need > back && c >= 0xC2 ? back : 0;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::string> StreamDecoder::Next(int32_t id) {
  std::string bytes;
  if (!tokenizer_.TokenBytes(id, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside the vocabulary"));
  }
  pending_ += bytes;
  const size_t hold = IncompleteTail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::Finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace ag::glm
