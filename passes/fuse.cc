#include "passes/fuse.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "ir/status_macros.h"
#include "passes/rewrite.h"

namespace ag::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::OpId;
using ir::ValueId;

// A fused node standing for a pattern of nodes.
struct Replacement {
  OpId op;
  std::vector<ValueId> operands;
  ir::Attrs attrs;
  int32_t layer = -1;
  std::vector<ValueId> replaces;  // the old values its results stand for, in order
  std::vector<int32_t> pattern;   // the nodes it replaces
};

bool InPattern(const Replacement& r, int32_t n) { return std::find(r.pattern.begin(), r.pattern.end(), n) != r.pattern.end(); }

// Where the fused node goes: right after its last operand is defined. -1
// when that would break the graph: a use of what it replaces comes earlier,
// a pattern result it does not replace is used elsewhere, or another node
// touches its state in between.
int32_t Placement(const Graph& g, const Users& users, const Replacement& r) {
  int32_t position = 0;
  for (ValueId v : r.operands) position = std::max(position, ProducerIndex(g, v) + 1);
  for (int32_t n : r.pattern) {
    for (ValueId res : g.nodes()[n].results) {
      const bool replaced = std::find(r.replaces.begin(), r.replaces.end(), res) != r.replaces.end();
      if (!replaced && g.IsOutput(res)) return -1;
      for (int32_t u : users[res]) {
        if (InPattern(r, u)) continue;
        if (!replaced || u < position) return -1;
      }
    }
  }
  const int state_operand = ir::GetOpInfo(r.op).state_operand;
  if (state_operand >= 0) {
    const ValueId state = r.operands[state_operand];
    const int32_t last = *std::max_element(r.pattern.begin(), r.pattern.end());
    for (int32_t n = position; n < last; ++n) {
      if (InPattern(r, n)) continue;
      const auto& ops = g.nodes()[n].operands;
      if (std::find(ops.begin(), ops.end(), state) != ops.end()) return -1;
    }
  }
  return position;
}

// Inserts the fused node at `position`, redirects the uses of what it
// replaces, drops the pattern.
absl::StatusOr<bool> Commit(Graph& g, const Replacement& r, int32_t position) {
  std::vector<std::string> names;
  for (ValueId v : r.replaces) names.push_back(TakeName(g, v));
  for (int32_t n : r.pattern) g.mutable_nodes()[n].dead = true;
  ASSIGN_OR_RETURN(std::vector<ValueId> results,
                   g.InsertNode(static_cast<size_t>(position), r.op, r.operands, r.attrs, r.layer, names));
  for (size_t i = 0; i < results.size(); ++i) g.ReplaceAllUses(r.replaces[i], results[i]);
  g.Compact();
  return true;
}

absl::StatusOr<bool> Apply(Graph& g, const Users& users, const Replacement& r) {
  const int32_t position = Placement(g, users, r);
  if (position < 0) return false;
  return Commit(g, r, position);
}

ir::AttrValue Attr(const Node& n, const char* name) { return n.attrs.at(name); }

// A parameter that concatenates `parts` row-wise (flattening parts that are concatenations already).
absl::StatusOr<ValueId> ConcatParam(Graph& g, const std::vector<ValueId>& parts, const std::string& name) {
  std::vector<ir::ParamPart> sources;
  ir::TensorType type = g.value(parts[0]).type;
  int64_t rows = 0;
  for (ValueId p : parts) {
    const ir::Value& v = g.value(p);
    if (v.kind != ir::ValueKind::kParam || v.type.dtype != type.dtype || v.type.rank() != type.rank()) {
      return absl::InvalidArgumentError("only parameters of one dtype and rank can be concatenated");
    }
    if (v.concat_of.empty()) {
      sources.push_back({v.name, {}});
    } else {
      sources.insert(sources.end(), v.concat_of.begin(), v.concat_of.end());
    }
    rows += v.type.shape[0].offset();
  }
  type.shape[0] = ir::Dim(rows);
  return g.AddParam(g.UniqueName(name), type, sources);
}

