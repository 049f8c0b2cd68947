#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <random>
#include <set>

#include "runtime/cpu_backend.h"
#include "runtime/weights.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

// tiny-glm's first golden case: prompt and greedy continuation.
const std::vector<int32_t> kPrompt = {15, 292, 121, 86, 283, 147, 287};
const std::vector<int32_t> kGreedy = {69, 153, 229, 237, 286, 283, 283, 234, 237, 220, 176, 279, 219, 140, 219, 30};

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(const EngineOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(plan_, backend_, *tiny_.weights, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  static void Drain(Engine& engine) {
    while (engine.HasWork()) ASSERT_TRUE(engine.Step().ok());
  }

  testing::TinyGlm tiny_;
  compiler::Plan plan_ = tiny_.plan;  // tests may edit it
  std::vector<std::unique_ptr<Engine>> engines_;
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

// A seed gives the same answer whether its rows are sampled on the host or where the logits are
// (one rule, ref::SampleFiltered, and one stream of draws): every knob, penalties and biases.
TEST_F(EngineTest, HostAndWhereTheLogitsAreSampleAlike) {
  std::vector<std::vector<int32_t>> answers[2];
  for (const bool device_like : {false, true}) {
    CpuBackend backend(device_like);
    std::unique_ptr<Engine> engine = *Engine::Create(plan_, backend, *tiny_.weights, {});
    std::vector<int> ids;
    for (uint64_t seed = 0; seed < 6; ++seed) {
      Request r;
      r.prompt = kPrompt;
      r.max_new_tokens = 12;
      r.sampling.temperature = 0.7f + 0.1f * static_cast<float>(seed);
      r.sampling.seed = seed;
      r.sampling.top_p = seed % 2 == 0 ? 0.9f : 1.0f;
      r.sampling.top_k = seed % 3 == 0 ? 40 : 0;
      r.sampling.min_p = seed == 4 ? 0.05f : 0.0f;
      r.sampling.frequency_penalty = seed == 1 ? 0.5f : 0.0f;
      r.sampling.repetition_penalty = seed == 2 ? 1.3f : 1.0f;
      r.sampling.logit_bias = {{kGreedy[0], seed == 3 ? 5.0f : 0.0f}};
      ids.push_back(*engine->Submit(r));
    }
    Drain(*engine);
    for (const int id : ids) answers[device_like].push_back(engine->new_tokens(id));
  }
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_NE(answers[0][0], answers[0][5]) << "seeds sample apart";
}

// Where the logits are sampled (the CUDA backend's way), a step brings back only the rows the host
// samples: one constrained sequence among greedy ones (its mask kept on the host) reads its own row,
// not the batch's, and every answer is what it is alone (the CPU backend leaves the rows not asked
// for NaN). With its mask sent down instead, nothing comes back, and the answer is the same.
TEST_F(EngineTest, OnlyTheRowsSampledOnTheHostComeBack) {
  class RowRecorder : public CpuBackend {
   public:
    RowRecorder() : CpuBackend(/*device_like=*/true) {}
    absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) override {
      reads.push_back(wanted);
      return CpuBackend::ReadLogitRows(rows, wanted, out);
    }
    std::vector<std::vector<int64_t>> reads;
  };
  class AnyToken : public TokenConstraint {  // takes everything: the answer is the sampler's
    void Mask(float*, int64_t) override {}
    bool Accept(int32_t) override { return true; }
    bool Complete() const override { return true; }
  };
  Request sampled;
  sampled.prompt = kPrompt;
  sampled.max_new_tokens = 12;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 9;
  sampled.constraint = [] { return std::make_unique<AnyToken>(); };
  EngineOptions host_masks;
  host_masks.mask_where_logits_are = false;
  std::vector<int32_t> alone;
  {
    RowRecorder backend;
    std::unique_ptr<Engine> engine = *Engine::Create(plan_, backend, *tiny_.weights, host_masks);
    const int id = *engine->Submit(sampled);
    Drain(*engine);
    alone = engine->new_tokens(id);
  }
  {
    RowRecorder backend;
    std::unique_ptr<Engine> engine = *Engine::Create(plan_, backend, *tiny_.weights, {});
    const int id = *engine->Submit(sampled);
    Drain(*engine);
    EXPECT_EQ(engine->new_tokens(id), alone);
    EXPECT_TRUE(backend.reads.empty());
  }
  RowRecorder backend;
  std::unique_ptr<Engine> engine = *Engine::Create(plan_, backend, *tiny_.weights, host_masks);
  Request greedy;
  greedy.prompt = kPrompt;
  greedy.max_new_tokens = 16;
  const int first = *engine->Submit(greedy);
  const int id = *engine->Submit(sampled);
  const int last = *engine->Submit(greedy);
  Drain(*engine);
  EXPECT_EQ(engine->new_tokens(id), alone);
  EXPECT_EQ(engine->new_tokens(first), kGreedy);
  EXPECT_EQ(engine->new_tokens(last), kGreedy);
  ASSERT_EQ(backend.reads.size(), alone.size());  // one read a token it chose
  for (const std::vector<int64_t>& rows : backend.reads) EXPECT_EQ(rows.size(), 1u);
  EXPECT_EQ(backend.reads.back(), std::vector<int64_t>{1}) << "the middle of three decoding rows";
}

// A constraint released (an optional tool call the reply did not start with) goes: the rest is
// chosen as an unconstrained sequence's -- the device's argmax or a draw where the logits are, its
// rows no longer read back (with masks kept on the host; sent down, none is) -- and a seeded draw
// goes on along the same stream.
TEST_F(EngineTest, AReleasedConstraintGoesAndTheRestIsChosenUnconstrained) {
  class RowRecorder : public CpuBackend {
   public:
    RowRecorder() : CpuBackend(/*device_like=*/true) {}
    absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) override {
      ++reads;
      return CpuBackend::ReadLogitRows(rows, wanted, out);
    }
    int reads = 0;
  };
  // Bars `barred` while it holds; released after `tokens` tokens (never, at -1).
  class ReleasedAfter : public TokenConstraint {
   public:
    ReleasedAfter(int tokens, int32_t barred, int* masks) : left_(tokens), barred_(barred), masks_(masks) {}
    void Mask(float* logits, int64_t n) override {
      EXPECT_NE(left_, 0) << "masked after its release";
      ++*masks_;
      if (barred_ >= 0 && barred_ < n) logits[barred_] = -INFINITY;
    }
    bool Accept(int32_t token) override {
      EXPECT_NE(left_, 0) << "fed after its release";
      if (left_ > 0) --left_;
      return token != barred_;
    }
    bool Complete() const override { return true; }
    bool Released() const override { return left_ == 0; }

   private:
    int left_;
    int32_t barred_;
    int* masks_;
  };
  EngineOptions options;
  options.mask_where_logits_are = false;
  auto run = [&](Request r, int* reads) {
    RowRecorder backend;
    std::unique_ptr<Engine> engine = *Engine::Create(plan_, backend, *tiny_.weights, options);
    const int id = *engine->Submit(r);
    Drain(*engine);
    if (reads != nullptr) *reads = backend.reads;
    return engine->new_tokens(id);
  };
  // Greedy: the first token barred, so the held part differs from kGreedy; the rest is the argmax
  // of what came before (the same prompt and prefix, unconstrained).
  int masks = 0, reads = 0;
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 10;
  r.constraint = [&] { return std::make_unique<ReleasedAfter>(3, kGreedy[0], &masks); };
  const std::vector<int32_t> tokens = run(r, &reads);
  ASSERT_EQ(tokens.size(), 10u);
  EXPECT_NE(tokens[0], kGreedy[0]);
  EXPECT_EQ(masks, 3);
  EXPECT_EQ(reads, 3) << "only the held tokens' rows come back";
  Request rest;
  rest.prompt = kPrompt;
  rest.prompt.insert(rest.prompt.end(), tokens.begin(), tokens.begin() + 3);
  rest.max_new_tokens = 7;
  EXPECT_EQ(run(rest, nullptr), std::vector<int32_t>(tokens.begin() + 3, tokens.end()));
  options.mask_where_logits_are = true;
  masks = 0;
  EXPECT_EQ(run(r, &reads), tokens);
  EXPECT_EQ(masks, 3);
  EXPECT_EQ(reads, 0);
  options.mask_where_logits_are = false;
  // Seeded draws: released after 4, never, or not constrained at all -- one answer.
  Request sampled;
  sampled.prompt = kPrompt;
  sampled.max_new_tokens = 12;
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.seed = 5;
  const std::vector<int32_t> free = run(sampled, &reads);
  EXPECT_EQ(reads, 0);
  int unused = 0;
  for (const int release_after : {4, -1, 0}) {
    sampled.constraint = [&] { return std::make_unique<ReleasedAfter>(release_after, -1, &unused); };
    EXPECT_EQ(run(sampled, &reads), free) << release_after;
    EXPECT_EQ(reads, release_after < 0 ? 12 : release_after) << release_after;
  }
}

