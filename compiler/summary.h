// Counts that describe a plan: what autoglm-compile and autoglm-inspect print.
#ifndef AUTOGLM_COMPILER_SUMMARY_H_
#define AUTOGLM_COMPILER_SUMMARY_H_

#include <cstdint>
#include <map>
#include <string>

#include "compiler/plan.h"

namespace ag::compiler {

struct PlanSummary {
  int64_t total_steps = 0;
  int64_t steps_per_layer = 0;  // the most steps any one layer has
  int64_t steps_outside_layers = 0;
  int64_t weight_bytes = 0;       // per rank, on a device (quantized weights in their formats)
  std::map<std::string, int64_t> bytes_by_format;  // weight_bytes by format ("bf16", "int4:g128:asym", ...)
  // What a rank streams per decode step: every weight a step reads whole (the
  // embedding table is only looked up, T rows).
  int64_t weight_bytes_read_per_step = 0;
  // Of weight_bytes, the weights only looked up (LookupOnlyWeights: the embedding table), which a
  // device need not hold (autoglm-run/serve/bench --embedding-on-host).
  int64_t lookup_only_bytes = 0;
  int32_t tp = 1;
  int64_t collectives_per_layer = 0;  // the most collective steps any one layer has
  int64_t collectives = 0;            // in the whole step
  // GPU launches per layer: one per step when a fused all-reduce is the
  // one-shot kernel (one node, small messages); with NCCL each fused
  // all-reduce is NCCL's kernel plus the residual add / norm kernel.
  int64_t launches_per_layer = 0;
  int64_t launches_per_layer_nccl = 0;
  std::map<std::string, int64_t> kernels;  // kernel name -> steps
};

// The counts of one program of the plan (its layers: the decoder's layers or the vision tower's blocks).
PlanSummary Summarize(const Plan& plan, const Program& program);
inline PlanSummary Summarize(const Plan& plan) { return Summarize(plan, plan.decoder()); }

// The weights only embedding steps read, in any program (the token tables: a step looks up T
// rows), which a backend may keep outside its device memory; a weight another step also reads
// (an LM head tied to the table) is not one.
std::vector<int32_t> LookupOnlyWeights(const Plan& plan);

// One line per step: "  12 l1.o = linear(l1.attn, @model.layers.1.self_attn.o_proj.weight) : f32[T,64] @arena+512".
std::string DescribeSteps(const Plan& plan, const Program& program);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_SUMMARY_H_
