#include "tools/common.h"

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/plan_file.h"
#include "ir/status_macros.h"
#include "runtime/cpu_backend.h"
#ifdef AUTOGLM_HAVE_CUDA
#include "runtime/cuda_backend.h"
#endif

namespace ag::tools {

absl::StatusOr<Model> OpenModel(const std::string& model_dir, const std::string& config_file) {
  if (model_dir.empty() == config_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model DIR or --config FILE");
  }
  Model model;
  ASSIGN_OR_RETURN(model.config, glm::LoadModelConfig(model_dir.empty() ? config_file : model_dir));
  if (!model_dir.empty()) {
    ASSIGN_OR_RETURN(glm::Checkpoint ckpt, glm::Checkpoint::Open(model_dir));
    model.checkpoint = std::move(ckpt);
  }
  return model;
}

absl::StatusOr<ir::DType> ParseModelDType(const std::string& name) {
  if (name == "f32") return ir::DType::kF32;
  if (name == "bf16") return ir::DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype must be bf16 or f32, got '", name, "'"));
}

absl::StatusOr<compiler::Plan> PlanForModel(const Model& model, const std::string& plan_file,
                                            const compiler::CompileOptions& options) {
  compiler::Plan plan;
  if (!plan_file.empty()) {
    ASSIGN_OR_RETURN(plan, compiler::ReadPlanFile(plan_file));
  } else {
    ASSIGN_OR_RETURN(compiler::CompileResult compiled, compiler::Compile(model.config, options));
    plan = std::move(compiled.plan);
  }
  RETURN_IF_ERROR(compiler::CheckPlanAgainstModel(plan, model.config,
                                                  model.checkpoint ? &*model.checkpoint : nullptr));
  return plan;
}

bool HaveCudaBackend() {
#ifdef AUTOGLM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<runtime::Backend>> MakeBackend(const std::string& device) {
  if (device == "cpu") return std::unique_ptr<runtime::Backend>(new runtime::CpuBackend());
  if (device == "cuda") {
#ifdef AUTOGLM_HAVE_CUDA
    return runtime::CreateCudaBackend();
#else
    return absl::UnimplementedError("this build has no CUDA backend (configure with nvcc available)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("--device must be cpu or cuda, got '", device, "'"));
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text) {
  std::vector<int32_t> ids;
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (trimmed.empty()) return ids;
  for (absl::string_view part : absl::StrSplit(trimmed, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not a token id"));
    }
    ids.push_back(id);
  }
  return ids;
}

void NormalizeFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (arg[0] != '-' || arg[1] != '-' || arg[2] == '\0') {
      if (arg[0] == '-' && arg[1] == '-') break;  // "--" ends the flags
      continue;
    }
    for (char* p = arg + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

int ReportError(const char* tool, const absl::Status& status) {
  std::string message(status.message());
  for (char& c : message) {
    if (c == '\n') c = ' ';
  }
  std::fprintf(stderr, "%s: error: %s\n", tool, message.c_str());
  return 1;
}

}  // namespace ag::tools
