// autoglm-compile: compile a GLM-4 model description into a plan file.
//
//   autoglm-compile --model DIR -o FILE.agplan [--max-batch-tokens N] [--max-seqs N]
//                   [--kv-block-size N] [--dtype bf16|f32] [--tp N] [--dump-after=PASS] [--disable-pass=PASS,...]
//
// --model checks every weight the plan names against the checkpoint's headers;
// --config FILE compiles from a config.json alone.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/driver.h"
#include "compiler/plan_file.h"
#include "compiler/summary.h"
#include "ir/status_macros.h"
#include "ir/text.h"
#include "tools/common.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory (config.json, *.safetensors)");
ABSL_FLAG(std::string, config, "", "a config.json, to compile without a checkpoint");
ABSL_FLAG(std::string, o, "", "output plan file");
ABSL_FLAG(int64_t, max_batch_tokens, 256, "most tokens in one step (prefill chunks and decode tokens)");
ABSL_FLAG(int64_t, max_seqs, 16, "most sequences in one step");
ABSL_FLAG(int64_t, kv_block_size, 16, "tokens per KV-cache block");
ABSL_FLAG(std::string, dtype, "f32", "f32 (the CPU golden path) or bf16 (the GPU)");
ABSL_FLAG(std::string, dump_after, "", "print the IR after this pass ('all': after every pass; 'build': before any)");
ABSL_FLAG(std::vector<std::string>, disable_pass, {}, "passes to skip, comma-separated");
ABSL_FLAG(bool, verify_each, true, "run the IR verifier after every pass");
ABSL_FLAG(std::string, quantize, "",
          "store the linear weights as fp8, int8 or int4 (int4 = int4:g128:asym; README 'Quantization'); "
          "the LM head and K/V rows of a 4-bit body stay 8-bit");
ABSL_FLAG(std::string, quantize_policy, "", "a file of 'PATTERN: FORMAT' lines that override --quantize per weight");
ABSL_FLAG(std::string, kv_cache_dtype, "auto", "the KV cache: auto (the model's dtype), fp8 or int8 (8-bit, a scale per token and KV head)");
ABSL_FLAG(int64_t, tp, 1, "tensor-parallel degree: the plan is one rank's share, run by every rank (autoglm-run --tp)");

namespace ag::tools {
namespace {

absl::Status Run() {
  const std::string out = absl::GetFlag(FLAGS_o);
  if (out.empty()) return absl::InvalidArgumentError("-o FILE.agplan is required");
  ASSIGN_OR_RETURN(Model model, OpenModel(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_config)));
  compiler::CompileOptions options;
  ASSIGN_OR_RETURN(options.build.dtype, ParseModelDType(absl::GetFlag(FLAGS_dtype)));
  options.build.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.build.max_seqs = absl::GetFlag(FLAGS_max_seqs);
  options.build.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  options.pipeline.disabled = absl::GetFlag(FLAGS_disable_pass);
  options.pipeline.verify_each = absl::GetFlag(FLAGS_verify_each);
  ASSIGN_OR_RETURN(options.quant, QuantPolicyFromFlags(absl::GetFlag(FLAGS_quantize), absl::GetFlag(FLAGS_quantize_policy)));
  ASSIGN_OR_RETURN(options.build.kv_dtype, ParseKvCacheDType(absl::GetFlag(FLAGS_kv_cache_dtype)));
  const int64_t tp = absl::GetFlag(FLAGS_tp);
  if (tp < 1 || tp > ir::kMaxTensorParallel) {
    return absl::InvalidArgumentError(absl::StrCat("--tp must be in [1, ", ir::kMaxTensorParallel, "], got ", tp));
  }
  options.tp = static_cast<int32_t>(tp);
  const std::string dump_after = absl::GetFlag(FLAGS_dump_after);
  if (dump_after == "build") {
    glm::BuildOptions build = options.build;
    build.image_rows = model.glm4v.has_value();
    ASSIGN_OR_RETURN(ir::Graph built, glm::BuildGlmGraph(model.config, build));
    std::cout << "// IR as built\n" << ir::PrintGraph(built);
  } else {
    options.pipeline.dump_after = dump_after;
  }
  options.pipeline.dump = [](absl::string_view pass, const ir::Graph& graph) {
    std::cout << "// IR after " << pass << "\n" << ir::PrintGraph(graph);
  };
  ASSIGN_OR_RETURN(compiler::CompileResult compiled, CompileModel(model, options));
  const compiler::Plan& plan = compiled.plan;
  RETURN_IF_ERROR(CheckPlan(plan, model));
  RETURN_IF_ERROR(compiler::WritePlanFile(plan, out));

  const compiler::PlanSummary s = compiler::Summarize(plan);
  std::vector<std::string> passes;
  for (const passes::PassRecord& r : compiled.passes) passes.push_back(r.name + (r.changed ? "" : " (no change)"));
  std::printf("compiled %s model, %lld layers, %s, tp %d -> %s\n", plan.model.layout.c_str(),
              static_cast<long long>(plan.model.num_layers), std::string(ir::DTypeName(plan.dtype)).c_str(), plan.tp,
              out.c_str());
  std::printf("passes: %s\n", passes.empty() ? "none" : absl::StrJoin(passes, ", ").c_str());
  std::printf("steps per forward step: %lld (%lld per layer, %lld outside layers)\n",
              static_cast<long long>(s.total_steps), static_cast<long long>(s.steps_per_layer),
              static_cast<long long>(s.steps_outside_layers));
  std::printf("arena: %lld bytes for up to %lld tokens and %lld sequences per step\n",
              static_cast<long long>(plan.decoder().arena_bytes), static_cast<long long>(plan.max_batch_tokens),
              static_cast<long long>(plan.max_seqs));
  if (const compiler::Program* vision = plan.FindProgram(compiler::kVisionProgram)) {
    std::printf("vision arena: %lld bytes for up to %lld patches of %lld images per step\n",
                static_cast<long long>(vision->arena_bytes), static_cast<long long>(vision->bounds.at("P")),
                static_cast<long long>(vision->bounds.at("I")));
  }
  std::printf("kv cache: %s%s, %lld bytes per token (blocks of %lld tokens)\n", std::string(ir::DTypeName(plan.kv.dtype)).c_str(),
              plan.kv.static_scales() ? " (the checkpoint's static scales)" : "",
              static_cast<long long>(plan.kv.BytesPerToken()), static_cast<long long>(plan.kv.block_size));
  std::printf("weights: %zu tensors, %lld bytes%s\n", plan.weights.size(), static_cast<long long>(s.weight_bytes),
              plan.tp > 1 ? " per rank" : "");
  if (s.bytes_by_format.size() > 1 || !s.bytes_by_format.contains(std::string(ir::DTypeName(plan.dtype)))) {
    for (const auto& [format, bytes] : s.bytes_by_format) {
      std::printf("  %s: %lld bytes\n", format.c_str(), static_cast<long long>(bytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("compile a GLM-4 model to a plan.\n  autoglm-compile --model DIR -o FILE.agplan");
  ag::tools::ParseFlagsOrExit(argc, argv, "autoglm-compile");
  absl::Status status = ag::tools::Run();
  if (!status.ok()) return ag::tools::ReportError("autoglm-compile", status);
  return 0;
}
