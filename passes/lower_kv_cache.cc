#include "passes/lower_kv_cache.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "passes/rewrite.h"

namespace ag::passes {
namespace {

// The runtime input `name` of type `type`, declared if the graph lacks it.
absl::StatusOr<ir::ValueId> EnsureInput(ir::Graph& g, const std::string& name, const ir::TensorType& type) {
  const ir::ValueId v = g.FindValue(name);
  if (v == ir::kNoValue) return g.AddInput(name, type);
  if (g.value(v).kind != ir::ValueKind::kInput || !(g.value(v).type == type)) {
    return absl::InvalidArgumentError(absl::StrCat("%", name, " must be an input of type ", type.ToString()));
  }
  return v;
}

}  // namespace

absl::StatusOr<bool> LowerKvCachePass::Run(ir::Graph& g) {
  bool changed = false;
  // Every KV state takes the block size chosen here.
  for (ir::ValueId v : g.ValuesOfKind(ir::ValueKind::kState)) {
    ir::Value& state = g.mutable_value(v);
    if (state.type.rank() == 5 && !(state.type.shape[2] == ir::Dim(block_size_))) {
      state.type.shape[2] = ir::Dim(block_size_);
      changed = true;
    }
  }
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    if (g.nodes()[n].dead || g.nodes()[n].op != ir::OpId::k_attention) continue;
    const ir::Node attention = g.nodes()[n];
    const ir::ValueId q = attention.operands[0], k = attention.operands[1], v = attention.operands[2];
    const ir::ValueId cache = attention.operands[3];
    const ir::Dim tokens = g.value(q).type.shape[0];
    if (!tokens.is_symbolic()) return absl::InvalidArgumentError("attention over a static token count");
    const ir::Dim seqs = ir::Dim::Sym("S");
    ASSIGN_OR_RETURN(ir::ValueId slots, EnsureInput(g, "slot_mapping", {ir::DType::kI32, {tokens}}));
    ASSIGN_OR_RETURN(ir::ValueId offsets, EnsureInput(g, "seq_offsets", {ir::DType::kI32, {ir::Dim::Sym("S", 1)}}));
    ASSIGN_OR_RETURN(ir::ValueId tables,
                     EnsureInput(g, "block_tables", {ir::DType::kI32, {seqs, ir::Dim::Sym("MB")}}));
    ASSIGN_OR_RETURN(ir::ValueId lens, EnsureInput(g, "context_lens", {ir::DType::kI32, {seqs}}));

    const std::string name = TakeName(g, attention.results[0]);
    g.mutable_nodes()[n].dead = true;
    RETURN_IF_ERROR(
        g.InsertNode(n, ir::OpId::k_kv_cache_write, {k, v, slots, cache}, attention.attrs, attention.layer).status());
    ASSIGN_OR_RETURN(std::vector<ir::ValueId> out,
                     g.InsertNode(n + 1, ir::OpId::k_paged_attention, {q, cache, offsets, tables, lens},
                                  attention.attrs, attention.layer, {name}));
    g.ReplaceAllUses(attention.results[0], out[0]);
    ++n;  // skip the paged_attention just placed
    changed = true;
  }
  if (changed) g.Compact();
  return changed;
}

}  // namespace ag::passes
