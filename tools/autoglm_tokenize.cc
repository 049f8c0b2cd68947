// autoglm-tokenize: text to GLM-4 token ids and back.
//
//   autoglm-tokenize --tokenizer DIR < text.txt            ordinary encoding -> [ids]
//   autoglm-tokenize --tokenizer DIR --chat < chat.json    [{"role","content"},...] -> chat-template ids
//                    [--chat-template-content-format auto|string|openai]
//   autoglm-tokenize --tokenizer DIR --decode < ids.json   [ids] -> text
//
// DIR holds tokenizer.model (tiktoken) or tokenizer.json (HF). The chat
// template is the one DIR defines (GLM-4's or GLM-4.1V's; GLM-4's when it has
// none); content may be a string or OpenAI's list of text and image parts,
// each image becoming one image token (the engine expands it to the image's
// rows once it has the image).
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "tools/common.h"

ABSL_FLAG(std::string, tokenizer, "", "directory with tokenizer.model or tokenizer.json");
ABSL_FLAG(bool, chat, false, "stdin is a JSON array of {role, content}: apply the chat template");
ABSL_FLAG(std::string, chat_template_content_format, "auto",
          "how --chat renders content lists (vLLM's flag): string (image placeholders first, texts joined by "
          "newlines), openai (parts in place), or auto (the template's choice: openai for GLM-4.1V's)");
ABSL_FLAG(bool, decode, false, "stdin is a JSON array of ids: print the text");
ABSL_FLAG(bool, allow_special, false, "recognise special-token text such as <|user|> in the input");

namespace ag::tools {
namespace {

absl::Status Run() {
  const std::string dir = absl::GetFlag(FLAGS_tokenizer);
  if (dir.empty()) return absl::InvalidArgumentError("--tokenizer DIR is required");
  ASSIGN_OR_RETURN(std::unique_ptr<glm::Tokenizer> tokenizer, glm::Tokenizer::Load(dir));
  std::stringstream in;
  in << std::cin.rdbuf();
  const std::string input = in.str();
  if (absl::GetFlag(FLAGS_decode)) {
    const nlohmann::json j = nlohmann::json::parse(input, nullptr, false);
    if (j.is_discarded() || !j.is_array()) return absl::InvalidArgumentError("--decode reads a JSON array of ids");
    std::vector<int32_t> ids;
    for (const nlohmann::json& id : j) {
      if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) {
        return absl::InvalidArgumentError("--decode reads a JSON array of integer ids");
      }
      ids.push_back(id.get<int32_t>());
    }
    ASSIGN_OR_RETURN(std::string text, tokenizer->Decode(ids));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return absl::OkStatus();
  }
  std::vector<int32_t> ids;
  if (absl::GetFlag(FLAGS_chat)) {
    ASSIGN_OR_RETURN(std::vector<glm::ChatMessage> messages, glm::ParseChatMessages(input));
    glm::ChatOptions chat;
    ASSIGN_OR_RETURN(chat.chat_template, glm::DetectChatTemplate(dir, glm::ChatTemplate::kGlm4));
    const std::string format = absl::GetFlag(FLAGS_chat_template_content_format);
    if (format == "auto") {
      chat.content_format = glm::DefaultContentFormat(chat.chat_template);
    } else if (format == "string" || format == "openai") {
      chat.content_format = format == "string" ? glm::ContentFormat::kString : glm::ContentFormat::kOpenai;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat-template-content-format must be auto, string or openai, got '", format, "'"));
    }
    ASSIGN_OR_RETURN(ids, glm::EncodeChat(*tokenizer, messages, chat));
  } else {
    ids = tokenizer->Encode(input, absl::GetFlag(FLAGS_allow_special));
  }
  std::printf("[%s]\n", absl::StrJoin(ids, ", ").c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("GLM-4 text <-> token ids.\n  autoglm-tokenize --tokenizer DIR [--chat|--decode] < input");
  ag::tools::ParseFlagsOrExit(argc, argv, "autoglm-tokenize");
  absl::Status status = ag::tools::Run();
  if (!status.ok()) return ag::tools::ReportError("autoglm-tokenize", status);
  return 0;
}
