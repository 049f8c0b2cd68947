#include "tools/common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/plan_file.h"
#include "image/image.h"
#include "models/glm/read_file.h"
#include "ir/status_macros.h"
#include "runtime/cpu_backend.h"
#include "runtime/tp_backend.h"
#ifdef AUTOGLM_HAVE_CUDA
#include "runtime/cuda_backend.h"
#include "runtime/nccl_communicator.h"
#endif

namespace ag::tools {

absl::StatusOr<Model> OpenModel(const std::string& model_dir, const std::string& config_file) {
  if (model_dir.empty() == config_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model DIR or --config FILE");
  }
  Model model;
  const std::string path = model_dir.empty() ? config_file : model_dir;
  model.dir = model_dir.empty() ? std::filesystem::path(config_file).parent_path().string() : model_dir;
  if (model.dir.empty()) model.dir = ".";
  if (glm4v::IsGlm4vCheckpoint(path)) {
    if (model_dir.empty()) {
      ASSIGN_OR_RETURN(const std::string text, glm::ReadWholeFile(config_file));
      ASSIGN_OR_RETURN(model.glm4v, glm4v::ParseConfig(text, config_file));
    } else {
      ASSIGN_OR_RETURN(model.glm4v, glm4v::LoadConfig(model_dir));
    }
    model.config = model.glm4v->text;
  } else {
    ASSIGN_OR_RETURN(model.config, glm::LoadModelConfig(path));
  }
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

absl::Status CheckTpFlag(int64_t tp) {
  if (tp >= 0 && tp <= ir::kMaxTensorParallel) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--tp must be in [1, ", ir::kMaxTensorParallel, "], got ", tp));
}

absl::StatusOr<compiler::Plan> PlanForModel(const Model& model, const std::string& plan_file,
                                            compiler::CompileOptions options, int64_t tp) {
  RETURN_IF_ERROR(CheckTpFlag(tp));
  compiler::Plan plan;
  if (!plan_file.empty()) {
    ASSIGN_OR_RETURN(plan, compiler::ReadPlanFile(plan_file));
    if (tp != 0 && tp != plan.tp) {
      return absl::InvalidArgumentError(absl::StrCat("--tp ", tp, " conflicts with ", plan_file,
                                                     ", compiled for tp=", plan.tp, " (drop --tp or recompile)"));
    }
  } else {
    options.tp = static_cast<int32_t>(tp == 0 ? 1 : tp);
    ASSIGN_OR_RETURN(compiler::CompileResult compiled, CompileModel(model, options));
    plan = std::move(compiled.plan);
  }
  RETURN_IF_ERROR(CheckPlan(plan, model));
  return plan;
}

absl::StatusOr<compiler::CompileResult> CompileModel(const Model& model, const compiler::CompileOptions& options) {
  if (model.glm4v) return compiler::Compile(*model.glm4v, options);
  return compiler::Compile(model.config, options);
}

absl::Status CheckPlan(const compiler::Plan& plan, const Model& model) {
  const glm::Checkpoint* ckpt = model.checkpoint ? &*model.checkpoint : nullptr;
  if (model.glm4v) return compiler::CheckPlanAgainstModel(plan, *model.glm4v, ckpt);
  return compiler::CheckPlanAgainstModel(plan, model.config, ckpt);
}

absl::StatusOr<image::ProcessorConfig> LoadProcessorConfig(const Model& model) {
  if (!model.glm4v) return absl::InvalidArgumentError("this model takes no images (it is a text model)");
  const std::string path = model.dir + "/preprocessor_config.json";
  ASSIGN_OR_RETURN(const std::string text, glm::ReadWholeFile(path));
  ASSIGN_OR_RETURN(image::ProcessorConfig config, image::ParseProcessorConfig(text, path));
  // The processor and the vision tower must agree on the patch geometry.
  const glm4v::VisionConfig& v = model.glm4v->vision;
  if (config.patch_size != v.patch_size || config.merge_size != v.merge_size ||
      config.temporal_patch_size != v.temporal_patch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": patch_size ", config.patch_size, ", merge_size ", config.merge_size, ", temporal_patch_size ",
        config.temporal_patch_size, " differ from config.json's vision_config (", v.patch_size, ", ", v.merge_size,
        ", ", v.temporal_patch_size, ")"));
  }
  return config;
}

absl::StatusOr<std::vector<std::shared_ptr<const image::Patches>>> LoadImageFiles(
    const std::vector<std::string>& paths, const image::ProcessorConfig& config) {
  std::vector<std::shared_ptr<const image::Patches>> images;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(const std::string bytes, glm::ReadWholeFile(path));
    ASSIGN_OR_RETURN(const image::RgbImage rgb, image::Decode(bytes, path));
    ASSIGN_OR_RETURN(image::Patches patches, image::Preprocess(rgb, config, path));
    images.push_back(std::make_shared<const image::Patches>(std::move(patches)));
  }
  return images;
}

