#include "serve/app.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "models/glm/chat.h"
#include "serve/generation.h"

namespace ag::serve {
namespace {

using nlohmann::json;

void Error(const std::shared_ptr<Responder>& out, int status, std::string message, std::string param = "",
           std::string type = "", Headers headers = {}) {
  ApiError e;
  e.http_status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  if (!type.empty()) {
    e.type = std::move(type);
  } else if (status == 401) {
    e.type = "authentication_error";
  } else if (status == 404) {
    e.type = "not_found_error";
  } else if (status == 429) {
    e.type = "rate_limit_error";
  } else if (status >= 500) {
    e.type = "server_error";
  }
  out->Respond(status, "application/json", e.ToJson(), std::move(headers));
}

void Send(const std::shared_ptr<Responder>& out, const ApiError& e) {
  out->Respond(e.http_status, "application/json", e.ToJson());
}

// Equal strings, in a time that depends only on `expected`'s length (an API key).
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ expected[i]);
  }
  return diff == 0;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

}  // namespace

App::App(AppOptions options) : options_(std::move(options)) {
  running_ = &metrics_.AddGauge("autoglm:num_requests_running", "Requests in the engine's running batch.");
  waiting_ = &metrics_.AddGauge("autoglm:num_requests_waiting", "Requests queued for the engine.");
  kv_usage_ = &metrics_.AddGauge("autoglm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1).");
  prefix_hits_ = &metrics_.AddCounter("autoglm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
  prefix_queries_ =
      &metrics_.AddCounter("autoglm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
  prompt_tokens_ = &metrics_.AddCounter("autoglm:prompt_tokens_total", "Prompt tokens of finished requests.");
  generation_tokens_ = &metrics_.AddCounter("autoglm:generation_tokens_total", "Tokens generated.");
  preemptions_ = &metrics_.AddCounter("autoglm:num_preemptions_total", "Sequences preempted for KV-cache space.");
  spec_drafts_ = &metrics_.AddCounter("autoglm:spec_decode_num_drafts_total", "Sequence steps that ran drafts.");
  spec_draft_tokens_ = &metrics_.AddCounter("autoglm:spec_decode_num_draft_tokens_total", "Draft tokens run.");
  spec_accepted_tokens_ =
      &metrics_.AddCounter("autoglm:spec_decode_num_accepted_tokens_total", "Draft tokens kept (each a step saved).");
  const std::string success = "autoglm:request_success_total", help = "Finished choices, by finish reason.";
  success_stop_ = &metrics_.AddCounter(success, help, "finished_reason=\"stop\"");
  success_length_ = &metrics_.AddCounter(success, help, "finished_reason=\"length\"");
  success_abort_ = &metrics_.AddCounter(success, help, "finished_reason=\"abort\"");
  ttft_ = &metrics_.AddHistogram("autoglm:time_to_first_token_seconds", "Time to the first token.", LatencyBuckets());
  tpot_ = &metrics_.AddHistogram("autoglm:time_per_output_token_seconds", "Time per token after the first.",
                                 LatencyBuckets());
  e2e_ = &metrics_.AddHistogram("autoglm:e2e_request_latency_seconds", "Time from arrival to the last token.",
                                LatencyBuckets());
  mm_images_ = &metrics_.AddCounter("autoglm:mm_images_total", "Images in admitted chat requests.");
  encoder_cache_hits_ =
      &metrics_.AddCounter("autoglm:encoder_cache_hits_total", "Images whose rows were found in the encoder cache.");
  encoder_seconds_ = &metrics_.AddHistogram("autoglm:mm_encoder_seconds", "Time of each vision-program run.",
                                            LatencyBuckets());
  kept_run_hits_ = &metrics_.AddCounter("autoglm:tokenizer_kept_run_hits_total",
                                        "Runs of prompt text whose tokens the tokenizer remembered.");
  kept_run_bytes_ = &metrics_.AddGauge("autoglm:tokenizer_kept_run_bytes", "What the tokenizer's remembered runs take.");
  workers_ = std::make_unique<WorkQueue>(std::max(1, options_.workers));
}

App::~App() { Close(); }

void App::Close() {
  Shutdown();
  workers_.reset();  // finishes what they run, before the model goes
  ready_ = false;
  model_.loop.reset();  // joins the engine thread: the last events are delivered, the responders released
}

bool App::SetModel(LoadedModel model) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (closed_) return false;
  model_ = std::move(model);
  if (model_.json_vocabulary != nullptr) json_schemas_ = std::make_unique<runtime::JsonSchemaGrammars>(model_.json_vocabulary);
  ready_ = true;
  return true;
}

bool App::CloseIfLoading() {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (ready_) return false;
  closed_ = true;
  return true;
}

int64_t App::in_flight() const { return ready_ && model_.loop ? model_.loop->in_flight() : 0; }

void App::Shutdown() {
  admitting_ = false;
  if (ready_ && model_.loop) model_.loop->Stop();  // every request in it hears that the server is shutting down
}

void App::Guarded(const char* what, const std::shared_ptr<Responder>& out, const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoglm-serve: internal error in %s: %s\n", what, e.what());
    Error(out, 500, "internal error");
  } catch (...) {
    std::fprintf(stderr, "autoglm-serve: internal error in %s\n", what);
    Error(out, 500, "internal error");
  }
}

