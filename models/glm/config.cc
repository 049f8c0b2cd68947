#include "models/glm/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/op_table.h"
#include "ir/status_macros.h"
#include "models/glm/json_fields.h"
#include "models/glm/read_file.h"

namespace ag::glm {
namespace {

using nlohmann::json;

absl::Status ParseHf(const Fields& f, ModelConfig& c) {
  ASSIGN_OR_RETURN(c.hidden_size, f.Size("hidden_size", kMaxHiddenSize));
  ASSIGN_OR_RETURN(c.intermediate_size, f.Size("intermediate_size", kMaxIntermediateSize));
  ASSIGN_OR_RETURN(c.num_layers, f.Size("num_hidden_layers", kMaxLayers));
  ASSIGN_OR_RETURN(c.num_heads, f.Size("num_attention_heads", kMaxHeads));
  // Defaults are transformers' GlmConfig / Glm4Config defaults (2 KV heads, head_dim 128, ...).
  ASSIGN_OR_RETURN(c.num_kv_heads, f.Size("num_key_value_heads", kMaxHeads, 2));
  ASSIGN_OR_RETURN(c.head_dim, f.Size("head_dim", kMaxHeadDim, 128));
  ASSIGN_OR_RETURN(c.vocab_size, f.Size("vocab_size", kMaxVocabSize));
  ASSIGN_OR_RETURN(c.rms_norm_eps, f.Number("rms_norm_eps", 1.5625e-07));
  ASSIGN_OR_RETURN(c.attention_bias, f.Bool("attention_bias", true));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   f.Size("max_position_embeddings", kMaxPositions, c.layout == Layout::kGlm4 ? 32768 : 131072));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") return f.Error("hidden_act", absl::StrCat("'", act, "' is not supported (silu only)"));
  if (f.Has("rope_scaling")) return f.Error("rope_scaling", "is not supported");
  // RoPE: transformers >= 5 nests the parameters in rope_parameters; older
  // configs keep them at the top level. The nested ones win.
  ASSIGN_OR_RETURN(c.rope_theta, f.Number("rope_theta", 10000.0));
  ASSIGN_OR_RETURN(c.partial_rotary_factor, f.Number("partial_rotary_factor", 0.5));
  if (f.Has("rope_parameters")) {
    const nlohmann::json& rp = f.object()["rope_parameters"];
    if (!rp.is_object()) return f.Error("rope_parameters", "must be an object");
    Fields nested(rp, absl::StrCat(f.source(), " rope_parameters"));
    ASSIGN_OR_RETURN(c.rope_theta, nested.Number("rope_theta", c.rope_theta));
    ASSIGN_OR_RETURN(c.partial_rotary_factor, nested.Number("partial_rotary_factor", c.partial_rotary_factor));
    ASSIGN_OR_RETURN(std::string type, nested.String("rope_type", "default"));
    if (type != "default") return nested.Error("rope_type", absl::StrCat("'", type, "' is not supported"));
  }
  return absl::OkStatus();
}

absl::Status ParseChatGlm(const Fields& f, ModelConfig& c) {
  ASSIGN_OR_RETURN(c.hidden_size, f.Size("hidden_size", kMaxHiddenSize));
  ASSIGN_OR_RETURN(c.intermediate_size, f.Size("ffn_hidden_size", kMaxIntermediateSize));
  ASSIGN_OR_RETURN(c.num_layers, f.Size("num_layers", kMaxLayers));
  ASSIGN_OR_RETURN(c.num_heads, f.Size("num_attention_heads", kMaxHeads));
  ASSIGN_OR_RETURN(bool mqa, f.Bool("multi_query_attention", false));
  c.num_kv_heads = c.num_heads;
  if (mqa) {
    ASSIGN_OR_RETURN(c.num_kv_heads, f.Size("multi_query_group_num", kMaxHeads));
  }
  ASSIGN_OR_RETURN(c.head_dim, f.Size("kv_channels", kMaxHeadDim, c.hidden_size / c.num_heads));
  ASSIGN_OR_RETURN(c.vocab_size, f.Size("padded_vocab_size", kMaxVocabSize));
  ASSIGN_OR_RETURN(c.rms_norm_eps, f.Number("layernorm_epsilon", 1e-5));
  ASSIGN_OR_RETURN(c.attention_bias, f.Bool("add_qkv_bias", false));
  ASSIGN_OR_RETURN(c.max_position_embeddings, f.Size("seq_length", kMaxPositions, 2048));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(double rope_ratio, f.Number("rope_ratio", 1.0));
  c.rope_theta = 10000.0 * rope_ratio;
  c.partial_rotary_factor = 0.5;  // rotary on half of kv_channels
  // Variants of the original architecture this engine does not implement.
  RETURN_IF_ERROR(f.Require("rmsnorm", true, true));
  RETURN_IF_ERROR(f.Require("post_layer_norm", true, true));
  RETURN_IF_ERROR(f.Require("add_bias_linear", false, false));
  RETURN_IF_ERROR(f.Require("apply_residual_connection_post_layernorm", false, false));
  RETURN_IF_ERROR(f.Require("original_rope", true, true));
  return absl::OkStatus();
}

}  // namespace