// vLLM's min_tokens: the eos and stop ids are not drawn before that many new tokens (greedy takes
// the next best there), and the request still ends on them after; on the host sampler and where the
// logits are alike. min_new_tokens past max_new_tokens is refused.
TEST_F(EngineTest, MinNewTokensHoldsOffEosAndStopIds) {
  plan_.model.eos_token_ids = {kGreedy[4]};
  CpuBackend device_like(/*sample_where_logits_are=*/true);
  absl::StatusOr<std::unique_ptr<Engine>> device = Engine::Create(plan_, device_like, *tiny_.weights, {});
  ASSERT_TRUE(device.ok());
  std::unique_ptr<Engine> host = MakeEngine();
  for (Engine* engine : {host.get(), device->get()}) {
    Request r;
    r.prompt = kPrompt;
    r.max_new_tokens = 16;
    r.stop_ids = {kGreedy[2]};
    const int plain = *engine->Submit(r);
    r.min_new_tokens = 6;
    const int held = *engine->Submit(r);
    r.min_new_tokens = 17;
    EXPECT_FALSE(engine->Submit(r).ok());
    Drain(*engine);
    EXPECT_EQ(engine->new_tokens(plain), std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 3));
    EXPECT_EQ(engine->finish_reason(plain), FinishReason::kStop);
    const std::vector<int32_t> tokens = engine->new_tokens(held);
    ASSERT_GE(tokens.size(), 6u);
    EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.begin() + 2), std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 2));
    EXPECT_NE(tokens[2], kGreedy[2]) << "the stop id is barred at the third token";
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_NE(tokens[i], kGreedy[2]) << i;
      EXPECT_NE(tokens[i], kGreedy[4]) << i;
    }
    if (tokens.size() < 16) {
      EXPECT_TRUE(tokens.back() == kGreedy[2] || tokens.back() == kGreedy[4]) << "it ended on a stop or eos id";
    }
  }
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