bool App::Authorized(const std::string& authorization) const {
  if (options_.api_key.empty()) return true;
  // "Bearer KEY": the scheme is case-insensitive (RFC 9110), the key compared in constant time.
  absl::string_view h = absl::StripAsciiWhitespace(authorization);
  const size_t space = h.find(' ');
  if (space == absl::string_view::npos || !absl::EqualsIgnoreCase(h.substr(0, space), "bearer")) return false;
  return ConstantTimeEquals(absl::StripAsciiWhitespace(h.substr(space + 1)), options_.api_key);
}

std::string App::RenderMetrics() {
  if (ready_ && model_.loop) {
    const runtime::LoopStats s = model_.loop->stats();
    std::lock_guard<std::mutex> lock(stats_mu_);
    running_->Set(static_cast<double>(s.running));
    waiting_->Set(static_cast<double>(s.waiting));
    kv_usage_->Set(s.kv_blocks > 0 ? static_cast<double>(s.kv_blocks - s.kv_blocks_free) / s.kv_blocks : 0.0);
    // The loop's counts are cumulative: the counters take the growth since the last look.
    auto grow = [&](runtime::Counter* counter, int64_t runtime::LoopStats::*count) {
      counter->Add(static_cast<double>(std::max<int64_t>(0, s.*count - last_stats_.*count)));
    };
    grow(prefix_hits_, &runtime::LoopStats::prefix_hits);
    grow(prefix_queries_, &runtime::LoopStats::prefix_queries);
    grow(preemptions_, &runtime::LoopStats::preemptions);
    grow(spec_drafts_, &runtime::LoopStats::spec_drafts);
    grow(spec_draft_tokens_, &runtime::LoopStats::spec_draft_tokens);
    grow(spec_accepted_tokens_, &runtime::LoopStats::spec_accepted_tokens);
    grow(encoder_cache_hits_, &runtime::LoopStats::encoder_cache_hits);
    for (const double seconds : model_.loop->TakeEncoderSeconds()) encoder_seconds_->Observe(seconds);
    last_stats_ = s;
    if (const glm::EncodedRuns* runs = model_.tokenizer ? model_.tokenizer->encoded_runs() : nullptr; runs != nullptr) {
      const size_t hits = runs->hits();
      kept_run_hits_->Add(static_cast<double>(hits - std::min(hits, last_kept_run_hits_)));
      last_kept_run_hits_ = hits;
      kept_run_bytes_->Set(static_cast<double>(runs->bytes()));
    }
  }
  return metrics_.Render();
}

void App::Handle(HttpRequest request, std::shared_ptr<Responder> out) {
  Guarded("a request", out, [&] { Route(request, out); });
}

