#include "compiler/driver.h"

#include <optional>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/lower.h"
#include "ir/status_macros.h"
#include "models/glm/weight_map.h"
#include "models/quant/checkpoint_quant.h"
#include "models/quant/packed.h"
#include "passes/pipeline.h"
#include "models/glm4v/vision_builder.h"
#include "models/glm4v/weight_map.h"
#include "passes/shard.h"

namespace ag::compiler {

std::vector<std::string> StandardPassNames() {
  return passes::BuildStandardPipeline({}, {})->Names();
}

namespace {

absl::Status CheckLimits(const CompileOptions& options) {
  const glm::BuildOptions& b = options.build;
  struct Limit {
    const char* flag;
    int64_t value, max;
  };
  for (const Limit& l : {Limit{"--max-batch-tokens", b.max_batch_tokens, kMaxBatchTokens},
                         Limit{"--max-seqs", b.max_seqs, kMaxSeqs},
                         Limit{"--kv-block-size", b.kv_block_size, kMaxKvBlockSize},
                         Limit{"--max-vision-patches", options.max_vision_patches, kMaxBatchTokens},
                         Limit{"--max-images", options.max_images, kMaxSeqs}}) {
    if (l.value <= 0 || l.value > l.max) {
      return absl::InvalidArgumentError(absl::StrCat(l.flag, " must be in [1, ", l.max, "], got ", l.value));
    }
  }
  return absl::OkStatus();
}

// The standard pipeline over one graph, at tensor-parallel degree `tp`.
absl::StatusOr<std::vector<passes::PassRecord>> RunPipeline(ir::Graph& graph, const CompileOptions& options,
                                                            int32_t tp, bool decoder = true) {
  passes::StandardPassOptions pass_options;
  pass_options.kv_block_size = options.build.kv_block_size;
  pass_options.tp = tp;
  pass_options.collectives_at_tp1 = options.collectives_at_tp1 && tp == options.tp;
  if (decoder) pass_options.quant = options.quant;
  return passes::BuildStandardPipeline(options.pipeline, pass_options)->Run(graph);
}

std::vector<std::string> Names(const std::vector<passes::PassRecord>& ran) {
  std::vector<std::string> names;
  for (const passes::PassRecord& r : ran) names.push_back(r.name);
  return names;
}

}  // namespace

absl::StatusOr<CompileResult> Compile(const glm::ModelConfig& config, const CompileOptions& options) {
  RETURN_IF_ERROR(CheckLimits(options));
  ASSIGN_OR_RETURN(ir::Graph graph, glm::BuildGlmGraph(config, options.build));
  ASSIGN_OR_RETURN(std::vector<passes::PassRecord> ran, RunPipeline(graph, options, options.tp));
  ASSIGN_OR_RETURN(Plan plan, LowerToPlan(graph, config, options.build, Names(ran)));
  return CompileResult{std::move(plan), std::move(graph), std::move(ran)};
}

absl::StatusOr<CompileResult> Compile(const glm4v::Config& config, const CompileOptions& options) {
  RETURN_IF_ERROR(CheckLimits(options));
  glm::BuildOptions build = options.build;
  build.image_rows = true;
  ASSIGN_OR_RETURN(ir::Graph decoder, glm::BuildGlmGraph(config.text, build));
  ASSIGN_OR_RETURN(std::vector<passes::PassRecord> ran, RunPipeline(decoder, options, options.tp));
  // The vision tower is small next to the decoder: every rank holds it whole (no shard).
  const int64_t group = config.vision.patches_per_token();
  const glm4v::VisionBuildOptions vision_options{options.build.dtype, options.max_vision_patches / group * group,
                                                 options.max_images};
  ASSIGN_OR_RETURN(ir::Graph vision, glm4v::BuildVisionGraph(config, vision_options));
  RETURN_IF_ERROR(RunPipeline(vision, options, /*tp=*/1, /*decoder=*/false).status());

  Plan plan = PlanHeader(config.text, build, Names(ran), decoder.tp(), KvHeadsOfGraph(decoder, config.text.num_kv_heads));
  plan.model.config = glm4v::ConfigFingerprint(config);
  plan.model.image_token_id = config.image_token_id;
  plan.model.patches_per_token = group;
  // A pre-quantized checkpoint's language-model linears keep its storage; the vision tower must be
  // stored dense (the checkpoint's config leaves it out, as GLM-4.xV's quantized releases do).
  ASSIGN_OR_RETURN(const quant::CheckpointQuant stored, quant::ParseCheckpointQuant(config.text));
  const WeightMapper map = [&config, &stored](absl::string_view param) -> absl::StatusOr<glm::WeightSource> {
    ASSIGN_OR_RETURN(glm::WeightSource source, glm4v::MapWeight(config, param));
    if (!glm4v::IsVisionTensor(source.tensor)) return quant::Annotate(stored, std::move(source));
    if (glm4v::IsVisionLinear(source.tensor) && stored.Covers(quant::PackedModule(source.tensor))) {
      return absl::UnimplementedError(absl::StrCat(
          "config.json: quantization_config covers the vision tower's ", source.tensor,
          "; only its language model can be stored quantized (list the vision tower in its ignore or "
          "modules_to_not_convert)"));
    }
    return source;
  };
  ASSIGN_OR_RETURN(Program decoder_program, LowerProgram(decoder, kDecoderProgram, map, config.text.num_layers, plan));
  plan.programs.push_back(std::move(decoder_program));
  ASSIGN_OR_RETURN(Program vision_program, LowerProgram(vision, kVisionProgram, map, 0, plan));
  plan.programs.push_back(std::move(vision_program));
  RETURN_IF_ERROR(AddStaticKvScales(stored, map, plan));
  RETURN_IF_ERROR(ValidatePlan(plan));
  return CompileResult{std::move(plan), std::move(decoder), std::move(ran)};
}

namespace {

// The model facts a plan's steps carry as attributes: each must be the
// config's (a plan resealed with another eps or theta would run and answer
// differently). The config fingerprint covers the plan's header, not its steps.
absl::Status CheckStepFacts(const Plan& plan, const glm::ModelConfig& config) {
  const int64_t heads = config.num_heads / plan.tp;
  const int64_t kv_heads = passes::KvHeadsPerRank(config.num_kv_heads, plan.tp);
  for (size_t i = 0; i < plan.decoder().steps.size(); ++i) {
    const PlanStep& step = plan.decoder().steps[i];
    for (const auto& [name, value] : step.attrs) {
      std::string want;
      if ((name == "eps" || name == "residual_eps") && *ir::GetFloat(step.attrs, name) != config.rms_norm_eps) {
        want = absl::StrCat(config.rms_norm_eps);
      } else if (name == "theta" && *ir::GetFloat(step.attrs, name) != config.rope_theta) {
        want = absl::StrCat(config.rope_theta);
      } else if (name == "rot" && *ir::GetInt(step.attrs, name) != config.rotary_dim) {
        want = absl::StrCat(config.rotary_dim);
      } else if (name == "head_dim" && *ir::GetInt(step.attrs, name) != config.head_dim) {
        want = absl::StrCat(config.head_dim);
      } else if (name == "kv_heads" && *ir::GetInt(step.attrs, name) != kv_heads) {
        want = absl::StrCat(kv_heads);
      } else if (name == "heads") {  // a rotary step rotates the query heads or the KV heads
        const int64_t got = *ir::GetInt(step.attrs, name);
        const bool rotary = step.kernel == ir::OpId::k_rotary;
        if (got != heads && !(rotary && got == kv_heads)) {
          want = rotary ? absl::StrCat(heads, " or ", kv_heads) : absl::StrCat(heads);
        }
      }
      if (!want.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("step ", i, " (", step.name, "): ", name, " is ",
                                                       ir::AttrValueToString(value), " but the model's config gives ", want,
                                                       " (recompile the plan)"));
      }
    }
  }
  return absl::OkStatus();
}


// The vision program's facts, as CheckStepFacts does for the decoder's.
absl::Status CheckVisionStepFacts(const Plan& plan, const glm4v::Config& config) {
  const Program* vision = plan.FindProgram(kVisionProgram);
  if (vision == nullptr) return absl::InvalidArgumentError("a GLM-4.1V plan needs its vision program (recompile the plan)");
  const glm4v::VisionConfig& v = config.vision;
  if (plan.model.image_token_id != config.image_token_id || plan.model.patches_per_token != v.patches_per_token()) {
    return absl::InvalidArgumentError("the plan's image token or merge size is not the model's (recompile the plan)");
  }
  for (size_t i = 0; i < vision->steps.size(); ++i) {
    const PlanStep& step = vision->steps[i];
    for (const auto& [name, value] : step.attrs) {
      std::optional<ir::AttrValue> want;
      if (name == "eps") want = step.kernel == ir::OpId::k_layer_norm ? 1e-5 : v.rms_norm_eps;
      if (name == "theta") want = v.rope_theta;
      if (name == "heads") want = v.num_heads;
      if (name == "head_dim") want = v.head_dim();
      if (name == "side") want = v.side();
      if (name == "group") want = v.patches_per_token();
      if (want && !(*want == value)) {
        return absl::InvalidArgumentError(absl::StrCat("vision step ", i, " (", step.name, "): ", name, " is ",
                                                       ir::AttrValueToString(value), " but the model's config gives ",
                                                       ir::AttrValueToString(*want), " (recompile the plan)"));
      }
    }
  }
  return absl::OkStatus();
}

// What both families share: the decoder's facts against `config`, the plan's
// config fingerprint against `fingerprint`, and the checkpoint's tensors.
absl::Status CheckPlan(const Plan& plan, const glm::ModelConfig& config, const std::string& fingerprint,
                       const glm::Checkpoint* checkpoint);

}  // namespace

