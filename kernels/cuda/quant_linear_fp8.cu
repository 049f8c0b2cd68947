// The quantized linear's decode kernels for fp8 codes (one file per format: parallel nvcc).
#include "kernels/cuda/quant_linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kFp8)
}  // namespace ag::cuda