void App::Route(HttpRequest& request, const std::shared_ptr<Responder>& out) {
  std::string path = request.target.substr(0, request.target.find('?'));
  // HEAD is GET without the body (the HTTP layer leaves it out).
  const bool get = request.method == "GET" || request.method == "HEAD", post = request.method == "POST";
  if (path == "/health") {
    if (!get) return Error(out, 405, "use GET for /health");
    if (!ready_) return out->Respond(503, "application/json", R"({"status": "loading", "model_loaded": false})");
    return out->Respond(200, "application/json", R"({"status": "ok", "model_loaded": true})");
  }
  if (path == "/metrics") {
    if (!get) return Error(out, 405, "use GET for /metrics");
    return out->Respond(200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics());
  }
  const bool known = path == "/v1/models" || path == "/v1/chat/completions" || path == "/v1/completions" ||
                     path == "/tokenize" || path == "/detokenize";
  if (!known) return Error(out, 404, absl::StrCat("no such path: ", path.substr(0, 200)));
  if (!Authorized(request.authorization)) {
    return Error(out, 401, "a valid API key is needed (Authorization: Bearer KEY)");
  }
  if (!ready_) return Error(out, 503, "the model is still loading", "", "", {{"Retry-After", "5"}});
  if (path == "/v1/models") {
    if (!get) return Error(out, 405, "use GET for /v1/models");
    const json body = {{"object", "list"},
                       {"data", json::array({{{"id", options_.served_model_name},
                                              {"object", "model"},
                                              {"created", static_cast<int64_t>(std::time(nullptr))},
                                              {"owned_by", "autoglm"},
                                              {"max_model_len", model_.max_context}}})}};
    return out->Respond(200, "application/json", JsonText(body));
  }
  if (!post) return Error(out, 405, absl::StrCat("use POST for ", path));
  // Parsing and tokenizing a body may take long: off the I/O thread.
  workers_->Post([this, path = std::move(path), request = std::move(request), out] {
    Guarded(path.c_str(), out, [&] {
      if (path == "/v1/chat/completions") return Chat(request, out);
      if (path == "/v1/completions") return Completions(request, out);
      if (path == "/tokenize") return Tokenize(request, out);
      return Detokenize(request, out);
    });
  });
}

