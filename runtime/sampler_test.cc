#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <cmath>

namespace ag::runtime {
namespace {

// Frequencies of each id over `draws` samples of `logits`.
std::vector<double> Frequencies(const SamplingParams& params, const std::vector<float>& logits, int draws,
                                const std::vector<int32_t>& history = {}) {
  Sampler sampler(params);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l = logits;
    ++counts[sampler.Sample(l, history)];
  }
  std::vector<double> freq;
  for (int c : counts) freq.push_back(static_cast<double>(c) / draws);
  return freq;
}

std::vector<float> LogProbs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// Within 4.5 standard deviations of a binomial proportion: fails by chance about once in 10^5 runs.
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, int draws) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double sd = std::sqrt(std::max(want[i] * (1 - want[i]), 1e-12) / draws);
    EXPECT_NEAR(got[i], want[i], 4.5 * sd + 1e-12) << "id " << i;
  }
}

const std::vector<double> kProbs = {0.5, 0.3, 0.15, 0.05};
constexpr int kDraws = 100000;

TEST(Sampler, TemperatureOneDrawsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1;
  ExpectClose(Frequencies(p, LogProbs(kProbs), kDraws), kProbs, kDraws);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  for (float t : {0.5f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 2;
    std::vector<double> want;
    double total = 0;
    for (double x : kProbs) total += std::pow(x, 1.0 / t);
    for (double x : kProbs) want.push_back(std::pow(x, 1.0 / t) / total);
    ExpectClose(Frequencies(p, LogProbs(kProbs), kDraws), want, kDraws);
  }
}

TEST(Sampler, TopKAndTopPRenormalise) {
  SamplingParams k2;
  k2.temperature = 1.0f;
  k2.top_k = 2;
  k2.seed = 3;
  ExpectClose(Frequencies(k2, LogProbs(kProbs), kDraws), {0.625, 0.375, 0, 0}, kDraws);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;  // 0.5 + 0.3 + 0.15 reaches 0.9
  p.seed = 4;
  ExpectClose(Frequencies(p, LogProbs(kProbs), kDraws), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, kDraws);
}

// vLLM's min_p: only tokens at least min_p times as likely as the likeliest, renormalised; with
// top-p after it (over what min-p kept).
TEST(Sampler, MinPKeepsTheLikelyOnes) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 4;
  p.min_p = 0.35f;  // 0.5 x 0.35 = 0.175: 0.5 and 0.3 stay
  ExpectClose(Frequencies(p, LogProbs(kProbs), kDraws), {0.625, 0.375, 0.0, 0.0}, kDraws);
  p.top_p = 0.6f;  // 0.625 of the kept mass is the first
  ExpectClose(Frequencies(p, LogProbs(kProbs), kDraws), {1.0, 0.0, 0.0, 0.0}, kDraws);
  p = {};
  p.min_p = 1.5f;
  EXPECT_FALSE(p.Validate().ok());
}

TEST(Sampler, EdgesAreGreedy) {
  const std::vector<float> logits = LogProbs({0.2, 0.1, 0.6, 0.1});
  SamplingParams greedy;  // temperature 0
  EXPECT_EQ(Frequencies(greedy, logits, 100)[2], 1.0);
  SamplingParams top1;
  top1.temperature = 1.5f;
  top1.top_k = 1;
  EXPECT_EQ(Frequencies(top1, logits, 100)[2], 1.0);
  SamplingParams tiny_p;
  tiny_p.temperature = 1.5f;
  tiny_p.top_p = 1e-6f;
  EXPECT_EQ(Frequencies(tiny_p, logits, 100)[2], 1.0);
  SamplingParams cold;
  cold.temperature = 1e-4f;
  EXPECT_EQ(Frequencies(cold, logits, 100)[2], 1.0);
}

TEST(Sampler, RepetitionPenaltyFollowsTransformers) {
  // Positive logits are divided by the penalty, negative ones multiplied.
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler sampler(p);
  std::vector<float> logits = {3.0f, 2.0f, -1.0f};
  EXPECT_EQ(sampler.Sample(logits, std::vector<int32_t>{0}), 1) << "3/2 = 1.5 < 2";
  EXPECT_EQ(logits[0], 1.5f);
  std::vector<float> negative = {-1.0f, -1.5f};
  EXPECT_EQ(sampler.Sample(negative, std::vector<int32_t>{0}), 1) << "-1*2 = -2 < -1.5";
}

TEST(Sampler, SameSeedSameDrawsAndVocabLimit) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  int same = 0, differ = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> la = LogProbs(kProbs), lb = la, lc = la;
    const std::vector<ref::Penalty> none;
    const int32_t x = a.Sample(la, none), y = b.Sample(lb, none), z = c.Sample(lc, none);
    same += x == y;
    differ += x != z;
  }
  EXPECT_EQ(same, 200);
  EXPECT_GT(differ, 0);
  SamplingParams limited;
  limited.vocab_limit = 2;
  EXPECT_FALSE(limited.IsPlainGreedy());
  EXPECT_EQ(Frequencies(limited, LogProbs({0.1, 0.2, 0.7}), 10)[1], 1.0) << "id 2 is past the limit";
}

