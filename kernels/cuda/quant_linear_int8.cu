// The quantized linear's decode kernels and prefill GEMM for int8 codes (one file per format: parallel nvcc).
#include "kernels/cuda/quant_gemm.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kInt8)
AG_INSTANTIATE_QUANT_GEMM(QuantCode::kInt8)
}  // namespace ag::cuda