absl::Status CheckPlanAgainstModel(const Plan& plan, const glm::ModelConfig& config,
                                   const glm::Checkpoint* checkpoint) {
  if (plan.programs.size() != 1) {
    return absl::InvalidArgumentError("the plan has a vision program; the model is a text model (recompile the plan)");
  }
  return CheckPlan(plan, config, glm::ConfigFingerprint(config), checkpoint);
}

absl::Status CheckPlanAgainstModel(const Plan& plan, const glm4v::Config& config, const glm::Checkpoint* checkpoint) {
  RETURN_IF_ERROR(CheckVisionStepFacts(plan, config));
  return CheckPlan(plan, config.text, glm4v::ConfigFingerprint(config), checkpoint);
}

namespace {

absl::Status CheckPlan(const Plan& plan, const glm::ModelConfig& config, const std::string& fingerprint,
                       const glm::Checkpoint* checkpoint) {
  const ModelInfo& m = plan.model;
  const int64_t kv_heads = passes::KvHeadsPerRank(config.num_kv_heads, plan.tp);
  if (m.layout != glm::LayoutName(config.layout) || m.vocab_size != config.vocab_size ||
      m.hidden_size != config.hidden_size || m.num_layers != config.num_layers || plan.kv.kv_heads != kv_heads ||
      plan.kv.head_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan was compiled for a different model (", m.layout, ", ", m.num_layers, " layers, hidden ",
        m.hidden_size, ", vocab ", m.vocab_size, ") than the checkpoint (", glm::LayoutName(config.layout), ", ",
        config.num_layers, " layers, hidden ", config.hidden_size, ", vocab ", config.vocab_size, ")"));
  }
  // Same shapes are not enough: eps, rope, positions and eos ids change the answer too.
  if (m.config != fingerprint) {
    const std::vector<absl::string_view> planned = absl::StrSplit(m.config, '\n');
    const std::vector<absl::string_view> actual = absl::StrSplit(fingerprint, '\n');
    size_t i = 0;
    while (i < planned.size() && i < actual.size() && planned[i] == actual[i]) ++i;
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan was compiled from a different config: plan has '", i < planned.size() ? planned[i] : "",
        "', the model has '", i < actual.size() ? actual[i] : "", "' (recompile the plan)"));
  }
  // The fingerprint matches, so a fact that disagrees with it was edited into the plan.
  // The facts the runtime reads from the plan's header must be the model's:
  if (m.max_position_embeddings != config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("the plan says the model has ", m.max_position_embeddings,
                                                   " positions; its config says ", config.max_position_embeddings,
                                                   " (recompile the plan)"));
  }
  if (m.eos_token_ids != config.eos_token_ids) {
    return absl::InvalidArgumentError(absl::StrCat("the plan's end-of-sequence ids (", absl::StrJoin(m.eos_token_ids, ","),
                                                   ") are not the model's (", absl::StrJoin(config.eos_token_ids, ","),
                                                   ") (recompile the plan)"));
  }
  RETURN_IF_ERROR(CheckStepFacts(plan, config));
  if (checkpoint == nullptr) return absl::OkStatus();
  absl::flat_hash_set<absl::string_view> used;
  std::vector<std::string> packed_names;  // the tensors of pre-quantized linears
  for (const WeightEntry& w : plan.weights) {
    for (const WeightPiece& p : w.pieces) {
      if (p.packing != ir::QuantPacking::kNone) {
        ASSIGN_OR_RETURN(std::vector<std::string> names, quant::CheckPacked(*checkpoint, p.packing, p.quant,
                                                                            quant::PackedModule(p.tensor),
                                                                            p.tensor_shape[0], p.tensor_shape[1]));
        packed_names.insert(packed_names.end(), names.begin(), names.end());
        continue;
      }
      glm::WeightSource src{p.tensor, p.tensor_shape, p.row_begin, p.row_end};
      RETURN_IF_ERROR(glm::FindSourceTensor(*checkpoint, src).status());
      used.insert(p.tensor);
    }
  }
  for (const std::string& name : packed_names) used.insert(name);
  // A tensor the plan never reads means the config and the checkpoint disagree
  // (fewer layers, untied head, ...): running anyway would silently give
  // another model's answers. Rotary inverse-frequency buffers are recomputed, so they may be left.
  // A KV-cache scheme's scales go unread when the cache keeps the model's dtype (AddStaticKvScales).
  ASSIGN_OR_RETURN(const quant::CheckpointQuant stored, quant::ParseCheckpointQuant(config));
  const bool kv_scales_unread = stored.kv_cache && !plan.kv.static_scales();
  int unused = 0;
  std::string first;
  for (const std::string& name : checkpoint->Names()) {
    if (used.contains(name) || absl::EndsWith(name, ".inv_freq")) continue;
    if (kv_scales_unread && absl::c_any_of(glm::kKvScaleSuffixes, [&](absl::string_view suffix) {
          return absl::EndsWith(name, absl::StrCat(".", suffix));
        })) {
      continue;
    }
    if (unused++ == 0) first = name;
  }
  if (unused > 0) {
    return absl::InvalidArgumentError(absl::StrCat(checkpoint->dir(), ": tensor '", first, "'",
                                                   unused > 1 ? absl::StrCat(" and ", unused - 1, " more") : "",
                                                   " not used by a ", m.layout, " model of ", m.num_layers,
                                                   " layers (does config.json match the checkpoint?)"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::compiler
