#include "compiler/driver.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/lower.h"
#include "ir/status_macros.h"
#include "models/glm/weight_map.h"
#include "passes/pipeline.h"

namespace ag::compiler {

std::vector<std::string> StandardPassNames() {
  return passes::BuildStandardPipeline({}, {})->Names();
}

absl::StatusOr<CompileResult> Compile(const glm::ModelConfig& config, const CompileOptions& options) {
  ASSIGN_OR_RETURN(ir::Graph graph, glm::BuildGlmGraph(config, options.build));
  passes::StandardPassOptions pass_options;
  pass_options.kv_block_size = options.build.kv_block_size;
  std::unique_ptr<passes::Pipeline> pipeline = passes::BuildStandardPipeline(options.pipeline, pass_options);
  ASSIGN_OR_RETURN(std::vector<passes::PassRecord> ran, pipeline->Run(graph));
  std::vector<std::string> names;
  for (const passes::PassRecord& r : ran) names.push_back(r.name);
  ASSIGN_OR_RETURN(Plan plan, LowerToPlan(graph, config, options.build, names));
  return CompileResult{std::move(plan), std::move(graph), std::move(ran)};
}

absl::Status CheckPlanAgainstModel(const Plan& plan, const glm::ModelConfig& config,
                                   const glm::Checkpoint* checkpoint) {
  const ModelInfo& m = plan.model;
  if (m.layout != glm::LayoutName(config.layout) || m.vocab_size != config.vocab_size ||
      m.hidden_size != config.hidden_size || m.num_layers != config.num_layers ||
      plan.kv.kv_heads != config.num_kv_heads || plan.kv.head_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan was compiled for a different model (", m.layout, ", ", m.num_layers, " layers, hidden ",
        m.hidden_size, ", vocab ", m.vocab_size, ") than the checkpoint (", glm::LayoutName(config.layout), ", ",
        config.num_layers, " layers, hidden ", config.hidden_size, ", vocab ", config.vocab_size, ")"));
  }
  if (checkpoint == nullptr) return absl::OkStatus();
  for (const WeightEntry& w : plan.weights) {
    for (const WeightPiece& p : w.pieces) {
      glm::WeightSource src{p.tensor, p.tensor_shape, p.row_begin, p.row_end};
      RETURN_IF_ERROR(glm::FindSourceTensor(*checkpoint, src).status());
    }
  }
  return absl::OkStatus();
}

}  // namespace ag::compiler
