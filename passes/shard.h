// shard: tensor parallelism, Megatron-style. The graph becomes one rank's
// share of the model (one SPMD graph serves every rank):
//
// - q/k/v projections are column-parallel (each rank keeps whole heads: H/tp
//   query heads and the KV heads they use), and so is gate/up (each rank keeps
//   whole SiLU pairs: rows j of gate and of up together). Attention and rotary
//   attributes and the KV state shrink to the rank's heads.
// - o_proj and down_proj are row-parallel (their input columns split), each
//   followed by an `all_reduce` that sums the ranks' partial results.
// - The LM head is split by vocabulary, followed by an `all_gather` of the
//   logits columns: every rank ends with the full logits and greedy tokens.
// - The embedding stays whole on every rank (a lookup reads T rows whatever
//   the split; a vocabulary-split table would cost an all_reduce of [T, H] per
//   step to save memory: NOTES.md).
// - KV heads are replicated when the degree exceeds them (GLM-4-9B has 2;
//   MQA checkpoints 1): rank r holds KV head r * kv_heads / tp.
//
// Parameters record their shard (ir::ShardSpec) per checkpoint part; the plan
// carries it and each rank reads only its slice. A degree the model cannot
// honour is an error naming the size. tp 1 changes nothing, unless asked to
// keep the collectives (`even_alone`): then a one-rank plan still carries its
// all_reduce and all_gather steps, which is how the collective path is tested
// on a machine with one GPU.
#ifndef AUTOGLM_PASSES_SHARD_H_
#define AUTOGLM_PASSES_SHARD_H_

#include <cstdint>

#include "passes/pass.h"

namespace ag::passes {

// KV heads each rank holds at degree `tp`: its share when the degree divides
// them, one (replicated) when the degree is a multiple of them.
int64_t KvHeadsPerRank(int64_t kv_heads, int32_t tp);

class ShardPass : public Pass {
 public:
  explicit ShardPass(int32_t tp, bool even_alone = false) : tp_(tp), even_alone_(even_alone) {}
  absl::string_view name() const override { return "shard"; }
  absl::StatusOr<bool> Run(ir::Graph& graph) override;

 private:
  int32_t tp_;
  bool even_alone_;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_SHARD_H_
