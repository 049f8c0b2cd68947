// Environment switches of the CUDA code (defined in common.cu); plain C++, so host code reads them too.
#ifndef AUTOGLM_KERNELS_CUDA_SWITCHES_H_
#define AUTOGLM_KERNELS_CUDA_SWITCHES_H_

namespace ag::cuda {

// False when the environment variable is "0": how a feature is switched off (AUTOGLM_WGMMA, ...).
bool SwitchedOn(const char* variable);
// True only when the environment variable is "1": how a feature that is off by default is switched
// on (AUTOGLM_PDL, AUTOGLM_PROFILE_PROGRAMS).
bool SwitchedOnByHand(const char* variable);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_SWITCHES_H_
