// Lowers a final graph to a Plan: one step per node, operands resolved to
// arena offsets, weights, runtime inputs or KV state; the weight manifest
// from the weight map.
#ifndef AUTOGLM_COMPILER_LOWER_H_
#define AUTOGLM_COMPILER_LOWER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"
#include "ir/graph.h"
#include "models/glm/builder.h"
#include "models/glm/config.h"

namespace ag::compiler {

// When the graph has no memory plan (plan-memory disabled) every buffer gets
// its own slot, no reuse.
absl::StatusOr<Plan> LowerToPlan(const ir::Graph& graph, const glm::ModelConfig& config,
                                 const glm::BuildOptions& options, std::vector<std::string> passes);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_LOWER_H_
