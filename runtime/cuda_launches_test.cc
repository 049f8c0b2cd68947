#include "runtime/cuda_launches.h"

#include <gtest/gtest.h>

#include "kernels/cuda/attention_plan.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

// Per layer of tiny-glm's fused plan (head_dim 16: a flash build): decode at batch 1 is one launch a
// step but for attention's combine step where the context is sliced; past one row every fused norm
// prologue is a launch of its own; a prefill's attention is one flash launch.
TEST(CudaLaunches, FollowTheDispatchRules) {
  const testing::TinyGlm tiny;
  const compiler::Plan& plan = tiny.plan;
  int64_t steps = 0, norm_prologues = 0, attention = 0;
  for (const compiler::PlanStep& step : plan.decoder().steps) {
    if (step.layer != 0) continue;
    ++steps;
    norm_prologues += step.kernel == ir::OpId::k_norm_linear || step.kernel == ir::OpId::k_norm_gate_up_silu ||
                      step.kernel == ir::OpId::k_norm_qkv_rope_kv_write;
    attention += step.kernel == ir::OpId::k_paged_attention;
  }
  ASSERT_GT(norm_prologues, 0) << "the fused plan normalises inside its linears";
  ASSERT_EQ(attention, 1);

  // Batch 1 at 4096 tokens: 2 KV heads, a group of 2: sliced, so a combine launch follows.
  const cuda::AttentionGeometry sliced = cuda::PlanAttention(1, 2, 2, 4096, 132);
  ASSERT_GT(sliced.slices, 1);
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 1, 4096}), steps + 1);
  // Batch 8: the norm prologues launch separately (the skinny kernel takes x normalised).
  const cuda::AttentionGeometry batch8 = cuda::PlanAttention(8, 2, 2, 4096, 132);
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {8, 1, 4096}), steps + norm_prologues + (batch8.slices > 1 ? 1 : 0));
  // A 512-token prompt: flash attention, one launch.
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 512, 512}), steps + norm_prologues);
}

}  // namespace
}  // namespace ag::runtime
