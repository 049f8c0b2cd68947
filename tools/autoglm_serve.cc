// autoglm-serve: an OpenAI-compatible GLM server (serve/app.h). It listens at
// once (GET /health answers 503 while the model loads), loads the model and
// warms it up, then serves until SIGTERM or SIGINT: it stops accepting,
// lets in-flight requests finish (up to --shutdown-grace-seconds, then
// cancels them) and exits 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "image/preprocess.h"
#include "ir/status_macros.h"
#include "models/glm/chat.h"
#include "runtime/engine.h"
#include "runtime/engine_loop.h"
#include "runtime/speculative.h"
#include "runtime/weights.h"
#include "serve/app.h"
#include "serve/http_server.h"
#include "tools/parallel_flags.h"
#include "tools/common.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory (env MODEL_DIR)");
ABSL_FLAG(std::string, plan, "", "a compiled .agplan (default: compile the model now)");
ABSL_FLAG(std::string, device, "", "cuda or cpu (default: cuda when this build has it, else cpu)");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer directory (default: --model)");
ABSL_FLAG(std::string, host, "0.0.0.0", "address to listen on");
ABSL_FLAG(int32_t, port, 8080, "port to listen on; 0 picks a free one (env PORT)");
ABSL_FLAG(std::string, served_model_name, "", "the model's name in the API (env MODEL_NAME; default: the directory's)");
ABSL_FLAG(std::string, api_key, "", "require 'Authorization: Bearer KEY' on /v1 and tokenize (env API_KEY)");
ABSL_FLAG(int64_t, max_queue, 256, "requests in flight at once; more are answered 429");
ABSL_FLAG(double, kv_cache_gb, 0, "KV-cache size in GiB (env MAX_MEMORY_GB; default: the engine's)");
ABSL_FLAG(int64_t, max_context, 0, "maximum sequence length (default: the model's)");
ABSL_FLAG(std::string, dtype, "", "when compiling: f32 or bf16 (default: f32 on cpu, bf16 on cuda)");
ABSL_FLAG(int64_t, max_batch_tokens, 256, "when compiling: tokens per step");
ABSL_FLAG(int64_t, max_seqs, 16, "when compiling: sequences per step");
ABSL_FLAG(std::string, kv_cache_dtype, "auto", "when compiling: the KV cache, auto (the model's dtype), fp8 (fp8_e4m3) or int8");
ABSL_FLAG(int64_t, kv_block_size, 16, "when compiling: tokens per KV-cache block");
ABSL_FLAG(bool, prefix_caching, true, "reuse cached K/V of shared prompt prefixes");
ABSL_FLAG(std::string, speculative_config, "",
          "prompt-lookup drafts, vLLM's JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
          "\"prompt_lookup_max\": 4[, \"prompt_lookup_min\": 2, \"disable_by_batch_size\": 8]}");
ABSL_FLAG(int32_t, http_threads, 4, "I/O threads serving connections");
ABSL_FLAG(int64_t, max_body_mb, 8, "largest request body in MiB; larger is answered 413");
ABSL_FLAG(int64_t, max_stream_backlog_kb, 4096,
          "a streaming client that leaves more than this unread is dropped and its request cancelled");
ABSL_FLAG(int32_t, request_timeout_seconds, 30, "a request (headers and body) must arrive within this; else 408");
ABSL_FLAG(int32_t, shutdown_grace_seconds, 30, "on SIGTERM, how long in-flight requests may still run");
ABSL_FLAG(std::string, log_level, "info", "error, info or debug (env LOG_LEVEL)");
// vLLM's flags, as the Open-AutoGLM README starts vLLM with them (see the README's agent section).
ABSL_FLAG(int64_t, max_model_len, 0, "vLLM's name for --max-context");
ABSL_FLAG(std::string, chat_template_content_format, "auto",
          "how a chat's content lists are rendered: string (image placeholders first, texts joined by newlines: what "
          "the phone agent asks for), openai (parts in place), auto (the template's choice, as vLLM decides it)");
