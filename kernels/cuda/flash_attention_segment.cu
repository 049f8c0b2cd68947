// Flash attention within segments of rows, non-causal (flash_attention.cuh).
#include "kernels/cuda/flash_attention_impl.cuh"

namespace ag::cuda {

cudaError_t LaunchFlashSegmentAttention(const bf16* q, const bf16* k, const bf16* v, const int32_t* offsets,
                                        int64_t segments, int64_t rows, int64_t heads, int64_t head_dim, bf16* out,
                                        cudaStream_t stream, int64_t in_stride) {
  if (!FlashHeadDim(head_dim) || segments <= 0 || heads <= 0) return cudaErrorInvalidValue;
  if (in_stride == 0) in_stride = heads * head_dim;
  if (in_stride < heads * head_dim || in_stride % 8 != 0) return cudaErrorInvalidValue;  // 16-byte rows for cp.async
  if (const cudaError_t e =
          LaunchWgmmaFlashSegment(q, k, v, offsets, segments, rows, heads, head_dim, out, stream, in_stride);
      e != cudaErrorNotSupported) {
    return e;
  }
  flash_detail::Params p{};
  p.q = q;
  p.out = out;
  p.offsets = offsets;
  p.sequences = segments;
  p.heads = static_cast<int>(heads);
  p.group = 1;
  p.scale_log2 = ScaleLog2(head_dim);
  p.k = k;
  p.v = v;
  p.in_stride = in_stride;
  return flash_detail::LaunchFlashFor<flash_detail::Mask::kSegment>(p, head_dim, rows, stream);
}

}  // namespace ag::cuda
