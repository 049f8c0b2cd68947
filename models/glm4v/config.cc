#include "models/glm4v/config.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ir/op_table.h"
#include "ir/status_macros.h"
#include "models/glm/json_fields.h"
#include "models/glm/read_file.h"

namespace ag::glm4v {
namespace {

using glm::Fields;
using nlohmann::json;

// text_config as the glm4 parser reads it: transformers' Glm4vTextConfig
// defaults where they differ from glm4's, the checkpoint's dtype, and the
// rotary sections taken out (the glm4 parser refuses rope_scaling).
absl::StatusOr<json> TextForGlm4(const json& root, const json& text_config, const Fields& text,
                                 std::vector<int64_t>* mrope_section) {
  json t = text_config;
  t["model_type"] = "glm4";
  if (!text.Has("head_dim") && t.value("hidden_size", json()).is_number_integer() &&
      t.value("num_attention_heads", json()).is_number_integer() && t["num_attention_heads"].get<int64_t>() > 0) {
    t["head_dim"] = t["hidden_size"].get<int64_t>() / t["num_attention_heads"].get<int64_t>();  // no key: hidden / heads
  }
  if (!text.Has("rms_norm_eps")) t["rms_norm_eps"] = 1e-5;
  if (!text.Has("attention_bias")) t["attention_bias"] = true;  // transformers builds q/k/v with biases always
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (!text.Has(key) && root.contains(key)) t[key] = root[key];
  }
  // A pre-quantized checkpoint describes its storage at the top level (models/quant reads it).
  if (root.contains("quantization_config")) t["quantization_config"] = root["quantization_config"];
  // The rotary sections: in rope_parameters (transformers >= 5) or the legacy rope_scaling.
  const json* sections = nullptr;
  if (text.Has("rope_parameters") && t["rope_parameters"].is_object() && t["rope_parameters"].contains("mrope_section")) {
    sections = &text_config["rope_parameters"]["mrope_section"];
    t["rope_parameters"].erase("mrope_section");
    if (t["rope_parameters"].value("rope_type", "default") == "mrope") t["rope_parameters"]["rope_type"] = "default";
  }
  if (text.Has("rope_scaling")) {
    const json& scaling = text_config["rope_scaling"];
    if (!scaling.is_object()) return text.Error("rope_scaling", "must be an object");
    const std::string type = scaling.value("rope_type", scaling.value("type", std::string("default")));
    if (type != "default" && type != "mrope") return text.Error("rope_scaling", absl::StrCat("type '", type, "' is not supported"));
    if (scaling.contains("mrope_section")) sections = &scaling["mrope_section"];
    t.erase("rope_scaling");
  }
  *mrope_section = {8, 12, 12};  // transformers' default
  if (sections != nullptr) {
    if (!sections->is_array() || sections->size() != 3 ||
        !std::all_of(sections->begin(), sections->end(),
                     [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; })) {
      return text.Error("mrope_section", "must be three non-negative integers");
    }
    *mrope_section = sections->get<std::vector<int64_t>>();
  }
  return t;
}

absl::Status ParseVision(const Fields& f, VisionConfig& v) {
  ASSIGN_OR_RETURN(v.depth, f.Size("depth", glm::kMaxLayers));
  ASSIGN_OR_RETURN(v.hidden_size, f.Size("hidden_size", glm::kMaxHiddenSize));
  ASSIGN_OR_RETURN(v.num_heads, f.Size("num_heads", glm::kMaxHeads));
  ASSIGN_OR_RETURN(v.patch_size, f.Size("patch_size", 64, 14));
  ASSIGN_OR_RETURN(v.temporal_patch_size, f.Size("temporal_patch_size", 8, 2));
  ASSIGN_OR_RETURN(v.merge_size, f.Size("spatial_merge_size", 8, 2));
  ASSIGN_OR_RETURN(v.image_size, f.Size("image_size", 16384, 336));
  ASSIGN_OR_RETURN(v.out_hidden_size, f.Size("out_hidden_size", glm::kMaxHiddenSize));
  ASSIGN_OR_RETURN(v.intermediate_size, f.Size("intermediate_size", glm::kMaxIntermediateSize));
  ASSIGN_OR_RETURN(v.rms_norm_eps, f.Number("rms_norm_eps", 1e-5));
  ASSIGN_OR_RETURN(const int64_t channels, f.Size("in_channels", 8, 3));
  if (channels != 3) return f.Error("in_channels", "must be 3 (RGB)");
  ASSIGN_OR_RETURN(const std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") return f.Error("hidden_act", absl::StrCat("'", act, "' is not supported (silu only)"));
  RETURN_IF_ERROR(f.Require("attention_bias", false, false));
  if (f.Has("rope_parameters")) {
    if (!f.object()["rope_parameters"].is_object()) return f.Error("rope_parameters", "must be an object");
    Fields rope(f.object()["rope_parameters"], absl::StrCat(f.source(), " rope_parameters"));
    ASSIGN_OR_RETURN(v.rope_theta, rope.Number("rope_theta", 10000.0));
  }
  if (v.hidden_size % v.num_heads != 0) {
    return f.Error("num_heads", absl::StrCat("(", v.num_heads, ") must divide hidden_size (", v.hidden_size, ")"));
  }
  if (v.head_dim() % 4 != 0) {
    return f.Error("hidden_size", absl::StrCat("gives a head width of ", v.head_dim(),
                                               ", which the 2-D rotary needs divisible by 4"));
  }
  if (v.image_size % v.patch_size != 0) return f.Error("image_size", "must be a multiple of patch_size");
  if (!(v.rms_norm_eps >= 0 && v.rms_norm_eps <= ir::kMaxNormEps)) {
    return f.Error("rms_norm_eps", absl::StrCat("must be in [0, ", ir::kMaxNormEps, "]"));
  }
  if (!(v.rope_theta >= ir::kMinRopeTheta && v.rope_theta <= ir::kMaxRopeTheta)) {
    return f.Error("rope_theta", absl::StrCat("must be in [", ir::kMinRopeTheta, ", ", ir::kMaxRopeTheta, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsGlm4vCheckpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_regular_file(path, ec) ? path : (fs::path(path) / "config.json").string();
  absl::StatusOr<std::string> text = glm::ReadWholeFile(file);
  if (!text.ok()) return false;
  const json root = json::parse(text->begin(), text->end(), nullptr, false);
  return root.is_object() && root.value("model_type", json()) == "glm4v";
}

absl::StatusOr<Config> ParseConfig(absl::string_view json_text, absl::string_view source) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid JSON object"));
  }
  Fields f(root, source);
  ASSIGN_OR_RETURN(const std::string model_type, f.String("model_type", ""));
  if (model_type != "glm4v") return f.Error("model_type", absl::StrCat("'", model_type, "' is not glm4v"));
  for (const char* key : {"text_config", "vision_config"}) {
    if (!f.Has(key) || !root[key].is_object()) return f.Error(key, "must be an object");
  }
  Config c;
  const std::string text_source = absl::StrCat(source, " text_config");
  Fields text(root["text_config"], text_source);
  std::vector<int64_t> sections;
  ASSIGN_OR_RETURN(const json glm4, TextForGlm4(root, root["text_config"], text, &sections));
  ASSIGN_OR_RETURN(c.text, glm::ParseModelConfig(glm4.dump(), text_source));
  c.text.layout = glm::Layout::kGlm4v;
  c.text.mrope_section = sections;
  if (2 * (sections[0] + sections[1] + sections[2]) != c.text.rotary_dim) {
    return text.Error("mrope_section", absl::StrCat("[", absl::StrJoin(sections, ", "), "] covers ",
                                                    sections[0] + sections[1] + sections[2],
                                                    " rotary pairs; the rotary width ", c.text.rotary_dim, " has ",
                                                    c.text.rotary_dim / 2));
  }
  RETURN_IF_ERROR(ParseVision(Fields(root["vision_config"], absl::StrCat(source, " vision_config")), c.vision));
  if (c.vision.out_hidden_size != c.text.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(source, " vision_config: field 'out_hidden_size' (",
                                                   c.vision.out_hidden_size, ") must equal the text hidden_size (",
                                                   c.text.hidden_size, ")"));
  }
  struct Id {
    const char* key;
    int64_t* out;
    bool required;
  };
  for (const Id& id : {Id{"image_token_id", &c.image_token_id, true}, Id{"image_start_token_id", &c.image_start_token_id, false},
                       Id{"image_end_token_id", &c.image_end_token_id, false}, Id{"video_token_id", &c.video_token_id, false}}) {
    if (!f.Has(id.key)) {
      if (id.required) return f.Error(id.key, "is missing");
      continue;
    }
    ASSIGN_OR_RETURN(*id.out, f.Int(id.key));
    if (*id.out < 0 || *id.out >= c.text.vocab_size) return f.Error(id.key, "is outside the vocabulary");
  }
  return c;
}

absl::StatusOr<Config> LoadConfig(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  absl::StatusOr<std::string> text = glm::ReadWholeFile(file);
  if (absl::IsNotFound(text.status())) return absl::NotFoundError(absl::StrCat(file, ": cannot open"));
  if (!text.ok()) return text.status();
  ASSIGN_OR_RETURN(Config config, ParseConfig(*text, file));
  RETURN_IF_ERROR(glm::AddGenerationConfigEos(dir, config.text));
  return config;
}

std::string ConfigFingerprint(const Config& c) {
  const VisionConfig& v = c.vision;
  return absl::StrCat(glm::ConfigFingerprint(c.text), "vision.depth=", v.depth, "\nvision.hidden_size=", v.hidden_size,
                      "\nvision.num_heads=", v.num_heads, "\nvision.patch_size=", v.patch_size,
                      "\nvision.temporal_patch_size=", v.temporal_patch_size, "\nvision.merge_size=", v.merge_size,
                      "\nvision.image_size=", v.image_size, "\nvision.intermediate_size=", v.intermediate_size,
                      "\nvision.rms_norm_eps=", absl::StrFormat("%.17g", v.rms_norm_eps),
                      "\nvision.rope_theta=", absl::StrFormat("%.17g", v.rope_theta),
                      "\nimage_token_id=", c.image_token_id, "\n");
}

}  // namespace ag::glm4v