TEST(Sampler, ValidatesParameters) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate().ok());
  p.temperature = -1;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_k = -3;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.repetition_penalty = 0;
  EXPECT_FALSE(p.Validate().ok());
  for (const float bad : {-2.5f, 2.01f, NAN}) {
    p = {};
    p.frequency_penalty = bad;
    EXPECT_FALSE(p.Validate().ok()) << bad;
    p = {};
    p.presence_penalty = bad;
    EXPECT_FALSE(p.Validate().ok()) << bad;
  }
  p = {};
  p.vocab_limit = 10;
  p.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  EXPECT_TRUE(p.Validate().ok());
  for (const std::vector<SamplingParams::Bias>& bad : std::vector<std::vector<SamplingParams::Bias>>{
           {{10, 1.0f}}, {{-1, 1.0f}}, {{3, 100.5f}}, {{3, NAN}}, {{3, -INFINITY}}, {{3, 1.0f}, {4, 2.0f}, {3, 0.0f}}}) {
    p.logit_bias = bad;
    EXPECT_FALSE(p.Validate().ok()) << bad.front().id << " " << bad.front().bias;
  }
}

// OpenAI's logit_bias: -100 bans an id, +100 all but forces it, at any temperature; a bias
// alone makes greedy decoding read the logits (not plain greedy).
TEST(Sampler, LogitBiasBansAndForces) {
  SamplingParams p;
  p.logit_bias = {{0, -100.0f}};
  EXPECT_TRUE(p.HasPenalty());
  EXPECT_FALSE(p.IsPlainGreedy());
  PenaltyTracker banned(p, {});
  std::vector<float> logits = LogProbs(kProbs);
  EXPECT_EQ(Sampler(p).Sample(logits, banned.entries()), 1) << "id 0 is banned";
  p.temperature = 1.0f;
  p.seed = 9;
  p.logit_bias = {{0, -100.0f}, {3, 100.0f}};
  PenaltyTracker forced(p, {});
  Sampler sampler(p);
  for (int i = 0; i < 1000; ++i) {
    std::vector<float> l = LogProbs(kProbs);
    ASSERT_EQ(sampler.Sample(l, forced.entries()), 3) << "e^100 outweighs the rest";
  }
}

// OpenAI's frequency and presence penalties, against their definition:
// logit[t] -= frequency x count(t in the generated tokens) + presence x [count > 0];
// the prompt's tokens are not counted.
TEST(Sampler, FrequencyAndPresencePenaltiesAreOpenAIs) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f);
  std::uniform_int_distribution<int32_t> token(0, 11);
  for (int trial = 0; trial < 500; ++trial) {
    SamplingParams p;
    p.frequency_penalty = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    p.presence_penalty = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    std::vector<float> logits(12);
    for (float& l : logits) l = logit(rng);
    std::vector<int32_t> history(8);
    for (int32_t& t : history) t = token(rng);
    const size_t prompt = 3;
    std::vector<float> want = logits;
    for (int32_t t = 0; t < 12; ++t) {
      const int64_t count = std::count(history.begin() + prompt, history.end(), t);
      want[t] -= p.frequency_penalty * static_cast<float>(count) + (count > 0 ? p.presence_penalty : 0.0f);
    }
    const int32_t best = static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
    Sampler sampler(p);  // temperature 0: greedy after the penalties
    std::vector<float> got = logits;
    EXPECT_EQ(sampler.Sample(got, history, prompt), best) << trial;
    for (int32_t t = 0; t < 12; ++t) EXPECT_NEAR(got[t], want[t], 1e-5) << trial << " id " << t;
  }
  SamplingParams p;
  p.frequency_penalty = 0.2f;
  EXPECT_FALSE(p.IsPlainGreedy());
  EXPECT_TRUE(p.HasPenalty());
  p.frequency_penalty = 0;
  p.top_p = 0.85f;  // top_p with temperature 0 is greedy
  EXPECT_TRUE(p.IsPlainGreedy());
}