bool HaveCudaBackend() {
#ifdef AUTOGLM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<compiler::CompileOptions> BuildOptions(const std::string& dtype, const std::string& device,
                                                      int64_t max_batch_tokens, int64_t max_seqs,
                                                      int64_t kv_block_size) {
  compiler::CompileOptions options;
  ASSIGN_OR_RETURN(options.build.dtype, ParseModelDType(dtype.empty() ? (device == "cuda" ? "bf16" : "f32") : dtype));
  options.build.max_batch_tokens = max_batch_tokens;
  options.build.max_seqs = max_seqs;
  options.build.kv_block_size = kv_block_size;
  return options;
}

absl::StatusOr<std::optional<ir::DType>> ParseKvCacheDType(const std::string& text) {
  if (text.empty() || text == "auto" || text == "bf16" || text == "f32") return std::optional<ir::DType>();
  if (text == "fp8" || text == "fp8_e4m3" || text == "fp8e4m3") return std::optional<ir::DType>(ir::DType::kF8E4M3);
  if (text == "int8") return std::optional<ir::DType>(ir::DType::kI8);
  return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype: '", text, "' is not auto, fp8 or int8"));
}

absl::StatusOr<passes::QuantPolicy> QuantPolicyFromFlags(const std::string& quantize, const std::string& policy_file) {
  passes::QuantPolicy policy;
  if (!quantize.empty()) {
    absl::StatusOr<ir::QuantFormat> body = ir::ParseQuantFormat(quantize);
    if (!body.ok()) return absl::InvalidArgumentError(absl::StrCat("--quantize: ", body.status().message()));
    if (!body->quantized()) return absl::InvalidArgumentError("--quantize: name a format (fp8, int8, int4, ...)");
    policy = passes::DefaultQuantPolicy(*body);
  }
  if (!policy_file.empty()) {
    ASSIGN_OR_RETURN(const std::string text, glm::ReadWholeFile(policy_file));
    ASSIGN_OR_RETURN(std::vector<passes::QuantRule> rules, passes::ParseQuantPolicy(text, policy_file));
    policy.rules.insert(policy.rules.begin(), rules.begin(), rules.end());
  }
  return policy;
}

