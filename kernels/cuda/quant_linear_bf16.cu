// The quantized linear's decode kernels and prefill GEMM for bf16 rows: a quantized weight's pieces kept
// unquantized (one file per format: parallel nvcc).
#include "kernels/cuda/quant_gemm.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kBf16)
AG_INSTANTIATE_QUANT_GEMM(QuantCode::kBf16)
}  // namespace ag::cuda
