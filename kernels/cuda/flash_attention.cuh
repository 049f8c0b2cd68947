// Prefill attention on the tensor cores (flash attention, FA2's schedule on
// mma.sync.m16n8k16): a block takes 64 query rows of one sequence and one
// query head, holds their running max, sum and output in registers, and
// streams the sequence's keys through shared memory in 64-key tiles
// (cp.async, double-buffered): S = Q K^T and O += P V are mma's, the
// softmax's probabilities go from S's accumulators to P's A fragments without
// leaving registers. One kernel family, two masks:
//   paged   causal over the decoder's paged KV cache (bf16, or 8-bit codes
//           dequantized as the tiles arrive): the row at
//           position p sees keys 0..p of its sequence (chunked prefill
//           included: earlier chunks are in the cache);
//   segment non-causal within each segment of rows, K and V beside Q (the
//           vision program: each image attends within itself).
// LaunchPagedAttention and LaunchSegmentAttention take it where it applies
// (attention_plan.h: UseFlashAttention, FlashHeadDim); on Hopper, at head_dim
// 128, both try the wgmma kernel first (flash_wgmma.cu).
#ifndef AUTOGLM_KERNELS_CUDA_FLASH_ATTENTION_CUH_
#define AUTOGLM_KERNELS_CUDA_FLASH_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/paged_kv.cuh"

namespace ag::cuda {

// q and out: [tokens, heads * head_dim]; heads % cache.kv_heads == 0; a bf16 or an 8-bit cache (the
// K and V tiles dequantized on their way into shared memory, each key's scale applied once).
cudaError_t LaunchFlashPagedAttention(const __nv_bfloat16* q, int64_t tokens, int64_t heads, const PagedKv& cache,
                                      const SeqBatch& seqs, __nv_bfloat16* out, cudaStream_t stream);
// q, k, v and out: [rows, heads * head_dim], q's, k's and v's rows `in_stride` elements apart (0:
// heads * head_dim); offsets [segments + 1] on the device.
cudaError_t LaunchFlashSegmentAttention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                        const int32_t* offsets, int64_t segments, int64_t rows, int64_t heads,
                                        int64_t head_dim, __nv_bfloat16* out, cudaStream_t stream,
                                        int64_t in_stride = 0);

// The segment kernel on wgmma (flash_wgmma.cu), which LaunchFlashSegmentAttention tries first:
// WgmmaFlashUsable says whether it can run here (a Hopper device, AUTOGLM_WGMMA and
// AUTOGLM_WGMMA_FLASH not 0, head_dim 128, 16-byte aligned q, k and v); otherwise it returns
// cudaErrorNotSupported.
bool WgmmaFlashUsable(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t rows,
                      int64_t heads, int64_t head_dim);
cudaError_t LaunchWgmmaFlashSegment(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                    const int32_t* offsets, int64_t segments, int64_t rows, int64_t heads,
                                    int64_t head_dim, __nv_bfloat16* out, cudaStream_t stream, int64_t in_stride = 0);

// The causal kernel on wgmma, which LaunchFlashPagedAttention tries first: WgmmaFlashPagedUsable
// says whether it can run here (a Hopper device, AUTOGLM_WGMMA and AUTOGLM_WGMMA_FLASH not 0,
// head_dim 128, a bf16 cache whose `slots` are given, pages PagedBoxesFit, 16-byte aligned q, k and
// v); otherwise it returns cudaErrorNotSupported.
bool WgmmaFlashPagedUsable(const __nv_bfloat16* q, int64_t heads, const PagedKv& cache);
cudaError_t LaunchWgmmaFlashPaged(const __nv_bfloat16* q, int64_t tokens, int64_t heads, const PagedKv& cache,
                                  const SeqBatch& seqs, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_FLASH_ATTENTION_CUH_