// "...q_proj.weight" -> "...qkv_proj.weight".
std::string FusedName(const std::string& q_name) {
  const std::string fused = absl::StrReplaceAll(q_name, {{"q_proj", "qkv_proj"}});
  return fused == q_name ? q_name + ".qkv" : fused;
}

// ---- the rules: each returns true when it rewrote the pattern anchored at node n ----

absl::StatusOr<bool> NormQkvRopeKvWrite(Graph& g, int32_t n, const Users& users) {
  const Node& write = g.nodes()[n];
  const ValueId kr = write.operands[0], v = write.operands[1];
  const Node* krot = ProducerOf(g, kr, OpId::k_rotary);
  const Node* lv = ProducerOf(g, v, OpId::k_linear);
  if (krot == nullptr || lv == nullptr) return false;
  const Node* lk = ProducerOf(g, krot->operands[0], OpId::k_linear);
  if (lk == nullptr || lk->operands[0] != lv->operands[0]) return false;
  const ValueId h = lk->operands[0];
  const Node* norm = ProducerOf(g, h, OpId::k_rms_norm);
  if (norm == nullptr || users[h].size() != 3 || !HasExactlyUsers(g, users, h, 3)) return false;
  // The third user of h is the q projection, feeding a rotary like k's.
  const Node* lq = nullptr;
  for (int32_t u : users[h]) {
    const Node& node = g.nodes()[u];
    if (&node != lk && &node != lv) lq = &node;
  }
  if (lq == nullptr || lq->op != OpId::k_linear || lq->operands[0] != h) return false;
  const ValueId q = lq->results[0];
  if (!HasExactlyUsers(g, users, q, 1) || users[q].size() != 1) return false;
  const Node& qrot = g.nodes()[users[q][0]];
  if (qrot.op != OpId::k_rotary || qrot.operands[0] != q || qrot.operands[1] != krot->operands[1]) return false;
  for (const char* a : {"head_dim", "rot", "theta"}) {
    if (!SameAttr(qrot, *krot, a)) return false;
  }
  if (qrot.attrs.contains("mrope_section") != krot->attrs.contains("mrope_section") ||
      (qrot.attrs.contains("mrope_section") && !SameAttr(qrot, *krot, "mrope_section"))) {
    return false;
  }
  if (!(Attr(*krot, "heads") == Attr(write, "kv_heads")) || !(Attr(*krot, "head_dim") == Attr(write, "head_dim"))) {
    return false;
  }
  const bool bias = lq->operands.size() == 3;
  if (lk->operands.size() != lq->operands.size() || lv->operands.size() != lq->operands.size()) return false;
  for (ValueId single : {kr, v, krot->operands[0]}) {
    if (!HasExactlyUsers(g, users, single, 1)) return false;
  }

  Replacement r;
  r.op = OpId::k_norm_qkv_rope_kv_write;
  r.layer = write.layer;
  r.attrs = {{"eps", Attr(*norm, "eps")},           {"heads", Attr(qrot, "heads")},
             {"kv_heads", Attr(*krot, "heads")},    {"head_dim", Attr(qrot, "head_dim")},
             {"rot", Attr(qrot, "rot")},             {"theta", Attr(qrot, "theta")}};
  if (qrot.attrs.contains("mrope_section")) r.attrs["mrope_section"] = Attr(qrot, "mrope_section");
  r.replaces = {qrot.results[0]};
  r.pattern = {ProducerIndex(g, h), ProducerIndex(g, q), ProducerIndex(g, krot->operands[0]), ProducerIndex(g, v),
               ProducerIndex(g, qrot.results[0]), ProducerIndex(g, kr), n};
  const std::vector<ValueId> weights = {lq->operands[1], lk->operands[1], lv->operands[1]};
  const std::vector<ValueId> biases =
      bias ? std::vector<ValueId>{lq->operands[2], lk->operands[2], lv->operands[2]} : std::vector<ValueId>{};
  // Placed as if with the q weight and bias; the concatenated parameters replace them once it fits.
  r.operands = {norm->operands[0], norm->operands[1], weights[0], krot->operands[1], write.operands[2],
                write.operands[3]};
  if (bias) r.operands.push_back(biases[0]);
  const int32_t position = Placement(g, users, r);
  if (position < 0) return false;
  ASSIGN_OR_RETURN(r.operands[2], ConcatParam(g, weights, FusedName(g.value(weights[0]).name)));
  if (bias) {
    ASSIGN_OR_RETURN(r.operands[6], ConcatParam(g, biases, FusedName(g.value(biases[0]).name)));
  }
  return Commit(g, r, position);
}

