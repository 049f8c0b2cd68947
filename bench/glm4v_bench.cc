// autoglm-bench --glm4v: one phone-agent step of GLM-4.1V (AutoGLM-Phone-9B)
// with random weights, through the engine as a server runs it:
//   png decode  the screenshot's PNG (RGBA, as the phone sends it) to RGB on the host;
//   preprocess  its resize, normalisation and patches on the host;
//   vision      one vision-program run over it (rows read back: the engine keeps them on the host);
//   agent ttft  a new request: the cached system prompt, the screenshot, the step's text,
//               to its first token (vision, prefill chunks and the pick);
//   decode      the median step of the reply that follows.
// Each beside its floor (compiler/roofline.h at 4.45 TB/s and 790 TFLOP/s).
#include "bench/glm4v_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/screenshot.h"
#include "compiler/driver.h"
#include "compiler/roofline.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "ir/status_macros.h"
#include "models/glm/read_file.h"
#include "models/glm4v/config.h"
#include "runtime/engine.h"
#include "runtime/multimodal.h"
#include "runtime/weights.h"
#include "tools/common.h"

ABSL_FLAG(std::string, image_size, "1080x2400", "with --glm4v: the screenshot, WIDTHxHEIGHT pixels");
ABSL_FLAG(int64_t, system_tokens, 2000, "with --glm4v: the cached system prompt's tokens");
ABSL_FLAG(int64_t, step_tokens, 300, "with --glm4v: the step's new text tokens after the screenshot");
ABSL_FLAG(int64_t, reply_tokens, 64, "with --glm4v: tokens decoded after the first");

namespace ag::tools {
namespace {

using Clock = std::chrono::steady_clock;

// GLM-4.1V-9B / AutoGLM-Phone-9B (../shared/GLM4V_SPEC.md section 1.2).
constexpr char kGlm4v9B[] = R"({"model_type":"glm4v","image_token_id":151343,"image_start_token_id":151339,
  "image_end_token_id":151340,"video_token_id":151344,"tie_word_embeddings":false,"dtype":"bfloat16",
  "text_config":{"vocab_size":151552,"hidden_size":4096,"num_hidden_layers":40,"num_attention_heads":32,
    "num_key_value_heads":2,"intermediate_size":13696,"hidden_act":"silu","rms_norm_eps":1e-05,"attention_bias":true,
    "max_position_embeddings":65536,"eos_token_id":[151329,151336,151338],
    "rope_parameters":{"rope_theta":10000.0,"partial_rotary_factor":0.5,"mrope_section":[8,12,12],"rope_type":"default"}},
  "vision_config":{"depth":24,"hidden_size":1536,"num_heads":12,"patch_size":14,"temporal_patch_size":2,
    "spatial_merge_size":2,"image_size":336,"in_channels":3,"out_hidden_size":4096,"intermediate_size":13696,
    "hidden_act":"silu","rms_norm_eps":1e-05,"attention_bias":false,
    "rope_parameters":{"rope_theta":10000.0,"rope_type":"axial"}}})";

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double Ms(Clock::time_point since) { return std::chrono::duration<double, std::milli>(Clock::now() - since).count(); }


struct Row {
  std::string name;
  double ms, floor_ms;
};

}  // namespace

