#include "models/quant/checkpoint_quant.h"

#include <regex>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm/json_fields.h"
#include "models/quant/packed.h"

namespace ag::quant {
namespace {

using json = nlohmann::json;

// The module names a linear weight of the model has in the checkpoint, by the
// weight map's tensor name suffix.
constexpr absl::string_view kLinearSuffixes[] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_up_proj.weight", "mlp.down_proj.weight",   // HF names
    "self_attention.query_key_value.weight", "self_attention.dense.weight", "mlp.dense_h_to_4h.weight",
    "mlp.dense_4h_to_h.weight",  // the original ChatGLM names
};
constexpr absl::string_view kHeads[] = {"lm_head.weight", "transformer.output_layer.weight"};

absl::StatusOr<ir::QuantFormat> IntFormat(const glm::Fields& f, const char* bits_key, const char* group_key,
                                          bool symmetric) {
  ASSIGN_OR_RETURN(int64_t bits, f.Int(bits_key));
  if (bits != 4 && bits != 8) return f.Error(bits_key, absl::StrCat("is ", bits, "; 4 and 8 are supported"));
  ir::QuantFormat format{bits == 4 ? ir::QuantKind::kInt4 : ir::QuantKind::kInt8, 0, symmetric};
  ASSIGN_OR_RETURN(int64_t group, f.Int(group_key));
  if (group != -1 && (group == 0 || !ir::IsQuantGroup(group))) return f.Error(group_key, absl::StrCat("is ", group, "; -1 (per channel), 32, 64 and 128 are supported"));
  format.group = group == -1 ? 0 : static_cast<int32_t>(group);
  return format;
}

absl::StatusOr<std::vector<std::string>> Strings(const json& object, const glm::Fields& f, const char* key) {
  std::vector<std::string> out;
  if (!f.Has(key)) return out;
  const json& v = object[key];
  if (!v.is_array()) return f.Error(key, "must be a list of module names");
  for (const json& s : v) {
    if (!s.is_string()) return f.Error(key, "must be a list of module names");
    out.push_back(s.get<std::string>());
  }
  return out;
}

absl::StatusOr<CheckpointQuant> ParseGptq(const json& q, const glm::Fields& f) {
  CheckpointQuant c;
  ASSIGN_OR_RETURN(const bool sym, f.Bool("sym", true));
  ASSIGN_OR_RETURN(c.format, IntFormat(f, "bits", "group_size", sym));
  ASSIGN_OR_RETURN(c.lm_head, f.Bool("lm_head", false));
  ASSIGN_OR_RETURN(const std::string format, f.String("checkpoint_format", "gptq"));
  if (format != "gptq" && format != "gptq_v2") {
    return f.Error("checkpoint_format", absl::StrCat("'", format, "' is not gptq or gptq_v2"));
  }
  c.packing = format == "gptq" ? ir::QuantPacking::kGptq : ir::QuantPacking::kGptqV2;
  if (f.Has("dynamic") && !(q["dynamic"].is_object() && q["dynamic"].empty())) {
    return f.Error("dynamic", "(per-module bits) is not supported");
  }
  return c;
}

absl::StatusOr<CheckpointQuant> ParseAwq(const json& q, const glm::Fields& f) {
  CheckpointQuant c;
  c.packing = ir::QuantPacking::kAwq;
  ASSIGN_OR_RETURN(const std::string version, f.String("version", "gemm"));
  if (absl::AsciiStrToLower(version) != "gemm") return f.Error("version", absl::StrCat("'", version, "' is not gemm"));
  ASSIGN_OR_RETURN(const bool zero_point, f.Bool("zero_point", true));
  if (!zero_point) return f.Error("zero_point", "false is not supported (AWQ's GEMM checkpoints have zero points)");
  ASSIGN_OR_RETURN(c.format, IntFormat(f, f.Has("w_bit") ? "w_bit" : "bits", f.Has("q_group_size") ? "q_group_size" : "group_size", false));
  if (c.format.kind != ir::QuantKind::kInt4) return f.Error("bits", "must be 4 for AWQ");
  ASSIGN_OR_RETURN(c.keep_dense, Strings(q, f, "modules_to_not_convert"));
  c.keep_dense_by_substring = true;
  c.lm_head = false;  // AutoAWQ never quantizes it
  return c;
}

// kv_cache_scheme: 8-bit codes with a static, symmetric scale per layer and K or V (strategy
// tensor), as llm-compressor writes them and vLLM reads them.
absl::StatusOr<ir::DType> ParseKvCacheScheme(const json& q, const glm::Fields& f) {
  const json& s = q["kv_cache_scheme"];
  if (!s.is_object()) return f.Error("kv_cache_scheme", "must be an object");
  const glm::Fields kf(s, "config.json: quantization_config.kv_cache_scheme");
  ASSIGN_OR_RETURN(const std::string type, kf.String("type", "float"));
  ASSIGN_OR_RETURN(const int64_t bits, kf.Int("num_bits"));
  ASSIGN_OR_RETURN(const std::string strategy, kf.String("strategy", "tensor"));
  ASSIGN_OR_RETURN(const bool dynamic, kf.Bool("dynamic", false));
  ASSIGN_OR_RETURN(const bool symmetric, kf.Bool("symmetric", true));
  if (type != "float" && type != "int") return kf.Error("type", absl::StrCat("'", type, "' is not float or int"));
  if (bits != 8) return kf.Error("num_bits", absl::StrCat("is ", bits, "; 8 is supported"));
  if (strategy != "tensor") return kf.Error("strategy", absl::StrCat("'", strategy, "' is not tensor (one scale per layer)"));
  if (dynamic) return kf.Error("dynamic", "must be false (the checkpoint's static k_scale/v_scale)");
  if (!symmetric) return kf.Error("symmetric", "must be true");
  return type == "float" ? ir::DType::kF8E4M3 : ir::DType::kI8;
}

// input_activations: the W8A8 schemes (llm-compressor's FP8_DYNAMIC and INT8 W8A8 presets) quantize
// each token's row of the linear's input with a dynamic symmetric scale; null is weight-only.
absl::StatusOr<ir::ActQuant> ParseInputActivations(const json& group, const std::string& where) {
  if (group.contains("output_activations") && !group["output_activations"].is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": field 'output_activations' is not supported (null)"));
  }
  if (!group.contains("input_activations") || group["input_activations"].is_null()) return ir::ActQuant::kNone;
  const json& a = group["input_activations"];
  if (!a.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": field 'input_activations' must be an object or null"));
  const glm::Fields af(a, absl::StrCat(where, ".input_activations"));
  ASSIGN_OR_RETURN(const std::string type, af.String("type", "int"));
  ASSIGN_OR_RETURN(const int64_t bits, af.Int("num_bits"));
  ASSIGN_OR_RETURN(const std::string strategy, af.String("strategy", "tensor"));
  ASSIGN_OR_RETURN(const bool dynamic, af.Bool("dynamic", false));
  ASSIGN_OR_RETURN(const bool symmetric, af.Bool("symmetric", true));
  if (type != "float" && type != "int") return af.Error("type", absl::StrCat("'", type, "' is not float or int"));
  if (bits != 8) return af.Error("num_bits", absl::StrCat("is ", bits, "; 8-bit inputs are supported"));
  if (strategy != "token") {
    return af.Error("strategy", absl::StrCat("'", strategy, "' is not token (static input scales are not supported)"));
  }
  if (!dynamic) return af.Error("dynamic", "must be true (a scale computed for each token)");
  if (!symmetric) return af.Error("symmetric", "must be true");
  return type == "float" ? ir::ActQuant::kFp8 : ir::ActQuant::kInt8;
}