bool App::Admit(const GenerationOptions& options, int64_t prompt_tokens, const std::shared_ptr<Responder>& out,
                const char* prompt_param, runtime::ConstraintFactory* constraint) {
  if (!options.model.empty() && options.model != options_.served_model_name) {
    Error(out, 404, absl::StrCat("the model '", options.model.substr(0, 200), "' does not exist; this server has '",
                                 options_.served_model_name, "'"),
          "model");
    return false;
  }
  const int32_t vocab = std::min(model_.vocab_size, model_.tokenizer->vocab_size());
  for (const runtime::SamplingParams::Bias& b : options.sampling.logit_bias) {
    if (b.id >= vocab) {  // as vLLM refuses it; the sampler never picks a padding id
      Error(out, 400, absl::StrCat("'logit_bias' names token id ", b.id, ", outside the vocabulary [0, ", vocab, ")"),
            "logit_bias");
      return false;
    }
  }
  if (options.structured() && model_.json_vocabulary == nullptr) {
    Error(out, 400, absl::StrCat("'", options.structured_param, "': this model's tokenizer cannot write every JSON character"),
          options.structured_param);
    return false;
  }
  if (options.json_object) {
    *constraint = [vocabulary = model_.json_vocabulary] { return vocabulary->NewConstraint(); };
  } else if (options.json_schema || !options.choice.empty()) {
    absl::StatusOr<std::shared_ptr<runtime::JsonSchemaGrammar>> grammar =
        options.json_schema ? json_schemas_->Get(*options.json_schema) : json_schemas_->GetChoice(options.choice);
    if (!grammar.ok()) {
      Error(out, 400, absl::StrCat("'", options.structured_param, "': ", grammar.status().message()), options.structured_param);
      return false;
    }
    *constraint = [grammar = *std::move(grammar)] { return grammar->NewConstraint(); };
  } else if (options.regex) {
    absl::StatusOr<std::shared_ptr<runtime::RegexGrammar>> grammar = regexes_.Get(*options.regex, [&] {
      return runtime::RegexGrammar::Create(*options.regex, model_.json_vocabulary);
    });
    if (!grammar.ok()) {
      Error(out, 400, absl::StrCat("'", options.structured_param, "': ", grammar.status().message()), options.structured_param);
      return false;
    }
    *constraint = [grammar = *std::move(grammar)] { return grammar->NewConstraint(); };
  }
  for (const int32_t id : options.stop_token_ids) {
    if (id >= vocab) {
      Error(out, 400, absl::StrCat("'stop_token_ids' has token id ", id, ", outside the vocabulary [0, ", vocab, ")"),
            "stop_token_ids");
      return false;
    }
  }
  if (options.min_tokens > 0 && prompt_tokens < model_.max_context &&
      options.min_tokens > model_.max_context - prompt_tokens) {
    Error(out, 400,
          absl::StrCat("'min_tokens' (", options.min_tokens, ") is more than the ", model_.max_context - prompt_tokens,
                       " tokens the context leaves after the prompt"),
          "min_tokens");
    return false;
  }
  if (!admitting_) {
    Error(out, 503, "the server is shutting down");
    return false;
  }
  if (model_.loop->in_flight() >= options_.max_queue) {
    Error(out, 429, absl::StrCat(options_.max_queue, " requests are in flight already; try again shortly"), "", "",
          {{"Retry-After", "1"}});
    return false;
  }
  if (prompt_tokens >= model_.max_context) {  // a 400, as vLLM answers it (--max-model-len)
    Error(out, 400,
          absl::StrCat("This model's maximum context length is ", model_.max_context, " tokens. However, your request has ",
                       prompt_tokens, " input tokens (image tokens included): shorten it or raise --max-model-len"),
          prompt_param);
    return false;
  }
  return true;
}

