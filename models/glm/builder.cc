#include "models/glm/builder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm/weight_map.h"

namespace ag::glm {
namespace {

using ir::Attrs;
using ir::DType;
using ir::Graph;
using ir::OpId;
using ir::TensorType;
using ir::ValueId;

class Builder {
 public:
  Builder(const ModelConfig& c, const BuildOptions& o) : c_(c), o_(o), g_(absl::StrCat(LayoutName(c.layout))) {}

  absl::StatusOr<Graph> Build() {
    if (o_.kv_block_size <= 0 || o_.max_batch_tokens <= 0 || o_.max_seqs <= 0) {
      return absl::InvalidArgumentError("kv block size, max batch tokens and max sequences must be positive");
    }
    if (!ir::IsFloat(o_.dtype)) return absl::InvalidArgumentError("model dtype must be a float type");
    if (o_.KvDType() != o_.dtype && o_.KvDType() != ir::DType::kI8 && o_.KvDType() != ir::DType::kF8E4M3) {
      return absl::InvalidArgumentError("the KV cache is the model's dtype, int8 or fp8");
    }
    g_.set_symbol_bound("T", o_.max_batch_tokens);
    g_.set_symbol_bound("R", o_.max_batch_tokens);
    g_.set_symbol_bound("S", o_.max_seqs);
    g_.set_symbol_bound("M", o_.max_batch_tokens);  // image rows of a step (GLM-4.1V)
    const ir::Dim t = ir::Dim::Sym("T");
    ASSIGN_OR_RETURN(ValueId tokens, g_.AddInput("tokens", {DType::kI32, {t}}));
    // M-RoPE reads three position streams (temporal, height, width), one row each.
    const TensorType positions = c_.mrope_section.empty() ? TensorType{DType::kI32, {t}}
                                                           : TensorType{DType::kI32, {3, t}};
    ASSIGN_OR_RETURN(positions_, g_.AddInput("positions", positions));
    ASSIGN_OR_RETURN(ValueId rows, g_.AddInput("logit_rows", {DType::kI32, {ir::Dim::Sym("R")}}));

    ASSIGN_OR_RETURN(ValueId embed, Param("model.embed_tokens.weight"));
    ASSIGN_OR_RETURN(ValueId x, g_.AddResultOf(OpId::k_embedding, {tokens, embed}, {}, -1, "x"));
    if (o_.image_rows) {
      // The vision tower's rows replace the embeddings of image tokens (M of them in a step).
      const ir::Dim m = ir::Dim::Sym("M");
      ASSIGN_OR_RETURN(ValueId embeds, g_.AddInput("mm_embeds", {o_.dtype, {m, c_.hidden_size}}));
      ASSIGN_OR_RETURN(ValueId mm_rows, g_.AddInput("mm_rows", {DType::kI32, {m}}));
      ASSIGN_OR_RETURN(x, g_.AddResultOf(OpId::k_scatter_rows, {x, embeds, mm_rows}, {}, -1, "x_mm"));
    }
    for (int layer = 0; layer < c_.num_layers; ++layer) {
      ASSIGN_OR_RETURN(x, Layer(layer, x));
    }
    ASSIGN_OR_RETURN(ValueId last, g_.AddResultOf(OpId::k_gather_rows, {x, rows}, {}, -1, "last"));
    ASSIGN_OR_RETURN(ValueId norm_w, Param("model.norm.weight"));
    ASSIGN_OR_RETURN(ValueId normed, g_.AddResultOf(OpId::k_rms_norm, {last, norm_w}, Eps(), -1, "final_norm"));
    ASSIGN_OR_RETURN(ValueId head, Param("lm_head.weight"));
    ASSIGN_OR_RETURN(ValueId logits, g_.AddResultOf(OpId::k_linear, {normed, head}, {}, -1, "logits"));
    ASSIGN_OR_RETURN(ValueId next, g_.AddResultOf(OpId::k_argmax, {logits}, {}, -1, "next_tokens"));
    g_.AddOutput(logits);
    g_.AddOutput(next);
    return std::move(g_);
  }

 private:
  absl::StatusOr<ValueId> Layer(int layer, ValueId x) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    const std::string n = absl::StrCat("l", layer, ".");
    auto node = [&](OpId op, std::vector<ValueId> operands, Attrs attrs, absl::string_view name) {
      return g_.AddResultOf(op, std::move(operands), std::move(attrs), layer, absl::StrCat(n, name));
    };
    const int64_t inter = c_.intermediate_size;

