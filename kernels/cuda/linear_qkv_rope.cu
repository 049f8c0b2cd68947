// The linear kernels with the kQkvRope epilogue (one file per epilogue: parallel nvcc).
#include "kernels/cuda/linear_impl.cuh"

namespace ag::cuda {
AG_INSTANTIATE_LINEAR(Epilogue::kQkvRope)
}  // namespace ag::cuda
