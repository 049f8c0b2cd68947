#include <algorithm>
#include <cfloat>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_impl.cuh"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.cuh"

namespace ag::cuda {

namespace attention_detail {
AG_INSTANTIATE_ATTENTION(KvCode::kBF16)
}  // namespace attention_detail

using namespace attention_detail;  // NOLINT: this file is the slice kernels' host side

namespace {

// grid (heads, tokens from row_base): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void __launch_bounds__(kThreads) CombineKernel(const float* partial_acc, const float* partial_ml, int heads,
                                                          int slices, int head_dim, int64_t row_base, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int h = blockIdx.x;
  const int64_t t = row_base + blockIdx.y;
  const float* ml = partial_ml + (t * heads + h) * slices * 2;
  float m = -FLT_MAX;
  for (int s = 0; s < slices; ++s) m = fmaxf(m, ml[2 * s]);
  float denom = 0.0f;
  for (int s = 0; s < slices; ++s) denom += ml[2 * s + 1] * __expf(ml[2 * s] - m);
  const float* acc = partial_acc + (t * heads + h) * slices * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kThreads) {
    float num = 0.0f;
    for (int s = 0; s < slices; ++s) num += acc[s * head_dim + d] * __expf(ml[2 * s] - m);
    out[(t * heads + h) * head_dim + d] = __float2bfloat16(num / denom);
  }
}

}  // namespace

int64_t PagedAttentionWorkspace(const AttentionShape& shape, int64_t kv_heads, int64_t head_dim) {
  // The most any row count up to shape.tokens needs (fewer rows may use more slices), on either
  // decode kernel.
  const int sms = MultiprocessorCount();
  const int64_t group = kv_heads > 0 ? std::max<int64_t>(shape.heads / kv_heads, 1) : 1;
  int64_t most = 0;
  for (int64_t t = 1; t <= shape.tokens; ++t) {
    const int slices = std::max(PlanAttention(t, kv_heads, group, shape.max_context, sms).slices,
                                PlanGqaDecode(t, kv_heads, shape.max_context, sms).slices);
    most = std::max<int64_t>(most, t * slices);
  }
  return most * shape.heads * (head_dim + 2);
}