absl::StatusOr<bool> NormGateUpSilu(Graph& g, int32_t n, const Users& users) {
  const Node& mul = g.nodes()[n];
  for (int i = 0; i < 2; ++i) {
    const ValueId act = mul.operands[i], up = mul.operands[1 - i];
    const Node* silu = ProducerOf(g, act, OpId::k_silu);
    if (silu == nullptr) continue;
    const Node* gate = ProducerOf(g, silu->operands[0], OpId::k_slice);
    const Node* upper = ProducerOf(g, up, OpId::k_slice);
    if (gate == nullptr || upper == nullptr || gate->operands[0] != upper->operands[0]) continue;
    const ValueId gu = gate->operands[0];
    const Node* lin = ProducerOf(g, gu, OpId::k_linear);
    if (lin == nullptr || lin->operands.size() != 2) continue;
    const Node* norm = ProducerOf(g, lin->operands[0], OpId::k_rms_norm);
    if (norm == nullptr) continue;
    const ir::TensorType& gu_type = g.value(gu).type;
    if (gu_type.rank() != 2 || gu_type.shape[1].is_symbolic()) continue;
    const int64_t inter = gu_type.shape[1].offset() / 2;
    auto is_slice = [&](const Node* s, int64_t start) {
      return *ir::GetInt(s->attrs, "axis") == 1 && *ir::GetInt(s->attrs, "start") == start &&
             *ir::GetInt(s->attrs, "size") == inter;
    };
    if (gu_type.shape[1].offset() != 2 * inter || !is_slice(gate, 0) || !is_slice(upper, inter)) continue;
    if (!HasExactlyUsers(g, users, act, 1) || !HasExactlyUsers(g, users, up, 1) ||
        !HasExactlyUsers(g, users, silu->operands[0], 1) || !HasExactlyUsers(g, users, gu, 2) ||
        !HasExactlyUsers(g, users, lin->operands[0], 1)) {
      continue;
    }
    Replacement r;
    r.op = OpId::k_norm_gate_up_silu;
    r.layer = mul.layer;
    r.operands = {norm->operands[0], norm->operands[1], lin->operands[1]};
    r.attrs = {{"eps", Attr(*norm, "eps")}};
    r.replaces = {mul.results[0]};
    r.pattern = {ProducerIndex(g, lin->operands[0]), ProducerIndex(g, gu), ProducerIndex(g, silu->operands[0]),
                 ProducerIndex(g, up), ProducerIndex(g, act), n};
    return Apply(g, users, r);
  }
  return false;
}

// residual + f(y) where f is the single-use producer of one add operand (the later one first).
template <typename Build>
absl::StatusOr<bool> ResidualRule(Graph& g, int32_t n, const Users& users, OpId producer_op, Build build) {
  const Node& add = g.nodes()[n];
  for (int i : {1, 0}) {
    const Node* p = ProducerOf(g, add.operands[i], producer_op);
    if (p == nullptr || !HasExactlyUsers(g, users, add.operands[i], 1)) continue;
    Replacement r;
    r.layer = add.layer;
    r.replaces = {add.results[0]};
    r.pattern = {ProducerIndex(g, add.operands[i]), n};
    if (!build(*p, add.operands[1 - i], r)) continue;
    return Apply(g, users, r);
  }
  return false;
}

