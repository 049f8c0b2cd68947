#include "serve/generation.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "serve/openai.h"

namespace ag::serve {
namespace {

using nlohmann::json;

std::string NewId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrCat(prefix, absl::Hex(rng(), absl::kZeroPad16), absl::Hex(rng() >> 32, absl::kZeroPad8));
}

std::string ReasonName(runtime::FinishReason r) {
  switch (r) {
    case runtime::FinishReason::kLength:
    case runtime::FinishReason::kContext:
      return "length";
    case runtime::FinishReason::kCancelled:
      return "abort";
    default:
      return "stop";
  }
}

json ByteList(const std::string& s) {
  json bytes = json::array();
  for (unsigned char ch : s) bytes.push_back(static_cast<int>(ch));
  return bytes;
}

}  // namespace

Generation::Generation(GenerationSpec spec, const glm::Tokenizer& tokenizer, std::shared_ptr<Responder> out, Done done)
    : spec_(std::move(spec)), tokenizer_(tokenizer), out_(std::move(out)), done_(std::move(done)) {
  for (int i = 0; i < spec_.n; ++i) {
    choices_.emplace_back(tokenizer_);
    Choice& c = choices_.back();
    if (spec_.logprobs >= 0) {
      c.logprobs = spec_.chat ? json::array()
                              : json{{"tokens", json::array()},
                                     {"token_logprobs", json::array()},
                                     {"top_logprobs", json::array()},
                                     {"text_offset", json::array()}};
    }
  }
  id_ = NewId(spec_.chat ? "chatcmpl-" : "cmpl-");
  created_ = static_cast<int64_t>(std::time(nullptr));
  record_.prompt_tokens = spec_.prompt_tokens;
}

void Generation::Start(runtime::EngineLoop& loop, runtime::Request request) {
  std::lock_guard<std::mutex> lock(mu_);
  start_ = std::chrono::steady_clock::now();
  loop_ = &loop;
  if (spec_.stream) {
    out_->StartStream(200, "text/event-stream");
    started_stream_ = true;
    for (int i = 0; i < spec_.n; ++i) {  // the opening chunk of each choice, as vLLM sends it
      if (spec_.chat) {
        SendChunk(i, "", "");
      } else if (!spec_.echo_text.empty()) {
        SendChunk(i, spec_.echo_text, "");
      }
    }
  }
  std::weak_ptr<Generation> weak = weak_from_this();
  handle_ = loop.Submit(
      std::move(request), [self = shared_from_this()](const runtime::StreamEvent& e) { self->OnEvent(e); }, spec_.n,
      spec_.logprobs);
  out_->OnDisconnect([weak] {
    if (auto self = weak.lock()) {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (!self->finished_) self->loop_->Cancel(self->handle_);
    }
  });
}

void Generation::OnEvent(const runtime::StreamEvent& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  try {
    Handle(e);
  } catch (const std::exception& ex) {  // the engine thread must survive whatever one response does
    std::fprintf(stderr, "autoglm-serve: internal error in a response: %s\n", ex.what());
    Fail(absl::InternalError("internal error"));
  }
}

void Generation::Handle(const runtime::StreamEvent& e) {
  if (!e.error.ok()) return Fail(e.error);
  if (e.choice < 0 || e.choice >= static_cast<int>(choices_.size())) return;
  Choice& c = choices_[e.choice];
  if (c.done) return;
  if (e.token >= 0) AddToken(c, e.choice, e);
  if (e.finished && !c.done) Finish(c, e.choice, ReasonName(e.reason));
  if (std::all_of(choices_.begin(), choices_.end(), [](const Choice& x) { return x.done; })) Complete();
}