namespace {

#ifdef AUTOGLM_HAVE_CUDA
// One GPU per rank: this process holds plan_tp / nnodes of them, joined by NCCL.
absl::StatusOr<std::unique_ptr<runtime::Backend>> MakeCudaBackend(int32_t plan_tp, const ParallelOptions& p) {
  if (p.nnodes < 1 || p.nnodes > plan_tp || plan_tp % p.nnodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--nnodes ", p.nnodes, " does not divide the ", plan_tp, " ranks"));
  }
  if (p.node_rank < 0 || p.node_rank >= p.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--node-rank must be in [0, ", p.nnodes, ")"));
  }
  if (p.nnodes > 1 && p.master.empty()) return absl::InvalidArgumentError("--nnodes > 1 needs --master ADDR:PORT");
  const int local = plan_tp / static_cast<int>(p.nnodes);
  std::vector<int> devices;
  if (p.devices.empty()) {
    for (int i = 0; i < local; ++i) devices.push_back(i);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids = ParseIdList(p.devices);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("--devices: ", ids.status().message()));
    devices.assign(ids->begin(), ids->end());
  }
  if (static_cast<int>(devices.size()) != local) {
    return absl::InvalidArgumentError(absl::StrCat("--devices names ", devices.size(), " GPUs; this node runs ", local,
                                                   " of the ", plan_tp, " ranks"));
  }
  if (plan_tp == 1) {
    runtime::CudaBackendOptions o;
    o.device = devices[0];
    o.embedding_on_host = p.embedding_on_host;
    return runtime::CreateCudaBackend(o);
  }
  runtime::NcclGroupOptions g;
  g.devices = devices;
  g.nnodes = static_cast<int>(p.nnodes);
  g.node_rank = static_cast<int>(p.node_rank);
  g.master = p.master;
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::NcclGroup> made, runtime::NcclGroup::Create(g));
  std::shared_ptr<runtime::NcclGroup> group = std::move(made);
  std::vector<std::unique_ptr<runtime::Backend>> ranks;
  for (int i = 0; i < local; ++i) {
    runtime::CudaBackendOptions o;
    o.device = group->device(i);
    o.comm = &group->local(i);
    o.peer = group->peer(i);
    o.embedding_on_host = p.embedding_on_host;
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::Backend> rank, runtime::CreateCudaBackend(o));
    ranks.push_back(std::move(rank));
  }
  return std::unique_ptr<runtime::Backend>(new runtime::MultiRankBackend(std::move(ranks), std::move(group)));
}
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<runtime::Backend>> MakeBackend(const std::string& device, int32_t plan_tp,
                                                              const ParallelOptions& parallel) {
  if (plan_tp < 1 || plan_tp > ir::kMaxTensorParallel) {
    return absl::InvalidArgumentError(absl::StrCat("--tp must be in [1, ", ir::kMaxTensorParallel, "]"));
  }
  if (device == "cpu") {
    if (parallel.nnodes != 1 || !parallel.devices.empty() || !parallel.master.empty()) {
      return absl::InvalidArgumentError("--devices, --nnodes and --master are for --device cuda");
    }
    if (plan_tp == 1) return std::unique_ptr<runtime::Backend>(new runtime::CpuBackend());
    return runtime::CreateCpuTensorParallel(plan_tp);
  }
  if (device == "cuda") {
#ifdef AUTOGLM_HAVE_CUDA
    return MakeCudaBackend(plan_tp, parallel);
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

absl::Status CheckCommandLine(int argc, char** argv, int max_positional) {
  int positional = 0;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      if (++positional > max_positional) {
        return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
      }
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    absl::string_view body = absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
    const size_t eq = body.find('=');
    const absl::string_view name = body.substr(0, eq);
    // Abseil's usage flags are not registered flags; ParseCommandLine handles them.
    for (absl::string_view usage : {"help", "helpfull", "helpshort", "helppackage", "version", "only_check_args",
                                    "helpon", "helpmatch"}) {
      if (name == usage) return absl::OkStatus();
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no") && eq == absl::string_view::npos) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "'"));
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(body.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag '--", name, "' needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("flag '--", name, "': bad value '", value, "'"));
    }
  }
  return absl::OkStatus();
}

// The tool's own flags (those defined in the project's tools/ and bench/
// folders: Abseil's --help matches flags to the program by file name, and
// ours live in autoglm_run.cc, parallel_flags.cc, ...), as users type them.
void PrintHelp(const char* tool) {
  std::printf("%s: %s\n\nflags (dashes or underscores; default in brackets):\n", tool,
              std::string(absl::ProgramUsageMessage()).c_str());
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    if (absl::StrContains(file, "tools/") || absl::StrContains(file, "bench/")) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
  for (const absl::CommandLineFlag* flag : flags) {
    std::string name = std::string(flag->Name());
    std::replace(name.begin(), name.end(), '_', '-');
    const std::string def = flag->DefaultValue();
    std::printf("  --%s [%s]\n      %s\n", name.c_str(), def.empty() ? "\"\"" : def.c_str(), flag->Help().c_str());
  }
}

absl::StatusOr<std::vector<std::string>> TakeRepeatedFlag(int& argc, char** argv, absl::string_view name) {
  std::vector<std::string> values;
  const std::string flag = absl::StrCat("--", name), with_value = flag + "=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") {  // the rest is positional
      while (i < argc) argv[kept++] = argv[i++];
      break;
    }
    if (arg == flag) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
      values.emplace_back(argv[++i]);
    } else if (absl::StartsWith(arg, with_value)) {
      values.emplace_back(arg.substr(with_value.size()));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return values;
}

std::vector<std::string> ParseFlagsOrExit(int argc, char** argv, const char* tool, int max_positional) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      PrintHelp(tool);
      std::exit(0);
    }
  }
  NormalizeFlagNames(argc, argv);
  absl::Status ok = CheckCommandLine(argc, argv, max_positional);
  if (!ok.ok()) std::exit(ReportError(tool, ok));
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  return std::vector<std::string>(rest.begin() + 1, rest.end());
}

std::string EscapeForTerminal(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&out](unsigned char c) { absl::StrAppend(&out, absl::StrFormat("\\x%02x", c)); };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // A whole, shortest-form UTF-8 sequence that is not a C1 control prints as itself.
    const int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool valid = n > 0 && i + n <= text.size();
    uint32_t cp = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; valid && k < n; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      valid = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    valid = valid && cp >= 0xA0 && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
            !(cp >= 0xD800 && cp <= 0xDFFF);
    if (valid) {
      out.append(text.data() + i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else {
      escape(c);
      ++i;
    }
  }
  return out;
}

int ReportError(const char* tool, const absl::Status& status) {
  std::fprintf(stderr, "%s: error: %s\n", tool, EscapeForTerminal(status.message()).c_str());
  return 1;
}

}  // namespace ag::tools
