// autoglm-inspect: print a plan file.
//
//   autoglm-inspect FILE.agplan [--json]
//   autoglm-inspect FILE.agplan --roofline [--batch B] [--context C] [--tokens-per-seq N] [--json]
//   autoglm-inspect FILE.agplan --roofline --image-size WxH[,WxH...] [--json]   (GLM-4.1V's vision program)
//
// The text form lists the plan's inputs, weights and steps in order (the
// names an Nsight timeline shows), and the CUDA launches a layer takes at
// decode batches 1/8/32/64 and for a 512-token prompt (runtime/cuda_launches.h:
// the backend's dispatch rules, no GPU needed). --json prints counts:
// {"steps_per_layer", "total_steps", "arena_bytes", "kernels": {name: count},
//  "cuda_launches_per_layer": {"decode_1": n, ...}, ...}.
// --roofline prints, per step, the bytes and FLOPs of one step of that shape
// and its floor time on the H200 (no GPU needed); with --image-size, of one
// vision-program run over images of those pixel sizes (resized as the
// default GLM-4.1V processor does: 1080x2400 is 13,416 patches, 3,354 tokens).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/plan_file.h"
#include "compiler/roofline.h"
#include "compiler/summary.h"
#include "ir/status_macros.h"
#include "runtime/cuda_launches.h"
#include "tools/common.h"

ABSL_FLAG(bool, json, false, "print counts as JSON");
ABSL_FLAG(bool, roofline, false, "print each step's bytes, FLOPs and floor time at --batch / --context");
ABSL_FLAG(int64_t, batch, 1, "with --roofline: sequences in the step");
ABSL_FLAG(int64_t, context, 512, "with --roofline: tokens in each sequence's KV cache after the step");
ABSL_FLAG(int64_t, tokens_per_seq, 1, "with --roofline: new tokens per sequence (1: decode; more: prefill)");
ABSL_FLAG(std::string, image_size, "",
          "with --roofline: the vision program over images of these pixel sizes, WIDTHxHEIGHT[,WIDTHxHEIGHT...]");

