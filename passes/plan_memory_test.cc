// plan-memory on many random graphs: the invariants, not golden offsets.
#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "ir/verifier.h"
#include "passes/plan_memory.h"

namespace ag::passes {
namespace {

using ir::Dim;
using ir::DType;
using ir::OpId;
using ir::TensorType;
using ir::ValueId;

// A random graph over [T, width] activations: linears change the width,
// elementwise ops, norms and residual ops keep it, some results are outputs.
ir::Graph RandomGraph(uint32_t seed) {
  std::mt19937 rng(seed);
  ir::Graph g("random");
  g.set_symbol_bound("T", 1 + static_cast<int64_t>(rng() % 7));
  const std::vector<int64_t> widths = {8, 16, 24, 40, 64};
  auto pick = [&](auto& v) { return v[rng() % v.size()]; };
  std::vector<ValueId> values = {*g.AddInput("x", TensorType{DType::kF32, {Dim::Sym("T"), 16}})};
  const int nodes = 5 + static_cast<int>(rng() % 40);
  for (int i = 0; i < nodes; ++i) {
    const ValueId a = pick(values);
    const TensorType& ta = g.value(a).type;
    const int64_t width = ta.shape[1].offset();
    std::vector<ValueId> same;
    for (ValueId v : values) {
      if (g.value(v).type == ta) same.push_back(v);
    }
    const ValueId b = pick(same);
    auto param = [&](std::vector<int64_t> dims) {
      return *g.AddParam(absl::StrCat("p", i), TensorType{DType::kF32, ir::Shape(dims.begin(), dims.end())});
    };
    const ir::Attrs eps = {{"eps", 1e-5}};
    std::vector<ValueId> results;
    switch (rng() % 6) {
      case 0:
        results = *g.AddNode(OpId::k_linear, {a, param({pick(widths), width})});
        break;
      case 1:
        results = *g.AddNode(OpId::k_silu, {a});
        break;
      case 2:
        results = *g.AddNode(OpId::k_add, {a, b});
        break;
      case 3:
        results = *g.AddNode(OpId::k_rms_norm_residual, {a, param({width}), b}, eps);
        break;
      case 4:
        results = *g.AddNode(OpId::k_add_rms_norm, {a, b, param({width})}, eps);
        break;
      default:
        results = *g.AddNode(OpId::k_linear_residual, {a, param({width, width}), b});
        break;
    }
    values.insert(values.end(), results.begin(), results.end());
  }
  for (ValueId v : values) {
    if (g.value(v).kind == ir::ValueKind::kResult && (v == values.back() || rng() % 5 == 0)) g.AddOutput(v);
  }
  return g;
}

TEST(PlanMemory, InvariantsHoldOnRandomGraphs) {
  for (uint32_t seed = 0; seed < 500; ++seed) {
    ir::Graph g = RandomGraph(seed);
    ASSERT_TRUE(ir::Verify(g).ok()) << ir::Verify(g);
    ASSERT_TRUE(PlanMemoryPass().Run(g).ok());
    ASSERT_TRUE(ir::Verify(g).ok()) << "seed " << seed << ": " << ir::Verify(g);

    // Live ranges computed independently: definition to last use; outputs to the end.
    const int32_t end = static_cast<int32_t>(g.nodes().size());
    std::vector<int32_t> first(g.num_values(), -1), last(g.num_values(), -1);
    for (int32_t n = 0; n < end; ++n) {
      for (ValueId v : g.nodes()[n].operands) last[v] = n;
      for (ValueId v : g.nodes()[n].results) first[v] = last[v] = n;
    }
    for (int32_t n = 0; n < end; ++n) {
      for (ValueId v : g.nodes()[n].operands) last[v] = std::max(last[v], n);
    }
    for (ValueId v : g.outputs()) last[v] = end;

    int64_t total = 0;
    std::vector<ValueId> results = g.ValuesOfKind(ir::ValueKind::kResult);
    for (ValueId v : results) {
      const int64_t bytes = *g.value(v).type.ByteSize(g.symbol_bounds());
      total += (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
      EXPECT_EQ(g.value(v).arena_offset % kArenaAlignment, 0);
    }
    EXPECT_LE(g.arena_bytes(), total) << "seed " << seed;
    for (ValueId u : results) {
      for (ValueId v : results) {
        if (u >= v) continue;
        const int64_t ub = g.value(u).arena_offset, ue = ub + *g.value(u).type.ByteSize(g.symbol_bounds());
        const int64_t vb = g.value(v).arena_offset, ve = vb + *g.value(v).type.ByteSize(g.symbol_bounds());
        const bool share_memory = ub < ve && vb < ue;
        if (!share_memory) continue;
        EXPECT_FALSE(g.IsOutput(u) || g.IsOutput(v)) << "seed " << seed << ": an output shares memory";
        const bool share_time = first[u] <= last[v] && first[v] <= last[u];
        if (!share_time) continue;
        // Only allowed: v computed in place over u, which dies at v's node.
        const ir::Node& def = g.nodes()[first[v]];
        const int inplace = ir::GetOpInfo(def.op).inplace_operand;
        const bool in_place = inplace >= 0 && def.operands[inplace] == u && last[u] == first[v] &&
                              def.results[0] == v;
        EXPECT_TRUE(in_place) << "seed " << seed << ": %" << g.value(u).name << " and %" << g.value(v).name
                              << " are live together in the same memory";
      }
    }
  }
}

}  // namespace
}  // namespace ag::passes
