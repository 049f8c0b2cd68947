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

}  // namespace ag::cuda
