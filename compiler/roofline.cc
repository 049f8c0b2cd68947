#include "compiler/roofline.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/attrs.h"
#include "ir/checked_math.h"
#include "ir/status_macros.h"

namespace ag::compiler {
namespace {

bool HasLinearWeight(ir::OpId op) {
  switch (op) {
    case ir::OpId::k_linear:
    case ir::OpId::k_linear_residual:
    case ir::OpId::k_norm_gate_up_silu:
    case ir::OpId::k_residual_norm_gate_up_silu:
    case ir::OpId::k_norm_qkv_rope_kv_write:
    case ir::OpId::k_norm_linear:
      return true;
    default:
      return false;
  }
}

// 2 x rows x the weight's elements, for a step with a linear weight.
absl::StatusOr<double> LinearFlops(const PlanStep& step, const ir::SymbolBindings& bindings) {
  if (!HasLinearWeight(step.kernel)) return 0.0;
  const int weight = step.kernel == ir::OpId::k_linear || step.kernel == ir::OpId::k_linear_residual ? 1 : 2;
  const ir::Shape& w = step.operands[weight].type.shape;
  ASSIGN_OR_RETURN(int64_t rows, step.operands[0].type.shape[0].Resolve(bindings));
  return 2.0 * static_cast<double>(rows) * static_cast<double>(w[0].offset()) * static_cast<double>(w[1].offset());
}

void Total(const Ceilings& ceilings, StepCost c, Roofline& r) {
  c.floor_us = std::max(c.bytes / ceilings.bytes_per_second, c.flops / ceilings.flops_per_second) * 1e6;
  r.bytes += c.bytes;
  r.flops += c.flops;
  r.floor_us += c.floor_us;
  r.steps.push_back(std::move(c));
}

}  // namespace

absl::StatusOr<Roofline> VisionRoofline(const Plan& plan, const std::vector<std::pair<int64_t, int64_t>>& grids,
                                        const Ceilings& ceilings) {
  const Program* vision = plan.FindProgram(kVisionProgram);
  if (vision == nullptr) return absl::InvalidArgumentError("the plan has no vision program");
  const int64_t per_token = plan.model.patches_per_token;
  int64_t patches = 0;
  double pairs = 0;  // query-key pairs: each image's patches attend to each other
  for (const auto& [h, w] : grids) {
    const std::optional<int64_t> n = ir::CheckedMul(h, w);
    if (h <= 0 || w <= 0 || !n || *n % per_token != 0) {
      return absl::InvalidArgumentError(absl::StrCat("an image grid of ", h, " x ", w, " patches is not whole tokens"));
    }
    patches += *n;
    pairs += static_cast<double>(*n) * static_cast<double>(*n);
  }
  const int64_t images = static_cast<int64_t>(grids.size());
  if (images == 0 || images > vision->bounds.at("I") || patches > vision->bounds.at("P")) {
    return absl::InvalidArgumentError(absl::StrCat(images, " images of ", patches, " patches do not fit the plan's ",
                                                   vision->bounds.at("I"), " images of ", vision->bounds.at("P"),
                                                   " patches (compile with more)"));
  }
  const ir::SymbolBindings bindings = {{"P", patches}, {"I", images}, {"E", patches / per_token}};
  Roofline r;
  for (const PlanStep& step : vision->steps) {
    StepCost c;
    c.name = step.name;
    c.kernel = std::string(ir::OpName(step.kernel));
    for (const std::vector<PlanTensor>* list : {&step.operands, &step.results}) {
      for (const PlanTensor& t : *list) {
        ASSIGN_OR_RETURN(int64_t bytes, t.type.ByteSize(bindings));
        c.bytes += static_cast<double>(bytes);
      }
    }
    ASSIGN_OR_RETURN(c.flops, LinearFlops(step, bindings));
    if (step.kernel == ir::OpId::k_vision_qkv_rotary) {
      c.bytes *= 2.0 / 3.0;  // q's and k's columns read and written; v stays where it is (in place)
    }
    if (step.kernel == ir::OpId::k_segment_attention || step.kernel == ir::OpId::k_packed_segment_attention) {
      ASSIGN_OR_RETURN(int64_t heads, ir::GetInt(step.attrs, "heads"));
      ASSIGN_OR_RETURN(int64_t head_dim, ir::GetInt(step.attrs, "head_dim"));
      c.flops = 4.0 * static_cast<double>(heads * head_dim) * pairs;
    }
    Total(ceilings, std::move(c), r);
  }
  return r;
}

absl::StatusOr<Roofline> PlanRoofline(const Plan& plan, const StepShape& shape, const Ceilings& ceilings) {
  if (shape.seqs <= 0 || shape.tokens_per_seq <= 0 || shape.context < shape.tokens_per_seq) {
    return absl::InvalidArgumentError("a step shape needs sequences, tokens, and a context of at least the tokens");
  }
  const std::optional<int64_t> product = ir::CheckedMul(shape.seqs, shape.tokens_per_seq);
  if (!product || *product > plan.max_batch_tokens || shape.seqs > plan.max_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(shape.seqs, " sequences of ", shape.tokens_per_seq,
                                                   " tokens exceed the plan's ", plan.max_batch_tokens, " tokens and ",
                                                   plan.max_seqs, " sequences (compile with larger limits)"));
  }
  const int64_t tokens = *product;
  if (shape.image_rows < 0 || shape.image_rows > tokens) {
    return absl::InvalidArgumentError(absl::StrCat(shape.image_rows, " image rows do not fit a step of ", tokens, " tokens"));
  }
  if (shape.context > plan.model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("context ", shape.context, " exceeds the model's ",
                                                   plan.model.max_position_embeddings, " positions"));
  }
  const int64_t block = plan.kv.block_size;
  const ir::SymbolBindings bindings = {{"T", tokens},
                                       {"S", shape.seqs},
                                       {"R", shape.seqs},
                                       {"MB", (shape.context + block - 1) / block},
                                       {"NB", shape.seqs * ((shape.context + block - 1) / block)},
                                       {"M", shape.image_rows}};
  // K and V of one token in one layer.
  const double kv_token_bytes = static_cast<double>(plan.kv.BytesPerToken() / plan.kv.num_layers);
  // Keys each new token attends to, summed over a sequence's new tokens (causal).
  const double keys_per_seq = static_cast<double>(shape.tokens_per_seq) *
                                  static_cast<double>(shape.context - shape.tokens_per_seq) +
                              static_cast<double>(shape.tokens_per_seq) * (shape.tokens_per_seq + 1) / 2.0;
  Roofline r;
  for (const PlanStep& step : plan.decoder().steps) {
    StepCost c;
    c.name = step.name;
    c.kernel = std::string(ir::OpName(step.kernel));
    const bool writes_kv =
        step.kernel == ir::OpId::k_kv_cache_write || step.kernel == ir::OpId::k_norm_qkv_rope_kv_write;
    const bool reads_kv = step.kernel == ir::OpId::k_paged_attention || step.kernel == ir::OpId::k_attention;
    for (const PlanTensor& t : step.operands) {
      if (t.kind == TensorKind::kState) {
        if (writes_kv) c.bytes += static_cast<double>(tokens) * kv_token_bytes;
        // Each sequence streams its whole context's K and V once (GQA groups share the tiles).
        if (reads_kv) c.bytes += static_cast<double>(shape.seqs * shape.context) * kv_token_bytes;
        continue;
      }
      if (t.kind == TensorKind::kWeight && step.kernel == ir::OpId::k_embedding) {
        // A gather: only the rows of this step's tokens are read.
        const int64_t row = t.type.shape.back().offset() * ir::DTypeSize(t.type.dtype);
        c.bytes += static_cast<double>(tokens * row);
        continue;
      }
      if (t.kind == TensorKind::kWeight && plan.weights[t.index].quantized()) {
        c.bytes += static_cast<double>(plan.weights[t.index].DeviceBytes());  // codes, scales and zero points
        continue;
      }
      ASSIGN_OR_RETURN(int64_t bytes, t.type.ByteSize(bindings));
      c.bytes += static_cast<double>(bytes);
    }
    for (const PlanTensor& t : step.results) {
      ASSIGN_OR_RETURN(int64_t bytes, t.type.ByteSize(bindings));
      c.bytes += static_cast<double>(bytes);
    }
    ASSIGN_OR_RETURN(c.flops, LinearFlops(step, bindings));
    if (reads_kv) {
      ASSIGN_OR_RETURN(int64_t heads, ir::GetInt(step.attrs, "heads"));
      ASSIGN_OR_RETURN(int64_t head_dim, ir::GetInt(step.attrs, "head_dim"));
      c.flops = 4.0 * static_cast<double>(heads * head_dim) * keys_per_seq * static_cast<double>(shape.seqs);
    }
    Total(ceilings, std::move(c), r);
  }
  return r;
}

