#include <cstdlib>
#include <cstring>

#include "kernels/cuda/common.cuh"

namespace ag::cuda {

bool ProgrammaticLaunch() {
  static const bool enabled = [] {
    const char* v = std::getenv("AUTOGLM_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
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
