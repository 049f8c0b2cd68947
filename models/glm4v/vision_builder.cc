#include "models/glm4v/vision_builder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm4v/weight_map.h"

namespace ag::glm4v {
namespace {

using ir::Attrs;
using ir::DType;
using ir::OpId;
using ir::TensorType;
using ir::ValueId;

constexpr double kMergerLayerNormEps = 1e-5;  // nn.LayerNorm's default: the config does not set it

class VisionBuilder {
 public:
  VisionBuilder(const Config& c, const VisionBuildOptions& o) : c_(c), v_(c.vision), o_(o), g_("glm4v_vision") {}

  absl::StatusOr<ir::Graph> Build() {
    const int64_t group = v_.patches_per_token();
    if (o_.max_patches <= 0 || o_.max_patches % group != 0 || o_.max_images <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("vision limits: patches (", o_.max_patches,
                                                     ") must be a positive multiple of ", group,
                                                     ", images (", o_.max_images, ") positive"));
    }
    if (!ir::IsFloat(o_.dtype)) return absl::InvalidArgumentError("model dtype must be a float type");
    g_.set_symbol_bound("P", o_.max_patches);
    g_.set_symbol_bound("I", o_.max_images);
    g_.set_symbol_bound("E", o_.max_patches / group);
    const ir::Dim p = ir::Dim::Sym("P");
    ASSIGN_OR_RETURN(ValueId pixels, g_.AddInput("pixels", {o_.dtype, {p, v_.patch_values()}}));
    ASSIGN_OR_RETURN(pos_, g_.AddInput("patch_pos", {DType::kI32, {p, 4}}));
    ASSIGN_OR_RETURN(offsets_, g_.AddInput("image_offsets", {DType::kI32, {ir::Dim::Sym("I", 1)}}));

    // Patch embedding (the Conv3d as a linear), its norm, the resampled position table.
    ASSIGN_OR_RETURN(ValueId pw, Param("patch_embed.proj.weight"));
    ASSIGN_OR_RETURN(ValueId pb, Param("patch_embed.proj.bias"));
    ASSIGN_OR_RETURN(ValueId x, Node(OpId::k_linear, {pixels, pw, pb}, {}, -1, "patches"));
    ASSIGN_OR_RETURN(x, Norm(x, "post_conv_layernorm.weight", -1, "patches_norm"));
    ASSIGN_OR_RETURN(ValueId table, Param("embeddings.position_embedding.weight"));
    ASSIGN_OR_RETURN(x, Node(OpId::k_vision_pos_embed, {x, table, pos_}, {{"side", v_.side()}}, -1, "patches_pos"));
    for (int block = 0; block < v_.depth; ++block) {
      ASSIGN_OR_RETURN(x, Block(block, x));
    }
    ASSIGN_OR_RETURN(x, Norm(x, "post_layernorm.weight", -1, "blocks_norm"));

    // The 2x2 downsample (a Conv2d over each merge block: its rows side by side, then a linear) and the merger.
    ASSIGN_OR_RETURN(ValueId merged, Node(OpId::k_merge_rows, {x}, {{"group", v_.patches_per_token()}, {"rows", std::string("E")}},
                                          -1, "merged"));
    ASSIGN_OR_RETURN(ValueId dw, Param("downsample.weight"));
    ASSIGN_OR_RETURN(ValueId db, Param("downsample.bias"));
    ASSIGN_OR_RETURN(ValueId y, Node(OpId::k_linear, {merged, dw, db}, {}, -1, "downsampled"));
    ASSIGN_OR_RETURN(ValueId proj, Param("merger.proj.weight"));
    ASSIGN_OR_RETURN(y, Node(OpId::k_linear, {y, proj}, {}, -1, "merger_proj"));
    ASSIGN_OR_RETURN(ValueId lw, Param("merger.post_projection_norm.weight"));
    ASSIGN_OR_RETURN(ValueId lb, Param("merger.post_projection_norm.bias"));
    ASSIGN_OR_RETURN(y, Node(OpId::k_layer_norm, {y, lw, lb}, {{"eps", kMergerLayerNormEps}}, -1, "merger_norm"));
    ASSIGN_OR_RETURN(y, Node(OpId::k_gelu, {y}, {}, -1, "merger_gelu"));
    ASSIGN_OR_RETURN(y, SwiGlu(y, "merger.", v_.intermediate_size, -1, "merger", /*output=*/"image_embeds"));
    g_.AddOutput(y);
    return std::move(g_);
  }

