// The quantized linear's decode kernels and prefill GEMM for fp8 codes (one file per format: parallel nvcc).
#include "kernels/cuda/quant_gemm.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kFp8)
AG_INSTANTIATE_QUANT_GEMM(QuantCode::kFp8)
}  // namespace ag::cuda
