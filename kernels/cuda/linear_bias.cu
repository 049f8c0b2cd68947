// The linear kernels with the kBias epilogue (one file per epilogue: parallel nvcc).
#include "kernels/cuda/linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_LINEAR(Epilogue::kBias)
}  // namespace ag::cuda
