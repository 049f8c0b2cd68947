// plan-memory: gives every node result an offset in one activation arena.
//
// Activations are planned ahead of time, like a compiler allocates stack
// slots: sizes come from the symbol bounds (T, S, R at their maxima), live
// ranges from the node order, and two buffers share memory only when their
// live ranges are disjoint. Placement is greedy by size (largest first, each
// at the lowest offset that fits beside the overlapping live buffers).
// A result may reuse its operand's buffer in place only when the op table
// allows it for that operand, the operand dies at this node and has the same
// type. Graph outputs live to the end of the step and share with nothing.
// Records the arena size on the graph.
#ifndef AUTOGLM_PASSES_PLAN_MEMORY_H_
#define AUTOGLM_PASSES_PLAN_MEMORY_H_

#include <cstdint>

#include "passes/pass.h"

namespace ag::passes {

inline constexpr int64_t kArenaAlignment = 256;

class PlanMemoryPass : public Pass {
 public:
  absl::string_view name() const override { return "plan-memory"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_PLAN_MEMORY_H_
