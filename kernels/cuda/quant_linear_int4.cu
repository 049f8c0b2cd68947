// The quantized linear's decode kernels for int4 codes (one file per format: parallel nvcc).
#include "kernels/cuda/quant_linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_QUANT_LINEAR(QuantCode::kInt4)
}  // namespace ag::cuda
