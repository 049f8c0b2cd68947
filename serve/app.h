// The OpenAI-compatible application behind autoglm-serve: routes, the API
// key, the queue limit, the endpoints (chat and text completions, models,
// tokenize and detokenize, health, Prometheus metrics), every error shaped
// as OpenAI's. It answers 503 until the model is loaded (SetModel).
//
// Health, metrics and refusals are answered on the calling (I/O) thread; the
// requests that parse and tokenize a body run on a small pool of workers, so
// that one large body never stalls another client. No exception leaves a
// handler: it becomes a 500, logged, and the server keeps running.
#ifndef AUTOGLM_SERVE_APP_H_
#define AUTOGLM_SERVE_APP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "image/image.h"
#include "image/preprocess.h"
#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "runtime/engine_loop.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"
#include "runtime/metrics.h"
#include "runtime/regex_grammar.h"
#include "runtime/tool_call_grammar.h"
#include "serve/generation.h"
#include "serve/http_server.h"
#include "serve/media.h"
#include "serve/openai.h"
#include "serve/work_queue.h"

namespace ag::serve {

struct AppOptions {
  std::string served_model_name = "glm";
  std::string api_key;        // empty: no key needed
  int64_t max_queue = 256;    // requests in flight at once; more get 429
  RequestLimits limits;
  int workers = 4;            // threads that parse and tokenize request bodies
  // Images in chat requests (GLM-4.1V): where they may come from, how many a prompt may carry
  // (vLLM's --limit-mm-per-prompt), and how large they may be before decoding.
  MediaOptions media;
  int64_t max_images_per_prompt = 16;
  bool reasoning_parser = false;  // --reasoning-parser glm45
  image::DecodeLimits decode_limits;
};

// What the app needs of the loaded model.
struct LoadedModel {
  std::unique_ptr<runtime::EngineLoop> loop;
  std::unique_ptr<glm::Tokenizer> tokenizer;
  int64_t max_context = 0;
  int32_t vocab_size = 0;  // the model's (embedding rows); prompt ids must be below it
  std::vector<int32_t> eos_ids;
  glm::ChatOptions chat;  // the checkpoint's template and the content format
  std::optional<image::ProcessorConfig> processor;  // set when the model takes images
  int32_t image_token_id = -1;                       // the prompt token that stands for an image
  // JSON mode's vocabulary (the tokenizer's tokens as bytes, sorted; the masks it has computed), or
  // null when the tokenizer cannot write every JSON character.
  std::shared_ptr<runtime::JsonVocabulary> json_vocabulary;
};

class App {
 public:
  explicit App(AppOptions options);
  ~App();
  // Opens the API with the loaded model; false (and nothing opens) when
  // CloseIfLoading came first.
  bool SetModel(LoadedModel model);
  // While the model is still loading: closes the app for good (no request
  // will ever be admitted) and returns true. Once it is open: false, and the
  // caller must drain what was admitted.
  bool CloseIfLoading();
  bool ready() const { return ready_.load(); }
  void Handle(HttpRequest request, std::shared_ptr<Responder> out);
  // Refuses new generations (503) from now on.
  void StopAdmitting() { admitting_ = false; }
  int64_t in_flight() const;
  // Cancels whatever still runs: a streamed request ends with an error event
  // and [DONE], another gets a 503. Returns at once; the answers are written
  // by the I/O threads (HttpServer::WaitForResponses waits for them).
  void Shutdown();
  // After the HTTP server has stopped: Shutdown, then joins the workers and the engine loop, so
  // that every request's responder is released while the server that owns its connection still
  // exists (a responder outliving it would touch freed memory).
  void Close();
  std::string RenderMetrics();