// A request whose prompt starts with blocks another request computed prefills
// only the rest, with the same tokens and logits.
TEST_F(EngineTest, PrefixCacheSkipsTheSharedPrefix) {
  std::vector<int32_t> prompt = kPrompt;  // 15 tokens: three full blocks of 4 before the last token
  prompt.insert(prompt.end(), kGreedy.begin(), kGreedy.begin() + 8);
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = 8;
  r.keep_logits = true;
  std::unique_ptr<Engine> engine = MakeEngine();
  const int first = *engine->Submit(r);
  Drain(*engine);
  EXPECT_EQ(engine->prefix_cache_hits(), 0);
  const int second = *engine->Submit(r);
  int64_t prefilled = 0;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step().ok());
    prefilled += engine->last_step().prefill_tokens;
  }
  EXPECT_EQ(engine->prefix_cache_hits(), 12);
  EXPECT_EQ(prefilled, 3);  // the rest of the prompt only
  EXPECT_EQ(engine->new_tokens(second), engine->new_tokens(first));
  EXPECT_EQ(std::vector<int32_t>(engine->new_tokens(first).begin(), engine->new_tokens(first).end()),
            std::vector<int32_t>(kGreedy.begin() + 8, kGreedy.end()));
  ASSERT_EQ(engine->logits(second).size(), engine->logits(first).size());
  for (size_t row = 0; row < engine->logits(first).size(); ++row) {
    for (size_t i = 0; i < engine->logits(first)[row].size(); ++i) {
      ASSERT_NEAR(engine->logits(second)[row][i], engine->logits(first)[row][i], 1e-5);
    }
  }
}

