// The HF fixtures through the CPU plan path: one prefill of the prompt, then
// the KV-cache decode path one token at a time. New tokens must equal the
// golden ones and every logits row must be within 1e-3 of golden.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/driver.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/weights.h"
#include "tests/testing/golden.h"

namespace ag {
namespace {

using testing::GoldenCase;

constexpr double kTolerance = 1e-3;

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  int64_t steps = 0;
};

Outcome RunCase(const std::string& fixture, const GoldenCase& c, const compiler::CompileOptions& options) {
  const std::string dir = testing::TestDataDir() + "/" + fixture;
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(dir);
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  runtime::CpuBackend backend;
  runtime::CheckpointWeights weights(*ckpt);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::Create(compiled->plan, backend, weights, {});
  EXPECT_TRUE(engine.ok()) << engine.status();
  runtime::Request request;
  request.prompt = c.input_ids;
  request.max_new_tokens = static_cast<int64_t>(c.new_tokens.size());
  request.prompt_logits = request.keep_logits = true;
  request.stop_on_eos = false;
  absl::StatusOr<int> id = (*engine)->Submit(request);
  EXPECT_TRUE(id.ok()) << id.status();
  Outcome out;
  while ((*engine)->HasWork()) {
    absl::StatusOr<std::vector<runtime::TokenEvent>> events = (*engine)->Step();
    EXPECT_TRUE(events.ok()) << events.status();
    if (!events.ok()) break;
    ++out.steps;
  }
  out.tokens = (*engine)->new_tokens(*id);
  out.logits = (*engine)->logits(*id);
  return out;
}

double MaxError(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  double worst = 0;
  for (size_t r = 0; r < got.size() && r < want.size(); ++r) {
    for (size_t i = 0; i < got[r].size() && i < want[r].size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[r][i]) - want[r][i]));
    }
  }
  return worst;
}

class Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Golden, TokensAndLogitsMatchTransformers) {
  const std::string fixture = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + fixture);
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    const GoldenCase& c = cases[i];
    compiler::CompileOptions options;
    options.build.max_batch_tokens = 64;  // the whole prompt in one prefill step
    const Outcome out = RunCase(fixture, c, options);
    EXPECT_EQ(out.tokens, c.new_tokens) << fixture << " case " << i;
    const size_t rows = c.input_ids.size() + c.new_tokens.size() - 1;
    ASSERT_EQ(out.logits.size(), rows) << "P + N - 1 rows";
    ASSERT_EQ(out.logits[0].size(), c.logits[0].size());
    EXPECT_EQ(out.steps, static_cast<int64_t>(c.new_tokens.size())) << "one prefill, then one step per token";
    const double err = MaxError(out.logits, c.logits);
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
    const Outcome out = RunCase(fixture, c, options);
    EXPECT_EQ(out.tokens, c.new_tokens);
    EXPECT_LE(MaxError(out.logits, c.logits), kTolerance);
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