void Generation::AddToken(Choice& c, int index, const runtime::StreamEvent& e) {
  if (record_.generation_tokens == 0) {
    record_.seconds_to_first_token = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ++record_.generation_tokens;
  c.ids.push_back(e.token);
  if (c.stopped) return;
  if (spec_.hidden_ids.contains(e.token)) {  // the engine ends the choice on it (stop id or eos)
    c.stopped = true;
    return;
  }
  std::string piece;
  if (!spec_.skip_special_tokens || !tokenizer_.HiddenInOutput(e.token)) {
    absl::StatusOr<std::string> next = c.decoder.Next(e.token);
    if (next.ok()) piece = std::move(*next);
  }
  if (spec_.logprobs >= 0) {
    std::string token_text;
    (void)tokenizer_.TokenBytes(e.token, &token_text);
    if (spec_.chat) {
      json top = json::array();
      for (const auto& [id, lp] : e.top) {
        std::string t;
        (void)tokenizer_.TokenBytes(id, &t);
        top.push_back({{"token", t}, {"logprob", lp}, {"bytes", ByteList(t)}});
      }
      c.logprobs.push_back(
          {{"token", token_text}, {"logprob", e.logprob}, {"bytes", ByteList(token_text)}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const auto& [id, lp] : e.top) {
        std::string t;
        (void)tokenizer_.TokenBytes(id, &t);
        top[t] = lp;
      }
      c.logprobs["tokens"].push_back(token_text);
      c.logprobs["token_logprobs"].push_back(e.logprob);
      c.logprobs["top_logprobs"].push_back(top);
      c.logprobs["text_offset"].push_back(spec_.echo_text.size() + c.text.size());
    }
  }
  const size_t searched_from = c.text.size();
  c.text += piece;
  // The earliest stop string that now appears (it may have begun in earlier text), once the
  // choice has min_tokens tokens.
  size_t cut = std::string::npos, cut_size = 0;
  for (const std::string& stop : spec_.stop) {
    if (static_cast<int64_t>(c.ids.size()) < spec_.min_tokens) break;
    const size_t from = searched_from >= stop.size() ? searched_from - stop.size() + 1 : 0;
    const size_t at = c.text.find(stop, from);
    if (at < cut) cut = at, cut_size = stop.size();
  }
  if (cut != std::string::npos) {
    c.text.resize(spec_.include_stop_str ? cut + cut_size : cut);
    c.stopped = true;
    loop_->CancelChoice(handle_, index);  // its later events are ignored
    Finish(c, index, "stop");
    return;
  }
  if (spec_.stream) Flush(c, index, false);
}

std::optional<glm::ToolCall> Generation::CallOf(const Choice& c) const {
  if (spec_.tool_names.empty() || c.finish_reason != "stop") return std::nullopt;
  return glm::ParseToolCall(c.text, spec_.tool_names);
}

json Generation::ToolCallJson(const glm::ToolCall& call, bool with_index) {
  json j = {{"id", NewId("call_")}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  if (with_index) j["index"] = 0;
  return j;
}

size_t Generation::SendableEnd(const Choice& c, size_t from, bool all) const {
  size_t end = c.text.size();
  if (!all && !spec_.stop.empty()) {
    size_t hold = 0;
    for (const std::string& s : spec_.stop) hold = std::max(hold, s.size() - 1);
    end = end > from + hold ? end - hold : from;
    while (end > from && (static_cast<unsigned char>(c.text[end]) & 0xC0) == 0x80) --end;  // whole characters
  }
  return end;
}

void Generation::StreamCall(Choice& c, int index, bool all) {
  if (c.call_sent == 0) {
    const size_t newline = c.text.find('\n');
    if (newline == std::string::npos) return;
    c.call_sent = newline + 1;
    const std::string name(absl::StripAsciiWhitespace(absl::string_view(c.text).substr(0, newline)));
    SendChunk(index, "", "", json::array({ToolCallJson({name, ""}, /*with_index=*/true)}));
  }
  // The arguments as the finished call gives them (glm::ParseToolCall trims them).
  while (!c.arguments_begun && c.call_sent < c.text.size()) {
    c.arguments_begun = !absl::ascii_isspace(static_cast<unsigned char>(c.text[c.call_sent]));
    if (!c.arguments_begun) ++c.call_sent;
  }
  const size_t end = SendableEnd(c, c.call_sent, all);
  if (end > c.call_sent) {
    json piece = {{"index", 0}, {"function", {{"arguments", c.text.substr(c.call_sent, end - c.call_sent)}}}};
    c.call_sent = end;
    SendChunk(index, "", "", json::array({std::move(piece)}));
  }
}

void Generation::Flush(Choice& c, int index, bool all) {
  if (!spec_.tool_names.empty() && !c.is_content) {
    if (spec_.tool_calls == GenerationSpec::ToolCalls::kForced) return StreamCall(c, index, all);
    const bool may_be_a_call = glm::MayBecomeToolCall(c.text, spec_.tool_names);
    // An enforced call streams once its name's line is whole.
    if (spec_.tool_calls == GenerationSpec::ToolCalls::kEnforced && may_be_a_call &&
        c.text.find('\n') != std::string::npos) {
      return StreamCall(c, index, all);
    }
    if (!all && may_be_a_call) return;  // held until the call or the reply shows
    c.is_content = true;
  }
  const size_t end = SendableEnd(c, c.sent, all);
  const bool new_logprobs = spec_.logprobs >= 0 && (spec_.chat ? c.logprobs.size()
                                                               : c.logprobs["tokens"].size()) > c.streamed_logprobs;
  if (end == c.sent && !new_logprobs) return;
  const std::string delta = c.text.substr(c.sent, end - c.sent);
  c.sent = end;
  SendChunk(index, delta, "");
}

void Generation::SendChunk(int index, const std::string& delta, const std::string& finish_reason,
                           const json& tool_calls) {
  Choice& c = choices_[index];
  json choice = {{"index", index}};
  json logprobs = nullptr;
  if (spec_.logprobs >= 0) {
    if (spec_.chat) {
      json entries = json::array();
      for (size_t i = c.streamed_logprobs; i < c.logprobs.size(); ++i) entries.push_back(c.logprobs[i]);
      c.streamed_logprobs = c.logprobs.size();
      logprobs = {{"content", entries}};
    } else {
      logprobs = json::object();
      const size_t from = c.streamed_logprobs;
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        json part = json::array();
        for (size_t i = from; i < c.logprobs[key].size(); ++i) part.push_back(c.logprobs[key][i]);
        logprobs[key] = part;
      }
      c.streamed_logprobs = c.logprobs["tokens"].size();
    }
  }
  if (spec_.chat) {
    json d = json::object();
    if (!c.opened) d["role"] = "assistant";
    ReasoningSplitter::Parts parts{"", delta};
    if (spec_.reasoning) {
      parts = c.splitter.Add(delta);
      if (!finish_reason.empty()) {  // the last chunk: whatever was held back
        ReasoningSplitter::Parts rest = c.splitter.Finish();
        parts.reasoning += rest.reasoning;
        parts.content += rest.content;
      }
    }
    if (!parts.reasoning.empty()) d["reasoning_content"] = parts.reasoning;
    if (!parts.content.empty() || d.contains("role")) d["content"] = parts.content;
    if (!tool_calls.is_null()) d["tool_calls"] = tool_calls;
    choice["delta"] = d;
  } else {
    choice["text"] = delta;
  }
  c.opened = true;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  json chunk = {{"id", id_},
                {"object", spec_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", spec_.model},
                {"choices", json::array({choice})}};
  if (spec_.include_usage) chunk["usage"] = nullptr;
  out_->Write(absl::StrCat("data: ", JsonText(chunk), "\n\n"));
}

void Generation::Finish(Choice& c, int index, const std::string& reason) {
  c.done = true;
  c.finish_reason = reason;
  if (!c.stopped) c.text += c.decoder.Finish();
  record_.finish_reasons.push_back(reason);
  if (spec_.stream) {
    if (!c.is_content && (spec_.tool_calls == GenerationSpec::ToolCalls::kForced || c.call_sent > 0)) {
      StreamCall(c, index, /*all=*/true);
      if (c.call_sent > 0) return SendChunk(index, "", CallOf(c) ? "tool_calls" : reason);
      c.is_content = true;  // cut off before the name's line was whole: what there is, as text
    }
    if (!c.is_content) {
      if (const std::optional<glm::ToolCall> call = CallOf(c)) {
        SendChunk(index, "", "", json::array({ToolCallJson(*call, /*with_index=*/true)}));
        SendChunk(index, "", "tool_calls");
        return;
      }
    }
    Flush(c, index, true);
    SendChunk(index, "", reason);
  }
}

nlohmann::json Generation::Usage() const {
  return {{"prompt_tokens", record_.prompt_tokens},
          {"completion_tokens", record_.generation_tokens},
          {"total_tokens", record_.prompt_tokens + record_.generation_tokens}};
}

void Generation::Complete() {
  finished_ = true;
  record_.seconds_total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Counted before the client can see the end: a client that reads /metrics
  // right after its response finds its request there.
  done_(record_);
  const json usage = Usage();
  if (spec_.stream) {
    if (spec_.include_usage) {
      json chunk = {{"id", id_},
                    {"object", spec_.chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created_},
                    {"model", spec_.model},
                    {"choices", json::array()},
                    {"usage", usage}};
      out_->Write(absl::StrCat("data: ", JsonText(chunk), "\n\n"));
    }
    out_->Write("data: [DONE]\n\n");
    out_->End();
  } else {
    json choices = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& c = choices_[i];
      json choice = {{"index", i}};
      const std::optional<glm::ToolCall> call = spec_.chat ? CallOf(c) : std::nullopt;
      if (spec_.chat) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        if (spec_.reasoning) {
          ReasoningSplitter splitter;
          ReasoningSplitter::Parts parts = splitter.Add(c.text), rest = splitter.Finish();
          choice["message"]["content"] = parts.content + rest.content;
          choice["message"]["reasoning_content"] = parts.reasoning + rest.reasoning;
        }
        choice["logprobs"] = spec_.logprobs >= 0 ? json{{"content", c.logprobs}} : json(nullptr);
        if (call) {
          choice["message"] = {{"role", "assistant"},
                               {"content", nullptr},
                               {"tool_calls", json::array({ToolCallJson(*call, /*with_index=*/false)})}};
        }
      } else {
        choice["text"] = spec_.echo_text + c.text;
        choice["logprobs"] = spec_.logprobs >= 0 ? c.logprobs : json(nullptr);
        if (spec_.return_token_ids) {
          choice["token_ids"] = c.ids;
          choice["prompt_token_ids"] = spec_.prompt_ids;
        }
      }
      choice["finish_reason"] = call ? "tool_calls" : c.finish_reason;
      choices.push_back(choice);
    }
    const json body = {{"id", id_},
                       {"object", spec_.chat ? "chat.completion" : "text_completion"},
                       {"created", created_},
                       {"model", spec_.model},
                       {"choices", choices},
                       {"usage", usage}};
    out_->Respond(200, "application/json", JsonText(body));
  }
}

void Generation::Fail(const absl::Status& status) {
  finished_ = true;
  record_.failed = true;
  done_(record_);  // counted before the client sees the error, as in Complete
  ApiError error;
  error.message = std::string(status.message());
  if (absl::IsInvalidArgument(status) || absl::IsOutOfRange(status)) {
    error.http_status = 400;
  } else if (absl::IsResourceExhausted(status)) {
    error.http_status = 413;
  } else if (absl::IsUnavailable(status)) {  // shutting down
    error.http_status = 503;
    error.type = "server_error";
  } else {
    error.http_status = 500;
    error.type = "server_error";
  }
  if (started_stream_) {
    out_->Write(absl::StrCat("data: ", error.ToJson(), "\n\n"));
    out_->Write("data: [DONE]\n\n");
    out_->End();
  } else {
    out_->Respond(error.http_status, "application/json", error.ToJson());
  }
}

}  // namespace ag::serve
