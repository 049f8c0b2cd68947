// The compiler driver: model config -> graph -> pass pipeline -> Plan.
#ifndef AUTOGLM_COMPILER_DRIVER_H_
#define AUTOGLM_COMPILER_DRIVER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"
#include "ir/graph.h"
#include "models/glm/builder.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "models/glm4v/config.h"
#include "passes/pass.h"
#include "passes/quantize.h"

namespace ag::compiler {

struct CompileOptions {
  glm::BuildOptions build;
  // GLM-4.1V's vision program: patches and images one step encodes (16,384
  // patches hold a 1080 x 2400 screenshot's 13,416).
  int64_t max_vision_patches = 16384;
  int64_t max_images = 16;
  int32_t tp = 1;  // tensor-parallel degree: the plan is one rank's share, for every rank
  bool collectives_at_tp1 = false;  // tests: a tp 1 plan that keeps its all_reduce / all_gather steps
  // Weight formats of the decoder's linears (the quantize pass); the vision tower stays in `dtype`.
  passes::QuantPolicy quant;
  passes::PipelineOptions pipeline;
};

struct CompileResult {
  Plan plan;
  ir::Graph graph;                           // the final decoder graph the plan was lowered from
  std::vector<passes::PassRecord> passes;    // what ran (on the decoder)
};

// Names of the standard pipeline's passes, in order.
std::vector<std::string> StandardPassNames();

absl::StatusOr<CompileResult> Compile(const glm::ModelConfig& config, const CompileOptions& options);
// GLM-4.1V: the decoder (glm4's, with M-RoPE and image rows) and the vision
// tower, each through the pass pipeline, in one plan.
absl::StatusOr<CompileResult> Compile(const glm4v::Config& config, const CompileOptions& options);

// Checks that the plan was made for this model and that every weight piece
// exists in the checkpoint with the expected shape (headers only, no data read).
absl::Status CheckPlanAgainstModel(const Plan& plan, const glm::ModelConfig& config,
                                   const glm::Checkpoint* checkpoint);
absl::Status CheckPlanAgainstModel(const Plan& plan, const glm4v::Config& config, const glm::Checkpoint* checkpoint);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_DRIVER_H_
