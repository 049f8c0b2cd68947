#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace ag::cuda {

bool SwitchedOn(const char* variable) {
  const char* v = std::getenv(variable);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool SwitchedOnByHand(const char* variable) {
  const char* v = std::getenv(variable);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool ProgrammaticLaunch() {
  // Off unless AUTOGLM_PDL=1. On the H200 (2026-12-04, autoglm-bench, GLM-4-9B) it made decode
  // slower: 6.61 ms a step at batch 1 against 5.88 without, 13.45 against 10.33 at batch 32: each
  // kernel lets its dependents launch at its start, and their waiting blocks hold the multiprocessors'
  // slots the running kernel's later blocks need.
  static const bool enabled = SwitchedOnByHand("AUTOGLM_PDL");
  return enabled;
}

int MultiprocessorCount() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return count;
}

}  // namespace ag::cuda