ABSL_FLAG(std::string, limit_mm_per_prompt, "", "the most images a prompt may carry, as JSON: {\"image\": 10} (default 16)");
ABSL_FLAG(std::string, mm_processor_kwargs, "",
          "image processor settings as JSON: {\"max_pixels\": N, \"min_pixels\": N} bound the resize (vLLM ignores "
          "them for GLM-4.1V; here they apply)");
ABSL_FLAG(std::string, allowed_local_media_path, "",
          "chat images may be file:// URLs or paths under this folder (default: none may)");
ABSL_FLAG(bool, allow_remote_media, false,
          "chat images may be http:// or https:// URLs (certificates checked against the system's trust store; "
          "at most 32 MiB, within --media-fetch-timeout-seconds)");
ABSL_FLAG(double, media_fetch_timeout_seconds, 5,
          "the most one remote image may take, lookup to last byte (env VLLM_IMAGE_FETCH_TIMEOUT, vLLM's name)");
ABSL_FLAG(std::string, reasoning_parser, "",
          "glm45: a chat answer's <think>...</think> goes to reasoning_content (streamed too), as vLLM's parser does; "
          "default: all of it stays in content (the phone agent parses it there)");
ABSL_FLAG(std::string, mm_encoder_tp_mode, "", "accepted for vLLM's command line; the vision program runs on rank 0");
ABSL_FLAG(std::string, mm_processor_cache_type, "",
          "accepted for vLLM's command line; images are cached by content hash in the engine");

namespace ag::tools {
namespace {

// Whether --flag (or --flag=..., any spelling with - or _) is on the command line.
bool Given(const std::vector<std::string>& args, const std::string& flag) {
  for (std::string a : args) {
    if (a.rfind("--", 0) != 0) continue;
    a = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    std::replace(a.begin(), a.end(), '-', '_');
    if (a == flag || a == "no" + flag) return true;
  }
  return false;
}

// Environment settings, each used only when its flag was not given.
absl::Status ApplyEnvironment(const std::vector<std::string>& args) {
  auto given = [&](const char* flag) { return Given(args, flag); };
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* v = env("MODEL_DIR"); v && !given("model")) absl::SetFlag(&FLAGS_model, v);
  if (const char* v = env("MODEL_NAME"); v && !given("served_model_name")) absl::SetFlag(&FLAGS_served_model_name, v);
  if (const char* v = env("API_KEY"); v && !given("api_key")) absl::SetFlag(&FLAGS_api_key, v);
  if (const char* v = env("LOG_LEVEL"); v && !given("log_level")) absl::SetFlag(&FLAGS_log_level, v);
  if (const char* v = env("PORT"); v && !given("port")) {
    int32_t port = 0;
    if (!absl::SimpleAtoi(v, &port)) return absl::InvalidArgumentError(absl::StrCat("PORT: '", v, "' is not a number"));
    absl::SetFlag(&FLAGS_port, port);
  }
  if (const char* v = env("VLLM_IMAGE_FETCH_TIMEOUT"); v && !given("media_fetch_timeout_seconds")) {
    double seconds = 0;
    if (!absl::SimpleAtod(v, &seconds)) {
      return absl::InvalidArgumentError(absl::StrCat("VLLM_IMAGE_FETCH_TIMEOUT: '", v, "' is not a number"));
    }
    absl::SetFlag(&FLAGS_media_fetch_timeout_seconds, seconds);
  }
  if (const char* v = env("MAX_MEMORY_GB"); v && !given("kv_cache_gb")) {
    double gb = 0;
    if (!absl::SimpleAtod(v, &gb)) {
      return absl::InvalidArgumentError(absl::StrCat("MAX_MEMORY_GB: '", v, "' is not a number"));
    }
    absl::SetFlag(&FLAGS_kv_cache_gb, gb);
  }
  return absl::OkStatus();
}

// --mm-processor-kwargs: {"max_pixels": N, "min_pixels": N}; anything else is an error naming it.
absl::Status ApplyProcessorKwargs(const std::string& text, image::ProcessorConfig* config) {
  if (text.empty()) return absl::OkStatus();
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("--mm-processor-kwargs must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key != "max_pixels" && key != "min_pixels") {
      return absl::InvalidArgumentError(
          absl::StrCat("--mm-processor-kwargs: '", key, "' is not a setting here (max_pixels, min_pixels)"));
    }
    if (!value.is_number_integer() || value.get<int64_t>() < 28 * 28 || value.get<int64_t>() > (int64_t{1} << 34)) {
      return absl::InvalidArgumentError(absl::StrCat("--mm-processor-kwargs: '", key, "' must be an integer in [784, 2^34]"));
    }
    (key == "max_pixels" ? config->max_pixels : config->min_pixels) = value.get<int64_t>();
  }
  if (config->min_pixels > config->max_pixels) {
    return absl::InvalidArgumentError("--mm-processor-kwargs: min_pixels is more than max_pixels");
  }
  return absl::OkStatus();
}

