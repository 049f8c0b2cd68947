// What the command-line tools share: opening a model, compiling or loading
// a plan, choosing a backend, reporting errors on one line.
#ifndef AUTOGLM_TOOLS_COMMON_H_
#define AUTOGLM_TOOLS_COMMON_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/driver.h"
#include "compiler/plan.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "runtime/backend.h"

namespace ag::tools {

struct Model {
  glm::ModelConfig config;
  std::optional<glm::Checkpoint> checkpoint;  // absent with --config (random weights)
};

// Opens `model_dir` (config.json and safetensors), or only `config_file`.
absl::StatusOr<Model> OpenModel(const std::string& model_dir, const std::string& config_file);

// "bf16" or "f32".
absl::StatusOr<ir::DType> ParseModelDType(const std::string& name);

// Loads and checks `plan_file` against the model, or compiles one.
absl::StatusOr<compiler::Plan> PlanForModel(const Model& model, const std::string& plan_file,
                                            const compiler::CompileOptions& options);

// "cpu" or "cuda".
absl::StatusOr<std::unique_ptr<runtime::Backend>> MakeBackend(const std::string& device);
bool HaveCudaBackend();

// "5,17,42" -> ids.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text);

// Lets flags be written with dashes (--max-new-tokens) as well as with
// Abseil's underscores: rewrites each "--a-b[=v]" argument in place.
void NormalizeFlagNames(int argc, char** argv);

// Prints "TOOL: error: MESSAGE" on one line to stderr and returns 1.
int ReportError(const char* tool, const absl::Status& status);

}  // namespace ag::tools

#endif  // AUTOGLM_TOOLS_COMMON_H_