absl::StatusOr<bool> SublayerNormResidual(Graph& g, int32_t n, const Users& users) {
  return ResidualRule(g, n, users, OpId::k_rms_norm, [](const Node& norm, ValueId residual, Replacement& r) {
    r.op = OpId::k_rms_norm_residual;
    r.operands = {norm.operands[0], norm.operands[1], residual};
    r.attrs = {{"eps", norm.attrs.at("eps")}};
    return true;
  });
}

// residual + all_reduce(y): the sum lands on the residual in one step.
absl::StatusOr<bool> AllReduceResidual(Graph& g, int32_t n, const Users& users) {
  return ResidualRule(g, n, users, OpId::k_all_reduce, [](const Node& reduce, ValueId residual, Replacement& r) {
    r.op = OpId::k_all_reduce_residual;
    r.operands = {reduce.operands[0], residual};
    return true;
  });
}

// residual + rms_norm(all_reduce(y)) (GLM-4's sandwich norms after o_proj and down_proj).
absl::StatusOr<bool> AllReduceNormResidual(Graph& g, int32_t n, const Users& users) {
  return ResidualRule(g, n, users, OpId::k_rms_norm, [&](const Node& norm, ValueId residual, Replacement& r) {
    const Node* reduce = ProducerOf(g, norm.operands[0], OpId::k_all_reduce);
    if (reduce == nullptr || !HasExactlyUsers(g, users, norm.operands[0], 1)) return false;
    r.op = OpId::k_all_reduce_norm_residual;
    r.operands = {reduce->operands[0], norm.operands[1], residual};
    r.attrs = {{"eps", norm.attrs.at("eps")}};
    r.pattern.push_back(ProducerIndex(g, norm.operands[0]));
    return true;
  });
}

absl::StatusOr<bool> LinearResidual(Graph& g, int32_t n, const Users& users) {
  return ResidualRule(g, n, users, OpId::k_linear, [](const Node& lin, ValueId residual, Replacement& r) {
    if (lin.operands.size() != 2) return false;  // a bias would need another epilogue
    r.op = OpId::k_linear_residual;
    r.operands = {lin.operands[0], lin.operands[1], residual};
    return true;
  });
}

absl::StatusOr<bool> NormLinear(Graph& g, int32_t n, const Users& users) {
  const Node& lin = g.nodes()[n];
  if (lin.operands.size() != 2) return false;
  const Node* norm = ProducerOf(g, lin.operands[0], OpId::k_rms_norm);
  if (norm == nullptr || !HasExactlyUsers(g, users, lin.operands[0], 1)) return false;
  Replacement r;
  r.op = OpId::k_norm_linear;
  r.layer = lin.layer;
  r.operands = {norm->operands[0], norm->operands[1], lin.operands[1]};
  r.attrs = {{"eps", Attr(*norm, "eps")}};
  r.replaces = {lin.results[0]};
  r.pattern = {ProducerIndex(g, lin.operands[0]), n};
  return Apply(g, users, r);
}

absl::StatusOr<bool> AddRmsNorm(Graph& g, int32_t n, const Users& users) {
  const Node& norm = g.nodes()[n];
  const Node* add = ProducerOf(g, norm.operands[0], OpId::k_add);
  if (add == nullptr) return false;
  Replacement r;
  r.op = OpId::k_add_rms_norm;
  r.layer = norm.layer;
  r.operands = {add->operands[0], add->operands[1], norm.operands[1]};
  r.attrs = {{"eps", Attr(norm, "eps")}};
  r.replaces = {add->results[0], norm.results[0]};
  r.pattern = {ProducerIndex(g, norm.operands[0]), n};
  return Apply(g, users, r);
}