 private:
  absl::StatusOr<ValueId> Block(int block, ValueId x) {
    const std::string prefix = absl::StrCat("blocks.", block, ".");
    const std::string name = absl::StrCat("v", block, ".");
    const int64_t c = v_.hidden_size;
    ASSIGN_OR_RETURN(ValueId h, Norm(x, prefix + "norm1.weight", block, name + "h"));
    ASSIGN_OR_RETURN(ValueId wqkv, Param(prefix + "attn.qkv.weight"));
    ASSIGN_OR_RETURN(ValueId qkv, Node(OpId::k_linear, {h, wqkv}, {}, block, name + "qkv"));
    ValueId parts[3];
    for (int i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(parts[i], Node(OpId::k_slice, {qkv}, {{"axis", int64_t{1}}, {"start", i * c}, {"size", c}}, block,
                                      absl::StrCat(name, std::string(1, "qkv"[i]))));
    }
    const Attrs heads = {{"heads", v_.num_heads}, {"head_dim", v_.head_dim()}};
    Attrs rotary = heads;
    rotary["theta"] = v_.rope_theta;
    ASSIGN_OR_RETURN(ValueId q, Node(OpId::k_vision_rotary, {parts[0], pos_}, rotary, block, name + "q_rot"));
    ASSIGN_OR_RETURN(ValueId k, Node(OpId::k_vision_rotary, {parts[1], pos_}, rotary, block, name + "k_rot"));
    ASSIGN_OR_RETURN(ValueId a, Node(OpId::k_segment_attention, {q, k, parts[2], offsets_}, heads, block, name + "attn"));
    ASSIGN_OR_RETURN(ValueId wo, Param(prefix + "attn.proj.weight"));
    ASSIGN_OR_RETURN(ValueId o, Node(OpId::k_linear, {a, wo}, {}, block, name + "o"));
    ASSIGN_OR_RETURN(x, Node(OpId::k_add, {x, o}, {}, block, name + "x1"));
    ASSIGN_OR_RETURN(ValueId h2, Norm(x, prefix + "norm2.weight", block, name + "h2"));
    ASSIGN_OR_RETURN(ValueId d, SwiGlu(h2, prefix + "mlp.", v_.out_hidden_size, block, name, ""));
    return Node(OpId::k_add, {x, d}, {}, block, name + "x2");
  }

  // down(silu(gate(x)) * up(x)), gate and up read as one [gate | up] weight (which fuse can put behind a norm).
  absl::StatusOr<ValueId> SwiGlu(ValueId x, const std::string& prefix, int64_t width, int layer, const std::string& name,
                                 const std::string& output) {
    const std::string fused = absl::StrCat("model.visual.", prefix, "gate_up_proj.weight");
    ASSIGN_OR_RETURN(std::vector<int64_t> gate_shape, VisionParamShape(c_, absl::StrCat("model.visual.", prefix, "gate_proj.weight")));
    ASSIGN_OR_RETURN(ValueId wgu, g_.AddParam(fused, TensorType{o_.dtype, {2 * gate_shape[0], gate_shape[1]}},
                                              {{absl::StrCat("model.visual.", prefix, "gate_proj.weight"), {}},
                                               {absl::StrCat("model.visual.", prefix, "up_proj.weight"), {}}}));
    ASSIGN_OR_RETURN(ValueId gu, Node(OpId::k_linear, {x, wgu}, {}, layer, name + "gate_up"));
    ASSIGN_OR_RETURN(ValueId gate, Node(OpId::k_slice, {gu}, {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"size", width}},
                                        layer, name + "gate"));
    ASSIGN_OR_RETURN(ValueId up, Node(OpId::k_slice, {gu}, {{"axis", int64_t{1}}, {"start", width}, {"size", width}},
                                      layer, name + "up"));
    ASSIGN_OR_RETURN(ValueId act, Node(OpId::k_silu, {gate}, {}, layer, name + "act"));
    ASSIGN_OR_RETURN(ValueId m, Node(OpId::k_mul, {act, up}, {}, layer, name + "m"));
    ASSIGN_OR_RETURN(ValueId wd, Param(prefix + "down_proj.weight"));
    return Node(OpId::k_linear, {m, wd}, {}, layer, output.empty() ? name + "down" : output);
  }

  absl::StatusOr<ValueId> Norm(ValueId x, const std::string& weight, int layer, const std::string& name) {
    ASSIGN_OR_RETURN(ValueId w, Param(weight));
    return Node(OpId::k_rms_norm, {x, w}, {{"eps", v_.rms_norm_eps}}, layer, name);
  }
  absl::StatusOr<ValueId> Param(const std::string& name) {
    const std::string full = absl::StrCat("model.visual.", name);
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, VisionParamShape(c_, full));
    return g_.AddParam(full, TensorType{o_.dtype, ir::Shape(dims.begin(), dims.end())});
  }
  absl::StatusOr<ValueId> Node(OpId op, std::vector<ValueId> operands, Attrs attrs, int layer, const std::string& name) {
    return g_.AddResultOf(op, std::move(operands), std::move(attrs), layer, name);
  }

  const Config& c_;
  const VisionConfig& v_;
  const VisionBuildOptions& o_;
  ir::Graph g_;
  ValueId pos_ = ir::kNoValue, offsets_ = ir::kNoValue;
};

}  // namespace

absl::StatusOr<ir::Graph> BuildVisionGraph(const Config& config, const VisionBuildOptions& options) {
  return VisionBuilder(config, options).Build();
}

}  // namespace ag::glm4v
