// Compiled plans against the fixtures: fused equals unfused, batches equal
// single runs, plans survive their file format — and all match golden.
#include <gtest/gtest.h>

#include "compiler/plan_file.h"
#include "compiler/summary.h"
#include "tests/testing/engine_runner.h"

namespace ag {
namespace {

using testing::FixtureRunner;
using testing::Generation;
using testing::GoldenCase;
using testing::MaxAbsDiff;

constexpr double kGoldenTolerance = 1e-3;

class CompiledPlans : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<GoldenCase> Cases() const { return testing::LoadGolden(testing::TestDataDir() + "/" + GetParam()); }

  void ExpectGolden(const std::vector<Generation>& got, const std::vector<GoldenCase>& cases) {
    ASSERT_EQ(got.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(got[i].tokens, cases[i].new_tokens) << GetParam() << " case " << i;
      const size_t rows = cases[i].input_ids.size() + cases[i].new_tokens.size() - 1;
      EXPECT_LE(MaxAbsDiff(got[i].logits, testing::FirstRows(cases[i].logits, rows)), kGoldenTolerance)
          << GetParam() << " case " << i;
    }
  }
};

TEST_P(CompiledPlans, FusedMatchesUnfusedAndGolden) {
  const std::vector<GoldenCase> cases = Cases();
  compiler::CompileOptions unfused;
  unfused.pipeline.disabled = {"fuse"};
  FixtureRunner fused_runner(GetParam(), compiler::CompileOptions{});
  FixtureRunner unfused_runner(GetParam(), unfused);
  EXPECT_LT(compiler::Summarize(fused_runner.plan()).total_steps,
            compiler::Summarize(unfused_runner.plan()).total_steps);
  for (const GoldenCase& c : cases) {
    const std::vector<Generation> fused = fused_runner.Run({c});
    const std::vector<Generation> plain = unfused_runner.Run({c});
    EXPECT_EQ(fused[0].tokens, plain[0].tokens);
    EXPECT_LE(MaxAbsDiff(fused[0].logits, plain[0].logits), 1e-5);
  }
  ExpectGolden(fused_runner.Run(cases), cases);
  ExpectGolden(unfused_runner.Run(cases), cases);
}

TEST_P(CompiledPlans, NoPassesAtAllStillMatchesGolden) {
  compiler::CompileOptions none;
  none.pipeline.disabled = {"canonicalize", "dce", "lower-kv-cache", "fuse", "plan-memory"};
  FixtureRunner runner(GetParam(), none);
  EXPECT_EQ(compiler::Summarize(runner.plan()).kernels.count("attention"), 1u) << "the builder's attention runs as is";
  ExpectGolden(runner.Run(Cases()), Cases());
}

TEST_P(CompiledPlans, BatchedEqualsAlone) {
  const std::vector<GoldenCase> cases = Cases();
  FixtureRunner runner(GetParam(), compiler::CompileOptions{});
  std::vector<Generation> alone;
  for (const GoldenCase& c : cases) alone.push_back(runner.Run({c})[0]);
  // Every case twice, all at once, then staggered so steps mix prefill and decode.
  std::vector<GoldenCase> doubled = cases;
  doubled.insert(doubled.end(), cases.begin(), cases.end());
  for (bool stagger : {false, true}) {
    const std::vector<Generation> batched = runner.Run(doubled, stagger);
    ASSERT_EQ(batched.size(), doubled.size());
    for (size_t i = 0; i < doubled.size(); ++i) {
      EXPECT_EQ(batched[i].tokens, alone[i % cases.size()].tokens) << "request " << i << " stagger " << stagger;
      EXPECT_LE(MaxAbsDiff(batched[i].logits, alone[i % cases.size()].logits), 1e-5);
    }
    ExpectGolden(std::vector<Generation>(batched.begin(), batched.begin() + static_cast<std::ptrdiff_t>(cases.size())),
                 cases);
  }
  EXPECT_EQ(runner.max_step_seqs(), static_cast<int64_t>(doubled.size()));
  EXPECT_GT(runner.mixed_steps(), 0) << "some step carried prefill and decode together";
}

TEST_P(CompiledPlans, SmallBlocksAndChunksAndAPlanFile) {
  compiler::CompileOptions options;
  options.build.kv_block_size = 1;
  options.build.max_batch_tokens = 7;
  options.build.max_seqs = 3;
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/" + GetParam());
  ASSERT_TRUE(config.ok());
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<compiler::Plan> reread =
      compiler::DeserializePlan(compiler::SerializePlan(compiled->plan), "in-memory.agplan");
  ASSERT_TRUE(reread.ok()) << reread.status();
  FixtureRunner runner(GetParam(), *reread);
  const std::vector<GoldenCase> once = Cases();
  std::vector<GoldenCase> cases = once;
  cases.insert(cases.end(), once.begin(), once.end());
  const std::vector<Generation> got = runner.Run(cases, /*stagger=*/true);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i].tokens, cases[i].new_tokens);
    const size_t rows = cases[i].input_ids.size() + cases[i].new_tokens.size() - 1;
    EXPECT_LE(MaxAbsDiff(got[i].logits, testing::FirstRows(cases[i].logits, rows)), kGoldenTolerance);
  }
  EXPECT_LE(runner.max_step_seqs(), 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CompiledPlans, ::testing::ValuesIn(testing::kFixtures), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n) ch = ch == '-' ? '_' : ch;
  return n;
});

}  // namespace
}  // namespace ag
