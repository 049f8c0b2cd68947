// The linear kernels with the kNone epilogue (one file per epilogue: parallel nvcc).
#include "kernels/cuda/linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_LINEAR(Epilogue::kNone)
}  // namespace ag::cuda
