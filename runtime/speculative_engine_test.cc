// Speculative decoding in the engine: the same answers as plain decoding, in fewer steps.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/weights.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

const std::vector<int32_t> kPrompt = {15, 292, 121, 86, 283, 147, 287};

struct EngineRun {
  std::unique_ptr<CpuBackend> backend;
  std::unique_ptr<Engine> engine;
  int64_t sequence_steps = 0;  // each step's sequences, summed
};

class SpeculativeEngineTest : public ::testing::Test {
 protected:
  EngineRun Start(bool sample_where_logits_are, const EngineOptions& options) {
    EngineRun run;
    run.backend = std::make_unique<CpuBackend>(sample_where_logits_are);
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(tiny_.plan, *run.backend, *tiny_.weights, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    run.engine = std::move(*engine);
    return run;
  }
  static void Drain(EngineRun& run) {
    while (run.engine->HasWork()) {
      ASSERT_TRUE(run.engine->Step().ok());
      run.sequence_steps += run.engine->last_step().sequences;
    }
  }
  // The requests: the phone agent's settings, plain greedy, sampled with every knob, min_tokens
  // with stop ids, logprobs with kept logits, a short answer; long enough that the tiny random
  // model repeats itself (drafts kept) and wanders (drafts rejected).
  static std::vector<Request> Requests() {
    std::vector<Request> out;
    Request r;
    r.prompt = kPrompt;
    r.max_new_tokens = 48;
    r.stop_on_eos = false;
    out.push_back(r);  // plain greedy: the device's argmax
    Request agent = r;
    agent.sampling.top_p = 0.85f;
    agent.sampling.frequency_penalty = 0.2f;
    out.push_back(agent);
    Request sampled = r;
    sampled.sampling.temperature = 0.8f;
    sampled.sampling.top_k = 40;
    sampled.sampling.top_p = 0.95f;
    sampled.sampling.min_p = 0.01f;
    sampled.sampling.repetition_penalty = 1.1f;
    sampled.sampling.presence_penalty = -0.5f;
    sampled.sampling.logit_bias = {{69, 2.0f}, {153, -1.0f}};
    sampled.sampling.seed = 7;
    out.push_back(sampled);
    Request cold = sampled;
    cold.sampling = {};
    cold.sampling.temperature = 0.3f;  // likely tokens: drafts kept often, and sometimes not
    cold.sampling.seed = 3;
    out.push_back(cold);
    Request held = r;
    held.min_new_tokens = 20;
    held.stop_ids = {283, 237};
    out.push_back(held);
    Request logged = r;
    logged.logprobs = 3;
    logged.keep_logits = true;
    logged.sampling.frequency_penalty = 0.2f;
    out.push_back(logged);
    Request short_one = r;
    short_one.max_new_tokens = 3;
    out.push_back(short_one);
    Request other = r;
    other.prompt = {5, 17, 42, 5, 17, 42, 5, 17};  // drafts from the prompt itself
    other.max_new_tokens = 20;
    out.push_back(other);
    return out;
  }

  testing::TinyGlm tiny_;
};

struct Answer {
  std::vector<int32_t> tokens;
  FinishReason finish;
  std::vector<TokenLogprobs> logprobs;
  std::vector<std::vector<float>> logits;
};

std::vector<Answer> Answers(Engine& engine, const std::vector<int>& ids) {
  std::vector<Answer> out;
  for (const int id : ids) {
    out.push_back({engine.new_tokens(id), engine.finish_reason(id), engine.TakeLogprobs(id), engine.logits(id)});
  }
  return out;
}

void ExpectSameAnswers(const std::vector<Answer>& want, const std::vector<Answer>& got, const std::string& where) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << where << ", request " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << where << ", request " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << where << ", request " << i;
    for (size_t t = 0; t < want[i].logprobs.size(); ++t) {
      EXPECT_NEAR(got[i].logprobs[t].logprob, want[i].logprobs[t].logprob, 1e-4) << where << ", request " << i << ", token " << t;
      EXPECT_EQ(got[i].logprobs[t].top_ids, want[i].logprobs[t].top_ids) << where << ", request " << i << ", token " << t;
    }
    ASSERT_EQ(got[i].logits.size(), want[i].logits.size()) << where << ", request " << i;
    for (size_t row = 0; row < want[i].logits.size(); ++row) {
      float worst = 0;
      for (size_t v = 0; v < want[i].logits[row].size(); ++v) {
        worst = std::max(worst, std::abs(got[i].logits[row][v] - want[i].logits[row][v]));
      }
      EXPECT_LT(worst, 1e-4) << where << ", request " << i << ", kept row " << row;
    }
  }
}