// norm_gate_up_silu(rms_norm_residual(y, w1, residual), w2, W): the sandwich norm after attention
// (GLM-4.1V's and GLM-4-0414's post_self_attn_layernorm) folded into the MLP's first projection,
// which also gives the new residual stream h as its second result. At one row the GEMV computes h
// in its prologue, where it normalises x anyway: one launch a layer fewer at decode (the
// rms_norm_residual's, ~4 us of a one-block kernel and its boundary). Other shapes run the two
// kernels as before. Never at tp > 1: there the sum comes from all_reduce_norm_residual.
absl::StatusOr<bool> SandwichNormFold(Graph& g, int32_t n, const Users& users) {
  const Node& consumer = g.nodes()[n];
  const Node* pre = ProducerOf(g, consumer.operands[0], OpId::k_rms_norm_residual);
  if (pre == nullptr) return false;
  Replacement r;
  r.op = OpId::k_residual_norm_gate_up_silu;
  r.layer = consumer.layer;
  r.operands = {pre->operands[2], consumer.operands[1], consumer.operands[2], pre->operands[0], pre->operands[1]};
  r.attrs = {{"eps", Attr(consumer, "eps")}, {"residual_eps", Attr(*pre, "eps")}};
  r.replaces = {consumer.results[0], pre->results[0]};
  r.pattern = {ProducerIndex(g, consumer.operands[0]), n};
  return Apply(g, users, r);
}

// segment_attention(vision_rotary(slice(qkv, 0, w)), vision_rotary(slice(qkv, w, w)), slice(qkv, 2w, w))
// -> packed_segment_attention(vision_qkv_rotary(qkv)): the vision tower's q, k and v stay the
// columns of one matrix, q's and k's rotated where they are (in place when qkv dies there), so the
// three slices' copies and the rotaries' separate passes go (run 3: 13.4 ms of a screenshot's
// 125.5 on the H200). Two nodes replace six, so this rule inserts them itself.
absl::StatusOr<bool> VisionQkvAttention(Graph& g, int32_t n, const Users& users) {
  const Node& attn = g.nodes()[n];
  const Node* qrot = ProducerOf(g, attn.operands[0], OpId::k_vision_rotary);
  const Node* krot = ProducerOf(g, attn.operands[1], OpId::k_vision_rotary);
  const Node* vslice = ProducerOf(g, attn.operands[2], OpId::k_slice);
  if (qrot == nullptr || krot == nullptr || vslice == nullptr) return false;
  const Node* qslice = ProducerOf(g, qrot->operands[0], OpId::k_slice);
  const Node* kslice = ProducerOf(g, krot->operands[0], OpId::k_slice);
  if (qslice == nullptr || kslice == nullptr) return false;
  const ValueId qkv = qslice->operands[0], pos = qrot->operands[1], offsets = attn.operands[3];
  if (kslice->operands[0] != qkv || vslice->operands[0] != qkv || krot->operands[1] != pos) return false;
  for (const char* a : {"heads", "head_dim", "theta"}) {
    if (!SameAttr(*qrot, *krot, a)) return false;
  }
  if (!SameAttr(*qrot, attn, "heads") || !SameAttr(*qrot, attn, "head_dim")) return false;
  const int64_t width = *ir::GetInt(attn.attrs, "heads") * *ir::GetInt(attn.attrs, "head_dim");
  const ir::TensorType& type = g.value(qkv).type;
  if (type.rank() != 2 || type.shape[1].is_symbolic() || type.shape[1].offset() != 3 * width) return false;
  const Node* slices[3] = {qslice, kslice, vslice};
  for (int i = 0; i < 3; ++i) {
    if (*ir::GetInt(slices[i]->attrs, "axis") != 1 || *ir::GetInt(slices[i]->attrs, "start") != i * width ||
        *ir::GetInt(slices[i]->attrs, "size") != width) {
      return false;
    }
  }
  // Placement's checks, as for one fused node standing for the six: the slices and rotaries used
  // nowhere else, and a place right after qkv, the positions and the offsets.
  Replacement r;
  r.op = OpId::k_packed_segment_attention;
  r.operands = {qkv, pos, offsets};
  r.layer = attn.layer;
  r.replaces = {attn.results[0]};
  r.pattern = {ProducerIndex(g, qrot->operands[0]), ProducerIndex(g, krot->operands[0]),
               ProducerIndex(g, attn.operands[2]),  ProducerIndex(g, attn.operands[0]),
               ProducerIndex(g, attn.operands[1]),  n};
  const int32_t position = Placement(g, users, r);
  if (position < 0) return false;
  // Copied before the graph changes under the references.
  const ir::Attrs rotary_attrs = {{"heads", qrot->attrs.at("heads")},
                                  {"head_dim", qrot->attrs.at("head_dim")},
                                  {"theta", qrot->attrs.at("theta")}};
  r.attrs = {{"heads", attn.attrs.at("heads")}, {"head_dim", attn.attrs.at("head_dim")}};
  const std::string name = TakeName(g, r.replaces[0]);
  const std::string rotated_name = g.UniqueName(g.value(qkv).name + "_rot");
  for (int32_t p : r.pattern) g.mutable_nodes()[p].dead = true;
  ASSIGN_OR_RETURN(std::vector<ValueId> rotated, g.InsertNode(static_cast<size_t>(position), OpId::k_vision_qkv_rotary,
                                                              {qkv, pos}, rotary_attrs, r.layer, {rotated_name}));
  ASSIGN_OR_RETURN(std::vector<ValueId> out, g.InsertNode(static_cast<size_t>(position) + 1, r.op,
                                                          {rotated[0], offsets}, r.attrs, r.layer, {name}));
  g.ReplaceAllUses(r.replaces[0], out[0]);
  g.Compact();
  return true;
}