absl::StatusOr<CheckpointQuant> ParseCompressedTensors(const json& q, const glm::Fields& f, absl::string_view source) {
  CheckpointQuant c;
  if (f.Has("kv_cache_scheme")) {
    ASSIGN_OR_RETURN(c.kv_cache, ParseKvCacheScheme(q, f));
    // A checkpoint may quantize only its KV cache: its linears stay dense.
    if (!f.Has("config_groups") || (q["config_groups"].is_object() && q["config_groups"].empty())) return c;
  }
  ASSIGN_OR_RETURN(const std::string format, f.String("format", ""));
  if (!f.Has("config_groups") || !q["config_groups"].is_object() || q["config_groups"].size() != 1) {
    return f.Error("config_groups", "must hold one group (one scheme for every quantized linear)");
  }
  const json& group = q["config_groups"].begin().value();
  const std::string where = absl::StrCat(source, ": quantization_config.config_groups.", q["config_groups"].begin().key());
  if (!group.is_object() || !group.contains("weights") || !group["weights"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": needs a 'weights' scheme"));
  }
  const json& w = group["weights"];
  const glm::Fields wf(w, absl::StrCat(where, ".weights"));
  ASSIGN_OR_RETURN(const std::string type, wf.String("type", "int"));
  ASSIGN_OR_RETURN(const std::string strategy, wf.String("strategy", ""));
  ASSIGN_OR_RETURN(const bool sym, wf.Bool("symmetric", true));
  // "group" (alias "dynamic"): older llm-compressor's act order, stored as weight_g_idx; "weight"
  // (alias "static"): ordering during calibration only, the plain group layout.
  if (wf.Has("actorder")) {
    const json& order = w["actorder"];
    if (!order.is_string() || (order != "group" && order != "dynamic" && order != "weight" && order != "static")) {
      return wf.Error("actorder", "must be group, dynamic, weight or static");
    }
  }
  if (wf.Has("dynamic") && !(w["dynamic"].is_boolean() && !w["dynamic"].get<bool>())) {
    return wf.Error("dynamic", "weights must be quantized statically");
  }
  if (type == "float") {
    ASSIGN_OR_RETURN(int64_t bits, wf.Int("num_bits"));
    if (bits != 8) return wf.Error("num_bits", "must be 8 for float weights (FP8 E4M3)");
    if (strategy != "channel" && strategy != "tensor") return wf.Error("strategy", "must be channel or tensor for FP8");
    if (format != "float-quantized" && format != "naive-quantized") {
      return f.Error("format", absl::StrCat("'", format, "' is not float-quantized"));
    }
    c.packing = ir::QuantPacking::kCtFp8;
    c.format = {ir::QuantKind::kFp8E4M3, 0, true};  // a tensor scale becomes every row's (exact)
  } else if (type == "int" && (format == "int-quantized" || format == "naive-quantized")) {
    // llm-compressor's W8A8 int8: one int8 per weight, unpacked, a scale per channel (or tensor).
    ASSIGN_OR_RETURN(int64_t bits, wf.Int("num_bits"));
    if (bits != 8) return wf.Error("num_bits", absl::StrCat("is ", bits, "; ", format, " int weights must be 8-bit"));
    if (strategy != "channel" && strategy != "tensor") return wf.Error("strategy", "must be channel or tensor for int8");
    if (!sym) return wf.Error("symmetric", absl::StrCat("must be true for ", format, " weights"));
    c.packing = ir::QuantPacking::kCtInt8;
    c.format = {ir::QuantKind::kInt8, 0, true};  // a tensor scale becomes every row's (exact)
  } else if (type == "int") {
    if (format != "pack-quantized") {
      return f.Error("format", absl::StrCat("'", format, "' is not pack-quantized or int-quantized"));
    }
    if (strategy != "channel" && strategy != "group") return wf.Error("strategy", "must be channel or group");
    json shaped = w;
    if (strategy == "channel") shaped["group_size"] = -1;
    ASSIGN_OR_RETURN(c.format, IntFormat(glm::Fields(shaped, absl::StrCat(where, ".weights")), "num_bits", "group_size", sym));
    c.packing = ir::QuantPacking::kCtInt;
  } else {
    return wf.Error("type", absl::StrCat("'", type, "' is not int or float"));
  }
  ASSIGN_OR_RETURN(c.format.act, ParseInputActivations(group, where));
  ASSIGN_OR_RETURN(c.keep_dense, Strings(q, f, "ignore"));
  c.lm_head = true;  // unless ignored, as every linear
  return c;
}

}  // namespace

