#include "passes/shard.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "passes/rewrite.h"

namespace ag::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::OpId;
using ir::ShardSpec;
using ir::ValueId;

template <typename... Args>
absl::Status Err(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

constexpr ShardSpec kRows(int32_t parts) { return {0, parts}; }
constexpr ShardSpec kCols(int32_t parts) { return {1, parts}; }

class Sharder {
 public:
  Sharder(Graph& g, int32_t tp) : g_(g), tp_(tp), users_(g.ComputeUsers()) {}

  absl::Status Run() {
    for (const Node& node : g_.nodes()) {
      if (ir::GetOpInfo(node.op).Has(ir::kFused) || ir::GetOpInfo(node.op).Has(ir::kCollective) ||
          node.op == OpId::k_paged_attention || node.op == OpId::k_kv_cache_write) {
        return Err("shard runs on the builder's graph, before lower-kv-cache and fuse (found ", ir::OpName(node.op),
                   ")");
      }
    }
    for (int32_t n = 0; n < static_cast<int32_t>(g_.nodes().size()); ++n) {
      const OpId op = g_.nodes()[n].op;
      if (op == OpId::k_attention) RETURN_IF_ERROR(Attention(n));
      if (op == OpId::k_mul) RETURN_IF_ERROR(Mlp(n));
      if (op == OpId::k_argmax) RETURN_IF_ERROR(Head(n));
    }
    if (shards_.empty()) return Err("shard: the graph has no attention, MLP or LM head to split");
    RETURN_IF_ERROR(ApplyShards());
    RETURN_IF_ERROR(Retype());
    for (ValueId v : reduce_after_) RETURN_IF_ERROR(InsertAfter(v, OpId::k_all_reduce, {}, ".partial"));
    for (ValueId v : gather_after_) {
      RETURN_IF_ERROR(InsertAfter(v, OpId::k_all_gather, {{"parts", int64_t{tp_}}}, ".shard"));
    }
    g_.set_tp(tp_);
    return absl::OkStatus();
  }

 private:
  // The node producing `v` with `op`, by index, or an error naming what was expected.
  absl::StatusOr<int32_t> Producer(ValueId v, OpId op, absl::string_view what) {
    const int32_t p = ProducerIndex(g_, v);
    if (p < 0 || g_.nodes()[p].op != op) {
      return Err("shard: ", what, " (%", g_.value(v).name, ") is not made by ", ir::OpName(op));
    }
    return p;
  }

  // The single node using `v`, which must be a bias-free linear taking it as input.
  absl::StatusOr<int32_t> OnlyLinearUser(ValueId v, absl::string_view what) {
    if (g_.IsOutput(v) || users_[v].size() != 1) return Err("shard: ", what, " must feed exactly one projection");
    const int32_t u = users_[v][0];
    const Node& lin = g_.nodes()[u];
    if (lin.op != OpId::k_linear || lin.operands.size() != 2 || lin.operands[0] != v) {
      return Err("shard: ", what, " must feed a linear without bias");
    }
    return u;
  }

  absl::Status Mark(ValueId param, ShardSpec spec) {
    const ir::Value& p = g_.value(param);
    if (p.kind != ir::ValueKind::kParam) return Err("shard: %", p.name, " is not a parameter");
    auto [it, inserted] = shards_.try_emplace(param, spec);
    if (!inserted && !(it->second == spec)) {
      return Err("shard: @", p.name, " would be split two ways (", it->second.ToString(), ", ", spec.ToString(), ")");
    }
    return absl::OkStatus();
  }

  // Q/K/V column-parallel by heads, o_proj row-parallel.
  absl::Status Attention(int32_t n) {
    const Node& att = g_.nodes()[n];
    const int64_t heads = *ir::GetInt(att.attrs, "heads"), kv = *ir::GetInt(att.attrs, "kv_heads");
    if (heads % tp_ != 0) {
      return Err("--tp ", tp_, " does not divide the ", heads, " attention heads (num_attention_heads)");
    }
    if (tp_ <= kv ? kv % tp_ != 0 : tp_ % kv != 0) {
      return Err("--tp ", tp_, " cannot split or replicate the ", kv,
                 " KV heads evenly (num_key_value_heads; the degree must divide them or be a multiple of them)");
    }
    const int64_t kv_local = KvHeadsPerRank(kv, tp_);
    const int32_t kv_parts = static_cast<int32_t>(kv / kv_local);
    const ValueId q_rot = att.operands[0], k_rot = att.operands[1], v = att.operands[2], cache = att.operands[3];
    ASSIGN_OR_RETURN(const int32_t qrot, Producer(q_rot, OpId::k_rotary, "the attention's q"));
    ASSIGN_OR_RETURN(const int32_t krot, Producer(k_rot, OpId::k_rotary, "the attention's k"));
    ASSIGN_OR_RETURN(const int32_t qlin, Producer(g_.nodes()[qrot].operands[0], OpId::k_linear, "q"));
    ASSIGN_OR_RETURN(const int32_t klin, Producer(g_.nodes()[krot].operands[0], OpId::k_linear, "k"));
    ASSIGN_OR_RETURN(const int32_t vlin, Producer(v, OpId::k_linear, "the attention's v"));
    const struct {
      int32_t node;
      ShardSpec spec;
    } projections[] = {{qlin, kRows(tp_)}, {klin, kRows(kv_parts)}, {vlin, kRows(kv_parts)}};
    for (const auto& p : projections) {
      for (size_t i = 1; i < g_.nodes()[p.node].operands.size(); ++i) {  // weight and bias
        RETURN_IF_ERROR(Mark(g_.nodes()[p.node].operands[i], p.spec));
      }
    }
    std::vector<Node>& nodes = g_.mutable_nodes();
    nodes[qrot].attrs["heads"] = heads / tp_;
    nodes[krot].attrs["heads"] = kv_local;
    nodes[n].attrs["heads"] = heads / tp_;
    nodes[n].attrs["kv_heads"] = kv_local;
    ir::TensorType& state = g_.mutable_value(cache).type;
    if (state.rank() != 5) return Err("shard: $", g_.value(cache).name, " is not a KV cache");
    state.shape[3] = ir::Dim(kv_local);
    ASSIGN_OR_RETURN(const int32_t o, OnlyLinearUser(nodes[n].results[0], "the attention output"));
    RETURN_IF_ERROR(Mark(g_.nodes()[o].operands[1], kCols(tp_)));
    reduce_after_.push_back(g_.nodes()[o].results[0]);
    return absl::OkStatus();
  }

  // silu(gate) * up of one gate_up projection: column-parallel by SiLU pairs,
  // down_proj row-parallel. Other products are left alone.
  absl::Status Mlp(int32_t n) {
    const Node& mul = g_.nodes()[n];
    for (int i = 0; i < 2; ++i) {
      const Node* silu = ProducerOf(g_, mul.operands[i], OpId::k_silu);
      if (silu == nullptr) continue;
      const int32_t gate = ProducerIndex(g_, silu->operands[0]), up = ProducerIndex(g_, mul.operands[1 - i]);
      if (gate < 0 || up < 0 || g_.nodes()[gate].op != OpId::k_slice || g_.nodes()[up].op != OpId::k_slice ||
          g_.nodes()[gate].operands[0] != g_.nodes()[up].operands[0]) {
        continue;
      }
      ASSIGN_OR_RETURN(const int32_t lin, Producer(g_.nodes()[gate].operands[0], OpId::k_linear, "gate/up"));
      const ValueId w = g_.nodes()[lin].operands[1];
      const ir::Value& wv = g_.value(w);
      const int64_t inter = *ir::GetInt(g_.nodes()[gate].attrs, "size");
      if (g_.nodes()[lin].operands.size() != 2 || wv.kind != ir::ValueKind::kParam || !wv.concat_of.empty() ||
          !absl::EndsWith(wv.name, "mlp.gate_up_proj.weight") || *ir::GetInt(g_.nodes()[gate].attrs, "start") != 0 ||
          *ir::GetInt(g_.nodes()[up].attrs, "start") != inter || *ir::GetInt(g_.nodes()[up].attrs, "size") != inter ||
          !(wv.type.shape[0] == ir::Dim(2 * inter))) {
        return Err("shard: the MLP of layer ", mul.layer, " is not silu(gate) * up of one gate_up projection");
      }
      if (inter % tp_ != 0) return Err("--tp ", tp_, " does not divide intermediate_size ", inter);
      // Rank r keeps gate rows and up rows [r I/tp, (r+1) I/tp): whole SiLU pairs.
      const std::string prefix = wv.name.substr(0, wv.name.size() - std::string("gate_up_proj.weight").size());
      ir::Value& param = g_.mutable_value(w);
      param.concat_of = {{prefix + "gate_proj.weight", kRows(tp_)}, {prefix + "up_proj.weight", kRows(tp_)}};
      param.type.shape[0] = ir::Dim(2 * inter / tp_);
      std::vector<Node>& nodes = g_.mutable_nodes();
      nodes[gate].attrs["size"] = inter / tp_;
      nodes[up].attrs["start"] = inter / tp_;
      nodes[up].attrs["size"] = inter / tp_;
      ASSIGN_OR_RETURN(const int32_t down, OnlyLinearUser(nodes[n].results[0], "the MLP product"));
      RETURN_IF_ERROR(Mark(g_.nodes()[down].operands[1], kCols(tp_)));
      reduce_after_.push_back(g_.nodes()[down].results[0]);
      return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // The LM head feeding argmax: split by vocabulary, logits gathered.
  absl::Status Head(int32_t n) {
    ASSIGN_OR_RETURN(const int32_t lin, Producer(g_.nodes()[n].operands[0], OpId::k_linear, "argmax's input"));
    const Node& head = g_.nodes()[lin];
    if (head.operands.size() != 2) return Err("shard: an LM head with a bias is not supported");
    const ir::TensorType& w = g_.value(head.operands[1]).type;
    const int64_t vocab = w.shape[0].offset();
    if (vocab % tp_ != 0) {
      return Err("--tp ", tp_, " does not divide the vocabulary size ", vocab,
                 " (the LM head is split by vocabulary; padding it is not implemented)");
    }
    if (std::find(gather_after_.begin(), gather_after_.end(), head.results[0]) != gather_after_.end()) {
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(Mark(head.operands[1], kRows(tp_)));
    gather_after_.push_back(head.results[0]);
    return absl::OkStatus();
  }

  // Each marked parameter becomes its rank's shard.
  absl::Status ApplyShards() {
    for (const auto& [id, spec] : shards_) {
      ir::Value& p = g_.mutable_value(id);
      if (!p.concat_of.empty()) return Err("shard: @", p.name, " is already a concatenation");
      if (spec.axis >= p.type.rank()) return Err("shard: @", p.name, " has no axis ", spec.axis);
      const ir::Dim& d = p.type.shape[spec.axis];
      if (d.is_symbolic() || d.offset() % spec.parts != 0) {
        return Err("--tp ", tp_, ": @", p.name, " has ", d.ToString(), " ", spec.axis == 0 ? "rows" : "columns",
                   ", not divisible into ", spec.parts, " parts");
      }
      p.concat_of = {{p.name, spec}};
      p.type.shape[spec.axis] = ir::Dim(d.offset() / spec.parts);
    }
    return absl::OkStatus();
  }

  // Result types again, now that parameters, attributes and states shrank.
  absl::Status Retype() {
    for (size_t n = 0; n < g_.nodes().size(); ++n) {
      const Node& node = g_.nodes()[n];
      std::vector<ir::TensorType> operands;
      for (ValueId v : node.operands) operands.push_back(g_.value(v).type);
      absl::StatusOr<std::vector<ir::TensorType>> types = ir::InferResultTypes(node.op, operands, node.attrs);
      if (!types.ok()) return Err("shard: %", g_.value(node.results[0]).name, ": ", types.status().message());
      for (size_t i = 0; i < types->size(); ++i) g_.mutable_value(node.results[i]).type = (*types)[i];
    }
    return absl::OkStatus();
  }

  // v = op(v'), where v' is v's old value renamed: later uses see the collective's result.
  absl::Status InsertAfter(ValueId v, OpId op, ir::Attrs attrs, absl::string_view suffix) {
    const std::string name = g_.value(v).name;
    g_.RenameValue(v, g_.UniqueName(absl::StrCat(name, suffix)));
    const int32_t producer = g_.value(v).producer;
    ASSIGN_OR_RETURN(std::vector<ValueId> out, g_.InsertNode(static_cast<size_t>(producer) + 1, op, {v},
                                                             std::move(attrs), g_.nodes()[producer].layer, {name}));
    g_.ReplaceAllUses(v, out[0]);
    g_.mutable_nodes()[producer + 1].operands[0] = v;
    return absl::OkStatus();
  }

  Graph& g_;
  const int32_t tp_;
  const Users users_;
  absl::flat_hash_map<ValueId, ShardSpec> shards_;
  std::vector<ValueId> reduce_after_, gather_after_;
};

}  // namespace

int64_t KvHeadsPerRank(int64_t kv_heads, int32_t tp) { return kv_heads / std::min<int64_t>(tp, kv_heads); }

absl::StatusOr<bool> ShardPass::Run(Graph& g) {
  if (tp_ < 1 || tp_ > ir::kMaxTensorParallel) {
    return Err("--tp must be in [1, ", ir::kMaxTensorParallel, "], got ", tp_);
  }
  if (g.tp() != 1) return Err("shard: the graph is already split for tp=", g.tp());
  if (tp_ == 1 && !even_alone_) return false;
  RETURN_IF_ERROR(Sharder(g, tp_).Run());
  return true;
}

}  // namespace ag::passes
