// Kernels over the vocabulary and over weights: greedy argmax, temperature
// sampling by inverse CDF, and the seeded random weight generator.
#ifndef AUTOGLM_KERNELS_CUDA_VOCAB_CUH_
#define AUTOGLM_KERNELS_CUDA_VOCAB_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

// out[r] = index of the largest logit of row r (the first on ties). One block per row.
cudaError_t LaunchArgmax(const __nv_bfloat16* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

// Samples row r from softmax(logits[r] / temperature) over ids < vocab_limit,
// using uniforms[r] in [0, 1): the smallest id whose cumulative probability
// exceeds uniforms[r] * total. One block per row.
cudaError_t LaunchSampleTemperature(const __nv_bfloat16* logits, int64_t rows, int64_t vocab, int64_t vocab_limit,
                                    float temperature, const float* uniforms, int32_t* out, cudaStream_t stream);

// out[i] = center + half_width * (2u - 1) with u the i-th value of the
// counter-based generator (splitmix64) for (seed, stream): the same values
// as runtime::RandomWeights on the host, rounded to bf16.
cudaError_t LaunchFillRandom(__nv_bfloat16* out, int64_t n, uint64_t seed, uint64_t stream_id, float center,
                             float half_width, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_VOCAB_CUH_
