#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "compiler/driver.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "runtime/cpu_backend.h"
#include "runtime/weights.h"

namespace ag::runtime {
namespace {

// tiny-glm's first golden case: prompt and greedy continuation.
const std::vector<int32_t> kPrompt = {15, 292, 121, 86, 283, 147, 287};
const std::vector<int32_t> kGreedy = {69, 153, 229, 237, 286, 283, 283, 234, 237, 220, 176, 279, 219, 140, 219, 30};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* data = std::getenv("AUTOGLM_TEST_DATA");
    const std::string dir = std::string(data != nullptr ? data : "tests/data") + "/tiny-glm";
    config_ = *glm::LoadModelConfig(dir);
    checkpoint_ = std::make_unique<glm::Checkpoint>(*glm::Checkpoint::Open(dir));
    weights_ = std::make_unique<CheckpointWeights>(*checkpoint_);
    compiler::CompileOptions options;
    options.build.kv_block_size = 4;
    plan_ = compiler::Compile(config_, options)->plan;
  }

  std::unique_ptr<Engine> MakeEngine(const EngineOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(plan_, backend_, *weights_, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  static void Drain(Engine& engine) {
    while (engine.HasWork()) ASSERT_TRUE(engine.Step().ok());
  }

  glm::ModelConfig config_;
  std::unique_ptr<glm::Checkpoint> checkpoint_;
  std::unique_ptr<CheckpointWeights> weights_;
  compiler::Plan plan_;
  CpuBackend backend_;
};

TEST_F(EngineTest, StopsOnAnyOfTheEosIds) {
  // Three end-of-sequence ids, as GLM-4 has: each one ends generation where it first appears.
  plan_.model.eos_token_ids = {kGreedy[9], kGreedy[4], kGreedy[12]};
  std::unique_ptr<Engine> engine = MakeEngine();
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  const int id = *engine->Submit(r);
  r.stop_on_eos = false;
  const int all = *engine->Submit(r);
  Drain(*engine);
  EXPECT_EQ(engine->new_tokens(id), std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 5));
  EXPECT_EQ(engine->finish_reason(id), FinishReason::kEos);
  EXPECT_EQ(engine->new_tokens(all), kGreedy);
  EXPECT_EQ(engine->finish_reason(all), FinishReason::kLength);
}

TEST_F(EngineTest, StopsAtTheContextLimit) {
  EngineOptions options;
  options.max_context = static_cast<int64_t>(kPrompt.size()) + 3;
  std::unique_ptr<Engine> engine = MakeEngine(options);
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  const int id = *engine->Submit(r);
  Drain(*engine);
  EXPECT_EQ(engine->new_tokens(id), std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 3));
  EXPECT_EQ(engine->finish_reason(id), FinishReason::kContext);
}

TEST_F(EngineTest, RequestsShareAFullCacheAndStillMatch) {
  EngineOptions options;
  options.kv_cache_tokens = 24;  // six blocks of 4: one request of 7 + 15 tokens fills it
  std::unique_ptr<Engine> engine = MakeEngine(options);
  EXPECT_EQ(engine->kv_blocks(), 6);
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  std::vector<int> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*engine->Submit(r));
  Drain(*engine);
  for (int id : ids) EXPECT_EQ(engine->new_tokens(id), kGreedy);
  r.max_new_tokens = 30;  // 36 tokens of cache: more than the whole pool
  absl::StatusOr<int> too_big = engine->Submit(r);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("KV-cache blocks"), std::string::npos) << too_big.status();
}

// Blocks come as sequences grow; when the cache runs out the newest running
// sequence is preempted and later recomputed, with the tokens and logits it
// would have had alone.
TEST_F(EngineTest, PreemptedSequencesAreRecomputedExactly) {
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  r.prompt_logits = r.keep_logits = true;
  std::unique_ptr<Engine> solo_engine = MakeEngine();
  const int solo = *solo_engine->Submit(r);
  Drain(*solo_engine);
  ASSERT_EQ(solo_engine->preemptions(), 0);
  const std::vector<std::vector<float>>& want = solo_engine->logits(solo);
  ASSERT_EQ(want.size(), kPrompt.size() + kGreedy.size() - 1);

  EngineOptions options;
  options.kv_cache_tokens = 24;  // six blocks of 4; each request grows to 22 tokens (6 blocks)
  std::unique_ptr<Engine> engine = MakeEngine(options);
  std::vector<int> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*engine->Submit(r));
  int64_t most_running = 0;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step().ok());
    most_running = std::max(most_running, engine->num_running());
    ASSERT_GE(engine->kv_blocks_free(), 0);
  }
  EXPECT_GT(engine->preemptions(), 0);
  EXPECT_GE(most_running, 2);  // they ran together, not one after another
  EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks());  // every block came back
  for (int id : ids) {
    EXPECT_EQ(engine->new_tokens(id), kGreedy);
    const std::vector<std::vector<float>>& got = engine->logits(id);
    ASSERT_EQ(got.size(), want.size());
    for (size_t row = 0; row < want.size(); ++row) {
      for (size_t i = 0; i < want[row].size(); ++i) ASSERT_NEAR(got[row][i], want[row][i], 1e-5) << row;
    }
  }
}

TEST_F(EngineTest, SampledSequencesSurvivePreemption) {
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 5;
  std::unique_ptr<Engine> solo_engine = MakeEngine();
  const int solo = *solo_engine->Submit(r);
  Drain(*solo_engine);
  EngineOptions options;
  options.kv_cache_tokens = 24;
  std::unique_ptr<Engine> engine = MakeEngine(options);
  std::vector<int> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*engine->Submit(r));
  Drain(*engine);
  EXPECT_GT(engine->preemptions(), 0);
  for (int id : ids) EXPECT_EQ(engine->new_tokens(id), solo_engine->new_tokens(solo));
}

TEST_F(EngineTest, SamplingIsReproducible) {
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 10;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 11;
  std::unique_ptr<Engine> engine = MakeEngine();
  const int a = *engine->Submit(r), b = *engine->Submit(r);
  Drain(*engine);
  EXPECT_EQ(engine->new_tokens(a), engine->new_tokens(b));
  EXPECT_NE(engine->new_tokens(a), kGreedy);
}

}  // namespace
}  // namespace ag::runtime
