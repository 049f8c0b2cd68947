// Embedding gather: out[t] = table[ids[t]], bf16.
#ifndef AUTOGLM_KERNELS_CUDA_EMBEDDING_CUH_
#define AUTOGLM_KERNELS_CUDA_EMBEDDING_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

// ids in [0, vocab) (the runtime validates prompts); hidden % 8 == 0.
cudaError_t LaunchEmbedding(const int32_t* ids, int64_t tokens, const __nv_bfloat16* table, int64_t hidden,
                            __nv_bfloat16* out, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_EMBEDDING_CUH_
