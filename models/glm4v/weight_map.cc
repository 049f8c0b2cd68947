#include "models/glm4v/weight_map.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace ag::glm4v {
namespace {

constexpr absl::string_view kVisual = "model.visual.";

// The checkpoint tensor's own shape (the graph may read it flattened).
absl::StatusOr<std::vector<int64_t>> TensorShape(const Config& config, absl::string_view param) {
  const VisionConfig& v = config.vision;
  const int64_t c = v.hidden_size, o = v.out_hidden_size, inter = v.intermediate_size, m = v.merge_size;
  const absl::string_view name = param.substr(kVisual.size());
  if (name == "patch_embed.proj.weight") return std::vector<int64_t>{c, 3, v.temporal_patch_size, v.patch_size, v.patch_size};
  if (name == "patch_embed.proj.bias") return std::vector<int64_t>{c};
  if (name == "post_conv_layernorm.weight" || name == "post_layernorm.weight") return std::vector<int64_t>{c};
  if (name == "embeddings.position_embedding.weight") return std::vector<int64_t>{v.side() * v.side(), c};
  if (name == "downsample.weight") return std::vector<int64_t>{o, c, m, m};
  if (name == "downsample.bias") return std::vector<int64_t>{o};
  if (name == "merger.proj.weight") return std::vector<int64_t>{o, o};
  if (name == "merger.post_projection_norm.weight" || name == "merger.post_projection_norm.bias") {
    return std::vector<int64_t>{o};
  }
  if (name == "merger.gate_proj.weight" || name == "merger.up_proj.weight") return std::vector<int64_t>{inter, o};
  if (name == "merger.down_proj.weight") return std::vector<int64_t>{o, inter};
  if (absl::StartsWith(name, "blocks.")) {
    const absl::string_view rest = name.substr(7);
    const size_t dot = rest.find('.');
    int block = -1;
    if (dot != absl::string_view::npos && absl::SimpleAtoi(rest.substr(0, dot), &block) && block >= 0 &&
        block < v.depth) {
      const absl::string_view suffix = rest.substr(dot + 1);
      if (suffix == "norm1.weight" || suffix == "norm2.weight") return std::vector<int64_t>{c};
      if (suffix == "attn.qkv.weight") return std::vector<int64_t>{3 * c, c};
      if (suffix == "attn.proj.weight") return std::vector<int64_t>{c, c};
      if (suffix == "mlp.gate_proj.weight" || suffix == "mlp.up_proj.weight") return std::vector<int64_t>{o, c};
      if (suffix == "mlp.down_proj.weight") return std::vector<int64_t>{c, o};
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("'", param, "' is not a parameter of this glm4v vision tower"));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> VisionParamShape(const Config& config, absl::string_view param) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, TensorShape(config, param));
  if (shape.size() > 2) {  // a convolution's kernel, read as a linear: [out, everything else]
    int64_t columns = 1;
    for (size_t i = 1; i < shape.size(); ++i) columns *= shape[i];
    shape = {shape[0], columns};
  }
  return shape;
}

bool IsVisionTensor(absl::string_view tensor) { return absl::StartsWith(tensor, kVisual); }

bool IsVisionLinear(absl::string_view tensor) {
  const absl::string_view name = tensor.substr(IsVisionTensor(tensor) ? kVisual.size() : tensor.size());
  return (absl::StartsWith(name, "blocks.") || absl::StartsWith(name, "merger.")) &&
         (absl::EndsWith(name, "_proj.weight") || absl::EndsWith(name, "attn.qkv.weight") ||
          absl::EndsWith(name, "attn.proj.weight") || name == "merger.proj.weight");
}

absl::StatusOr<glm::WeightSource> MapWeight(const Config& config, absl::string_view param) {
  if (!absl::StartsWith(param, kVisual)) return glm::MapWeight(config.text, param);
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, TensorShape(config, param));
  return glm::WeightSource{std::string(param), shape, 0, shape[0]};
}

}  // namespace ag::glm4v
