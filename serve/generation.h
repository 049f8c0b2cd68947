// One OpenAI generation request in flight: it turns the engine loop's token
// events into chat or completion responses -- whole JSON bodies, or
// server-sent-event chunks as tokens arrive -- with text decoded
// incrementally, stop strings cut out (and held back while they might still
// be forming), special tokens left out of the text, logprobs, usage and
// finish reasons. Events arrive on the engine thread; a client disconnect
// arrives on an I/O thread and cancels the request.
#ifndef AUTOGLM_SERVE_GENERATION_H_
#define AUTOGLM_SERVE_GENERATION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "runtime/engine_loop.h"
#include "serve/http_server.h"
#include "serve/reasoning.h"

namespace ag::serve {

// What a finished request reports, for the metrics.
struct GenerationRecord {
  int64_t prompt_tokens = 0, generation_tokens = 0;
  double seconds_to_first_token = -1;  // < 0: no token came
  double seconds_total = 0;
  std::vector<std::string> finish_reasons;  // per choice: "stop", "length" or "abort"
  bool failed = false;
};

struct GenerationSpec {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  std::string model;
  std::vector<std::string> stop;
  bool include_stop_str = false;    // a stop string stays at the end of the text (vLLM's include_stop_str_in_output)
  bool skip_special_tokens = true;  // special tokens show no text (vLLM's; false shows them)
  int64_t min_tokens = 0;           // stop strings count from this many tokens on (vLLM's min_tokens)
  absl::flat_hash_set<int32_t> hidden_ids;  // ids that end a choice and never appear in its text
  int logprobs = -1;  // -1: none; else alternatives per token (chat: top_logprobs)
  bool reasoning = false;  // chat: <think>...</think> goes to reasoning_content (--reasoning-parser glm45)
  // Chat: the functions the model was shown. An answer that ends as a call to one (models/glm/tools.h)
  // is given as tool_calls with finish_reason "tool_calls"; a stream holds the text back while it may
  // still become one, and sends a call a grammar holds to as it is written.
  std::vector<std::string> tool_names;
  enum class ToolCalls {
    kParsed,    // read from the finished text (no grammar)
    kEnforced,  // a reply that starts as a call is held to one: streamed from its name's line on
    kForced,    // the answer is a call: streamed from its name on
  };
  ToolCalls tool_calls = ToolCalls::kParsed;
  // Completions only:
  std::string echo_text;  // prepended to each choice's text (echo)
  bool return_token_ids = false;
  std::vector<int32_t> prompt_ids;  // echoed as prompt_token_ids with return_token_ids
  int64_t prompt_tokens = 0;
};

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  using Done = std::function<void(const GenerationRecord&)>;
  Generation(GenerationSpec spec, const glm::Tokenizer& tokenizer, std::shared_ptr<Responder> out, Done done);

  // Submits to the loop and wires the client's disconnect to a cancel.
  void Start(runtime::EngineLoop& loop, runtime::Request request);

 private:
  struct Choice {
    explicit Choice(const glm::Tokenizer& t) : decoder(t) {}
    glm::StreamDecoder decoder;
    std::string text;         // everything decided so far (non-streaming), or not yet sent (streaming)
    size_t sent = 0;          // bytes of `text` already streamed
    std::vector<int32_t> ids;  // every generated id
    nlohmann::json logprobs;  // chat: the "content" entries; completions: tokens, token_logprobs, ...
    size_t streamed_logprobs = 0;  // entries already sent (streaming)
    bool opened = false;  // the first chunk (chat: the assistant role) has gone out
    ReasoningSplitter splitter;  // with spec.reasoning, streaming
    bool done = false;
    bool stopped = false;  // by a stop string or a hidden id
    bool is_content = false;  // with tool_names: the text is a reply, not a call (so far: undecided)
    size_t call_sent = 0;     // a call streamed as written: bytes of text sent (0: its name not yet)
    bool arguments_begun = false;  // ... and its arguments' first byte (whitespace before it is not sent)
    std::string finish_reason;
  };
  // The call a finished choice's text makes, if it ended as one.
  std::optional<glm::ToolCall> CallOf(const Choice& c) const;
  static nlohmann::json ToolCallJson(const glm::ToolCall& call, bool with_index);
  void OnEvent(const runtime::StreamEvent& e);
  void Handle(const runtime::StreamEvent& e);
  void AddToken(Choice& c, int index, const runtime::StreamEvent& e);
  void Finish(Choice& c, int index, const std::string& reason);
  void Fail(const absl::Status& status);
  // Streams whatever of the choice's text can no longer become part of a stop string.
  void Flush(Choice& c, int index, bool all);
  // Where the text that may be sent ends (all of it, or short of what a stop string may still take).
  size_t SendableEnd(const Choice& c, size_t from, bool all) const;
  // A forced call, streamed as it is written: its name once the name's line is whole (with the
  // call's id), then the arguments' text in pieces.
  void StreamCall(Choice& c, int index, bool all);
  void SendChunk(int index, const std::string& delta, const std::string& finish_reason,
                 const nlohmann::json& tool_calls = nullptr);
  void Complete();
  nlohmann::json Usage() const;

  GenerationSpec spec_;
  const glm::Tokenizer& tokenizer_;
  std::shared_ptr<Responder> out_;
  Done done_;
  std::vector<Choice> choices_;
  std::string id_;
  int64_t created_ = 0;
  std::chrono::steady_clock::time_point start_;
  GenerationRecord record_;
  runtime::EngineLoop* loop_ = nullptr;
  int64_t handle_ = -1;
  bool started_stream_ = false;
  bool finished_ = false;
  std::mutex mu_;  // events (engine thread) against the start
};

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_GENERATION_H_
