// autoglm-run: generate from a prompt with a GLM-4 checkpoint.
//
//   autoglm-run --model DIR --prompt-ids 5,17,42 --max-new-tokens 16 [--output-json FILE]
//
// Compiles the model (or loads --plan FILE), prefills the prompt once, then
// decodes one token per step through the KV cache. Prints the new ids and the
// time per token; --output-json writes {"new_tokens": [...], "logits": [[...]]}
// with one logits row per position processed (P + N - 1 rows).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "runtime/engine.h"
#include "runtime/weights.h"
#include "tools/common.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory (config.json, *.safetensors)");
ABSL_FLAG(std::string, config, "", "a config.json, for --random-weights runs without a checkpoint");
ABSL_FLAG(std::string, plan, "", "a compiled .agplan (default: compile the model now)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, prompt_ids, "", "comma-separated prompt token ids");
ABSL_FLAG(int64_t, max_new_tokens, 32, "tokens to generate");
ABSL_FLAG(std::string, output_json, "", "write new tokens and every logits row to this file");
ABSL_FLAG(bool, stop_on_eos, false,
          "with --prompt-ids, stop at the model's end-of-sequence ids (off: exactly --max-new-tokens tokens)");
ABSL_FLAG(int64_t, random_weights, -1, "use seeded random weights (the seed) instead of the checkpoint's");
ABSL_FLAG(std::string, dtype, "", "when compiling: f32 or bf16 (default: f32 on cpu, bf16 on cuda)");
ABSL_FLAG(int64_t, max_batch_tokens, 256, "when compiling: tokens per step");
ABSL_FLAG(int64_t, max_seqs, 16, "when compiling: sequences per step");
ABSL_FLAG(int64_t, kv_block_size, 16, "when compiling: tokens per KV-cache block");
ABSL_FLAG(int64_t, max_context, 0, "maximum sequence length (default: the model's max_position_embeddings)");
ABSL_FLAG(int64_t, kv_cache_tokens, 0, "KV-cache capacity in tokens (default: see --help)");
ABSL_FLAG(float, temperature, 0.0f, "sampling temperature; 0 is greedy");
ABSL_FLAG(int32_t, top_k, 0, "sample among the k most likely tokens; 0 is off");
ABSL_FLAG(float, top_p, 1.0f, "sample among the most likely tokens holding this much probability");
ABSL_FLAG(float, repetition_penalty, 1.0f, "penalise tokens already in the sequence (transformers' rule)");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");

namespace ag::tools {
namespace {

absl::Status Run() {
  const std::string device = absl::GetFlag(FLAGS_device);
  ASSIGN_OR_RETURN(Model model, OpenModel(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_config)));
  const bool random = absl::GetFlag(FLAGS_random_weights) >= 0;
  if (!model.checkpoint && !random) return absl::InvalidArgumentError("--config needs --random-weights SEED");

  compiler::CompileOptions options;
  std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype.empty()) dtype = device == "cuda" ? "bf16" : "f32";
  ASSIGN_OR_RETURN(options.build.dtype, ParseModelDType(dtype));
  options.build.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.build.max_seqs = absl::GetFlag(FLAGS_max_seqs);
  options.build.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  ASSIGN_OR_RETURN(compiler::Plan plan, PlanForModel(model, absl::GetFlag(FLAGS_plan), options));

  runtime::Request request;
  ASSIGN_OR_RETURN(request.prompt, ParseIdList(absl::GetFlag(FLAGS_prompt_ids)));
  request.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  request.stop_on_eos = absl::GetFlag(FLAGS_stop_on_eos);
  const std::string json_path = absl::GetFlag(FLAGS_output_json);
  request.prompt_logits = request.keep_logits = !json_path.empty();
  request.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  request.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  request.sampling.repetition_penalty = absl::GetFlag(FLAGS_repetition_penalty);
  request.sampling.seed = absl::GetFlag(FLAGS_seed);

  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Backend> backend, MakeBackend(device));
  std::unique_ptr<runtime::WeightSource> weights;
  if (random) {
    weights = std::make_unique<runtime::RandomWeights>(static_cast<uint64_t>(absl::GetFlag(FLAGS_random_weights)));
  } else {
    weights = std::make_unique<runtime::CheckpointWeights>(*model.checkpoint);
  }
  runtime::EngineOptions engine_options;
  engine_options.max_context = absl::GetFlag(FLAGS_max_context);
  engine_options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                   runtime::Engine::Create(plan, *backend, *weights, engine_options));
  const size_t prompt_tokens = request.prompt.size();
  ASSIGN_OR_RETURN(int id, engine->Submit(std::move(request)));

  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;
  while (engine->HasWork()) {
    ASSIGN_OR_RETURN(std::vector<runtime::TokenEvent> events, engine->Step());
    const runtime::StepStats& stats = engine->last_step();
    if (stats.prefill_tokens > 0) {
      prefill_seconds += stats.seconds;
    } else {
      decode_seconds += stats.seconds;
      ++decode_steps;
    }
  }
  const std::vector<int32_t>& tokens = engine->new_tokens(id);
  std::printf("new_tokens: [%s]\n", absl::StrJoin(tokens, ", ").c_str());
  std::printf("finish: %s\n", runtime::FinishReasonName(engine->finish_reason(id)));
  std::printf("time: prefill %.3f ms for %zu prompt tokens; decode %.3f ms/token over %lld steps (%s backend)\n",
              prefill_seconds * 1e3, prompt_tokens,
              decode_steps > 0 ? decode_seconds * 1e3 / static_cast<double>(decode_steps) : 0.0,
              static_cast<long long>(decode_steps), std::string(backend->name()).c_str());
  if (!json_path.empty()) {
    nlohmann::json out;
    out["new_tokens"] = tokens;
    out["logits"] = engine->logits(id);
    std::ofstream file(json_path);
    if (!file) return absl::PermissionDeniedError(absl::StrCat(json_path, ": cannot write"));
    file << out.dump() << "\n";
    if (!file) return absl::InternalError(absl::StrCat(json_path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "generate with a GLM-4 model.\n  autoglm-run --model DIR --prompt-ids 5,17,42 --max-new-tokens 16 "
      "[--output-json FILE]");
  ag::tools::NormalizeFlagNames(argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status status = ag::tools::Run();
  if (!status.ok()) return ag::tools::ReportError("autoglm-run", status);
  return 0;
}
