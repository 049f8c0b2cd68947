// Flash attention over the paged KV cache, causal (flash_attention.cuh): a bf16 cache here, 8-bit
// caches in flash_attention_paged8.cu.
#include "kernels/cuda/flash_attention_impl.cuh"

namespace ag::cuda {

cudaError_t LaunchFlashPagedAttention(const bf16* q, int64_t tokens, int64_t heads, const PagedKv& cache,
                                      const SeqBatch& seqs, bf16* out, cudaStream_t stream) {
  const bool codes = cache.code != KvCode::kBF16;
  if (!FlashHeadDim(cache.head_dim) || cache.kv_heads <= 0 || heads % cache.kv_heads != 0 || seqs.num_seqs <= 0 ||
      cache.block_size <= 0 || (codes && (cache.k_scale == nullptr || cache.v_scale == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (!codes) {
    if (const cudaError_t e = LaunchWgmmaFlashPaged(q, tokens, heads, cache, seqs, out, stream);
        e != cudaErrorNotSupported) {
      return e;
    }
  }
  flash_detail::Params p{};
  p.q = q;
  p.out = out;
  p.offsets = seqs.seq_offsets;
  p.sequences = seqs.num_seqs;
  p.heads = static_cast<int>(heads);
  p.group = static_cast<int>(heads / cache.kv_heads);
  p.scale_log2 = ScaleLog2(cache.head_dim);
  p.cache = cache;
  p.context_lens = seqs.context_lens;
  p.block_tables = seqs.block_tables;
  p.max_blocks = seqs.max_blocks;
  if (codes) return flash_detail::LaunchFlashPagedCodes(p, cache.code, cache.head_dim, tokens, stream);
  return flash_detail::LaunchFlashFor<flash_detail::Mask::kCausalPaged>(p, cache.head_dim, tokens, stream);
}

}  // namespace ag::cuda
