// The HF fixtures through the CPU plan path: one prefill of the prompt, then
// the KV-cache decode path one token at a time. New tokens must equal the
// golden ones and every logits row must be within 1e-3 of golden.
#include <gtest/gtest.h>

#include "tests/testing/engine_runner.h"

namespace ag {
namespace {

using testing::GoldenCase;

constexpr double kTolerance = 1e-3;

class Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Golden, TokensAndLogitsMatchTransformers) {
  const std::string fixture = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + fixture);
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    const GoldenCase& c = cases[i];
    compiler::CompileOptions options;
    options.build.max_batch_tokens = 64;  // the whole prompt in one prefill step
    testing::FixtureRunner runner(fixture, options);
    const testing::Generation out = runner.Run({c})[0];
    EXPECT_EQ(out.tokens, c.new_tokens) << fixture << " case " << i;
    const size_t rows = c.input_ids.size() + c.new_tokens.size() - 1;
    ASSERT_EQ(out.logits.size(), rows) << "P + N - 1 rows";
    ASSERT_EQ(out.logits[0].size(), c.logits[0].size());
    EXPECT_EQ(runner.steps(), static_cast<int64_t>(c.new_tokens.size())) << "one prefill, then one step per token";
    const double err = testing::MaxAbsDiff(out.logits, testing::FirstRows(c.logits, rows));
    EXPECT_LE(err, kTolerance) << fixture << " case " << i;
    std::printf("%s case %zu: %zu rows, max |logit - golden| = %.3g\n", fixture.c_str(), i, rows, err);
  }
}

TEST_P(Golden, ChunkedPrefillGivesTheSameAnswer) {
  // A token budget of 5 splits every prompt into chunks that attend to the cached earlier chunks.
  const std::string fixture = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + fixture);
  for (const GoldenCase& c : cases) {
    compiler::CompileOptions options;
    options.build.max_batch_tokens = 5;
    options.build.kv_block_size = 3;
    const testing::Generation out = testing::FixtureRunner(fixture, options).Run({c})[0];
    EXPECT_EQ(out.tokens, c.new_tokens);
    const size_t rows = c.input_ids.size() + c.new_tokens.size() - 1;
    EXPECT_LE(testing::MaxAbsDiff(out.logits, testing::FirstRows(c.logits, rows)), kTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(testing::kFixtures),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace ag