bool CheckpointQuant::Covers(absl::string_view module) const {
  if (!quantized()) return false;
  for (const std::string& k : keep_dense) {
    if (keep_dense_by_substring ? absl::StrContains(module, k) : module == k) return false;
    if (!keep_dense_by_substring && absl::StartsWith(k, "re:")) {
      const std::string m(module);
      if (std::regex_search(m, std::regex(k.substr(3)), std::regex_constants::match_continuous)) return false;
    }
  }
  return true;
}

absl::StatusOr<CheckpointQuant> ParseCheckpointQuant(const glm::ModelConfig& config) {
  if (config.quantization.empty()) return CheckpointQuant{};
  const json q = json::parse(config.quantization, nullptr, false);
  const std::string source = "config.json: quantization_config";
  if (q.is_discarded() || !q.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, " is not an object"));
  const glm::Fields f(q, source);
  ASSIGN_OR_RETURN(const std::string method, f.String("quant_method", ""));
  if (method == "gptq") return ParseGptq(q, f);
  if (method == "awq") return ParseAwq(q, f);
  if (method == "compressed-tensors") {
    // Regular expressions come from the file: a bad one is the file's error, not a crash.
    try {
      ASSIGN_OR_RETURN(CheckpointQuant c, ParseCompressedTensors(q, f, "config.json"));
      for (const std::string& k : c.keep_dense) {
        if (absl::StartsWith(k, "re:")) std::regex check(k.substr(3));
      }
      return c;
    } catch (const std::regex_error&) {
      return f.Error("ignore", "holds an invalid regular expression");
    }
  }
  return f.Error("quant_method", absl::StrCat("'", method, "' is not supported (gptq, awq, compressed-tensors)"));
}

glm::WeightSource Annotate(const CheckpointQuant& quant, glm::WeightSource source) {
  if (!quant.quantized() || !absl::EndsWith(source.tensor, ".weight") || source.tensor_shape.size() != 2) return source;
  bool linear = false;
  for (absl::string_view suffix : kLinearSuffixes) linear = linear || absl::EndsWith(source.tensor, suffix);
  for (absl::string_view head : kHeads) linear = linear || (quant.lm_head && source.tensor == head);
  const absl::string_view module = PackedModule(source.tensor);
  if (!linear || !quant.Covers(module)) return source;
  source.packing = quant.packing;
  source.quant = quant.format;
  return source;
}

}  // namespace ag::quant
