#include "models/glm/weight_map.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"

namespace ag::glm {
namespace {

constexpr absl::string_view kLayerPrefix = "model.layers.";

// HF per-layer suffix -> original ChatGLM per-layer suffix. q/k/v are handled apart.
struct Rename {
  absl::string_view hf, chatglm;
};
constexpr Rename kChatGlmLayer[] = {
    {"input_layernorm.weight", "input_layernorm.weight"},
    {"self_attn.o_proj.weight", "self_attention.dense.weight"},
    {"post_attention_layernorm.weight", "post_attention_layernorm.weight"},
    {"mlp.gate_up_proj.weight", "mlp.dense_h_to_4h.weight"},
    {"mlp.down_proj.weight", "mlp.dense_4h_to_h.weight"},
};

WeightSource Whole(std::string tensor, const std::vector<int64_t>& shape) {
  return WeightSource{std::move(tensor), shape, 0, shape.empty() ? 0 : shape[0]};
}

// Splits "model.layers.N.suffix"; false for other names.
bool SplitLayerName(absl::string_view param, int* layer, absl::string_view* suffix) {
  if (!absl::StartsWith(param, kLayerPrefix)) return false;
  const absl::string_view rest = param.substr(kLayerPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), layer)) return false;
  *suffix = rest.substr(dot + 1);
  return true;
}

absl::StatusOr<WeightSource> MapChatGlm(const ModelConfig& c, absl::string_view param,
                                        const std::vector<int64_t>& shape) {
  if (param == "model.embed_tokens.weight") return Whole("transformer.embedding.word_embeddings.weight", shape);
  if (param == "model.norm.weight") return Whole("transformer.encoder.final_layernorm.weight", shape);
  if (param == "lm_head.weight") return Whole("transformer.output_layer.weight", shape);
  int layer = 0;
  absl::string_view suffix;
  if (SplitLayerName(param, &layer, &suffix)) {
    const std::string prefix = absl::StrCat("transformer.encoder.layers.", layer, ".");
    for (const Rename& r : kChatGlmLayer) {
      if (suffix == r.hf) return Whole(absl::StrCat(prefix, r.chatglm), shape);
    }
    // q, k, v: row slices of the fused [Q | K | V] tensor.
    const int64_t q = c.q_size(), kv = c.kv_size();
    struct Slice {
      absl::string_view proj;
      int64_t begin, end;
    };
    const Slice slices[] = {{"q_proj", 0, q}, {"k_proj", q, q + kv}, {"v_proj", q + kv, q + 2 * kv}};
    for (const Slice& s : slices) {
      for (absl::string_view kind : {"weight", "bias"}) {
        if (suffix != absl::StrCat("self_attn.", s.proj, ".", kind)) continue;
        std::vector<int64_t> full = shape;
        full[0] = q + 2 * kv;
        return WeightSource{absl::StrCat(prefix, "self_attention.query_key_value.", kind), full, s.begin, s.end};
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("no checkpoint tensor for graph parameter '", param, "'"));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParamShape(const ModelConfig& c, absl::string_view param) {
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  if (param == "model.embed_tokens.weight" || param == "lm_head.weight") return std::vector<int64_t>{c.vocab_size, h};
  if (param == "model.norm.weight") return std::vector<int64_t>{h};
  int layer = 0;
  absl::string_view suffix;
  if (SplitLayerName(param, &layer, &suffix) && layer >= 0 && layer < c.num_layers) {
    const bool glm4 = c.sandwich_norms();
    if (suffix == "input_layernorm.weight" || suffix == "post_attention_layernorm.weight" ||
        (glm4 && (suffix == "post_self_attn_layernorm.weight" || suffix == "post_mlp_layernorm.weight"))) {
      return std::vector<int64_t>{h};
    }
    if (suffix == "self_attn.q_proj.weight") return std::vector<int64_t>{q, h};
    if (suffix == "self_attn.k_proj.weight" || suffix == "self_attn.v_proj.weight") return std::vector<int64_t>{kv, h};
    if (c.attention_bias) {
      if (suffix == "self_attn.q_proj.bias") return std::vector<int64_t>{q};
      if (suffix == "self_attn.k_proj.bias" || suffix == "self_attn.v_proj.bias") return std::vector<int64_t>{kv};
    }
    if (suffix == "self_attn.o_proj.weight") return std::vector<int64_t>{h, q};
    if (suffix == "mlp.gate_up_proj.weight") return std::vector<int64_t>{2 * inter, h};
    if (suffix == "mlp.gate_proj.weight" || suffix == "mlp.up_proj.weight") return std::vector<int64_t>{inter, h};
    if (suffix == "mlp.down_proj.weight") return std::vector<int64_t>{h, inter};
    // A compressed-tensors KV-cache scheme's static scales (models/quant): one value each.
    if (suffix == kKvScaleSuffixes[0] || suffix == kKvScaleSuffixes[1]) return std::vector<int64_t>{1};
  }
  return absl::InvalidArgumentError(absl::StrCat("'", param, "' is not a parameter of this ", LayoutName(c.layout),
                                                 " model"));
}

absl::StatusOr<WeightSource> MapWeight(const ModelConfig& config, absl::string_view param) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParamShape(config, param));
  if (param == "lm_head.weight" && config.tie_word_embeddings) {
    param = "model.embed_tokens.weight";
  }
  // gate and up: the two row halves of the fused gate_up tensor (the shard
  // pass splits each over the ranks, so that every rank keeps whole SiLU pairs).
  for (const auto& [half, begin] : {std::pair<absl::string_view, int64_t>{"mlp.gate_proj.weight", 0},
                                    std::pair<absl::string_view, int64_t>{"mlp.up_proj.weight", 1}}) {
    if (!absl::EndsWith(param, half)) continue;
    const std::string fused = absl::StrCat(param.substr(0, param.size() - half.size()), "mlp.gate_up_proj.weight");
    ASSIGN_OR_RETURN(WeightSource whole, MapWeight(config, fused));
    const int64_t inter = config.intermediate_size;
    whole.row_begin += begin * inter;
    whole.row_end = whole.row_begin + inter;
    return whole;
  }
  if (config.layout == Layout::kChatGlm) return MapChatGlm(config, param, shape);
  if (config.layout == Layout::kGlm4v && absl::StartsWith(param, "model.")) {
    // GLM-4.1V keeps its text decoder under model.language_model. (lm_head stays where it is).
    return Whole(absl::StrCat("model.language_model.", param.substr(6)), shape);
  }
  return Whole(std::string(param), shape);
}

absl::StatusOr<const TensorView*> FindSourceTensor(const Checkpoint& checkpoint, const WeightSource& source) {
  ASSIGN_OR_RETURN(const TensorView* view, checkpoint.Find(source.tensor));
  // A one-value tensor may be stored as a scalar (shape []), as some exporters write scales.
  const bool scalar = view->shape.empty() && source.tensor_shape == std::vector<int64_t>{1};
  if (view->shape != source.tensor_shape && !scalar) {
    return absl::InvalidArgumentError(absl::StrCat(*view->file, ": tensor '", source.tensor, "' has shape [",
                                                   absl::StrJoin(view->shape, ","), "], expected [",
                                                   absl::StrJoin(source.tensor_shape, ","), "]"));
  }
  if (!ir::IsFloat(view->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(*view->file, ": tensor '", source.tensor, "' is ",
                                                   ir::DTypeName(view->dtype),
                                                   ", not a float type (a quantized checkpoint needs its quantization_config)"));
  }
  return view;
}

}  // namespace ag::glm
