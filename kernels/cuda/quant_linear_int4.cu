// The quantized linear's decode kernels and prefill GEMM for int4 codes (one file per format: parallel nvcc).
#include "kernels/cuda/quant_gemm.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kInt4)
AG_INSTANTIATE_QUANT_GEMM(QuantCode::kInt4)
}  // namespace ag::cuda
