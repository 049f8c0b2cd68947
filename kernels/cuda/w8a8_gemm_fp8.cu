// The W8A8 GEMM's e4m3 instances (w8a8_gemm.cuh), one .cu per input code so that nvcc compiles them in parallel.
#include "kernels/cuda/w8a8_gemm.cuh"

namespace ag::cuda {

template cudaError_t LaunchW8A8GemmFor<true>(const LinearParams&, const QuantSegment&, const void*, cudaStream_t);

}  // namespace ag::cuda
