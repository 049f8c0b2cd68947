// Elementwise and data-movement kernels, bf16: add, mul, silu, column slice,
// row gather, rotary (interleaved, partial) and the paged KV-cache write.
#ifndef AUTOGLM_KERNELS_CUDA_ELEMENTWISE_CUH_
#define AUTOGLM_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/paged_kv.cuh"

namespace ag::cuda {

enum class Binary { kAdd, kMul };
// out = a op b, n elements (out may alias a or b).
cudaError_t LaunchBinary(Binary op, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n, __nv_bfloat16* out,
                         cudaStream_t stream);
cudaError_t LaunchSilu(const __nv_bfloat16* x, int64_t n, __nv_bfloat16* out, cudaStream_t stream);
// Columns [start, start + size) of a [rows, cols] matrix.
cudaError_t LaunchSliceColumns(const __nv_bfloat16* x, int64_t rows, int64_t cols, int64_t start, int64_t size,
                               __nv_bfloat16* out, cudaStream_t stream);
// out[r] = x[rows[r]].
cudaError_t LaunchGatherRows(const __nv_bfloat16* x, const int32_t* rows, int64_t num_rows, int64_t width,
                             __nv_bfloat16* out, cudaStream_t stream);
// Interleaved rotary on the first `rot` channels of each head; out may alias x.
cudaError_t LaunchRotary(const __nv_bfloat16* x, const RopePositions& positions, int64_t tokens, int64_t heads,
                         int64_t head_dim, int64_t rot, float theta, __nv_bfloat16* out, cudaStream_t stream);
// Writes each token's K and V rows ([tokens, kv_heads * head_dim]) to its cache slot; slot < 0 skips.
cudaError_t LaunchKvCacheWrite(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* slots, int64_t tokens,
                               const PagedKv& cache, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_ELEMENTWISE_CUH_
