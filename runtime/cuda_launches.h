// How many kernel launches (and NCCL calls and copies: graph nodes all) the
// CUDA backend makes for a step of a plan at a given batch shape. The rules
// are its dispatch's (runtime/cuda_kernels.cc, kernels/cuda), through the same
// plain-C++ choices where they exist (attention_plan.h, linear_split.h,
// peer_flags.h), so that autoglm-inspect counts launches per layer at each
// batch size without a GPU.
#ifndef AUTOGLM_RUNTIME_CUDA_LAUNCHES_H_
#define AUTOGLM_RUNTIME_CUDA_LAUNCHES_H_

#include <cstdint>

#include "compiler/plan.h"

namespace ag::runtime {

struct LaunchShape {
  int64_t seqs = 1;          // sequences in the step
  int64_t rows_per_seq = 1;  // new tokens each brings (1: decode)
  int64_t context = 512;     // tokens in each sequence's cache after the step
  int multiprocessors = 132;
  bool peer_access = true;   // tp > 1 on one node: the one-shot all-reduce where it fits
};

int64_t CudaStepLaunches(const compiler::Plan& plan, const compiler::PlanStep& step, const LaunchShape& shape);

// The most launches any decoder layer takes.
int64_t CudaLaunchesPerLayer(const compiler::Plan& plan, const LaunchShape& shape);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CUDA_LAUNCHES_H_
