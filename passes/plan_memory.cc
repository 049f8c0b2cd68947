#include "passes/plan_memory.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "ir/status_macros.h"

namespace ag::passes {
namespace {

int64_t AlignUp(int64_t v) { return (v + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// A buffer: one or more values sharing memory (a result and what it reuses in place).
struct Buffer {
  int64_t bytes = 0;
  int32_t first = 0, last = 0;  // live over node indices [first, last]
  int64_t offset = -1;
};

}  // namespace

absl::StatusOr<bool> PlanMemoryPass::Run(ir::Graph& g) {
  const auto& nodes = g.nodes();
  const int32_t end = static_cast<int32_t>(nodes.size());
  std::vector<int32_t> last_use(g.num_values(), -1);
  for (int32_t n = 0; n < end; ++n) {
    for (ir::ValueId v : nodes[n].operands) last_use[v] = n;
  }
  for (ir::ValueId v : g.outputs()) last_use[v] = end;  // read by the runtime after the last step

  std::vector<int32_t> buffer_of(g.num_values(), -1);
  std::vector<Buffer> buffers;
  for (int32_t n = 0; n < end; ++n) {
    const ir::Node& node = nodes[n];
    const ir::OpInfo& info = ir::GetOpInfo(node.op);
    for (size_t i = 0; i < node.results.size(); ++i) {
      const ir::ValueId r = node.results[i];
      ASSIGN_OR_RETURN(int64_t bytes, g.value(r).type.ByteSize(g.symbol_bounds()));
      const int32_t last = std::max(last_use[r], n);
      const bool output = g.IsOutput(r);
      if (i == 0 && !output && info.inplace_operand >= 0 && info.inplace_operand < static_cast<int>(node.operands.size())) {
        const ir::ValueId in = node.operands[info.inplace_operand];
        const int32_t b = buffer_of[in];
        // Reuse only a dying intermediate of the same type that no other operand of this node reads.
        const bool sole_read = std::count(node.operands.begin(), node.operands.end(), in) == 1;
        if (b >= 0 && last_use[in] == n && !g.IsOutput(in) && sole_read && g.value(in).type == g.value(r).type &&
            buffers[b].last == n) {
          buffers[b].last = last;
          buffer_of[r] = b;
          continue;
        }
      }
      buffer_of[r] = static_cast<int32_t>(buffers.size());
      // Outputs are exclusive: live over the whole step, they share memory with nothing.
      buffers.push_back({AlignUp(bytes), output ? 0 : n, last, -1});
    }
  }

  // Largest first; each at the lowest aligned offset clear of placed buffers whose lives overlap.
  std::vector<int32_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<int32_t> placed;
  int64_t arena = 0;
  for (int32_t i : order) {
    Buffer& buf = buffers[i];
    std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of overlapping live buffers
    for (int32_t j : placed) {
      const Buffer& other = buffers[j];
      if (other.first <= buf.last && buf.first <= other.last) taken.emplace_back(other.offset, other.offset + other.bytes);
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [begin, stop] : taken) {
      if (offset + buf.bytes <= begin) break;
      offset = std::max(offset, stop);
    }
    buf.offset = offset;
    arena = std::max(arena, offset + buf.bytes);
    placed.push_back(i);
  }
  bool changed = g.arena_bytes() != arena;
  for (ir::ValueId v = 0; v < g.num_values(); ++v) {
    const int64_t offset = buffer_of[v] >= 0 ? buffers[buffer_of[v]].offset : -1;
    changed = changed || g.value(v).arena_offset != offset;
    g.mutable_value(v).arena_offset = offset;
  }
  g.set_arena_bytes(arena);
  return changed;
}

}  // namespace ag::passes
