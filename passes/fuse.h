// fuse: replaces node patterns by fused ops, from a table of rules.
//
// Each kernel launch costs a launch gap and each intermediate a round trip
// through memory; at batch 1 the GPU time of a decode step is almost all
// weight streaming, so the pieces around each matrix product (norms, bias,
// rotary, the cache write, SiLU, residual adds) belong in its prologue or
// epilogue. The rules, in priority order:
//
//   norm-qkv-rope-kv-write  rms_norm -> q/k/v linear (+bias) -> rotary(q, k) -> kv_cache_write
//   norm-gate-up-silu       rms_norm -> gate_up linear -> slice, slice -> silu * up
//   all-reduce-norm-residual residual + rms_norm(all_reduce(y)) (tp > 1, glm4's sandwich norms)
//   all-reduce-residual     residual + all_reduce(y)         (tp > 1: after o_proj and down_proj)
//   sublayer-norm-residual  residual + rms_norm(y)           (glm4's post-sublayer norms)
//   linear-residual         residual + linear(x)             (o_proj and down_proj)
//   norm-linear             linear(rms_norm(x))              (final norm + LM head)
//   add-rms-norm            rms_norm(a + b), a + b kept      (residual add + norm)
//
// At tp > 1 the next RMSNorm is already the prologue of the next projection
// (norm-qkv-rope-kv-write, norm-gate-up-silu), so a layer's collectives are
// two fused all-reduce + residual (+ norm) steps.
//
// Fused q/k/v weights become one parameter, `concat` of the three, which the
// compiler's weight manifest assembles at load time.
#ifndef AUTOGLM_PASSES_FUSE_H_
#define AUTOGLM_PASSES_FUSE_H_

#include <string>
#include <vector>

#include "passes/pass.h"

namespace ag::passes {

class FusePass : public Pass {
 public:
  FusePass() = default;
  // Only the named rules (for tests).
  explicit FusePass(std::vector<std::string> only) : only_(std::move(only)) {}
  absl::string_view name() const override { return "fuse"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;

  static std::vector<std::string> RuleNames();

 private:
  std::vector<std::string> only_;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_FUSE_H_
