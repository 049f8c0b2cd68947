// lower-kv-cache: the builder's attention-with-cache becomes explicit paged
// KV-cache operations driven by runtime inputs.
//
//   %a = attention(%q, %k, %v, $kv.L)
// becomes
//   kv_cache_write(%k, %v, %slot_mapping, $kv.L)
//   %a = paged_attention(%q, $kv.L, %seq_offsets, %block_tables, %context_lens)
//
// so the write can be fused into the QKV projection's epilogue and the read
// is a kernel of its own. Every KV state gets this pass's block size. The
// cache layout is documented in kernels/ref/ref.h (KvCache).
//
// It runs before `fuse` (DESIGN.md lists it after): the QKV fusion absorbs
// the explicit cache write, which does not exist before this pass.
#ifndef AUTOGLM_PASSES_LOWER_KV_CACHE_H_
#define AUTOGLM_PASSES_LOWER_KV_CACHE_H_

#include <cstdint>

#include "passes/pass.h"

namespace ag::passes {

class LowerKvCachePass : public Pass {
 public:
  explicit LowerKvCachePass(int64_t block_size) : block_size_(block_size) {}
  absl::string_view name() const override { return "lower-kv-cache"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;

 private:
  int64_t block_size_;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_LOWER_KV_CACHE_H_
