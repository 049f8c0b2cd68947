#include "models/glm/chat.h"

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::glm {

absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(absl::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("chat input must be a JSON array of {\"role\", \"content\"} objects");
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " needs string 'role' and 'content'"));
    }
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

absl::StatusOr<std::vector<int32_t>> EncodeChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt) {
  auto special = [&](const std::string& text) -> absl::StatusOr<int32_t> {
    const int32_t id = tokenizer.SpecialId(text);
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("the tokenizer has no special token ", text));
    return id;
  };
  std::vector<int32_t> ids;
  for (const char* prefix : {"[gMASK]", "<sop>"}) {
    absl::StatusOr<int32_t> id = special(prefix);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "observation") {
      return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has unknown role '", m.role,
                                                     "' (system, user, assistant, observation)"));
    }
    absl::StatusOr<int32_t> role = special(absl::StrCat("<|", m.role, "|>"));
    if (!role.ok()) return role.status();
    ids.push_back(*role);
    const std::vector<int32_t> body = tokenizer.Encode(absl::StrCat("\n", m.content));
    ids.insert(ids.end(), body.begin(), body.end());
  }
  if (add_generation_prompt) {
    absl::StatusOr<int32_t> assistant = special("<|assistant|>");
    if (!assistant.ok()) return assistant.status();
    ids.push_back(*assistant);
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