// --limit-mm-per-prompt: {"image": N} (vLLM also takes "image=N").
absl::StatusOr<int64_t> ParseImageLimit(const std::string& text) {
  if (text.empty()) return 16;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  int64_t n = -1;
  if (!j.is_discarded() && j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (key == "image" && value.is_number_integer()) {
        n = value.get<int64_t>();
      } else if (key != "video" || !value.is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat("--limit-mm-per-prompt: '", key, "' is not a limit here (image)"));
      }
    }
    if (!j.contains("image")) n = 16;
  } else if (text.rfind("image=", 0) == 0 && !absl::SimpleAtoi(text.substr(6), &n)) {
    n = -1;
  }
  if (n < 0 || n > 1024) {
    return absl::InvalidArgumentError("--limit-mm-per-prompt must be {\"image\": N} with N in [0, 1024]");
  }
  return n;
}

// Everything the engine refers to, kept alive for the server's life.
struct Loaded {
  Model model;
  compiler::Plan plan;
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::WeightSource> weights;
};

absl::Status Load(Loaded& loaded, serve::App& app, const std::string& device) {
  ASSIGN_OR_RETURN(loaded.model, OpenModel(absl::GetFlag(FLAGS_model), ""));
  ASSIGN_OR_RETURN(compiler::CompileOptions options,
                   BuildOptions(absl::GetFlag(FLAGS_dtype), device, absl::GetFlag(FLAGS_max_batch_tokens),
                                absl::GetFlag(FLAGS_max_seqs), absl::GetFlag(FLAGS_kv_block_size)));
  ASSIGN_OR_RETURN(options.build.kv_dtype, ParseKvCacheDType(absl::GetFlag(FLAGS_kv_cache_dtype)));
  const ParallelOptions parallel = ParallelFlags();
  ASSIGN_OR_RETURN(loaded.plan, PlanForModel(loaded.model, absl::GetFlag(FLAGS_plan), options, parallel.tp));

  std::string dir = absl::GetFlag(FLAGS_tokenizer);
  if (dir.empty()) dir = absl::GetFlag(FLAGS_model);
  ASSIGN_OR_RETURN(std::unique_ptr<glm::Tokenizer> tokenizer, glm::Tokenizer::Load(dir));
  if (tokenizer->vocab_size() > loaded.plan.model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer in ", dir, " has ", tokenizer->vocab_size(),
                                                   " tokens, more than the model's vocabulary of ",
                                                   loaded.plan.model.vocab_size));
  }
  ASSIGN_OR_RETURN(loaded.backend, MakeBackend(device, loaded.plan.tp, parallel));
  loaded.weights = std::make_unique<runtime::CheckpointWeights>(*loaded.model.checkpoint);
  runtime::EngineOptions engine_options;
  engine_options.max_context = absl::GetFlag(FLAGS_max_context);
  if (absl::GetFlag(FLAGS_max_model_len) != 0) {
    if (engine_options.max_context != 0 && engine_options.max_context != absl::GetFlag(FLAGS_max_model_len)) {
      return absl::InvalidArgumentError("--max-model-len and --max-context differ (they are the same setting)");
    }
    engine_options.max_context = absl::GetFlag(FLAGS_max_model_len);
  }
  engine_options.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  ASSIGN_OR_RETURN(engine_options.speculative, runtime::ParseSpeculativeConfig(absl::GetFlag(FLAGS_speculative_config)));
  const double gb = absl::GetFlag(FLAGS_kv_cache_gb);
  if (gb < 0 || gb > 1e6) return absl::InvalidArgumentError("--kv-cache-gb must be in [0, 1e6]");
  if (gb > 0) {
    engine_options.kv_cache_tokens =
        static_cast<int64_t>(gb * static_cast<double>(int64_t{1} << 30) / loaded.plan.kv.BytesPerToken());
    if (engine_options.kv_cache_tokens < 1) return absl::InvalidArgumentError("--kv-cache-gb holds no token");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                   runtime::Engine::Create(loaded.plan, *loaded.backend, *loaded.weights, engine_options));

  serve::LoadedModel model;
  ASSIGN_OR_RETURN(model.chat.chat_template,
                   glm::DetectChatTemplate(dir, loaded.model.glm4v ? glm::ChatTemplate::kGlm4v : glm::ChatTemplate::kGlm4));
  const std::string format = absl::GetFlag(FLAGS_chat_template_content_format);
  if (format == "auto") {
    model.chat.content_format = glm::DefaultContentFormat(model.chat.chat_template);
  } else if (format == "string" || format == "openai") {
    model.chat.content_format = format == "string" ? glm::ContentFormat::kString : glm::ContentFormat::kOpenai;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat-template-content-format must be auto, string or openai, got '", format, "'"));
  }
  if (loaded.model.glm4v) {
    ASSIGN_OR_RETURN(model.processor, LoadProcessorConfig(loaded.model));
    RETURN_IF_ERROR(ApplyProcessorKwargs(absl::GetFlag(FLAGS_mm_processor_kwargs), &*model.processor));
  }
  model.max_context = engine->max_context();
  model.image_token_id = static_cast<int32_t>(loaded.plan.model.image_token_id);
  model.vocab_size = static_cast<int32_t>(loaded.plan.model.vocab_size);
  for (int64_t id : loaded.plan.model.eos_token_ids) model.eos_ids.push_back(static_cast<int32_t>(id));
  model.loop = std::make_unique<runtime::EngineLoop>(std::move(engine));
  // JSON mode's vocabulary (~50 ms for GLM-4's): none when the tokenizer lacks a printable character,
  // and then response_format json_object is a 400 naming the reason.
  absl::StatusOr<std::shared_ptr<runtime::JsonVocabulary>> json_vocabulary = runtime::JsonVocabulary::Build(*tokenizer);
  if (json_vocabulary.ok()) model.json_vocabulary = *json_vocabulary;
  model.tokenizer = std::move(tokenizer);

  // Warm-up, so that the first client pays no first-use costs (lazily loaded kernels, allocations):
  // a prompt long enough for the prefill GEMM next to a short one (decode at batches 2 and 1), each
  // with a sampled token and logprobs, the paths a request can take.
  const int64_t long_prompt = std::min<int64_t>({80, model.max_context - 3, loaded.plan.max_batch_tokens - 1});
  std::atomic<int> pending{0};
  absl::Status warm_status;
  std::mutex warm_mu;
  for (const int64_t length : {long_prompt, int64_t{8}}) {
    runtime::Request warm;
    for (int64_t i = 0; i < std::max<int64_t>(length, 1); ++i) warm.prompt.push_back(static_cast<int32_t>(i % 7));
    warm.max_new_tokens = 3;
    warm.stop_on_eos = false;
    warm.sampling.temperature = 0.7f;
    ++pending;
    model.loop->Submit(std::move(warm), [&](const runtime::StreamEvent& e) {
      if (!e.error.ok()) {
        std::lock_guard<std::mutex> lock(warm_mu);
        warm_status = e.error;
      }
      if (e.finished) --pending;
    }, /*n=*/1, /*top_logprobs=*/1);
  }
  while (pending > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!warm_status.ok()) return absl::InternalError(absl::StrCat("warm-up failed: ", warm_status.message()));
  if (!app.SetModel(std::move(model))) return absl::CancelledError("a signal came while loading");
  return absl::OkStatus();
}

