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
#include "image/preprocess.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "models/glm4v/config.h"
#include "runtime/backend.h"

namespace ag::tools {

struct Model {
  glm::ModelConfig config;  // the decoder's
  std::optional<glm4v::Config> glm4v;  // GLM-4.1V: the whole model's (config is its text part)
  std::optional<glm::Checkpoint> checkpoint;  // absent with --config (random weights)
  std::string dir;  // the checkpoint directory, or the config file's
};

// Opens `model_dir` (config.json and safetensors), or only `config_file`: a
// GLM-4 model or GLM-4.1V, by its config's model_type.
absl::StatusOr<Model> OpenModel(const std::string& model_dir, const std::string& config_file);

// Compiles the model (both programs for GLM-4.1V) and checks the plan against it.
absl::StatusOr<compiler::CompileResult> CompileModel(const Model& model, const compiler::CompileOptions& options);
// compiler::CheckPlanAgainstModel for the model's family.
absl::Status CheckPlan(const compiler::Plan& plan, const Model& model);

// GLM-4.1V's image processor settings (the model's preprocessor_config.json),
// and image files decoded and preprocessed with them, in order.
absl::StatusOr<image::ProcessorConfig> LoadProcessorConfig(const Model& model);
absl::StatusOr<std::vector<std::shared_ptr<const image::Patches>>> LoadImageFiles(
    const std::vector<std::string>& paths, const image::ProcessorConfig& config);

// "bf16" or "f32".
absl::StatusOr<ir::DType> ParseModelDType(const std::string& name);

// Tensor parallelism on the command line (tools/parallel_flags.h).
struct ParallelOptions {
  int64_t tp = 0;        // --tp; 0: not given (the plan's degree, or 1)
  std::string devices;   // --devices "0,1,2,3"; empty: 0 .. local ranks - 1
  int64_t nnodes = 1;    // --nnodes
  int64_t node_rank = 0; // --node-rank
  std::string master;    // --master ADDR:PORT (node 0), when nnodes > 1
  bool embedding_on_host = false;  // --embedding-on-host (cuda): runtime::CudaBackendOptions
};

// --tp as given: 0 (not given) or a degree in [1, ir::kMaxTensorParallel].
absl::Status CheckTpFlag(int64_t tp);

// Loads and checks `plan_file` against the model, or compiles one at degree
// `tp` (0: 1). A plan file's degree wins; a `tp` that differs is an error.
absl::StatusOr<compiler::Plan> PlanForModel(const Model& model, const std::string& plan_file,
                                            compiler::CompileOptions options, int64_t tp = 0);

// The compile options of a run that compiles its model now: `dtype` "f32" or
// "bf16", or empty for the device's default (bf16 on cuda, f32 on cpu).
absl::StatusOr<compiler::CompileOptions> BuildOptions(const std::string& dtype, const std::string& device,
                                                      int64_t max_batch_tokens, int64_t max_seqs,
                                                      int64_t kv_block_size);

// The weight formats of --quantize FORMAT (passes::DefaultQuantPolicy) and
// --quantize-policy FILE (its rules first); both empty: nothing quantized.
absl::StatusOr<passes::QuantPolicy> QuantPolicyFromFlags(const std::string& quantize, const std::string& policy_file);

// --kv-cache-dtype: "auto" (or empty, "bf16", "f32": the model's dtype), "fp8" ("fp8_e4m3",
// "fp8e4m3") or "int8": an 8-bit cache with a scale per token and KV head.
absl::StatusOr<std::optional<ir::DType>> ParseKvCacheDType(const std::string& text);

// "cpu" or "cuda", running `plan_tp` ranks: on the CPU as threads over an
// in-process group; on CUDA one GPU per rank over NCCL (`parallel` says which
// GPUs and nodes).
absl::StatusOr<std::unique_ptr<runtime::Backend>> MakeBackend(const std::string& device, int32_t plan_tp = 1,
                                                              const ParallelOptions& parallel = {});
bool HaveCudaBackend();

// "5,17,42" -> ids.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text);

// Lets flags be written with dashes (--max-new-tokens) as well as with
// Abseil's underscores: rewrites each "--a-b[=v]" argument in place.
void NormalizeFlagNames(int argc, char** argv);

// Checks the command line before Abseil parses it, so that a bad command
// line is one error line naming the first bad argument: an unknown flag, a
// flag without its value, a value that does not parse, or a positional
// argument past `max_positional`. Returns that error, or OK.
absl::Status CheckCommandLine(int argc, char** argv, int max_positional);

// Takes every "--NAME VALUE" and "--NAME=VALUE" out of the command line (a
// flag that may be given several times, such as --image), in order; a
// --NAME without its value is an error.
absl::StatusOr<std::vector<std::string>> TakeRepeatedFlag(int& argc, char** argv, absl::string_view name);

// NormalizeFlagNames, CheckCommandLine (on failure: ReportError and exit 1),
// then absl::ParseCommandLine. Returns the positional arguments.
std::vector<std::string> ParseFlagsOrExit(int argc, char** argv, const char* tool, int max_positional = 0);

// `text` with every byte that could drive a terminal (C0 and C1 controls,
// DEL, invalid UTF-8) written as \xNN, so hostile names print as text.
std::string EscapeForTerminal(absl::string_view text);

// Prints "TOOL: error: MESSAGE" on one line to stderr (escaped) and returns 1.
int ReportError(const char* tool, const absl::Status& status);

}  // namespace ag::tools

#endif  // AUTOGLM_TOOLS_COMMON_H_