// Every request's tokens, finish reason, logprobs and kept logits rows are plain decoding's, on
// the host sampler and where the logits are (the CUDA backend's rule: every row's draw peeked,
// the drafts before it in its penalties), for one draft a step and for many; and drafts were both
// kept and rejected on the way, each kept one a sequence's step saved.
TEST_F(SpeculativeEngineTest, GivesThePlainAnswersInFewerSteps) {
  for (const bool device_like : {false, true}) {
    EngineRun plain = Start(device_like, {});
    std::vector<int> plain_ids;
    for (const Request& r : Requests()) plain_ids.push_back(*plain.engine->Submit(r));
    Drain(plain);
    const std::vector<Answer> want = Answers(*plain.engine, plain_ids);
    for (const SpeculativeOptions spec : {SpeculativeOptions{1, 1, 1, 0}, SpeculativeOptions{5, 1, 4, 0},
                                          SpeculativeOptions{3, 2, 2, 0}}) {
      EngineOptions options;
      options.speculative = spec;
      EngineRun run = Start(device_like, options);
      std::vector<int> ids;
      for (const Request& r : Requests()) ids.push_back(*run.engine->Submit(r));
      Drain(run);
      const std::string where = std::string(device_like ? "where the logits are" : "host") + ", " +
                                std::to_string(spec.num_tokens) + " drafts";
      ExpectSameAnswers(want, Answers(*run.engine, ids), where);
      EXPECT_GT(run.engine->spec_accepted_tokens(), 0) << where;
      EXPECT_LT(run.engine->spec_accepted_tokens(), run.engine->spec_draft_tokens()) << where;
      EXPECT_LE(run.engine->spec_draft_tokens(), run.engine->spec_drafts() * spec.num_tokens) << where;
      // A sequence's step emits one token and one more per draft kept: that many fewer steps.
      EXPECT_EQ(run.sequence_steps, plain.sequence_steps - run.engine->spec_accepted_tokens()) << where;
      EXPECT_EQ(run.engine->kv_blocks_free(), run.engine->kv_blocks()) << where;
    }
  }
}

// A cache small enough to preempt (kept logits rows of recomputed sequences included), choices that
// share a prompt's blocks, and drafting turned off past a batch size: still plain decoding's answers,
// and every block back.
TEST_F(SpeculativeEngineTest, PreemptionChoicesAndABatchLimitChangeNothing) {
  auto submit = [](Engine& engine) {
    std::vector<int> ids;
    for (const Request& r : Requests()) ids.push_back(*engine.Submit(r));
    const std::vector<int> choices = *engine.SubmitChoices(Requests()[2], 3);
    ids.insert(ids.end(), choices.begin(), choices.end());
    return ids;
  };
  for (const bool device_like : {false, true}) {
    EngineRun plain = Start(device_like, {});
    const std::vector<int> plain_ids = submit(*plain.engine);
    Drain(plain);
    const std::vector<Answer> want = Answers(*plain.engine, plain_ids);
    for (const int32_t batch_limit : {0, 4}) {
      EngineOptions options;
      options.kv_cache_tokens = 64;  // 16 blocks of 4; a request needs up to 14
      options.speculative = {4, 1, 3, batch_limit};
      EngineRun run = Start(device_like, options);
      const std::vector<int> ids = submit(*run.engine);
      int64_t most_drafted = 0;
      while (run.engine->HasWork()) {
        ASSERT_TRUE(run.engine->Step().ok());
        if (run.engine->last_step().draft_tokens > 0) {
          most_drafted = std::max(most_drafted, run.engine->num_running());
        }
      }
      const std::string where = std::string(device_like ? "where the logits are" : "host") + ", batch limit " +
                                std::to_string(batch_limit);
      ExpectSameAnswers(want, Answers(*run.engine, ids), where);
      EXPECT_GT(run.engine->preemptions(), 0) << where;
      EXPECT_GT(run.engine->spec_drafts(), 0) << where;
      if (batch_limit > 0) {
        EXPECT_LE(most_drafted, batch_limit) << where;
      }
      EXPECT_EQ(run.engine->kv_blocks_free(), run.engine->kv_blocks()) << where;
    }
  }
}

TEST_F(SpeculativeEngineTest, RefusesSettingsOutsideTheirBounds) {
  for (const SpeculativeOptions bad : {SpeculativeOptions{-1, 1, 1, 0}, SpeculativeOptions{33, 1, 1, 0},
                                       SpeculativeOptions{2, 0, 1, 0}, SpeculativeOptions{2, 3, 2, 0},
                                       SpeculativeOptions{2, 1, 65, 0}, SpeculativeOptions{2, 1, 2, -1}}) {
    CpuBackend backend;
    EngineOptions options;
    options.speculative = bad;
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(tiny_.plan, backend, *tiny_.weights, options);
    ASSERT_FALSE(engine.ok()) << bad.num_tokens << " " << bad.lookup_min << " " << bad.lookup_max;
    EXPECT_NE(engine.status().message().find("speculative decoding"), std::string::npos) << engine.status();
  }
}

}  // namespace
}  // namespace ag::runtime