void App::Run(const GenerationOptions& options, std::vector<int32_t> prompt, bool chat, int logprobs,
              std::string echo, bool return_token_ids, runtime::ConstraintFactory constraint, std::shared_ptr<Responder> out,
              std::vector<std::shared_ptr<const image::Patches>> images, int64_t expanded_tokens,
              std::vector<std::string> tool_names, GenerationSpec::ToolCalls tool_calls) {
  const int64_t prompt_tokens = expanded_tokens >= 0 ? expanded_tokens : static_cast<int64_t>(prompt.size());
  GenerationSpec spec;
  spec.chat = chat;
  spec.reasoning = chat && options_.reasoning_parser;
  spec.tool_names = std::move(tool_names);
  spec.tool_calls = tool_calls;
  spec.stream = options.stream;
  spec.include_usage = options.include_usage;
  spec.n = options.n;
  spec.model = options_.served_model_name;
  spec.stop = options.stop;
  spec.include_stop_str = options.include_stop_str_in_output;
  spec.skip_special_tokens = options.skip_special_tokens;
  spec.min_tokens = options.min_tokens;
  spec.logprobs = logprobs;
  spec.echo_text = std::move(echo);
  spec.return_token_ids = return_token_ids;
  spec.prompt_tokens = prompt_tokens;
  if (return_token_ids) spec.prompt_ids = prompt;

  runtime::Request request;
  request.prompt = std::move(prompt);
  mm_images_->Add(static_cast<double>(images.size()));
  request.images = std::move(images);
  request.max_new_tokens = std::min(options.max_tokens.value_or(model_.max_context), model_.max_context - prompt_tokens);
  request.sampling = options.sampling;
  request.sampling.vocab_limit = std::min(model_.vocab_size, model_.tokenizer->vocab_size());
  request.stop_on_eos = !options.ignore_eos;
  request.min_new_tokens = options.min_tokens;
  // The ids that end a choice show no text (vLLM's, unless include_stop_str_in_output).
  const bool hide_stops = !options.include_stop_str_in_output;
  if (!options.ignore_eos && hide_stops) {
    for (int32_t id : model_.eos_ids) spec.hidden_ids.insert(id);
  }
  request.stop_ids = options.stop_token_ids;
  request.constraint = std::move(constraint);
  if (chat) {  // a GLM-4 turn also ends where the next role would begin
    for (const char* s : {"<|user|>", "<|observation|>", "<|endoftext|>"}) {
      const int32_t id = model_.tokenizer->SpecialId(s);
      if (id >= 0) request.stop_ids.push_back(id);
    }
  }
  if (hide_stops) spec.hidden_ids.insert(request.stop_ids.begin(), request.stop_ids.end());
  auto generation = std::make_shared<Generation>(std::move(spec), *model_.tokenizer, std::move(out),
                                                 [this](const GenerationRecord& r) {
                                                   prompt_tokens_->Add(static_cast<double>(r.prompt_tokens));
                                                   generation_tokens_->Add(static_cast<double>(r.generation_tokens));
                                                   for (const std::string& reason : r.finish_reasons) {
                                                     (reason == "stop"     ? success_stop_
                                                      : reason == "length" ? success_length_
                                                                           : success_abort_)
                                                         ->Add();
                                                   }
                                                   if (r.seconds_to_first_token >= 0) {
                                                     ttft_->Observe(r.seconds_to_first_token);
                                                     if (r.generation_tokens > 1) {
                                                       tpot_->Observe((r.seconds_total - r.seconds_to_first_token) /
                                                                      static_cast<double>(r.generation_tokens - 1));
                                                     }
                                                   }
                                                   e2e_->Observe(r.seconds_total);
                                                 });
  generation->Start(*model_.loop, std::move(request));
}