struct Rule {
  const char* name;
  OpId anchor;
  absl::StatusOr<bool> (*apply)(Graph& g, int32_t n, const Users& users);
};

constexpr Rule kRules[] = {
    {"norm-qkv-rope-kv-write", OpId::k_kv_cache_write, NormQkvRopeKvWrite},
    {"norm-gate-up-silu", OpId::k_mul, NormGateUpSilu},
    {"all-reduce-norm-residual", OpId::k_add, AllReduceNormResidual},
    {"all-reduce-residual", OpId::k_add, AllReduceResidual},
    {"sublayer-norm-residual", OpId::k_add, SublayerNormResidual},
    {"linear-residual", OpId::k_add, LinearResidual},
    {"norm-linear", OpId::k_linear, NormLinear},
    {"add-rms-norm", OpId::k_rms_norm, AddRmsNorm},
    {"vision-qkv-attention", OpId::k_segment_attention, VisionQkvAttention},
    {"sandwich-norm-fold", OpId::k_norm_gate_up_silu, SandwichNormFold},
};

}  // namespace

std::vector<std::string> FusePass::RuleNames() {
  std::vector<std::string> names;
  for (const Rule& r : kRules) names.emplace_back(r.name);
  return names;
}

absl::StatusOr<bool> FusePass::Run(Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    for (const Rule& rule : kRules) {
      if (!only_.empty() && std::find(only_.begin(), only_.end(), rule.name) == only_.end()) continue;
      Users users = g.ComputeUsers();
      for (int32_t n = 0; n < static_cast<int32_t>(g.nodes().size()); ++n) {
        if (g.nodes()[n].op != rule.anchor) continue;
        ASSIGN_OR_RETURN(bool fired, rule.apply(g, n, users));
        if (!fired) continue;
        // The graph was compacted: recompute uses and rescan from the start.
        changed = again = true;
        users = g.ComputeUsers();
        n = -1;
      }
    }
  }
  return changed;
}

}  // namespace ag::passes