// vLLM's min_tokens: the suppressed ids (end-of-sequence and stop ids) are -inf until that many
// tokens were generated, then back to their logit_bias (here +100 on id 0, so it wins at once).
TEST(Sampler, SuppressedIdsComeBackAfterMinTokens) {
  SamplingParams p;
  p.logit_bias = {{0, 100.0f}};
  p.suppressed_ids = {0, 2, 0};  // listed twice: one entry
  p.suppress_for = 3;
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_FALSE(p.IsPlainGreedy());
  PenaltyTracker tracker(p, {});
  EXPECT_EQ(tracker.entries().size(), 2u);
  std::vector<int32_t> picks;
  for (int i = 0; i < 5; ++i) {
    std::vector<float> logits = {1.0f, 0.5f, 3.0f, 2.0f};
    picks.push_back(Sampler(p).Sample(logits, tracker.entries()));
    tracker.Add(picks.back());
  }
  EXPECT_EQ(picks, (std::vector<int32_t>{3, 3, 3, 0, 0})) << "ids 0 and 2 barred for the first three";
  p.suppress_for = -1;
  EXPECT_FALSE(p.Validate().ok());
}

// The three penalties and the logit bias together, kept incrementally (PenaltyTracker: what the
// engine sends with a row), against their definitions applied in vLLM's order: the bias, the
// repetition factor on every id of the prompt or the answer, then frequency x count + presence
// on the answer's ids. Exact: the same float operations in the same order.
// A speculative step's draft rows: EntriesAfter(more) is the entry list Add would leave after `more`,
// entry for entry and in order (new ids appended as first seen), min_tokens' release included.
TEST(Sampler, EntriesAfterAreWhatAddLeaves) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, 11);
  for (int trial = 0; trial < 400; ++trial) {
    SamplingParams p;
    p.frequency_penalty = trial % 3 == 0 ? 0.0f : 0.3f;
    p.presence_penalty = trial % 4 == 0 ? 0.0f : -0.7f;
    p.repetition_penalty = trial % 2 == 0 ? 1.0f : 1.2f;
    if (trial % 5 == 1) p.logit_bias = {{3, 2.0f}, {7, -1.0f}};
    if (trial % 3 == 2) {
      p.suppressed_ids = {4, 9};
      p.suppress_for = 1 + trial % 7;
    }
    std::vector<int32_t> prompt(1 + trial % 5), answer(trial % 6), more(trial % 5);
    for (int32_t& t : prompt) t = token(rng);
    for (int32_t& t : answer) t = token(rng);
    for (int32_t& t : more) t = token(rng);
    PenaltyTracker tracker(p, prompt);
    for (const int32_t t : answer) tracker.Add(t);
    std::vector<ref::Penalty> got;
    tracker.EntriesAfter(more, &got);
    for (const int32_t t : more) tracker.Add(t);
    const std::span<const ref::Penalty> want = tracker.entries();
    ASSERT_EQ(got.size(), want.size()) << trial;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id) << trial;
      EXPECT_EQ(got[i].scale, want[i].scale) << trial;
      EXPECT_EQ(got[i].delta, want[i].delta) << trial;
      EXPECT_EQ(got[i].bias, want[i].bias) << trial;
    }
  }
}

TEST(Sampler, TrackedPenaltiesEqualTheirDefinition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f), penalty(-2.0f, 2.0f);
  std::uniform_int_distribution<int32_t> token(0, 15);
  for (int trial = 0; trial < 300; ++trial) {
    SamplingParams p;
    p.frequency_penalty = trial % 3 == 0 ? 0.0f : penalty(rng);
    p.presence_penalty = trial % 5 == 0 ? 0.0f : penalty(rng);
    p.repetition_penalty = trial % 2 == 0 ? 1.0f : std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
    std::vector<int32_t> prompt(1 + trial % 6), answer(trial % 9);
    for (int32_t& t : prompt) t = token(rng);
    for (int32_t& t : answer) t = token(rng);
    std::vector<float> bias(16, 0.0f);  // logit_bias on a few distinct ids in every other trial
    for (int32_t t = 0; t < 16 && trial % 2 == 1; ++t) {
      if (token(rng) < 5) {
        bias[t] = std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng);
        p.logit_bias.push_back({t, bias[t]});
      }
    }
    std::vector<float> want(16);
    for (float& l : want) l = logit(rng);
    std::vector<float> got = want;
    for (int32_t t = 0; t < 16; ++t) {
      const bool seen = std::count(prompt.begin(), prompt.end(), t) + std::count(answer.begin(), answer.end(), t) > 0;
      const int64_t count = std::count(answer.begin(), answer.end(), t);
      float& l = want[t];
      l += bias[t];  // vLLM's order: the bias, then the penalties
      if (seen && p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      if (count > 0) l -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    }
    PenaltyTracker tracker(p, prompt);
    for (const int32_t t : answer) tracker.Add(t);
    const std::span<const ref::Penalty> entries = tracker.entries();
    ref::ApplyPenalties(got.data(), 16, entries);
    EXPECT_EQ(got, want) << trial;
    std::vector<int32_t> ids;
    for (const ref::Penalty& e : entries) ids.push_back(e.id);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "one entry per id";
  }
}

}  // namespace
}  // namespace ag::runtime
