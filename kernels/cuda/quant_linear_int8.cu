// The quantized linear's decode kernels for int8 codes (one file per format: parallel nvcc).
#include "kernels/cuda/quant_linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kInt8)
}  // namespace ag::cuda
