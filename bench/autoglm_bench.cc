// autoglm-bench: end-to-end step times for a model config with random weights.
//
//   autoglm-bench [--config FILE] [--device cuda|cpu] [--prompt-len 512] [--context 512]
//                 [--batches 1,8,32] [--iterations 50] [--json FILE]
//   autoglm-bench --profile [--profile-batch B] [--context C] [--json FILE]
//   autoglm-bench --glm4v [--config GLM4V_CONFIG] [--image-size 1080x2400] [--system-tokens 2000]
//                 [--step-tokens 300] [--reply-tokens 64]   (a phone-agent step: glm4v_bench.cc)
//
// Default config: GLM-4-9B (../shared/GLM_SPEC.md). Reports the time to first
// token for one prompt (one prefill step) and the median decode step at each
// batch size, timed on the device's clock over many steps after warm-up, each
// beside its floor: the bytes a decode step must read (every weight but the
// embedding table, plus the KV cache) at 4.45 TB/s, or the FLOPs of a prefill
// at 790 TFLOP/s.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/glm4_9b.h"
#include "bench/glm4v_bench.h"
#include "compiler/driver.h"
#include "compiler/summary.h"
#include "compiler/roofline.h"
#include "ir/status_macros.h"
#include "runtime/speculative.h"
#include "runtime/weights.h"
#include "tools/common.h"
#include "tools/parallel_flags.h"

ABSL_FLAG(std::string, config, "", "config.json (default: GLM-4-9B)");
ABSL_FLAG(std::string, device, "cuda", "cuda or cpu");
ABSL_FLAG(int64_t, prompt_len, 512, "prompt tokens for the time to first token");
ABSL_FLAG(int64_t, context, 512, "tokens already cached when a decode step runs");
ABSL_FLAG(std::vector<std::string>, batches, std::vector<std::string>({"1", "8", "32"}), "decode batch sizes");
ABSL_FLAG(std::vector<std::string>, verify_rows, std::vector<std::string>(),
          "speculative decoding's verify steps: each decode sequence feeds this many rows (its last token and "
          "drafts, every row's logits), timed beside the one-row step (e.g. 2,3,5)");
ABSL_FLAG(int32_t, iterations, 50, "timed steps per measurement");
ABSL_FLAG(int32_t, warmup, 5, "untimed steps first");
ABSL_FLAG(std::string, json, "", "also write the results here");
ABSL_FLAG(std::string, quantize, "",
          "store the linear weights quantized, as autoglm-compile --quantize does (int8, int4, fp8, ...; the floor "
          "counts their bytes)");
ABSL_FLAG(std::string, quantize_policy, "", "a file of 'PATTERN: FORMAT' lines that override --quantize per weight");
ABSL_FLAG(std::string, kv_cache_dtype, "auto", "the KV cache: auto (the model's dtype), fp8 or int8");
ABSL_FLAG(uint64_t, seed, 1, "random weight seed");
ABSL_FLAG(bool, profile, false,
          "instead: time every plan step of one decode step (--profile-batch sequences at --context) beside its "
          "floor; --json writes the table's data");
ABSL_FLAG(int64_t, profile_batch, 1, "with --profile: sequences in the step");
ABSL_FLAG(int64_t, profile_prompt, 0,
          "with --profile: instead of a decode step, the prefill of one prompt of this many tokens (the time to "
          "first token's step)");
ABSL_FLAG(bool, glm4v, false,
          "instead: a GLM-4.1V phone-agent step (preprocess, vision, time to first token, decode); --config is then "
          "a GLM-4.1V config (default: GLM-4.1V-9B)");

