// Paged attention over an fp8 KV cache (attention_impl.cuh; one file per format: parallel nvcc).
#include "kernels/cuda/attention_impl.cuh"

namespace ag::cuda::attention_detail {
AG_INSTANTIATE_ATTENTION(KvCode::kFp8)
}  // namespace ag::cuda::attention_detail
