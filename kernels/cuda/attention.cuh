// Paged attention over the KV cache, for decode tokens and prefill chunks
// alike (flash-decoding): each block takes one query token, one KV head, a
// chunk of that KV head's query heads (the K/V tile is read once for all of
// them) and one slice of the context (attention_plan.h sizes both so that a
// decode step fills the GPU at every context length); it streams 32-key K/V
// tiles through cp.async double buffering, keeps an online softmax per head
// in warp registers, and writes a partial result; a second kernel combines
// the slices (with one slice the slice kernel writes the answer itself).
// Causal: the query at position p sees keys 0..p of its own sequence.
// Steps whose sequences bring many new rows (prefill) go to the tensor-core
// flash kernel instead (flash_attention.cuh), whatever the cache's format;
// in a step that mixes them, the decode rows the engine schedules first
// (shape.decode_seqs) stay on the decode kernels.
#ifndef AUTOGLM_KERNELS_CUDA_ATTENTION_CUH_
#define AUTOGLM_KERNELS_CUDA_ATTENTION_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/paged_kv.cuh"

namespace ag::cuda {

struct AttentionShape {
  int64_t tokens = 0;      // query rows
  int64_t heads = 0;       // query heads; heads % kv_heads == 0
  int64_t max_context = 0; // bound on every sequence's context length in this batch: sizes the slices
  // Leading sequences of one new row each (the engine schedules decode rows first). When the
  // sequences after them take the flash kernel, these rows take the decode kernels: a flash block
  // walks its sequence's whole context a query head for 128 rows, one of them real.
  int64_t decode_seqs = 0;
};

// Floats of workspace LaunchPagedAttention needs for up to shape.tokens rows.
int64_t PagedAttentionWorkspace(const AttentionShape& shape, int64_t kv_heads, int64_t head_dim);

// q and out: [tokens, heads * head_dim]; head_dim % 8 == 0, <= 256.
cudaError_t LaunchPagedAttention(const __nv_bfloat16* q, const AttentionShape& shape, const PagedKv& cache,
                                 const SeqBatch& seqs, float* workspace, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_ATTENTION_CUH_