    // Attention block.
    ASSIGN_OR_RETURN(ValueId ln1, Param(p + "input_layernorm.weight"));
    ASSIGN_OR_RETURN(ValueId hn, node(OpId::k_rms_norm, {x, ln1}, Eps(), "h"));
    ValueId proj[3];
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(ValueId w, Param(absl::StrCat(p, "self_attn.", names[i], ".weight")));
      std::vector<ValueId> operands = {hn, w};
      if (c_.attention_bias) {
        ASSIGN_OR_RETURN(ValueId b, Param(absl::StrCat(p, "self_attn.", names[i], ".bias")));
        operands.push_back(b);
      }
      ASSIGN_OR_RETURN(proj[i], node(OpId::k_linear, operands, {}, std::string(1, "qkv"[i])));
    }
    ASSIGN_OR_RETURN(ValueId qr, node(OpId::k_rotary, {proj[0], positions_}, Rotary(c_.num_heads), "q_rot"));
    ASSIGN_OR_RETURN(ValueId kr, node(OpId::k_rotary, {proj[1], positions_}, Rotary(c_.num_kv_heads), "k_rot"));
    ASSIGN_OR_RETURN(ValueId cache,
                     g_.AddState(absl::StrCat("kv.", layer),
                                 TensorType{o_.KvDType(), {2, ir::Dim::Sym("NB"), o_.kv_block_size, c_.num_kv_heads,
                                                       c_.head_dim}}));
    ASSIGN_OR_RETURN(ValueId attn, node(OpId::k_attention, {qr, kr, proj[2], cache}, Heads(), "attn"));
    ASSIGN_OR_RETURN(ValueId wo, Param(p + "self_attn.o_proj.weight"));
    ASSIGN_OR_RETURN(ValueId o, node(OpId::k_linear, {attn, wo}, {}, "o"));
    if (c_.sandwich_norms()) {
      ASSIGN_OR_RETURN(ValueId w, Param(p + "post_self_attn_layernorm.weight"));
      ASSIGN_OR_RETURN(o, node(OpId::k_rms_norm, {o, w}, Eps(), "o_norm"));
    }
    ASSIGN_OR_RETURN(ValueId x1, node(OpId::k_add, {x, o}, {}, "x1"));

    // MLP block.
    ASSIGN_OR_RETURN(ValueId ln2, Param(p + "post_attention_layernorm.weight"));
    ASSIGN_OR_RETURN(ValueId h1, node(OpId::k_rms_norm, {x1, ln2}, Eps(), "h1"));
    ASSIGN_OR_RETURN(ValueId wgu, Param(p + "mlp.gate_up_proj.weight"));
    ASSIGN_OR_RETURN(ValueId gu, node(OpId::k_linear, {h1, wgu}, {}, "gate_up"));
    ASSIGN_OR_RETURN(ValueId gate, node(OpId::k_slice, {gu}, Slice(0, inter), "gate"));
    ASSIGN_OR_RETURN(ValueId up, node(OpId::k_slice, {gu}, Slice(inter, inter), "up"));
    ASSIGN_OR_RETURN(ValueId act, node(OpId::k_silu, {gate}, {}, "act"));
    ASSIGN_OR_RETURN(ValueId m, node(OpId::k_mul, {act, up}, {}, "m"));
    ASSIGN_OR_RETURN(ValueId wd, Param(p + "mlp.down_proj.weight"));
    ASSIGN_OR_RETURN(ValueId d, node(OpId::k_linear, {m, wd}, {}, "down"));
    if (c_.sandwich_norms()) {
      ASSIGN_OR_RETURN(ValueId w, Param(p + "post_mlp_layernorm.weight"));
      ASSIGN_OR_RETURN(d, node(OpId::k_rms_norm, {d, w}, Eps(), "down_norm"));
    }
    return node(OpId::k_add, {x1, d}, {}, "x2");
  }

  absl::StatusOr<ValueId> Param(const std::string& name) {
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, ParamShape(c_, name));
    return g_.AddParam(name, TensorType{o_.dtype, ir::Shape(dims.begin(), dims.end())});
  }
  Attrs Eps() const { return {{"eps", c_.rms_norm_eps}}; }
  Attrs Heads() const {
    return {{"heads", c_.num_heads}, {"kv_heads", c_.num_kv_heads}, {"head_dim", c_.head_dim}};
  }
  Attrs Rotary(int64_t heads) const {
    Attrs attrs = {{"heads", heads}, {"head_dim", c_.head_dim}, {"rot", c_.rotary_dim}, {"theta", c_.rope_theta}};
    if (!c_.mrope_section.empty()) attrs["mrope_section"] = c_.mrope_section;
    return attrs;
  }
  static Attrs Slice(int64_t start, int64_t size) {
    return {{"axis", int64_t{1}}, {"start", start}, {"size", size}};
  }

  const ModelConfig& c_;
  const BuildOptions& o_;
  Graph g_;
  ValueId positions_ = ir::kNoValue;
};

}  // namespace

absl::StatusOr<ir::Graph> BuildGlmGraph(const ModelConfig& config, const BuildOptions& options) {
  return Builder(config, options).Build();
}

}  // namespace ag::glm
