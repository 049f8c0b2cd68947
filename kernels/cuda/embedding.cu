#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.cuh"

namespace ag::cuda {
namespace {

// One block per token, 16-byte copies.
__global__ void EmbeddingKernel(const int32_t* __restrict__ ids, const bf16* __restrict__ table, int64_t hidden,
                                bf16* __restrict__ out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t t = blockIdx.x;
  const bf16* row = table + static_cast<int64_t>(ids[t]) * hidden;
  bf16* dst = out + t * hidden;
  for (int64_t i = threadIdx.x * 8; i < hidden; i += blockDim.x * 8) Store8(dst + i, Load8(row + i));
}

}  // namespace

cudaError_t LaunchEmbedding(const int32_t* ids, int64_t tokens, const bf16* table, int64_t hidden, bf16* out,
                            cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (hidden % 8 != 0) return cudaErrorInvalidValue;
  return LaunchKernel(EmbeddingKernel, dim3(static_cast<unsigned>(tokens)), dim3(128), 0, stream, ids, table, hidden, out);
}

}  // namespace ag::cuda