absl::Status RunGlm4vBench(const std::string& config_file, const std::string& device, int iterations, uint64_t seed,
                           const std::string& json_path) {
  glm4v::Config config;
  if (config_file.empty()) {
    ASSIGN_OR_RETURN(config, glm4v::ParseConfig(kGlm4v9B, "GLM-4.1V-9B (built in)"));
  } else {
    ASSIGN_OR_RETURN(const std::string text, glm::ReadWholeFile(config_file));
    ASSIGN_OR_RETURN(config, glm4v::ParseConfig(text, config_file));
  }
  const std::vector<absl::string_view> wh = absl::StrSplit(absl::GetFlag(FLAGS_image_size), 'x');
  int width = 0, height = 0;
  if (wh.size() != 2 || !absl::SimpleAtoi(wh[0], &width) || !absl::SimpleAtoi(wh[1], &height) || width <= 0 ||
      height <= 0) {
    return absl::InvalidArgumentError("--image-size must be WIDTHxHEIGHT");
  }
  const int64_t system = absl::GetFlag(FLAGS_system_tokens), text = absl::GetFlag(FLAGS_step_tokens);
  const int64_t reply = absl::GetFlag(FLAGS_reply_tokens);
  if (system < 1 || text < 0 || reply < 1) {
    return absl::InvalidArgumentError("--system-tokens and --reply-tokens must be positive, --step-tokens not negative");
  }
  image::ProcessorConfig processor;
  processor.patch_size = static_cast<int>(config.vision.patch_size);
  processor.merge_size = static_cast<int>(config.vision.merge_size);
  processor.temporal_patch_size = static_cast<int>(config.vision.temporal_patch_size);

  // The screenshots: one per measured step, each new to the encoder cache, as the agent's are.
  const int runs = std::max(3, iterations / 10);
  std::vector<std::shared_ptr<const image::Patches>> shots;
  std::vector<double> png_ms, preprocess_ms;
  for (int i = 0; i < runs + 1; ++i) {
    const std::string png = bench::ScreenshotPng(width, height, static_cast<uint32_t>(seed + i));
    Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(const image::RgbImage rgb, image::Decode(png, "screenshot"));
    png_ms.push_back(Ms(start));
    start = Clock::now();
    ASSIGN_OR_RETURN(image::Patches p, image::Preprocess(rgb, processor, "screenshot"));
    preprocess_ms.push_back(Ms(start));
    shots.push_back(std::make_shared<const image::Patches>(std::move(p)));
  }
  const int64_t image_tokens = shots[0]->rows() / config.vision.patches_per_token();
  const int64_t new_tokens = image_tokens + text + 1;  // the image, the text, and <|assistant|>-like tail

  compiler::CompileOptions options;
  options.build.dtype = device == "cuda" ? ir::DType::kBF16 : ir::DType::kF32;
  options.build.max_batch_tokens = std::max<int64_t>(std::min<int64_t>(new_tokens, 8192), system);
  options.build.max_seqs = 4;
  options.max_vision_patches = std::max<int64_t>(shots[0]->rows(), 1024);
  options.max_images = 1;
  ASSIGN_OR_RETURN(compiler::CompileResult compiled, compiler::Compile(config, options));
  const compiler::Plan& plan = compiled.plan;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Backend> backend, MakeBackend(device, plan.tp, {}));
  runtime::RandomWeights weights(seed);
  runtime::EngineOptions engine_options;
  const int64_t context = system + new_tokens + reply + 16;
  if (context > plan.model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the agent step (", context, " tokens with ", image_tokens, " image tokens) is longer than the model's ",
        plan.model.max_position_embeddings, " positions: lower --system-tokens, --step-tokens, --image-size"));
  }
  engine_options.max_context = std::min(context, plan.model.max_position_embeddings);
  engine_options.kv_cache_tokens = 2 * context;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine, runtime::Engine::Create(plan, *backend, weights, engine_options));

  // Token ids: ordinary ones below the image token (the special tokens follow the ordinary ones).
  const int32_t image_token = static_cast<int32_t>(config.image_token_id);
  const int64_t ordinary = std::min<int64_t>(image_token, plan.model.vocab_size) - 10;
  auto text_ids = [&](int64_t n, int64_t salt) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + salt * 104729) % ordinary + 10));
    return ids;
  };
  const std::vector<int32_t> system_ids = text_ids(system, 0);
  auto run_to_end = [&](runtime::Request r, double* first_ms, std::vector<double>* decode_ms) -> absl::Status {
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(const int id, engine->Submit(std::move(r)));
    bool first = true;
    while (engine->HasWork()) {
      ASSIGN_OR_RETURN(std::vector<runtime::TokenEvent> events, engine->Step());
      if (first && !events.empty()) {
        if (first_ms != nullptr) *first_ms = Ms(start);
        first = false;
      } else if (!events.empty() && decode_ms != nullptr) {
        decode_ms->push_back(engine->last_step().seconds * 1e3);
      }
    }
    return engine->Release(id);
  };
  runtime::Request warm;  // the system prompt into the prefix cache
  warm.prompt = system_ids;
  warm.max_new_tokens = 1;
  warm.stop_on_eos = false;
  RETURN_IF_ERROR(run_to_end(warm, nullptr, nullptr));

  // Vision alone: the program over one screenshot, rows read back.
  std::vector<double> vision_ms;
  for (int i = 0; i < runs + 1; ++i) {
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(auto rows, runtime::EncodeImages(*backend, plan, {shots[i].get()}));
    if (i > 0) vision_ms.push_back(Ms(start));  // the first run pays first-use costs
  }
  // Agent steps: system (cached) + screenshot + text, to the first token, then the reply.
  std::vector<double> ttft_ms, decode_ms;
  for (int i = 0; i < runs + 1; ++i) {
    runtime::Request r;
    r.prompt = system_ids;
    r.prompt.push_back(image_token);
    const std::vector<int32_t> step = text_ids(text + 1, i + 1);
    r.prompt.insert(r.prompt.end(), step.begin(), step.end());
    r.images = {shots[i]};
    r.max_new_tokens = 1 + (i == runs ? reply : 0);
    r.stop_on_eos = false;
    double first = 0;
    RETURN_IF_ERROR(run_to_end(std::move(r), &first, i == runs ? &decode_ms : nullptr));
    if (i > 0) ttft_ms.push_back(first);
  }

  // Floors.
  std::vector<std::pair<int64_t, int64_t>> grid = {{shots[0]->grid_h, shots[0]->grid_w}};
  ASSIGN_OR_RETURN(const compiler::Roofline vision_floor, compiler::VisionRoofline(plan, grid));
  const int64_t chunk = plan.max_batch_tokens;
  double prefill_floor_us = 0;
  for (int64_t done = 0; done < new_tokens; done += chunk) {
    const int64_t n = std::min(chunk, new_tokens - done);
    const int64_t image_rows = std::max<int64_t>(std::min(done + n, image_tokens) - done, 0);  // the image comes first
    ASSIGN_OR_RETURN(const compiler::Roofline r, compiler::PlanRoofline(plan, {1, n, system + done + n, image_rows}));
    prefill_floor_us += r.floor_us;
  }
  ASSIGN_OR_RETURN(const compiler::Roofline decode_floor,
                   compiler::PlanRoofline(plan, {1, 1, system + new_tokens + reply / 2}));
  const std::vector<Row> rows = {
      {absl::StrFormat("png decode %dx%d (host)", width, height), Median(png_ms), 0.0},
      {absl::StrFormat("preprocess %dx%d (host)", width, height), Median(preprocess_ms), 0.0},
      {absl::StrFormat("vision %lld patches", static_cast<long long>(shots[0]->rows())), Median(vision_ms),
       vision_floor.floor_us / 1e3},
      {absl::StrFormat("agent ttft %lld+%lld+%lld", static_cast<long long>(system), static_cast<long long>(image_tokens),
                       static_cast<long long>(text + 1)),
       Median(ttft_ms), (vision_floor.floor_us + prefill_floor_us) / 1e3},
      {absl::StrFormat("decode ctx~%lld", static_cast<long long>(system + new_tokens)), Median(decode_ms),
       decode_floor.floor_us / 1e3}};
  std::printf("GLM-4.1V agent step, %s backend, %lld image tokens; median of %d\n", std::string(backend->name()).c_str(),
              static_cast<long long>(image_tokens), runs);
  std::printf("%-36s %12s %12s %10s\n", "measurement", "median ms", "floor ms", "floor/ms");
  nlohmann::json results;
  results["device"] = device;
  results["image_tokens"] = image_tokens;
  results["patches"] = shots[0]->rows();
  results["vision_flops"] = vision_floor.flops;
  for (const Row& row : rows) {
    std::printf("%-36s %12.3f %12.3f %10.3f\n", row.name.c_str(), row.ms, row.floor_ms,
                row.ms > 0 ? row.floor_ms / row.ms : 0.0);
    results["rows"].push_back({{"name", row.name}, {"median_ms", row.ms}, {"floor_ms", row.floor_ms}});
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << results.dump(1) << "\n";
    if (!out) return absl::InternalError(json_path + ": write failed");
  }
  return absl::OkStatus();
}

}  // namespace ag::tools