namespace ag::tools {
namespace {

constexpr double kBandwidth = 4.45e12;  // bytes/s read, measured on the H200
constexpr double kTensorRate = 790e12;  // bf16 FLOP/s, measured


double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A step where sequence s (blocks [s * per_seq, ...)) processes tokens [first, first + count).
void AddSequence(runtime::StepBatch& b, int64_t s, int64_t first, int64_t count, int64_t per_seq, int64_t block,
                 int64_t vocab, bool logits_for_all) {
  if (b.seq_offsets.empty()) b.seq_offsets.push_back(0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = first + i;
    b.tokens.push_back(static_cast<int32_t>((pos * 7919 + s * 104729) % vocab));
    b.positions.push_back(static_cast<int32_t>(pos));
    b.slot_mapping.push_back(static_cast<int32_t>((s * per_seq + pos / block) * block + pos % block));
    if (logits_for_all || i == count - 1) b.logit_rows.push_back(static_cast<int32_t>(b.num_tokens + i));
  }
  b.num_tokens += count;
  b.num_logit_rows = static_cast<int64_t>(b.logit_rows.size());
  b.seq_offsets.push_back(static_cast<int32_t>(b.num_tokens));
  b.context_lens.push_back(static_cast<int32_t>(first + count));
  for (int64_t j = 0; j < b.max_blocks; ++j) b.block_tables.push_back(static_cast<int32_t>(s * per_seq + j));
  ++b.num_seqs;
}

// Caches `context - 1` tokens for sequences [0, batch), in steps of the plan's size.
absl::Status FillContexts(runtime::Backend& backend, const compiler::Plan& plan, int64_t batch, int64_t context,
                          int64_t per_seq) {
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t first = 0; first < context - 1; first += plan.max_batch_tokens) {
      runtime::StepBatch fill;
      fill.max_blocks = per_seq;
      AddSequence(fill, s, first, std::min(plan.max_batch_tokens, context - 1 - first), per_seq, plan.kv.block_size,
                  plan.model.vocab_size, false);
      RETURN_IF_ERROR(backend.Execute(fill));
    }
  }
  return absl::OkStatus();
}

// One decode step: each of `batch` sequences adds its token at position context - 1; with `rows` > 1 a
// speculative verify step, the sequence's last `rows` positions (a token and its drafts), each with logits.
runtime::StepBatch DecodeStep(const compiler::Plan& plan, int64_t batch, int64_t context, int64_t per_seq,
                              int64_t rows = 1) {
  runtime::StepBatch b;
  b.max_blocks = per_seq;
  for (int64_t s = 0; s < batch; ++s) {
    AddSequence(b, s, context - rows, rows, per_seq, plan.kv.block_size, plan.model.vocab_size, true);
  }
  return b;
}

// --profile: the median time of every plan step over `iterations` eager
// steps, beside the step's floor (compiler/roofline.h): a decode step, or with `prompt` the
// prefill of one prompt of that many tokens (one step: prompt <= max_batch_tokens).
absl::Status Profile(runtime::Backend& backend, const compiler::Plan& plan, int64_t batch, int64_t context,
                     int64_t per_seq, int64_t prompt) {
  runtime::StepBatch step;
  if (prompt > 0) {
    if (prompt > plan.max_batch_tokens) return absl::InvalidArgumentError("--profile-prompt over the step's tokens");
    step.max_blocks = per_seq;
    AddSequence(step, 0, 0, prompt, per_seq, plan.kv.block_size, plan.model.vocab_size, false);
    batch = 1;
    context = prompt;
  } else {
    RETURN_IF_ERROR(FillContexts(backend, plan, batch, context, per_seq));
    step = DecodeStep(plan, batch, context, per_seq);
  }
  RETURN_IF_ERROR(backend.Execute(step));  // warm-up: first-use costs stay out of the profile
  const int iterations = std::max(1, absl::GetFlag(FLAGS_iterations) / 5);
  std::vector<std::vector<double>> samples(plan.decoder().steps.size());
  for (int i = 0; i < iterations; ++i) {
    ASSIGN_OR_RETURN(std::vector<double> us, backend.ProfileExecute(step));
    for (size_t k = 0; k < us.size() && k < samples.size(); ++k) samples[k].push_back(us[k]);
  }
  std::vector<double> median;
  for (const std::vector<double>& v : samples) median.push_back(Median(v));
  ASSIGN_OR_RETURN(const compiler::Roofline r,
                   compiler::PlanRoofline(plan, {batch, prompt > 0 ? prompt : 1, context}));
  std::printf("profile: %s, %lld sequences, context %lld, %s backend, median of %d eager steps\n%s",
              prompt > 0 ? "prefill" : "decode", static_cast<long long>(batch), static_cast<long long>(context),
              std::string(backend.name()).c_str(), iterations, compiler::FormatRoofline(r, &median).c_str());
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << compiler::RooflineJson(r, &median) << "\n";
    if (!out) return absl::InternalError(json_path + ": write failed");
  }
  return absl::OkStatus();
}