namespace ag::tools {
namespace {

// "1080x2400,640x480" -> the patch grids the default GLM-4.1V processor makes of them.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ImageGrids(const std::string& sizes) {
  const image::ProcessorConfig config;
  std::vector<std::pair<int64_t, int64_t>> grids;
  for (absl::string_view size : absl::StrSplit(sizes, ',')) {
    const std::vector<absl::string_view> wh = absl::StrSplit(size, 'x');
    int width = 0, height = 0;
    if (wh.size() != 2 || !absl::SimpleAtoi(wh[0], &width) || !absl::SimpleAtoi(wh[1], &height)) {
      return absl::InvalidArgumentError(absl::StrCat("--image-size: '", size, "' is not WIDTHxHEIGHT"));
    }
    ASSIGN_OR_RETURN(const auto resized, image::SmartResize(height, width, config));
    grids.emplace_back(resized.first / config.patch_size, resized.second / config.patch_size);
  }
  return grids;
}

// The batch shapes whose CUDA launches per layer inspect counts: decode at four batch sizes and a
// 512-token prompt, at context 512.
std::vector<std::pair<std::string, runtime::LaunchShape>> LaunchShapes() {
  std::vector<std::pair<std::string, runtime::LaunchShape>> shapes;
  for (int64_t batch : {1, 8, 32, 64}) shapes.push_back({absl::StrCat("decode_", batch), {batch, 1, 512}});
  shapes.push_back({"prefill_512", {1, 512, 512}});
  return shapes;
}

absl::Status Run(const std::string& path) {
  ASSIGN_OR_RETURN(compiler::Plan plan, compiler::ReadPlanFile(path));
  const compiler::PlanSummary s = compiler::Summarize(plan);
  if (absl::GetFlag(FLAGS_roofline) && !absl::GetFlag(FLAGS_image_size).empty()) {
    ASSIGN_OR_RETURN(const auto grids, ImageGrids(absl::GetFlag(FLAGS_image_size)));
    ASSIGN_OR_RETURN(const compiler::Roofline r, compiler::VisionRoofline(plan, grids));
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", compiler::RooflineJson(r).c_str());
    } else {
      std::vector<std::string> shown;
      for (const auto& [h, w] : grids) shown.push_back(absl::StrCat(h, "x", w));
      std::printf("vision roofline: patch grids (rows x columns) %s; 4.45 TB/s, 790 TFLOP/s\n%s",
                  absl::StrJoin(shown, ", ").c_str(), compiler::FormatRoofline(r).c_str());
    }
    return absl::OkStatus();
  }
  if (!absl::GetFlag(FLAGS_image_size).empty()) return absl::InvalidArgumentError("--image-size goes with --roofline");
  if (absl::GetFlag(FLAGS_roofline)) {
    const compiler::StepShape shape{absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_tokens_per_seq),
                                    absl::GetFlag(FLAGS_context)};
    ASSIGN_OR_RETURN(const compiler::Roofline r, compiler::PlanRoofline(plan, shape));
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("%s\n", compiler::RooflineJson(r).c_str());
    } else {
      std::printf("roofline: %lld sequences x %lld tokens, context %lld; 4.45 TB/s, 790 TFLOP/s\n%s",
                  static_cast<long long>(shape.seqs), static_cast<long long>(shape.tokens_per_seq),
                  static_cast<long long>(shape.context), compiler::FormatRoofline(r).c_str());
    }
    return absl::OkStatus();
  }
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j;
    j["steps_per_layer"] = s.steps_per_layer;
    j["total_steps"] = s.total_steps;
    j["steps_outside_layers"] = s.steps_outside_layers;
    j["arena_bytes"] = plan.decoder().arena_bytes;
    j["kernels"] = s.kernels;
    j["layers"] = plan.model.num_layers;
    j["layout"] = plan.model.layout;
    j["dtype"] = std::string(ir::DTypeName(plan.dtype));
    j["max_batch_tokens"] = plan.max_batch_tokens;
    j["max_seqs"] = plan.max_seqs;
    j["kv_bytes_per_token"] = plan.kv.BytesPerToken();
    j["kv_dtype"] = std::string(ir::DTypeName(plan.kv.dtype));
    j["kv_static_scales"] = plan.kv.static_scales();
    j["kv_block_size"] = plan.kv.block_size;
    j["weight_bytes"] = s.weight_bytes;
    j["weight_bytes_lookup_only"] = s.lookup_only_bytes;
    j["weight_bytes_by_format"] = s.bytes_by_format;
    j["tp"] = plan.tp;
    j["collectives_per_layer"] = s.collectives_per_layer;
    j["collectives"] = s.collectives;
    j["launches_per_layer"] = s.launches_per_layer;
    nlohmann::json launches;
    for (const auto& [name, shape] : LaunchShapes()) launches[name] = runtime::CudaLaunchesPerLayer(plan, shape);
    j["cuda_launches_per_layer"] = launches;
    j["launches_per_layer_nccl"] = s.launches_per_layer_nccl;
    j["weight_bytes_read_per_step"] = s.weight_bytes_read_per_step;
    j["passes"] = plan.passes;
    if (const compiler::Program* vision = plan.FindProgram(compiler::kVisionProgram)) {
      const compiler::PlanSummary v = compiler::Summarize(plan, *vision);
      j["vision"] = {{"total_steps", v.total_steps},
                     {"steps_per_block", v.steps_per_layer},
                     {"steps_outside_blocks", v.steps_outside_layers},
                     {"blocks", v.steps_per_layer > 0 ? (v.total_steps - v.steps_outside_layers) / v.steps_per_layer : 0},
                     {"arena_bytes", vision->arena_bytes},
                     {"kernels", v.kernels},
                     {"weight_bytes", v.weight_bytes},
                     {"max_patches", vision->bounds.at("P")},
                     {"max_images", vision->bounds.at("I")},
                     {"image_token_id", plan.model.image_token_id}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return absl::OkStatus();
  }
  std::printf("plan %s: %s model, %lld layers, vocab %lld, %s\n", path.c_str(), plan.model.layout.c_str(),
              static_cast<long long>(plan.model.num_layers), static_cast<long long>(plan.model.vocab_size),
              std::string(ir::DTypeName(plan.dtype)).c_str());
  if (plan.tp > 1) {
    std::printf("tensor parallel: tp %d (one SPMD plan, every rank runs these steps on its slice); %lld all-reduces "
                "per layer, %lld collectives per step; GPU launches per layer: %lld with the one-shot all-reduce "
                "(one node), %lld with NCCL\n",
                plan.tp, static_cast<long long>(s.collectives_per_layer), static_cast<long long>(s.collectives),
                static_cast<long long>(s.launches_per_layer), static_cast<long long>(s.launches_per_layer_nccl));
  } else {
    std::printf("tensor parallel: tp 1; %lld GPU launches per layer\n", static_cast<long long>(s.launches_per_layer));
  }
  std::vector<std::string> launches;
  for (const auto& [name, shape] : LaunchShapes()) {
    launches.push_back(absl::StrCat(name, " ", runtime::CudaLaunchesPerLayer(plan, shape)));
  }
  std::printf("CUDA launches per layer (the backend's dispatch at context 512): %s\n",
              absl::StrJoin(launches, ", ").c_str());
  std::printf("per rank and decode step: %lld weight bytes streamed (of %lld held; %lld only looked up, the "
              "embedding table, which --embedding-on-host keeps in host memory)\n",
              static_cast<long long>(s.weight_bytes_read_per_step), static_cast<long long>(s.weight_bytes),
              static_cast<long long>(s.lookup_only_bytes));
  std::printf("limits: T<=%lld tokens, S<=%lld sequences per step; arena %lld bytes\n",
              static_cast<long long>(plan.max_batch_tokens), static_cast<long long>(plan.max_seqs),
              static_cast<long long>(plan.decoder().arena_bytes));
  std::printf("kv cache (per rank): %s%s, %lld layers x [2, blocks, %lld, %lld, %lld], %lld bytes per token\n",
              std::string(ir::DTypeName(plan.kv.dtype)).c_str(),
              plan.kv.static_scales() ? " (static scales)" : "", static_cast<long long>(plan.kv.num_layers),
              static_cast<long long>(plan.kv.block_size),
              static_cast<long long>(plan.kv.kv_heads), static_cast<long long>(plan.kv.head_dim),
              static_cast<long long>(plan.kv.BytesPerToken()));
  std::printf("passes: %s\n", absl::StrJoin(plan.passes, ", ").c_str());
  std::printf("inputs:");
  for (const compiler::PlanInput& in : plan.decoder().inputs) {
    std::printf(" %%%s %s", in.name.c_str(), in.type.ToString().c_str());
  }
  std::printf("\nweights: %zu (%lld bytes)\n", plan.weights.size(), static_cast<long long>(s.weight_bytes));
  std::printf("bytes by format: %s\n",
              absl::StrJoin(s.bytes_by_format, ", ", [](std::string* o, const auto& kv) {
                absl::StrAppend(o, kv.first, " ", kv.second);
              }).c_str());
  for (const compiler::WeightEntry& w : plan.weights) {
    std::vector<std::string> pieces;
    for (const compiler::WeightPiece& p : w.pieces) {
      pieces.push_back(absl::StrCat(p.tensor, "[", p.row_begin, ":", p.row_end, "]",
                                    p.shard.sharded() ? absl::StrCat(" ", p.shard.ToString()) : "",
                                    p.quant.quantized() ? absl::StrCat(" as ", p.quant.ToString()) : "",
                                    p.packing != ir::QuantPacking::kNone
                                        ? absl::StrCat(" (", ir::QuantPackingName(p.packing), ")") : ""));
    }
    std::printf("  @%s %s[%s] <- %s\n", w.name.c_str(), std::string(ir::DTypeName(w.dtype)).c_str(),
                absl::StrJoin(w.shape, ",").c_str(), absl::StrJoin(pieces, " + ").c_str());
  }
  for (const compiler::Program& program : plan.programs) {
    const compiler::PlanSummary ps = compiler::Summarize(plan, program);
    const bool decoder = &program == &plan.decoder();
    if (!decoder) {
      std::printf("%s program: up to %lld patches of %lld images per step (image token %lld, %lld patches a token); "
                  "arena %lld bytes; %lld weight bytes\n  inputs:",
                  program.name.c_str(), static_cast<long long>(program.bounds.at("P")),
                  static_cast<long long>(program.bounds.at("I")), static_cast<long long>(plan.model.image_token_id),
                  static_cast<long long>(plan.model.patches_per_token), static_cast<long long>(program.arena_bytes),
                  static_cast<long long>(ps.weight_bytes));
      for (const compiler::PlanInput& in : program.inputs) {
        std::printf(" %%%s %s", in.name.c_str(), in.type.ToString().c_str());
      }
      std::printf("\n");
    }
    std::printf("%s steps: %lld (%lld per %s, %lld launches per %s)\n%s", program.name.c_str(),
                static_cast<long long>(ps.total_steps), static_cast<long long>(ps.steps_per_layer),
                decoder ? "layer" : "block", static_cast<long long>(ps.launches_per_layer), decoder ? "layer" : "block",
                compiler::DescribeSteps(plan, program).c_str());
    std::printf("%s outputs:", program.name.c_str());
    for (size_t i = 0; i < program.outputs.size(); ++i) {
      std::printf(" %s=arena+%lld", program.output_names[i].c_str(), static_cast<long long>(program.outputs[i].index));
    }
    std::printf("\n");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("print a plan.\n  autoglm-inspect FILE.agplan [--json]");
  const std::vector<std::string> args = ag::tools::ParseFlagsOrExit(argc, argv, "autoglm-inspect", 1);
  if (args.size() != 1) {
    return ag::tools::ReportError("autoglm-inspect", absl::InvalidArgumentError("usage: autoglm-inspect FILE.agplan [--json]"));
  }
  absl::Status status = ag::tools::Run(args[0]);
  if (!status.ok()) return ag::tools::ReportError("autoglm-inspect", status);
  return 0;
}
