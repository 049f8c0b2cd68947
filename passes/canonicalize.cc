#include "passes/canonicalize.h"

#include "passes/rewrite.h"

namespace ag::passes {

absl::StatusOr<bool> CanonicalizePass::Run(ir::Graph& g) {
  bool changed = false;
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    ir::Node& node = g.mutable_nodes()[n];
    const ir::OpInfo& info = ir::GetOpInfo(node.op);
    if (info.Has(ir::kCommutative) && node.operands.size() == 2 &&
        ProducerIndex(g, node.operands[1]) < ProducerIndex(g, node.operands[0])) {
      std::swap(node.operands[0], node.operands[1]);
      changed = true;
    }
    if (node.op == ir::OpId::k_slice) {
      const ir::TensorType& in = g.value(node.operands[0]).type;
      const ir::TensorType& out = g.value(node.results[0]).type;
      if (in == out) {
        g.ReplaceAllUses(node.results[0], node.operands[0]);
        node.dead = true;
        changed = true;
      }
    }
  }
  if (changed) g.Compact();
  return changed;
}

absl::StatusOr<bool> DcePass::Run(ir::Graph& g) {
  bool changed = false;
  std::vector<bool> live_use(g.num_values(), false);  // used by a node that stays
  for (ir::ValueId v : g.outputs()) live_use[v] = true;
  auto& nodes = g.mutable_nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    ir::Node& node = nodes[i];
    bool needed = ir::GetOpInfo(node.op).Has(ir::kSideEffect);
    for (ir::ValueId r : node.results) needed = needed || live_use[r];
    if (!needed) {
      node.dead = true;
      changed = true;
      continue;
    }
    for (ir::ValueId v : node.operands) live_use[v] = true;
  }
  // Parameters and states nothing reads go too (Compact drops unused ones).
  for (ir::ValueId v = 0; v < g.num_values(); ++v) {
    const ir::ValueKind kind = g.value(v).kind;
    if ((kind == ir::ValueKind::kParam || kind == ir::ValueKind::kState) && !live_use[v]) changed = true;
  }
  if (changed) g.Compact();
  return changed;
}

}  // namespace ag::passes
