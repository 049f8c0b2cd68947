// Flash attention over an 8-bit paged KV cache (fp8 or int8 codes with per-token scales), causal:
// the K and V tiles dequantized on their way into shared memory (flash_attention_impl.cuh).
#include "kernels/cuda/flash_attention_impl.cuh"

namespace ag::cuda::flash_detail {

cudaError_t LaunchFlashPagedCodes(const Params& p, KvCode code, int64_t head_dim, int64_t rows, cudaStream_t stream) {
  switch (code) {
    case KvCode::kFp8:
      return LaunchFlashFor<Mask::kCausalPaged, KvCode::kFp8>(p, head_dim, rows, stream);
    case KvCode::kInt8:
      return LaunchFlashFor<Mask::kCausalPaged, KvCode::kInt8>(p, head_dim, rows, stream);
    case KvCode::kBF16:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace ag::cuda::flash_detail
