// The IR's invariant checker, run after every pass in tests and debug builds.
#ifndef AUTOGLM_IR_VERIFIER_H_
#define AUTOGLM_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "ir/graph.h"

namespace ag::ir {

// Checks that values are defined before use, result types follow the op
// table, state appears only where an op takes state, outputs exist, and (once
// memory is planned) every arena buffer lies inside the arena.
absl::Status Verify(const Graph& graph);

}  // namespace ag::ir

#endif  // AUTOGLM_IR_VERIFIER_H_