absl::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kGlm:
      return "glm";
    case Layout::kGlm4:
      return "glm4";
    case Layout::kChatGlm:
      return "chatglm";
    case Layout::kGlm4v:
      return "glm4v";
  }
  return "?";
}

int64_t ModelConfig::NumParameters() const {
  const int64_t attn = hidden_size * (q_size() + 2 * kv_size()) + (attention_bias ? q_size() + 2 * kv_size() : 0) +
                       q_size() * hidden_size;
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t norms = hidden_size * (sandwich_norms() ? 4 : 2);
  const int64_t embed = vocab_size * hidden_size;
  return num_layers * (attn + mlp + norms) + embed * (tie_word_embeddings ? 1 : 2) + hidden_size;
}

std::string ConfigFingerprint(const ModelConfig& c) {
  // %.17g round-trips a double exactly, so any change of eps or theta shows.
  return absl::StrCat("layout=", LayoutName(c.layout), "\nhidden_size=", c.hidden_size,
                      "\nintermediate_size=", c.intermediate_size, "\nnum_layers=", c.num_layers,
                      "\nnum_heads=", c.num_heads, "\nnum_kv_heads=", c.num_kv_heads, "\nhead_dim=", c.head_dim,
                      "\nvocab_size=", c.vocab_size, "\nrms_norm_eps=", absl::StrFormat("%.17g", c.rms_norm_eps),
                      "\nattention_bias=", c.attention_bias, "\nmax_position_embeddings=", c.max_position_embeddings,
                      "\ntie_word_embeddings=", c.tie_word_embeddings,
                      "\nrope_theta=", absl::StrFormat("%.17g", c.rope_theta), "\nrotary_dim=", c.rotary_dim,
                      "\nmrope_section=", absl::StrJoin(c.mrope_section, ","), "\neos_token_ids=", absl::StrJoin(c.eos_token_ids, ","),
                      "\n", c.quantization.empty() ? "" : absl::StrCat("quantization=", c.quantization, "\n"));
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view source) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": must be a JSON object"));
  Fields f(root, source);
  ModelConfig c;
  ASSIGN_OR_RETURN(std::string model_type, f.String("model_type", ""));
  if (model_type == "glm") {
    c.layout = Layout::kGlm;
  } else if (model_type == "glm4") {
    c.layout = Layout::kGlm4;
  } else if (model_type == "chatglm") {
    c.layout = Layout::kChatGlm;
  } else if (model_type.empty()) {
    return f.Error("model_type", "is missing");
  } else {
    return f.Error("model_type", absl::StrCat("'", model_type, "' is not a GLM-4 layout (glm, glm4, chatglm)"));
  }
  RETURN_IF_ERROR(c.layout == Layout::kChatGlm ? ParseChatGlm(f, c) : ParseHf(f, c));
  ASSIGN_OR_RETURN(c.eos_token_ids, f.IntOrList("eos_token_id"));
  if (!f.Has("eos_token_id") && c.layout != Layout::kChatGlm) {
    // transformers' default for glm / glm4: GLM-4's three end-of-sequence ids.
    for (int64_t id : {151329, 151336, 151338}) {
      if (id < c.vocab_size) c.eos_token_ids.push_back(id);
    }
  }
  // transformers >= 5 writes "dtype", older versions "torch_dtype".
  ASSIGN_OR_RETURN(std::string dtype, f.String("dtype", ""));
  if (dtype.empty()) {
    ASSIGN_OR_RETURN(dtype, f.String("torch_dtype", "float32"));
  }
  // The checkpoint's dtype changes nothing we compute (the rotary inverse
  // frequencies stay fp32, as transformers computes them at load), but a dtype
  // we do not know means a checkpoint we do not understand.
  if (dtype != "bfloat16" && dtype != "float16" && dtype != "float32") {
    return f.Error(f.Has("dtype") ? "dtype" : "torch_dtype", absl::StrCat("'", dtype, "' is not supported"));
  }
  if (f.Has("pad_token_id")) {
    ASSIGN_OR_RETURN(c.pad_token_id, f.Int("pad_token_id"));
  }
  if (f.Has("quantization_config")) {
    if (!root["quantization_config"].is_object()) return f.Error("quantization_config", "must be an object");
    c.quantization = root["quantization_config"].dump();
  }

  if (c.num_heads % c.num_kv_heads != 0) {
    return f.Error("num_attention_heads",
                   absl::StrCat("(", c.num_heads, ") must be a multiple of the KV head count (", c.num_kv_heads, ")"));
  }
  if (!(c.rms_norm_eps >= 0 && c.rms_norm_eps <= ir::kMaxNormEps)) {
    return f.Error("rms_norm_eps", absl::StrCat("must be in [0, ", ir::kMaxNormEps, "]"));
  }
  if (!(c.rope_theta >= ir::kMinRopeTheta && c.rope_theta <= ir::kMaxRopeTheta)) {
    return f.Error("rope_theta", absl::StrCat("must be in [", ir::kMinRopeTheta, ", ", ir::kMaxRopeTheta, "]"));
  }
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1)) {
    return f.Error("partial_rotary_factor", "must be in (0, 1]");
  }
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0) {
    return f.Error("partial_rotary_factor", absl::StrCat("gives an odd or empty rotary dimension (", c.rotary_dim,
                                                         ") for head_dim ", c.head_dim));
  }
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) return f.Error("eos_token_id", absl::StrCat(id, " is outside the vocabulary"));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool is_dir = !fs::is_regular_file(path, ec);
  const std::string file = is_dir ? (fs::path(path) / "config.json").string() : path;
  absl::StatusOr<std::string> text = ReadWholeFile(file);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(file, ": cannot open (missing config.json?)"));
  }
  if (!text.ok()) return text.status();
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(*text, file));
  if (is_dir) RETURN_IF_ERROR(AddGenerationConfigEos(path, config));
  // AutoGPTQ's checkpoints describe their quantization in a file of its own.
  const std::string gptq_file = (fs::path(path) / "quantize_config.json").string();
  if (is_dir && config.quantization.empty() && fs::exists(gptq_file, ec)) {
    ASSIGN_OR_RETURN(const std::string gptq_text, ReadWholeFile(gptq_file));
    json q = json::parse(gptq_text.begin(), gptq_text.end(), nullptr, false);
    if (q.is_discarded() || !q.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(gptq_file, ": not a valid JSON object"));
    }
    if (!q.contains("quant_method")) q["quant_method"] = "gptq";
    config.quantization = q.dump();
  }
  return config;
}

absl::Status AddGenerationConfigEos(const std::string& dir, ModelConfig& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string gen_file = (fs::path(dir) / "generation_config.json").string();
  if (!fs::exists(gen_file, ec)) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string s, ReadWholeFile(gen_file));
  const json root = json::parse(s.begin(), s.end(), nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(gen_file, ": not a valid JSON object"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> extra, Fields(root, gen_file).IntOrList("eos_token_id"));
  for (int64_t id : extra) {
    if (id < 0 || id >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(gen_file, ": eos_token_id ", id, " is outside the vocabulary"));
    }
    if (std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) == config.eos_token_ids.end()) {
      config.eos_token_ids.push_back(id);
    }
  }
  return absl::OkStatus();
}

}  // namespace ag::glm
