// quantize: chooses how each linear weight is stored (ir/quant.h), by a
// layered policy. It only annotates parameters (ParamPart::quant); the
// loader quantizes the checkpoint's rows when it reads them, deterministically
// (round to nearest, kernels/ref/quant.h), so a plan names its model's exact
// numbers without holding them.
//
// A policy is an ordered list of rules "PATTERN: FORMAT" (first match wins)
// over the engine's parameter names (`model.layers.3.mlp.down_proj.weight`,
// as `autoglm-inspect` prints them), then a body format for every other linear
// weight. A pattern is a glob (`*`, `?`) that must match a whole name; the
// leading "model." and the trailing ".weight" may be left out
// (`layers.0.*`, `*.down_proj`). A rule matches a fused weight's part by the
// part's name (`*.k_proj` takes the K rows of QKV) or the whole weight by its
// own (`*.gate_up_proj`). Only weights read as a linear's W are candidates:
// embeddings and norms always stay in the plan's dtype.
#ifndef AUTOGLM_PASSES_QUANTIZE_H_
#define AUTOGLM_PASSES_QUANTIZE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/quant.h"
#include "passes/pass.h"

namespace ag::passes {

struct QuantRule {
  std::string pattern;
  ir::QuantFormat format;
  std::string origin;  // "policy.txt:3" for a file's rule (it must name a weight), empty for a default one
};

struct QuantPolicy {
  std::vector<QuantRule> rules;  // first match wins
  ir::QuantFormat body;          // every other linear weight

  bool empty() const { return rules.empty() && !body.quantized(); }
};

// The policy of `--quantize BODY`: what QUANT_NOTES.md finds sensitive stays
// at 8 bits — with a 4-bit body, the LM head and the K/V rows of QKV in
// fp8e4m3 (GLM-4-9B has 2 KV heads: +0.2 % of the bytes); with an 8-bit body
// the LM head is 8-bit like the rest.
QuantPolicy DefaultQuantPolicy(ir::QuantFormat body);

// A policy file: one "PATTERN: FORMAT" per line, '#' comments, blank lines.
// Errors name the file and line. `file` names the source in errors and origins.
absl::StatusOr<std::vector<QuantRule>> ParseQuantPolicy(absl::string_view text, absl::string_view file);

// Whether `pattern` matches the parameter `name` (see above).
bool PatternMatchesWeight(absl::string_view pattern, absl::string_view name);

class QuantizePass : public Pass {
 public:
  explicit QuantizePass(QuantPolicy policy) : policy_(std::move(policy)) {}
  absl::string_view name() const override { return "quantize"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;

 private:
  QuantPolicy policy_;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_QUANTIZE_H_