void App::Chat(const HttpRequest& http, std::shared_ptr<Responder> out) {
  ChatResult parsed = ParseChatRequest(http.body, options_.limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Send(out, *e);
  ChatRequest& req = std::get<ChatRequest>(parsed);
  std::vector<std::shared_ptr<const image::Patches>> images;
  if (!LoadImages(req.messages, &images, out)) return;
  absl::StatusOr<std::vector<int32_t>> prompt = glm::EncodeChat(*model_.tokenizer, req.messages, model_.chat, req.tools);
  if (!prompt.ok()) return Error(out, 400, std::string(prompt.status().message()), req.tools.empty() ? "messages" : "tools");
  const int64_t expanded = ExpandedLength(*prompt, images);
  runtime::ConstraintFactory constraint;
  if (!Admit(req.options, expanded, out, "messages", &constraint)) return;
  const bool forced = ForcesACall(req.tool_choice);
  using ToolCalls = GenerationSpec::ToolCalls;
  ToolCalls tool_calls = forced ? ToolCalls::kForced : ToolCalls::kParsed;
  // An auto call is enforced once the reply starts as one; a response_format keeps the reply its own.
  if (forced || (req.tool_choice == ToolChoice::kAuto && !req.tools.empty() && !constraint)) {
    using Call = runtime::ToolCallGrammar::Call;
    if (!ToolCallConstraint(req.tools, forced ? Call::kForced : Call::kOptional, out, &constraint)) return;
    if (!forced && constraint) tool_calls = ToolCalls::kEnforced;
  }
  std::vector<std::string> tool_names;
  for (const glm::ToolFunction& f : req.tools) tool_names.push_back(f.name);
  Run(req.options, std::move(*prompt), /*chat=*/true, req.logprobs ? req.top_logprobs : -1, "", false,
      std::move(constraint), std::move(out), std::move(images), expanded, std::move(tool_names), tool_calls);
}

bool App::ToolCallConstraint(const std::vector<glm::ToolFunction>& tools, runtime::ToolCallGrammar::Call call,
                             const std::shared_ptr<Responder>& out, runtime::ConstraintFactory* constraint) {
  const bool forced = call == runtime::ToolCallGrammar::Call::kForced;
  if (model_.json_vocabulary == nullptr) {
    if (!forced) return true;
    Error(out, 400, "'tool_choice': this model's tokenizer cannot write every JSON character", "tool_choice");
    return false;
  }
  std::vector<runtime::ToolCallGrammar::Function> functions;
  std::vector<std::pair<std::string, std::string>> names_and_schemas;  // the name masks' key
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string schema = ToolParametersSchema(tools[i]);
    absl::StatusOr<std::shared_ptr<runtime::JsonSchemaGrammar>> arguments = json_schemas_->Get(schema);
    if (!arguments.ok() && !IsStrict(tools[i])) {
      schema = R"({"type":"object"})";
      arguments = json_schemas_->Get(schema);
    }
    if (!arguments.ok()) {
      const std::string param = absl::StrCat("tools[", i, "].function.parameters");
      Error(out, 400,
            absl::StrCat("'", param, "' (function '", tools[i].name, "', strict): ", arguments.status().message()),
            param);
      return false;
    }
    functions.push_back({tools[i].name, *std::move(arguments)});
    names_and_schemas.emplace_back(tools[i].name, std::move(schema));
  }
  const std::string key = runtime::ToolCallGrammar::NameMasksKey(call, names_and_schemas);
  std::shared_ptr<runtime::MaskCache> name_masks = *tool_name_masks_.Get(key, [] {
    return absl::StatusOr<std::shared_ptr<runtime::MaskCache>>(
        std::make_shared<runtime::MaskCache>(runtime::JsonVocabulary::kMaxCachedMasks));
  });
  absl::StatusOr<std::shared_ptr<runtime::ToolCallGrammar>> grammar =
      runtime::ToolCallGrammar::Create(std::move(functions), model_.json_vocabulary, call, std::move(name_masks));
  if (!grammar.ok()) {
    if (!forced) return true;
    Error(out, 400, absl::StrCat("'tools': ", grammar.status().message()), "tools");
    return false;
  }
  *constraint = [grammar = *std::move(grammar)] { return grammar->NewConstraint(); };
  return true;
}

bool App::LoadImages(const std::vector<glm::ChatMessage>& messages,
                     std::vector<std::shared_ptr<const image::Patches>>* images, const std::shared_ptr<Responder>& out) {
  for (size_t i = 0; i < messages.size(); ++i) {
    for (size_t j = 0; j < messages[i].parts.size(); ++j) {
      const glm::ContentPart& part = messages[i].parts[j];
      if (part.type != glm::ContentPart::Type::kImage) continue;
      const std::string where = absl::StrCat("messages[", i, "].content[", j, "]");
      if (!model_.processor) {
        Error(out, 400, absl::StrCat(where, ": this model takes no images"), where);
        return false;
      }
      if (static_cast<int64_t>(images->size()) >= options_.max_images_per_prompt) {
        Error(out, 400,
              absl::StrCat(where, ": more images than the ", options_.max_images_per_prompt,
                           " a prompt may have (--limit-mm-per-prompt)"),
              where);
        return false;
      }
      absl::StatusOr<std::string> bytes = FetchImageBytes(part.text, options_.media, where);
      absl::StatusOr<image::RgbImage> rgb =
          bytes.ok() ? image::Decode(*bytes, where, options_.decode_limits) : absl::StatusOr<image::RgbImage>(bytes.status());
      absl::StatusOr<image::Patches> patches =
          rgb.ok() ? image::Preprocess(*rgb, *model_.processor, where) : absl::StatusOr<image::Patches>(rgb.status());
      if (!patches.ok()) {
        Error(out, 400, std::string(patches.status().message()), where);
        return false;
      }
      images->push_back(std::make_shared<const image::Patches>(std::move(*patches)));
    }
  }
  return true;
}

