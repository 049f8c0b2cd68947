#include "runtime/memory_check.h"

#include <gtest/gtest.h>

#include "absl/algorithm/container.h"
#include "compiler/summary.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

// The embedding table is the one weight only looked up; a plan whose LM head also read it would
// have none (the table must then stay where the linear reads it). The summary counts its bytes.
TEST(LookupOnlyWeights, TheEmbeddingTableAlone) {
  const testing::TinyGlm tiny;
  compiler::Plan plan = tiny.plan;
  const std::vector<int32_t> lookup = compiler::LookupOnlyWeights(plan);
  ASSERT_EQ(lookup.size(), 1u);
  EXPECT_EQ(plan.weights[lookup[0]].name, "model.embed_tokens.weight");
  EXPECT_EQ(compiler::Summarize(plan).lookup_only_bytes, plan.weights[lookup[0]].DeviceBytes());
  for (compiler::Program& program : plan.programs) {  // tie the LM head to the table
    for (compiler::PlanStep& step : program.steps) {
      for (compiler::PlanTensor& t : step.operands) {
        if (t.kind == compiler::TensorKind::kWeight && plan.weights[t.index].name == "lm_head.weight") {
          t.index = lookup[0];
        }
      }
    }
  }
  EXPECT_TRUE(compiler::LookupOnlyWeights(plan).empty());
}

// Weights kept elsewhere (--embedding-on-host) are not counted: a budget of exactly the rest fits
// with the table elsewhere and not with it on the device, and the error names the weights' size.
TEST(CheckPlanFits, WeightsKeptElsewhereAreNotCounted) {
  const testing::TinyGlm tiny;
  const compiler::Plan& plan = tiny.plan;
  StorageLayout on_device{2, 2, 1, 1, true, true};
  StorageLayout table_on_host = on_device;
  table_on_host.weights_elsewhere = compiler::LookupOnlyWeights(plan);
  ASSERT_FALSE(table_on_host.weights_elsewhere.empty());
  const int64_t blocks = 8;
  // The smallest budget that fits with the table on the host: find it by halving.
  int64_t lo = 0, hi = int64_t{1} << 40;
  while (lo + 1 < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    (CheckPlanFits(plan, blocks, table_on_host, 0, mid, "GPU memory").ok() ? hi : lo) = mid;
  }
  EXPECT_TRUE(CheckPlanFits(plan, blocks, table_on_host, 0, hi, "GPU memory").ok());
  const absl::Status s = CheckPlanFits(plan, blocks, on_device, 0, hi, "GPU memory");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  const int64_t table = plan.weights[table_on_host.weights_elsewhere[0]].NumElements() * 2;
  EXPECT_TRUE(CheckPlanFits(plan, blocks, on_device, 0, hi + table, "GPU memory").ok())
      << "the table's bf16 bytes are the whole difference";
}

}  // namespace
}  // namespace ag::runtime