 private:
  void Route(HttpRequest& request, const std::shared_ptr<Responder>& out);
  // Runs f; an exception becomes a logged 500 (if nothing was answered yet).
  void Guarded(const char* what, const std::shared_ptr<Responder>& out, const std::function<void()>& f);
  bool Authorized(const std::string& authorization) const;
  void Chat(const HttpRequest& request, std::shared_ptr<Responder> out);
  void Completions(const HttpRequest& request, std::shared_ptr<Responder> out);
  void Tokenize(const HttpRequest& request, std::shared_ptr<Responder> out);
  void Detokenize(const HttpRequest& request, std::shared_ptr<Responder> out);
  // Checks the model name, the queue and the prompt's length, and makes the response format's
  // constraint (none for text); on a problem answers and returns false.
  bool Admit(const GenerationOptions& options, int64_t prompt_tokens, const std::shared_ptr<Responder>& out,
             const char* prompt_param, runtime::ConstraintFactory* constraint);
  void Run(const GenerationOptions& options, std::vector<int32_t> prompt, bool chat, int logprobs, std::string echo,
           bool return_token_ids, runtime::ConstraintFactory constraint, std::shared_ptr<Responder> out,
           std::vector<std::shared_ptr<const image::Patches>> images = {}, int64_t expanded_tokens = -1,
           std::vector<std::string> tool_names = {},
           GenerationSpec::ToolCalls tool_calls = GenerationSpec::ToolCalls::kParsed);
  // A call to one of `tools`, forced (tool_choice "required" or named) or optional ("auto"): the
  // constraint of its grammar, each function's arguments by its parameters schema -- or, where the
  // schema cannot be enforced and the function is not strict, as any JSON object (a strict one
  // answers 400). An optional call the tokenizer cannot enforce is left unconstrained.
  bool ToolCallConstraint(const std::vector<glm::ToolFunction>& tools, runtime::ToolCallGrammar::Call call,
                          const std::shared_ptr<Responder>& out, runtime::ConstraintFactory* constraint);
  // The chat's images, fetched, decoded and preprocessed; on a bad one answers 400 naming its part and returns false.
  bool LoadImages(const std::vector<glm::ChatMessage>& messages,
                  std::vector<std::shared_ptr<const image::Patches>>* images, const std::shared_ptr<Responder>& out);
  // The prompt's tokens once each image token is the image's rows.
  int64_t ExpandedLength(const std::vector<int32_t>& prompt,
                         const std::vector<std::shared_ptr<const image::Patches>>& images) const;

  AppOptions options_;
  std::atomic<bool> ready_{false}, admitting_{true};
  std::mutex state_mu_;  // SetModel against CloseIfLoading
  bool closed_ = false;  // guarded by state_mu_
  LoadedModel model_;
  std::unique_ptr<runtime::JsonSchemaGrammars> json_schemas_;  // response_format json_schema: grammars by schema text
  // The name states' masks of the tool sets met so far (ToolCallGrammar::NameMasksKey): each up to
  // 256 masks of 19 KB at GLM-4's vocabulary, so 16 sets hold at most ~80 MB, as the schemas' do.
  runtime::LruCache<std::shared_ptr<runtime::MaskCache>> tool_name_masks_{16};
  runtime::LruCache<std::shared_ptr<runtime::RegexGrammar>> regexes_{16};  // guided_regex: grammars by expression
  runtime::MetricsRegistry metrics_;
  runtime::Gauge *running_, *waiting_, *kv_usage_;
  runtime::Counter *prefix_hits_, *prefix_queries_, *prompt_tokens_, *generation_tokens_, *preemptions_;
  runtime::Counter *spec_drafts_, *spec_draft_tokens_, *spec_accepted_tokens_;
  runtime::Counter *success_stop_, *success_length_, *success_abort_;
  runtime::Histogram *ttft_, *tpot_, *e2e_;
  runtime::Counter *mm_images_, *encoder_cache_hits_;
  runtime::Histogram* encoder_seconds_;
  runtime::Counter* kept_run_hits_;  // the tokenizer's (glm::EncodedRuns)
  runtime::Gauge* kept_run_bytes_;
  std::mutex stats_mu_;  // the counters fed from the loop's cumulative stats
  runtime::LoopStats last_stats_;
  size_t last_kept_run_hits_ = 0;  // guarded by stats_mu_
  std::unique_ptr<WorkQueue> workers_;  // last: joined first, before the model goes
};

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_APP_H_