int64_t App::ExpandedLength(const std::vector<int32_t>& prompt,
                            const std::vector<std::shared_ptr<const image::Patches>>& images) const {
  int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t per_token = model_.processor ? int64_t{model_.processor->merge_size} * model_.processor->merge_size : 1;
  for (const auto& image : images) n += image->rows() / per_token - 1;
  return n;
}

void App::Completions(const HttpRequest& http, std::shared_ptr<Responder> out) {
  CompletionResult parsed = ParseCompletionRequest(http.body, options_.limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Send(out, *e);
  CompletionRequest& req = std::get<CompletionRequest>(parsed);
  std::vector<int32_t> prompt;
  std::string echo;
  if (const auto* text = std::get_if<std::string>(&req.prompt)) {
    prompt = model_.tokenizer->Encode(*text);
    if (req.echo) echo = *text;
  } else {
    prompt = std::get<std::vector<int32_t>>(req.prompt);
    for (int32_t id : prompt) {
      if (id < 0 || id >= model_.vocab_size) {
        return Error(out, 400, absl::StrCat("prompt token id ", id, " is outside the vocabulary [0, ", model_.vocab_size, ")"),
                     "prompt");
      }
    }
    if (req.echo) {
      absl::StatusOr<std::string> text = model_.tokenizer->Decode(prompt);
      if (!text.ok()) return Error(out, 400, std::string(text.status().message()), "prompt");
      echo = *text;
    }
  }
  if (prompt.empty()) return Error(out, 400, "the prompt is empty", "prompt");
  runtime::ConstraintFactory constraint;
  if (!Admit(req.options, static_cast<int64_t>(prompt.size()), out, "prompt", &constraint)) return;
  Run(req.options, std::move(prompt), /*chat=*/false, req.logprobs.value_or(-1), std::move(echo),
      req.return_token_ids, std::move(constraint), std::move(out));
}

void App::Tokenize(const HttpRequest& http, std::shared_ptr<Responder> out) {
  std::variant<TokenizeRequest, ApiError> parsed = ParseTokenizeRequest(http.body, options_.limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Send(out, *e);
  const TokenizeRequest& req = std::get<TokenizeRequest>(parsed);
  std::vector<int32_t> ids;
  if (req.prompt) {
    ids = model_.tokenizer->Encode(*req.prompt);
  } else {
    std::vector<std::shared_ptr<const image::Patches>> images;
    if (!LoadImages(req.messages, &images, out)) return;
    absl::StatusOr<std::vector<int32_t>> encoded = glm::EncodeChat(*model_.tokenizer, req.messages, model_.chat, req.tools);
    if (!encoded.ok()) {
      return Error(out, 400, std::string(encoded.status().message()), req.tools.empty() ? "messages" : "tools");
    }
    // The ids the model sees: each image token repeated for the image's rows.
    const int32_t image_token = model_.image_token_id;
    const int64_t per_token = model_.processor ? int64_t{model_.processor->merge_size} * model_.processor->merge_size : 1;
    size_t next = 0;
    for (const int32_t id : *encoded) {
      const bool image = !images.empty() && id == image_token && next < images.size();
      const int64_t copies = image ? images[next++]->rows() / per_token : 1;
      ids.insert(ids.end(), static_cast<size_t>(copies), id);
    }
  }
  out->Respond(200, "application/json",
               JsonText({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model_.max_context}}));
}

void App::Detokenize(const HttpRequest& http, std::shared_ptr<Responder> out) {
  std::variant<DetokenizeRequest, ApiError> parsed = ParseDetokenizeRequest(http.body, model_.tokenizer->vocab_size());
  if (auto* e = std::get_if<ApiError>(&parsed)) return Send(out, *e);
  absl::StatusOr<std::string> text = model_.tokenizer->Decode(std::get<DetokenizeRequest>(parsed).tokens);
  if (!text.ok()) return Error(out, 400, std::string(text.status().message()), "tokens");
  out->Respond(200, "application/json", JsonText({{"prompt", *text}}));
}

}  // namespace ag::serve