// Many requests with shared and unshared prefixes under KV pressure: the
// prefix cache and preemption together change no token.
TEST_F(EngineTest, PrefixCacheAndPreemptionChangeNoToken) {
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    Request r;
    r.prompt = kPrompt;
    if (i % 2 == 1) r.prompt.insert(r.prompt.end(), kGreedy.begin(), kGreedy.begin() + 4 + i);
    if (i % 3 == 2) r.prompt[0] = 7;  // a different first block: no sharing
    r.max_new_tokens = 6 + i;
    requests.push_back(r);
  }
  auto run = [&](bool caching, int64_t cache_tokens, Engine** out) {
    EngineOptions options;
    options.prefix_caching = caching;
    options.kv_cache_tokens = cache_tokens;
    engines_.push_back(MakeEngine(options));
    *out = engines_.back().get();
    std::vector<int> ids;
    for (const Request& r : requests) {  // arriving one step apart, so later ones find earlier prefixes
      ids.push_back(*(*out)->Submit(r));
      EXPECT_TRUE((*out)->Step().ok());
    }
    Drain(**out);
    std::vector<std::vector<int32_t>> tokens;
    for (int id : ids) tokens.push_back((*out)->new_tokens(id));
    return tokens;
  };
  Engine *plain = nullptr, *cached = nullptr, *squeezed = nullptr;
  const auto want = run(false, 0, &plain);
  EXPECT_EQ(run(true, 0, &cached), want);
  EXPECT_GT(cached->prefix_cache_hits(), 0);
  EXPECT_EQ(run(true, 40, &squeezed), want);
  EXPECT_GT(squeezed->preemptions(), 0);
  EXPECT_GT(squeezed->prefix_cache_hits(), 0);
  EXPECT_EQ(squeezed->kv_blocks_free(), squeezed->kv_blocks());
}

TEST_F(EngineTest, CancelFreesBlocksAndLeavesOthersAlone) {
  EngineOptions options;
  options.kv_cache_tokens = 24;
  std::unique_ptr<Engine> engine = MakeEngine(options);
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  std::vector<int> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*engine->Submit(r));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->Step().ok());
  ASSERT_TRUE(engine->Cancel(ids[0]).ok());  // running
  ASSERT_TRUE(engine->Cancel(ids[3]).ok());  // waiting, or running
  EXPECT_EQ(engine->finish_reason(ids[0]), FinishReason::kCancelled);
  EXPECT_TRUE(engine->Cancel(ids[0]).ok()) << "twice is once";
  EXPECT_FALSE(engine->Cancel(99).ok());
  Drain(*engine);
  EXPECT_EQ(engine->new_tokens(ids[1]), kGreedy);
  EXPECT_EQ(engine->new_tokens(ids[2]), kGreedy);
  EXPECT_LT(engine->new_tokens(ids[0]).size(), kGreedy.size());
  EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks());
}

