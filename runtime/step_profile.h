// Per-step device times of a program run eagerly with a CUDA event between steps: the decoder's
// (ProfileExecute, autoglm-bench --profile) and, with AUTOGLM_PROFILE_PROGRAMS=1, every other
// program's run (the GLM-4.1V vision tower), summed by step kind onto stderr.
#ifndef AUTOGLM_RUNTIME_STEP_PROFILE_H_
#define AUTOGLM_RUNTIME_STEP_PROFILE_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"

namespace ag::runtime {

// `count` events, created; on failure none is left.
absl::StatusOr<std::vector<cudaEvent_t>> CreateEvents(size_t count);

// Waits for the last event and returns the microseconds between consecutive ones; destroys them all.
absl::StatusOr<std::vector<double>> EventIntervals(std::vector<cudaEvent_t>& events);

// Whether AUTOGLM_PROFILE_PROGRAMS asks for the programs' per-step profile.
bool ProfilePrograms();

// The steps' times summed by kind (a step's name without its "v12." block prefix), longest first.
void PrintStepProfile(const compiler::Program& program, const std::vector<double>& us, std::FILE* out);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_STEP_PROFILE_H_
