// canonicalize: puts the graph in the one form the fusion patterns expect.
//
// - Commutative ops list the operand defined earlier first (parameters,
//   inputs and state count as earliest), so `add(x, o)` is the residual form
//   whichever way the builder wrote it.
// - A slice that covers its whole axis is its input.
//
// dce: removes nodes whose results nothing uses, unless they write state,
// then the parameters nothing reads any more.
#ifndef AUTOGLM_PASSES_CANONICALIZE_H_
#define AUTOGLM_PASSES_CANONICALIZE_H_

#include "passes/pass.h"

namespace ag::passes {

class CanonicalizePass : public Pass {
 public:
  absl::string_view name() const override { return "canonicalize"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;
};

class DcePass : public Pass {
 public:
  absl::string_view name() const override { return "dce"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_CANONICALIZE_H_