TEST_F(EngineTest, StopIdsAndReleasedRequestsKeepMemoryFlat) {
  std::unique_ptr<Engine> engine = MakeEngine();
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  r.stop_ids = {kGreedy[3]};
  const int stopped = *engine->Submit(r);
  Drain(*engine);
  EXPECT_EQ(engine->new_tokens(stopped), std::vector<int32_t>(kGreedy.begin(), kGreedy.begin() + 4));
  EXPECT_EQ(engine->finish_reason(stopped), FinishReason::kStop);
  EXPECT_FALSE(engine->Release(stopped + 1).ok());
  ASSERT_TRUE(engine->Release(stopped).ok());
  // Many short requests, released as they finish: nothing accumulates.
  r.stop_ids.clear();
  r.max_new_tokens = 1;
  for (int round = 0; round < 200; ++round) {
    std::vector<int> ids;
    for (int i = 0; i < 16; ++i) ids.push_back(*engine->Submit(r));
    const int running = *engine->Submit(r);
    EXPECT_FALSE(engine->Release(running).ok()) << "not finished yet";
    ASSERT_TRUE(engine->Cancel(running).ok());
    ids.push_back(running);
    Drain(*engine);
    for (int id : ids) ASSERT_TRUE(engine->Release(id).ok());
  }
  EXPECT_EQ(engine->num_requests(), 0);
  EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks());
}

// n choices of one prompt: choice i is what a request with seed + i gives
// alone, and the prompt is computed once (the others take its blocks).
TEST_F(EngineTest, ChoicesShareThePromptAndSampleApart) {
  std::vector<int32_t> prompt = kPrompt;
  prompt.insert(prompt.end(), kGreedy.begin(), kGreedy.begin() + 8);  // 15 tokens: 3 full blocks of 4
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = 8;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 40;
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < 4; ++i) {
    std::unique_ptr<Engine> engine = MakeEngine();
    Request one = r;
    one.sampling.seed = 40 + i;
    const int id = *engine->Submit(one);
    Drain(*engine);
    solo.push_back(engine->new_tokens(id));
  }
  EXPECT_NE(solo[0], solo[1]);
  std::unique_ptr<Engine> engine = MakeEngine();
  const std::vector<int> ids = *engine->SubmitChoices(r, 4);
  ASSERT_EQ(ids.size(), 4u);
  int64_t prefilled = 0;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step().ok());
    prefilled += engine->last_step().prefill_tokens;
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(engine->new_tokens(ids[i]), solo[i]) << i;
  EXPECT_EQ(engine->prefix_cache_hits(), 3 * 12);
  EXPECT_EQ(prefilled, 15 + 3 * 3);
  EXPECT_FALSE(engine->SubmitChoices(r, 0).ok());
}