absl::Status Run() {
  glm::ModelConfig config;
  const std::string config_file = absl::GetFlag(FLAGS_config);
  if (absl::GetFlag(FLAGS_glm4v)) {
    return RunGlm4vBench(config_file, absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_iterations),
                         absl::GetFlag(FLAGS_seed), absl::GetFlag(FLAGS_json));
  }
  if (config_file.empty()) {
    ASSIGN_OR_RETURN(config, glm::ParseModelConfig(bench::kGlm4_9BConfig, "GLM-4-9B (built in)"));
  } else {
    ASSIGN_OR_RETURN(config, glm::LoadModelConfig(config_file));
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  const int64_t prompt = absl::GetFlag(FLAGS_prompt_len), context = absl::GetFlag(FLAGS_context);
  std::vector<int64_t> batches;
  for (const std::string& b : absl::GetFlag(FLAGS_batches)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(b, &v) || v <= 0) return absl::InvalidArgumentError("--batches takes positive integers");
    batches.push_back(v);
  }
  std::vector<int64_t> verify_rows;
  for (const std::string& r : absl::GetFlag(FLAGS_verify_rows)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(r, &v) || v < 2 || v > 1 + runtime::kMaxSpeculativeTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("--verify-rows takes integers in [2, ", 1 + runtime::kMaxSpeculativeTokens, "]"));
    }
    verify_rows.push_back(v);
  }
  const bool profile = absl::GetFlag(FLAGS_profile);
  if (profile) batches = {absl::GetFlag(FLAGS_profile_batch)};
  if (batches.front() <= 0) return absl::InvalidArgumentError("--profile-batch must be positive");
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  if (prompt <= 0 || context < 2 || prompt > config.max_position_embeddings || context > config.max_position_embeddings) {
    return absl::InvalidArgumentError("--prompt-len and --context must fit the model's context");
  }

  compiler::CompileOptions options;
  options.build.dtype = device == "cuda" ? ir::DType::kBF16 : ir::DType::kF32;
  const int64_t most_rows = verify_rows.empty() ? 1 : *std::max_element(verify_rows.begin(), verify_rows.end());
  if (most_rows >= context) return absl::InvalidArgumentError("--verify-rows must be below --context");
  options.build.max_batch_tokens = std::max<int64_t>({prompt, max_batch * most_rows, 64});
  options.build.max_seqs = max_batch;
  ASSIGN_OR_RETURN(options.quant, QuantPolicyFromFlags(absl::GetFlag(FLAGS_quantize), absl::GetFlag(FLAGS_quantize_policy)));
  ASSIGN_OR_RETURN(options.build.kv_dtype, ParseKvCacheDType(absl::GetFlag(FLAGS_kv_cache_dtype)));
  const ParallelOptions parallel = ParallelFlags();
  RETURN_IF_ERROR(CheckTpFlag(parallel.tp));
  options.tp = static_cast<int32_t>(std::max<int64_t>(parallel.tp, 1));
  ASSIGN_OR_RETURN(compiler::CompileResult compiled, compiler::Compile(config, options));
  const compiler::Plan& plan = compiled.plan;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Backend> backend, MakeBackend(device, plan.tp, parallel));
  const int64_t block = plan.kv.block_size;
  const int64_t per_seq = (std::max(prompt, context) + block) / block;
  runtime::RandomWeights weights(absl::GetFlag(FLAGS_seed));
  RETURN_IF_ERROR(backend->Load(plan, weights, per_seq * max_batch));
  if (profile) return Profile(*backend, plan, max_batch, context, per_seq, absl::GetFlag(FLAGS_profile_prompt));

  // Bytes a decode step must read (per rank at tp > 1): every weight except the embedding table, in the
  // format it is stored in (quantized rows with their scales), plus the KV cache.
  int64_t weight_bytes = 0, weight_elements = 0;
  for (const compiler::WeightEntry& w : plan.weights) {
    if (w.name != "model.embed_tokens.weight" || config.tie_word_embeddings) {
      weight_bytes += w.DeviceBytes();
      weight_elements += w.NumElements();
    }
  }
  const int iterations = absl::GetFlag(FLAGS_iterations), warmup = absl::GetFlag(FLAGS_warmup);
  nlohmann::json results;
  results["device"] = device;
  results["tp"] = plan.tp;
  results["layers"] = config.num_layers;
  results["hidden"] = config.hidden_size;
  results["weight_bytes_per_step"] = weight_bytes;
  // What the GPU holds of the weights (a rank's): --embedding-on-host leaves the table in host memory.
  const compiler::PlanSummary summary = compiler::Summarize(plan);
  results["weight_bytes_on_gpu"] = summary.weight_bytes - (parallel.embedding_on_host ? summary.lookup_only_bytes : 0);
  results["embedding_on_host"] = parallel.embedding_on_host;
  results["quantize"] = absl::GetFlag(FLAGS_quantize);
  results["kv_cache_dtype"] = std::string(ir::DTypeName(plan.kv.dtype));
  std::printf("%-28s %12s %12s %10s\n", "measurement", "median ms", "floor ms", "floor/ms");

  // Time to first token: one prefill step of the whole prompt.
  {
    runtime::StepBatch b;
    b.max_blocks = per_seq;
    AddSequence(b, 0, 0, prompt, per_seq, block, config.vocab_size, false);
    ASSIGN_OR_RETURN(std::vector<double> ms, backend->TimeExecute(b, warmup, std::max(5, iterations / 5)));
    const double median = Median(ms);
    const double flops = 2.0 * static_cast<double>(weight_elements) * static_cast<double>(prompt);
    const double floor = flops / kTensorRate * 1e3;
    std::printf("%-28s %12.3f %12.3f %10.3f\n", absl::StrFormat("ttft prompt=%d", prompt).c_str(), median, floor,
                floor / median);
    results["ttft"] = {{"prompt", prompt}, {"median_ms", median}, {"floor_ms", floor}, {"flops", flops}};
  }
  // Decode steps at each batch size, after caching `context - 1` tokens per sequence.
  for (int64_t batch : batches) {
    RETURN_IF_ERROR(FillContexts(*backend, plan, batch, context, per_seq));
    const runtime::StepBatch b = DecodeStep(plan, batch, context, per_seq);
    ASSIGN_OR_RETURN(std::vector<double> ms, backend->TimeExecute(b, warmup, iterations));
    const double median = Median(ms);
    const int64_t kv_bytes = batch * context * plan.kv.BytesPerToken();
    const double floor = static_cast<double>(weight_bytes + kv_bytes) / kBandwidth * 1e3;
    std::printf("%-28s %12.3f %12.3f %10.3f\n",
                absl::StrFormat("decode batch=%d ctx=%d", batch, context).c_str(), median, floor, floor / median);
    results["decode"].push_back({{"batch", batch},
                                 {"context", context},
                                 {"median_ms", median},
                                 {"floor_ms", floor},
                                 {"bytes", weight_bytes + kv_bytes},
                                 {"tokens_per_s", 1e3 * static_cast<double>(batch) / median}});
    // Speculative verify steps: what a step of `rows` rows a sequence costs beside the one-row step,
    // and so how many drafts a step must keep, on average, to be faster per token (break-even).
    for (const int64_t rows : verify_rows) {
      const runtime::StepBatch v = DecodeStep(plan, batch, context, per_seq, rows);
      ASSIGN_OR_RETURN(std::vector<double> vms, backend->TimeExecute(v, warmup, iterations));
      const double verify = Median(vms);
      std::printf("%-28s %12.3f %12s %10s  (%.2fx the one-row step: pays when more than %.2f drafts are kept)\n",
                  absl::StrFormat("verify batch=%d rows=%d", batch, rows).c_str(), verify, "-", "-",
                  verify / median, verify / median - 1.0);
      results["verify"].push_back({{"batch", batch},
                                   {"rows", rows},
                                   {"context", context},
                                   {"median_ms", verify},
                                   {"ratio_to_decode", verify / median},
                                   {"break_even_kept", verify / median - 1.0}});
    }
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << results.dump(1) << "\n";
    if (!out) return absl::InternalError(json_path + ": write failed");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("time GLM-4 steps with random weights.\n  autoglm-bench [--config FILE] [--device cuda]");
  ag::tools::ParseFlagsOrExit(argc, argv, "autoglm-bench");
  absl::Status status = ag::tools::Run();
  if (!status.ok()) return ag::tools::ReportError("autoglm-bench", status);
  return 0;
}
