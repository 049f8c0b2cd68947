// CUDA kernels of the GLM-4.1V vision tower and of putting its rows into the
// decoder's embeddings (bf16 storage, fp32 math; the reference is kernels/ref
// vision.cc). Launchers take raw pointers, sizes and a stream.
#ifndef AUTOGLM_KERNELS_CUDA_VISION_CUH_
#define AUTOGLM_KERNELS_CUDA_VISION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

// out = x, then out[rows[i]] = src[i]; out may alias x.
cudaError_t LaunchScatterRows(const __nv_bfloat16* x, int64_t tokens, const __nv_bfloat16* src, const int32_t* rows,
                              int64_t m, int64_t width, __nv_bfloat16* out, cudaStream_t stream);
// LayerNorm per row of n (weight and bias), fp32 statistics.
cudaError_t LaunchLayerNorm(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b, int64_t rows,
                            int64_t n, float eps, __nv_bfloat16* out, cudaStream_t stream);
// The exact (erf) GELU.
cudaError_t LaunchGelu(const __nv_bfloat16* x, int64_t n, __nv_bfloat16* out, cudaStream_t stream);
// out = x + the [side, side, width] table sampled bicubically at each patch (see ref::VisionPosEmbed).
cudaError_t LaunchVisionPosEmbed(const __nv_bfloat16* x, const __nv_bfloat16* table, int64_t side,
                                 const int32_t* patch_pos, int64_t rows, int64_t width, __nv_bfloat16* out,
                                 cudaStream_t stream);
// The vision heads' 2-D rotate-half rotary (see ref::VisionRotary); out may alias x. Rows of x
// are x_stride elements apart and out's out_stride (0: heads x head_dim): the first `heads` heads
// of wider rows (a packed [q | k | v] matrix's q and k, in place).
cudaError_t LaunchVisionRotary(const __nv_bfloat16* x, const int32_t* patch_pos, int64_t rows, int64_t heads,
                               int64_t head_dim, float theta, __nv_bfloat16* out, cudaStream_t stream,
                               int64_t x_stride = 0, int64_t out_stride = 0);
// Non-causal attention within each segment of rows (see ref::SegmentAttention); head_dim <= 256.
// q, k and v rows are in_stride elements apart (0: heads x head_dim; the columns of one packed
// [q | k | v] matrix: 3 heads x head_dim); out's are heads x head_dim.
cudaError_t LaunchSegmentAttention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const int32_t* offsets, int64_t segments, int64_t rows, int64_t heads,
                                   int64_t head_dim, __nv_bfloat16* out, cudaStream_t stream, int64_t in_stride = 0);
// out[e, c * group + j] = x[e * group + j, c].
cudaError_t LaunchMergeRows(const __nv_bfloat16* x, int64_t rows, int64_t width, int64_t group, __nv_bfloat16* out,
                            cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_VISION_CUH_