// Random arrivals, cancellations, choices, shared prefixes and a cache small
// enough to preempt, without and with speculative drafts: every request that
// is not cancelled gets exactly its
// solo tokens, and every block comes back.
TEST_F(EngineTest, RandomTrafficKeepsEveryAnswerAndEveryBlock) {
  auto make = [&](int variant) {
    Request r;
    r.prompt = kPrompt;
    r.prompt.insert(r.prompt.end(), kGreedy.begin(), kGreedy.begin() + variant % 9);
    r.prompt[0] = 10 + variant % 3;
    r.max_new_tokens = 1 + variant % 11;
    if (variant % 4 == 3) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = static_cast<uint64_t>(variant);
    }
    return r;
  };
  std::map<int, std::vector<int32_t>> solo;  // variant -> tokens
  for (int v = 0; v < 60; ++v) {
    std::unique_ptr<Engine> engine = MakeEngine();
    absl::StatusOr<int> id = engine->Submit(make(v));
    ASSERT_TRUE(id.ok()) << id.status();
    Drain(*engine);
    solo[v] = engine->new_tokens(*id);
  }
  std::mt19937 rng(17);
  // The last three with prompt-lookup drafts (a draft never preempts; a preempted sequence drops its drafts).
  const std::pair<int64_t, bool> runs[] = {{28, false}, {48, false}, {0, false}, {28, false}, {32, false},
                                           {28, true},  {48, true},  {0, true}};
  for (const auto& [cache, speculate] : runs) {
    EngineOptions options;
    options.kv_cache_tokens = cache;
    if (speculate) options.speculative = {3, 1, 3, 0};
    std::unique_ptr<Engine> engine = MakeEngine(options);
    std::map<int, int> variant_of;  // id -> variant
    std::set<int> cancelled;
    for (int step = 0; step < 400 && (step < 200 || engine->HasWork()); ++step) {
      if (step < 200 && rng() % 3 == 0) {
        const int v = static_cast<int>(rng() % 60);
        if (v % 4 != 3 && rng() % 5 == 0) {  // greedy choices are all the solo answer
          absl::StatusOr<std::vector<int>> ids = engine->SubmitChoices(make(v), 3);
          ASSERT_TRUE(ids.ok()) << ids.status();
          for (int id : *ids) variant_of[id] = v;
        } else {
          absl::StatusOr<int> id = engine->Submit(make(v));
          ASSERT_TRUE(id.ok()) << id.status();
          variant_of[*id] = v;
        }
      }
      if (!variant_of.empty() && rng() % 17 == 0) {
        auto it = variant_of.begin();
        std::advance(it, rng() % variant_of.size());
        if (engine->finish_reason(it->first) == FinishReason::kNone) {
          ASSERT_TRUE(engine->Cancel(it->first).ok());
          cancelled.insert(it->first);
        }
      }
      ASSERT_TRUE(engine->Step().ok());
    }
    ASSERT_FALSE(engine->HasWork());
    for (const auto& [id, v] : variant_of) {
      if (cancelled.contains(id)) continue;
      EXPECT_EQ(engine->new_tokens(id), solo[v]) << "cache " << cache << " variant " << v;
    }
    EXPECT_EQ(engine->kv_blocks_free(), engine->kv_blocks()) << cache;
    if (cache == 28) {
      EXPECT_GT(engine->preemptions(), 0);
    }
    if (speculate) {
      EXPECT_GT(engine->spec_accepted_tokens(), 0) << cache;
    }
    EXPECT_GT(engine->prefix_cache_hits(), 0) << cache;
  }
}

// A CPU backend that records each step's block-table width beside the step's longest table.
class WidthRecordingBackend : public CpuBackend {
 public:
  absl::Status Execute(const StepBatch& batch) override {
    int64_t longest = 0;
    for (int64_t s = 0; s < batch.num_seqs; ++s) longest = std::max<int64_t>(longest, batch.context_lens[s]);
    widths.push_back({batch.max_blocks, longest, static_cast<int64_t>(batch.block_tables.size())});
    return CpuBackend::Execute(batch);
  }
  struct Width {
    int64_t max_blocks, longest_context, table_ints;
  };
  std::vector<Width> widths;
};

