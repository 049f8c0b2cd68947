#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace ag::cuda {

bool SwitchedOn(const char* variable) {
  const char* v = std::getenv(variable);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool ProgrammaticLaunch() {
  static const bool enabled = SwitchedOn("AUTOGLM_PDL");
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
