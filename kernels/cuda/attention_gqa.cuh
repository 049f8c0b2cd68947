// Decode attention on the tensor cores for grouped-query heads (attention_gqa.cu): the
// group's query heads as mma rows, K and V read once a group. LaunchPagedAttention takes it
// where GqaDecodeTakes says so; the slice kernel (attention_impl.cuh) elsewhere.
// AUTOGLM_GQA_DECODE=0 switches it off.
#ifndef AUTOGLM_KERNELS_CUDA_ATTENTION_GQA_CUH_
#define AUTOGLM_KERNELS_CUDA_ATTENTION_GQA_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/paged_kv.cuh"

namespace ag::cuda {

// Fewer query heads a KV head leave most of the 16 mma rows empty: the slice kernel takes them.
inline constexpr int64_t kGqaMinGroup = 4;

struct GqaDecodeParams {
  const __nv_bfloat16* q;  // [tokens, heads, head_dim]
  __nv_bfloat16* out;      // with one slice the answer; else CombineKernel's from the partials
  PagedKv cache;
  SeqBatch seqs;
  int heads, group, head_dim;
  int slices, slice_keys;  // PlanAttention's: the slice kernel's workspace and combine step
  float scale_log2;        // log2(e) / sqrt(head_dim)
  float* partial_acc;      // [tokens, heads, slices, head_dim]
  float* partial_ml;       // [tokens, heads, slices, 2]: the maximum (natural units) and the sum
  int64_t row_base;        // the launch's first query row (grid z holds at most kMaxGridYZ rows)
};

bool GqaDecodeTakes(int64_t head_dim, int64_t group, KvCode code);

// grid (slices, kv_heads, rows of this launch).
cudaError_t LaunchGqaDecode(const GqaDecodeParams& p, dim3 grid, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_ATTENTION_GQA_CUH_