namespace {

cudaError_t LaunchForCache(const Params& p, int heads_per_warp, dim3 grid, size_t smem, cudaStream_t stream) {
  switch (p.cache.code) {
    case KvCode::kBF16:
      return LaunchSlicesFor<KvCode::kBF16>(p, heads_per_warp, grid, smem, stream);
    case KvCode::kFp8:
      return LaunchSlicesFor<KvCode::kFp8>(p, heads_per_warp, grid, smem, stream);
    case KvCode::kInt8:
      return LaunchSlicesFor<KvCode::kInt8>(p, heads_per_warp, grid, smem, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

namespace {

// The decode kernels (the grouped-query one on the tensor cores, or the slice kernel) over rows
// 0 .. rows - 1, then the combine step where the context is sliced (and the grouped-query kernel's
// cluster has not merged the slices).
cudaError_t LaunchDecodeRows(const bf16* q, int64_t rows, const AttentionShape& shape, const PagedKv& cache,
                             const SeqBatch& seqs, float* workspace, bf16* out, cudaStream_t stream) {
  const int64_t D = cache.head_dim;
  const int64_t group = shape.heads / cache.kv_heads;
  const bool gqa = GqaDecodeTakes(D, group, cache.code);
  const int sms = MultiprocessorCount();
  AttentionGeometry geo = PlanAttention(rows, cache.kv_heads, group, shape.max_context, sms);
  bool folded = false;
  if (gqa) {  // its own slices (whole tiles); the slice kernel's heads per warp and chunks do not apply
    const GqaGeometry g = PlanGqaDecode(rows, cache.kv_heads, shape.max_context, sms);
    geo.slices = g.slices;
    geo.slice_keys = g.slice_keys;
    static const bool fold_on = SwitchedOn("AUTOGLM_GQA_FOLD");  // 0: partials and the combine step
    folded = g.fold && fold_on;
  }
  Params p;
  p.q = q;
  p.cache = cache;
  p.seqs = seqs;
  p.heads = static_cast<int>(shape.heads);
  p.group = static_cast<int>(group);
  p.head_dim = static_cast<int>(D);
  p.head_chunks = geo.head_chunks;
  p.slices = geo.slices;
  p.slice_keys = geo.slice_keys;
  p.scale = 1.0f / sqrtf(static_cast<float>(D));
  p.partial_acc = workspace;
  p.partial_ml = workspace + rows * shape.heads * geo.slices * D;
  p.out = out;
  const size_t smem = SliceSmemBytes(static_cast<int>(D), cache.code, geo.heads_per_warp);
  // Query rows go on grid z (and y for the combine step): at most kMaxGridYZ a launch.
  for (int64_t chunk = 0; chunk < RowChunks(rows); ++chunk) {
    p.row_base = chunk * kMaxGridYZ;
    const unsigned chunk_rows = static_cast<unsigned>(RowChunkSize(rows, chunk));
    cudaError_t e;
    if (gqa) {  // one block a (slice, KV head, row): every query head of the group
      e = LaunchGqaDecode(p, dim3(static_cast<unsigned>(geo.slices), static_cast<unsigned>(cache.kv_heads), chunk_rows),
                          folded, stream);
    } else {
      const dim3 grid(static_cast<unsigned>(geo.slices), static_cast<unsigned>(cache.kv_heads * geo.head_chunks),
                      chunk_rows);
      e = LaunchForCache(p, geo.heads_per_warp, grid, smem, stream);
    }
    if (e != cudaSuccess) return e;
    if (geo.slices == 1 || folded) continue;  // the decode kernel wrote out: no combine step
    e = LaunchKernel(CombineKernel, dim3(static_cast<unsigned>(shape.heads), chunk_rows), dim3(kThreads), 0, stream,
                     p.partial_acc, p.partial_ml, p.heads, geo.slices, p.head_dim, p.row_base, out);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchPagedAttention(const bf16* q, const AttentionShape& shape, const PagedKv& cache,
                                 const SeqBatch& seqs, float* workspace, bf16* out, cudaStream_t stream) {
  if (shape.tokens == 0) return cudaSuccess;
  const int64_t D = cache.head_dim;
  const bool codes = cache.code != KvCode::kBF16;
  if (D % (codes ? 16 : 8) != 0 || D > 64 * kMaxPairs || cache.kv_heads <= 0 || shape.heads % cache.kv_heads != 0 ||
      seqs.num_seqs <= 0 || (codes && (cache.k_scale == nullptr || cache.v_scale == nullptr)) ||
      shape.decode_seqs < 0 || shape.decode_seqs > seqs.num_seqs || shape.decode_seqs > shape.tokens) {
    return cudaErrorInvalidValue;
  }
  // Prefill (sequences of many new rows) on the tensor cores, over any cache format; the decode rows
  // leading a mixed step, and decode steps, below. The flash launch sees the sequences after the
  // decode rows (their offsets still index q's rows from its first).
  const int64_t decode = shape.decode_seqs;  // one row each: rows 0 .. decode - 1
  if (FlashHeadDim(D) && UseFlashAttention(shape.tokens - decode, seqs.num_seqs - decode)) {
    if (decode > 0) {
      if (const cudaError_t e = LaunchDecodeRows(q, decode, shape, cache, seqs, workspace, out, stream);
          e != cudaSuccess) {
        return e;
      }
    }
    SeqBatch rest = seqs;
    rest.seq_offsets += decode;
    rest.context_lens += decode;
    rest.block_tables += decode * seqs.max_blocks;
    rest.num_seqs -= decode;
    rest.row_seqs = nullptr;
    return LaunchFlashPagedAttention(q, shape.tokens, shape.heads, cache, rest, out, stream);
  }
  return LaunchDecodeRows(q, shape.tokens, shape, cache, seqs, workspace, out, stream);
}

}  // namespace ag::cuda