int Serve(const std::vector<std::string>& args) {
  if (absl::Status s = ApplyEnvironment(args); !s.ok()) return ReportError("autoglm-serve", s);
  const std::string level = absl::GetFlag(FLAGS_log_level);
  if (level != "error" && level != "info" && level != "debug") {
    return ReportError("autoglm-serve", absl::InvalidArgumentError("--log-level must be error, info or debug"));
  }
  const bool info = level != "error";
  for (const auto& [flag, value] : {std::pair{"--mm-encoder-tp-mode", absl::GetFlag(FLAGS_mm_encoder_tp_mode)},
                                    std::pair{"--mm-processor-cache-type", absl::GetFlag(FLAGS_mm_processor_cache_type)}}) {
    if (!value.empty() && info) {
      std::fprintf(stderr, "autoglm-serve: %s %s has no meaning in this engine; ignored\n", flag, value.c_str());
    }
  }
  if (absl::GetFlag(FLAGS_model).empty()) {
    return ReportError("autoglm-serve", absl::InvalidArgumentError("--model DIR (or MODEL_DIR) is required"));
  }
  if (ParallelFlags().nnodes != 1) {
    return ReportError("autoglm-serve", absl::UnimplementedError("--nnodes: the server runs on one node (its GPUs: "
                                                                 "--tp, --devices); across nodes only autoglm-run "
                                                                 "and autoglm-bench"));
  }
  std::string device = absl::GetFlag(FLAGS_device);
  if (device.empty()) device = HaveCudaBackend() ? "cuda" : "cpu";
  serve::AppOptions options;
  options.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  if (options.served_model_name.empty()) {
    options.served_model_name = std::filesystem::path(absl::GetFlag(FLAGS_model)).lexically_normal().filename().string();
    if (options.served_model_name.empty()) {
      options.served_model_name =
          std::filesystem::path(absl::GetFlag(FLAGS_model)).lexically_normal().parent_path().filename().string();
    }
  }
  options.api_key = absl::GetFlag(FLAGS_api_key);
  absl::StatusOr<int64_t> image_limit = ParseImageLimit(absl::GetFlag(FLAGS_limit_mm_per_prompt));
  if (!image_limit.ok()) return ReportError("autoglm-serve", image_limit.status());
  options.max_images_per_prompt = *image_limit;
  // Checked before listening (Load parses it again when it builds the engine).
  if (absl::Status spec = runtime::ParseSpeculativeConfig(absl::GetFlag(FLAGS_speculative_config)).status(); !spec.ok()) {
    return ReportError("autoglm-serve", spec);
  }
  const std::string parser = absl::GetFlag(FLAGS_reasoning_parser);
  if (!parser.empty() && parser != "glm45") {
    return ReportError("autoglm-serve", absl::InvalidArgumentError(
                                            absl::StrCat("--reasoning-parser: '", parser, "' is not one here (glm45)")));
  }
  options.reasoning_parser = parser == "glm45";
  options.media.allowed_local_path = absl::GetFlag(FLAGS_allowed_local_media_path);
  options.media.allow_remote = absl::GetFlag(FLAGS_allow_remote_media);
  const double fetch_seconds = absl::GetFlag(FLAGS_media_fetch_timeout_seconds);
  if (!(fetch_seconds > 0 && fetch_seconds <= 3600)) {
    return ReportError("autoglm-serve", absl::InvalidArgumentError("--media-fetch-timeout-seconds must be in (0, 3600]"));
  }
  options.media.remote_timeout_ms = static_cast<int>(fetch_seconds * 1000);
  if (!options.media.allowed_local_path.empty() && !std::filesystem::is_directory(options.media.allowed_local_path)) {
    return ReportError("autoglm-serve", absl::InvalidArgumentError(absl::StrCat(
                                            "--allowed-local-media-path: ", options.media.allowed_local_path,
                                            " is not a folder")));
  }
  options.max_queue = absl::GetFlag(FLAGS_max_queue);
  if (options.max_queue < 1) return ReportError("autoglm-serve", absl::InvalidArgumentError("--max-queue must be >= 1"));
  serve::HttpLimits limits;
  limits.threads = absl::GetFlag(FLAGS_http_threads);
  const int64_t body_mb = absl::GetFlag(FLAGS_max_body_mb);
  if (limits.threads < 1 || limits.threads > 256 || body_mb < 1 || body_mb > 1024) {
    return ReportError("autoglm-serve",
                       absl::InvalidArgumentError("--http-threads must be in [1, 256], --max-body-mb in [1, 1024]"));
  }
  limits.max_body_bytes = static_cast<size_t>(body_mb) << 20;
  const int64_t backlog_kb = absl::GetFlag(FLAGS_max_stream_backlog_kb);
  if (backlog_kb < 1 || backlog_kb > (int64_t{1} << 30)) {
    return ReportError("autoglm-serve", absl::InvalidArgumentError("--max-stream-backlog-kb must be in [1, 2^30]"));
  }
  limits.max_queued_bytes = static_cast<size_t>(backlog_kb) << 10;
  limits.read_timeout_seconds = absl::GetFlag(FLAGS_request_timeout_seconds);
  if (limits.read_timeout_seconds < 1 || limits.read_timeout_seconds > 3600) {
    return ReportError("autoglm-serve", absl::InvalidArgumentError("--request-timeout-seconds must be in [1, 3600]"));
  }

  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error code, not the end of the server
  // Signals are taken by sigwait below, not by whichever thread they land on.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Declared before the app: the app's engine loop runs on the backend and plan in `loaded`, so
  // it must be stopped and joined (~App) before they go. (The other order let the loop thread
  // finish its last step on a freed backend at exit: a server that sometimes never exited.)
  Loaded loaded;
  serve::App app(options);
  const bool debug = level == "debug";
  absl::StatusOr<std::unique_ptr<serve::HttpServer>> server = serve::HttpServer::Start(
      absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_port), limits,
      [&app, debug](serve::HttpRequest request, std::shared_ptr<serve::Responder> out) {
        if (debug) std::fprintf(stderr, "autoglm-serve: %s %s\n", request.method.c_str(), request.target.substr(0, 200).c_str());
        app.Handle(std::move(request), std::move(out));
      });
  if (!server.ok()) return ReportError("autoglm-serve", server.status());
  if (info) std::fprintf(stderr, "autoglm-serve: listening on %s:%d; loading %s on %s\n",
                         absl::GetFlag(FLAGS_host).c_str(), (*server)->port(), absl::GetFlag(FLAGS_model).c_str(),
                         device.c_str());

  absl::Status load_status;
  std::atomic<bool> load_done{false};
  std::thread loader([&] {
    load_status = Load(loaded, app, device);
    if (load_status.ok() && info) std::fprintf(stderr, "autoglm-serve: ready\n");
    load_done = true;
    if (!load_status.ok()) kill(getpid(), SIGTERM);  // wakes the sigwait below
  });
  int signal = 0;
  sigwait(&signals, &signal);
  const bool load_failed = load_done && !load_status.ok();
  // A signal while loading: nothing was admitted, and CloseIfLoading makes sure nothing will be.
  if (!load_failed && app.CloseIfLoading()) {
    if (info) std::fprintf(stderr, "autoglm-serve: signal %d while loading; exiting\n", signal);
    std::_Exit(0);
  }
  loader.join();
  if (!load_status.ok()) {
    (*server)->Stop();
    return ReportError("autoglm-serve", load_status);
  }
  if (info) std::fprintf(stderr, "autoglm-serve: signal %d: draining %lld requests\n", signal,
                         static_cast<long long>(app.in_flight()));
  (*server)->StopAccepting();
  app.StopAdmitting();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
  while (app.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Whatever outlived the grace period is cancelled: its client gets an error event and [DONE] (a
  // stream) or a 503, and the I/O threads get a moment to write those before they stop.
  app.Shutdown();
  if (!(*server)->WaitForResponses(5.0) && info) {
    std::fprintf(stderr, "autoglm-serve: some answers could not be written within 5 s\n");
  }
  (*server)->Stop();  // no request handler runs after this
  app.Close();        // and no request's responder outlives the server
  if (info) std::fprintf(stderr, "autoglm-serve: stopped\n");
  return 0;
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "an OpenAI-compatible GLM server.\n  autoglm-serve --model DIR [--device cuda|cpu] [--port 8080] "
      "[--api-key KEY] ...");
  const std::vector<std::string> args(argv, argv + argc);
  ag::tools::ParseFlagsOrExit(argc, argv, "autoglm-serve");
  return ag::tools::Serve(args);
}