TEST_F(EngineTest, BlockTablesAreAsWideAsTheLongestTableRoundedUp) {
  // Prompts of 2, 25 and 50 four-token blocks decoding together (tiny-glm: 256 positions, 64 blocks a
  // sequence at most), the longest finishing first: the width follows the longest table, a power of
  // two from 16, up to 64.
  std::vector<Request> requests(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    for (int t = 0; t < (i == 0 ? 7 : i == 1 ? 99 : 199); ++t) {
      requests[i].prompt.push_back(10 + (t * 37 + static_cast<int>(i)) % 250);
    }
    requests[i].max_new_tokens = 12 - 5 * static_cast<int64_t>(i);  // the longest ends first: the width narrows
  }
  std::vector<std::vector<int32_t>> solo;
  for (const Request& r : requests) {
    std::unique_ptr<Engine> engine = MakeEngine();
    absl::StatusOr<int> id = engine->Submit(r);
    ASSERT_TRUE(id.ok()) << id.status();
    Drain(*engine);
    solo.push_back(engine->new_tokens(*id));
  }
  WidthRecordingBackend recording;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(plan_, recording, *tiny_.weights, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int> ids;
  for (const Request& r : requests) ids.push_back(*(*engine)->Submit(r));
  Drain(**engine);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ((*engine)->new_tokens(ids[i]), solo[i]) << i;
  const int64_t block = plan_.kv.block_size;
  std::set<int64_t> seen;
  for (const WidthRecordingBackend::Width& w : recording.widths) {
    const int64_t longest_table = (w.longest_context + block - 1) / block;
    const uint64_t at_least = static_cast<uint64_t>(std::max<int64_t>(longest_table, 16));
    const int64_t want = std::min<int64_t>(static_cast<int64_t>(std::bit_ceil(at_least)), 64);
    EXPECT_EQ(w.max_blocks, want) << "longest context " << w.longest_context;
    EXPECT_EQ(w.table_ints % w.max_blocks, 0);
    seen.insert(w.max_blocks);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{16, 32, 64}));
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

// Logprobs computed where the logits are equal the reference's over the rows that chose the tokens.
TEST_F(EngineTest, LogprobsMatchTheChoosingRows) {
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 6;
  r.keep_logits = true;
  r.logprobs = 3;
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 3;
  std::unique_ptr<Engine> engine = MakeEngine();
  const int id = *engine->Submit(r);
  std::vector<TokenLogprobs> got;
  while (engine->HasWork()) {
    ASSERT_TRUE(engine->Step().ok());
    for (TokenLogprobs& t : engine->TakeLogprobs(id)) got.push_back(std::move(t));
  }
  const std::vector<int32_t>& tokens = engine->new_tokens(id);
  ASSERT_EQ(got.size(), tokens.size());
  const std::vector<std::vector<float>>& rows = engine->logits(id);
  ASSERT_EQ(rows.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<int32_t> ids;
    std::vector<float> lps;
    const float want = ref::LogProbs(rows[i].data(), static_cast<int64_t>(rows[i].size()), 0, tokens[i], 3, &ids, &lps);
    EXPECT_FLOAT_EQ(got[i].logprob, want);
    EXPECT_EQ(got[i].top_ids, ids);
    EXPECT_LE(got[i].logprob, got[i].top_logprobs[0]);
  }
  r.logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(engine->Submit(r).ok());
}

// Sampling where the logits are (the CUDA backend's path), here through the CPU backend's
// reference of the device rule: seeds repeat, greedy settings give the greedy tokens, the
// vocabulary limit holds, preemption changes nothing, and a repetition penalty stays on the host.
TEST_F(EngineTest, SamplingWhereTheLogitsAreRepeatsAndSurvivesPreemption) {
  CpuBackend device_like(/*sample_where_logits_are=*/true);
  auto make = [&](const EngineOptions& options) {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(plan_, device_like, *tiny_.weights, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  };
  Request r;
  r.prompt = kPrompt;
  r.max_new_tokens = 16;
  r.sampling.temperature = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 7;
  std::unique_ptr<Engine> solo_engine = make({});
  const int solo = *solo_engine->Submit(r);
  Request limited = r;
  limited.sampling.vocab_limit = 50;
  limited.sampling.temperature = 2.0f;
  const int low = *solo_engine->Submit(limited);
  Request greedy = r;
  greedy.sampling.top_k = 1;
  const int g = *solo_engine->Submit(greedy);
  Drain(*solo_engine);
  EXPECT_NE(solo_engine->new_tokens(solo), kGreedy);
  EXPECT_EQ(solo_engine->new_tokens(g), kGreedy);
  for (int32_t t : solo_engine->new_tokens(low)) EXPECT_LT(t, 50);

  EngineOptions options;
  options.kv_cache_tokens = 24;
  std::unique_ptr<Engine> engine = make(options);
  std::vector<int> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(*engine->Submit(r));
  Drain(*engine);
  EXPECT_GT(engine->preemptions(), 0);
  for (int id : ids) EXPECT_EQ(engine->new_tokens(id), solo_engine->new_tokens(solo));

  // A repetition penalty no longer sends the request to the host sampler: it goes down with the
  // row like the others (the device rule, reproducible), and it changes the draw.
  Request penalised = r;
  penalised.sampling.repetition_penalty = 1.3f;
  std::unique_ptr<Engine> first = make({}), second = make({});
  const int a = *first->Submit(penalised), b = *second->Submit(penalised);
  Drain(*first);
  Drain(*second);
  EXPECT_EQ(first->new_tokens(a), second->new_tokens(b));
  EXPECT_NE(first->new_tokens(a), solo_engine->new_tokens(solo));
}

// Every penalty goes down with the row (Backend::SampleRows' penalty entries), so the device rule
// applies them where the logits are, the repetition penalty and the logit bias included (no
// logits row comes back for them): greedy with the phone agent's frequency_penalty, with a
// repetition penalty, a logit bias, and mixes picks the host sampler's tokens, and a strong
// penalty or bias changes the answer.
TEST_F(EngineTest, PenaltiesWhereTheLogitsAreMatchTheHost) {
  CpuBackend device_like(/*sample_where_logits_are=*/true);
  absl::StatusOr<std::unique_ptr<Engine>> device = Engine::Create(plan_, device_like, *tiny_.weights, {});
  ASSERT_TRUE(device.ok());
  std::unique_ptr<Engine> host = MakeEngine();
  const struct {
    float frequency, presence, repetition;
    bool changes;
    std::vector<SamplingParams::Bias> bias;
  } cases[] = {{0.2f, 0, 1},
               {1.5f, 0.5f, 1, true},
               {-1.0f, 0, 1},
               {0, 0, 1.8f, true},
               {0.2f, 0.1f, 1.3f},
               {0, 0, 1, true, {{kGreedy[0], -100.0f}}},  // logit_bias alone: the first pick banned
               {0.2f, 0, 1.3f, true, {{kGreedy[1], -3.0f}, {kGreedy[2], 2.0f}, {7, 1.5f}}}};
  for (const auto& c : cases) {
    Request r;
    r.prompt = kPrompt;
    r.max_new_tokens = 24;
    r.stop_on_eos = false;
    r.sampling.temperature = 0.0f;
    r.sampling.top_p = 0.85f;
    r.sampling.frequency_penalty = c.frequency;
    r.sampling.presence_penalty = c.presence;
    r.sampling.repetition_penalty = c.repetition;
    r.sampling.logit_bias = c.bias;
    const int a = *(*device)->Submit(r), b = *host->Submit(r);
    Drain(**device);
    Drain(*host);
    EXPECT_EQ((*device)->new_tokens(a), host->new_tokens(b)) << c.frequency << " " << c.repetition;
    if (c.changes) {
      EXPECT_NE(host->new_tokens(b), kGreedy) << "a strong penalty changes the answer";
    }
  }
}

// The row -> sequence map the CUDA attention kernels read: every row of a sequence names it, a
// sequence with no rows names none, and offsets past the step's rows are cut at num_tokens.
TEST(StepBatchTest, RowSequencesFollowTheOffsets) {
  StepBatch batch;
  batch.num_tokens = 9;
  batch.seq_offsets = {0, 5, 5, 6, 9};
  EXPECT_EQ(batch.RowSequences(), (std::vector<int32_t>{0, 0, 0, 0, 0, 2, 3, 3, 3}));
  batch.num_tokens = 4;
  EXPECT_EQ(batch.RowSequences(), (std::vector<int32_t>{0, 0, 0, 0}));
  batch.num_tokens = 0;
  EXPECT_TRUE(batch.RowSequences().empty());
}

}  // namespace
}  // namespace ag::runtime
