// The linear kernels with the kResidual epilogue (one file per epilogue: parallel nvcc).
#include "kernels/cuda/linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_LINEAR(Epilogue::kResidual)
}  // namespace ag::cuda
