// The floor of every plan step: the bytes it must move and the FLOPs it must
// do for one batch shape, and the time those take at the machine's measured
// ceilings (4.45 TB/s HBM read, 790 TFLOP/s bf16 on the H200). autoglm-inspect
// --roofline prints it without a GPU; autoglm-bench --profile puts measured
// times beside it. Rows carry the plan's step names, as NVTX ranges do.
#ifndef AUTOGLM_COMPILER_ROOFLINE_H_
#define AUTOGLM_COMPILER_ROOFLINE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"

namespace ag::compiler {

struct Ceilings {
  double bytes_per_second = 4.45e12;
  double flops_per_second = 790e12;
};

// `seqs` sequences each process `tokens_per_seq` new tokens and end the step
// with `context` tokens in their KV cache (decode: tokens_per_seq 1).
struct StepShape {
  int64_t seqs = 1;
  int64_t tokens_per_seq = 1;
  int64_t context = 512;
  int64_t image_rows = 0;  // GLM-4.1V: image rows that replace token embeddings in the step (at most its tokens)
};

struct StepCost {
  std::string name;    // the plan step's name
  std::string kernel;  // its op
  double bytes = 0;    // weights, activations and KV cache read and written
  double flops = 0;
  double floor_us = 0;  // max(bytes / bandwidth, flops / tensor rate)
};

struct Roofline {
  std::vector<StepCost> steps;
  double bytes = 0, flops = 0, floor_us = 0;  // sums
};

absl::StatusOr<Roofline> PlanRoofline(const Plan& plan, const StepShape& shape, const Ceilings& ceilings = {});
// One run of the plan's vision program over images of these (height, width)
// patch grids: each image's patches attend to each other (no causal half).
absl::StatusOr<Roofline> VisionRoofline(const Plan& plan, const std::vector<std::pair<int64_t, int64_t>>& grids,
                                        const Ceilings& ceilings = {});

// The table autoglm-inspect --roofline and autoglm-bench --profile print: one
// row per step (name, kernel, bytes, FLOPs, floor us; with `measured_us`, one
// entry per step, also measured us and floor / measured), then the totals.
std::string FormatRoofline(const Roofline& roofline, const std::vector<double>* measured_us = nullptr);
// The same data as JSON text: {"steps": [{name, kernel, bytes, flops, floor_us[, us]}], "bytes", ...}.
std::string RooflineJson(const Roofline& roofline, const std::vector<double>* measured_us = nullptr);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_ROOFLINE_H_
