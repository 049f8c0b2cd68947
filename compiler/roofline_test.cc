#include "compiler/roofline.h"

#include <gtest/gtest.h>

#include "compiler/driver.h"
#include "models/glm/config.h"

namespace ag::compiler {
namespace {

Plan Glm4_9B(ir::DType dtype, int64_t max_tokens) {
  const char* text = R"({"model_type":"glm","hidden_size":4096,"intermediate_size":13696,"num_hidden_layers":40,
    "num_attention_heads":32,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,"attention_bias":true,
    "eos_token_id":[151329]})";
  absl::StatusOr<glm::ModelConfig> c = glm::ParseModelConfig(text, "config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  CompileOptions options;
  options.build.dtype = dtype;
  options.build.max_batch_tokens = max_tokens;
  options.build.max_seqs = 64;
  absl::StatusOr<CompileResult> compiled = Compile(*c, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled->plan;
}

// The floor DESIGN.md and PERF.md derive by hand: 17.56 GB of weights (all
// but the embedding table) plus 20 MB of KV cache at 4.45 TB/s is 3.95 ms.
TEST(Roofline, Glm4DecodeFloorMatchesTheBudget) {
  const Plan plan = Glm4_9B(ir::DType::kBF16, 512);
  absl::StatusOr<Roofline> r = PlanRoofline(plan, {1, 1, 512});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps.size(), plan.decoder().steps.size());
  const double kv = 512.0 * 40 * 2 * 2 * 128 * 2;
  EXPECT_NEAR(r->bytes, 17.56e9 + kv, 0.01e9);
  EXPECT_NEAR(r->floor_us, 3950, 15);
  // Batch 32 reads the same weights: the bytes grow only by 31 more KV caches and the
  // activations (32 rows of every intermediate, about 190 MB over 40 layers).
  absl::StatusOr<Roofline> b32 = PlanRoofline(plan, {32, 1, 512});
  ASSERT_TRUE(b32.ok());
  EXPECT_GT(b32->bytes - r->bytes, 31 * kv);
  EXPECT_LT(b32->bytes - r->bytes, 31 * kv + 0.25e9);
  EXPECT_NEAR(b32->flops, 32 * r->flops, 0.01 * 32 * r->flops);
}

// A 512-token prefill is compute-bound. DESIGN.md's 9.0 TFLOP (11.4 ms) counts
// the LM head for every prompt token; the plan computes logits for the last
// one only: 2 x 8.158 G layer weights x 512 + the head once + causal attention.
TEST(Roofline, Glm4PrefillIsComputeBound) {
  const Plan plan = Glm4_9B(ir::DType::kBF16, 512);
  absl::StatusOr<Roofline> r = PlanRoofline(plan, {1, 512, 512});
  ASSERT_TRUE(r.ok()) << r.status();
  const double layers = 40.0 * (4608.0 * 4096 + 4096.0 * 4096 + 27392.0 * 4096 + 4096.0 * 13696);
  const double expected = 2 * layers * 512 + 2 * 151552.0 * 4096 + 40 * 4.0 * 4096 * (512 * 513 / 2.0);
  EXPECT_NEAR(r->flops, expected, 1e-6 * expected);
  EXPECT_GT(r->floor_us, expected / 790e12 * 1e6);  // plus the bandwidth-bound small steps
  EXPECT_LT(r->floor_us, 1.05 * expected / 790e12 * 1e6);
}

TEST(Roofline, RejectsShapesThePlanCannotRun) {
  const Plan plan = Glm4_9B(ir::DType::kBF16, 64);
  EXPECT_FALSE(PlanRoofline(plan, {1, 128, 512}).ok());  // more tokens than the plan's limit
  EXPECT_FALSE(PlanRoofline(plan, {1, 4, 2}).ok());      // context shorter than the step
  EXPECT_FALSE(PlanRoofline(plan, {0, 1, 16}).ok());
}

}  // namespace
}  // namespace ag::compiler