std::string FormatRoofline(const Roofline& r, const std::vector<double>* measured_us) {
  const bool measured = measured_us != nullptr && measured_us->size() == r.steps.size();
  std::string out = absl::StrFormat("%4s  %-28s %-24s %14s %14s %10s", "#", "step", "kernel", "bytes", "FLOPs",
                                    "floor us");
  if (measured) absl::StrAppend(&out, absl::StrFormat(" %10s %8s", "us", "floor/us"));
  out += "\n";
  double total_us = 0;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepCost& c = r.steps[i];
    absl::StrAppend(&out, absl::StrFormat("%4d  %-28s %-24s %14.0f %14.0f %10.2f", i, c.name, c.kernel, c.bytes,
                                          c.flops, c.floor_us));
    if (measured) {
      const double us = (*measured_us)[i];
      total_us += us;
      absl::StrAppend(&out, absl::StrFormat(" %10.2f %8.2f", us, us > 0 ? c.floor_us / us : 0.0));
    }
    out += "\n";
  }
  absl::StrAppend(&out, absl::StrFormat("%4s  %-28s %-24s %14.0f %14.0f %10.2f", "", "total", "", r.bytes, r.flops,
                                        r.floor_us));
  if (measured) absl::StrAppend(&out, absl::StrFormat(" %10.2f %8.2f", total_us, total_us > 0 ? r.floor_us / total_us : 0.0));
  return out + "\n";
}

std::string RooflineJson(const Roofline& r, const std::vector<double>* measured_us) {
  const bool measured = measured_us != nullptr && measured_us->size() == r.steps.size();
  nlohmann::json j;
  j["steps"] = nlohmann::json::array();
  double total_us = 0;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepCost& c = r.steps[i];
    nlohmann::json row = {{"name", c.name}, {"kernel", c.kernel}, {"bytes", c.bytes}, {"flops", c.flops},
                          {"floor_us", c.floor_us}};
    if (measured) {
      row["us"] = (*measured_us)[i];
      total_us += (*measured_us)[i];
    }
    j["steps"].push_back(std::move(row));
  }
  j["bytes"] = r.bytes;
  j["flops"] = r.flops;
  j["floor_us"] = r.floor_us;
  if (measured) j["us"] = total_us;
  return j.dump(1);
}

}  // namespace ag::compiler
