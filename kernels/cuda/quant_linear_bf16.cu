// The quantized linear's decode kernels for bf16 rows: a quantized weight's pieces kept
// unquantized (one file per format: parallel nvcc).
#include "kernels/cuda/quant_linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kBf16)
}  // namespace ag::cuda
