#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <random>

namespace ag::runtime {
namespace {

// The rule as written: the longest n in [lo, hi] whose last-n tokens occur earlier (ending before
// the last token), the earliest occurrence, then up to k tokens after it.
std::vector<int32_t> ByDefinition(const std::vector<int32_t>& t, int lo, int hi, int64_t k) {
  const int64_t total = static_cast<int64_t>(t.size());
  for (int64_t n = hi; n >= lo; --n) {
    for (int64_t e = n - 1; e + 1 < total; ++e) {
      bool same = true;
      for (int64_t j = 0; j < n && same; ++j) same = t[e - j] == t[total - 1 - j];
      if (!same) continue;
      std::vector<int32_t> out;
      for (int64_t i = e + 1; i < total && i <= e + k; ++i) out.push_back(t[i]);
      return out;
    }
  }
  return {};
}

std::vector<int32_t> Propose(const std::vector<int32_t>& t, size_t split, int lo, int hi, int64_t k) {
  std::vector<int32_t> head(t.begin(), t.begin() + split), tail(t.begin() + split, t.end()), out;
  ProposeNgramDrafts(head, tail, lo, hi, k, &out);
  return out;
}

TEST(Ngram, VllmsExample) {
  // [1,2,3,4,2,3], n in [2, 3], k 4: [4,2,3] is not found earlier, [2,3] is: what followed it.
  EXPECT_EQ(Propose({1, 2, 3, 4, 2, 3}, 6, 2, 3, 4), (std::vector<int32_t>{4, 2, 3}));
  EXPECT_EQ(Propose({1, 2, 3, 4, 2, 3}, 2, 2, 3, 2), (std::vector<int32_t>{4, 2}));  // wherever the prompt ends
  EXPECT_TRUE(Propose({1, 2, 3, 4, 2, 3}, 6, 3, 3, 4).empty());
  EXPECT_TRUE(Propose({7}, 1, 1, 1, 4).empty());
  EXPECT_TRUE(Propose({7, 7}, 2, 1, 4, 0).empty());
  EXPECT_EQ(Propose({7, 7}, 1, 1, 4, 3), (std::vector<int32_t>{7}));  // overlapping the tail is fine
  // The longest match wins over an earlier shorter one; the earliest among the longest.
  EXPECT_EQ(Propose({5, 9, 1, 2, 8, 1, 2, 6, 9, 1, 2}, 11, 1, 3, 2), (std::vector<int32_t>{8, 1}));
  EXPECT_EQ(Propose({1, 2, 8, 5, 1, 2, 6, 1, 2}, 9, 1, 3, 2), (std::vector<int32_t>{8, 5}));
}

TEST(Ngram, AgreesWithItsDefinition) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 4000; ++trial) {
    const int alphabet = 2 + trial % 5;
    const int64_t size = 1 + rng() % 40;
    std::vector<int32_t> t(static_cast<size_t>(size));
    for (int32_t& v : t) v = static_cast<int32_t>(rng() % alphabet);
    const int lo = 1 + static_cast<int>(rng() % 3), hi = lo + static_cast<int>(rng() % 4);
    const int64_t k = rng() % 6;
    const size_t split = rng() % (t.size() + 1);
    ASSERT_EQ(Propose(t, split, lo, hi, k), ByDefinition(t, lo, hi, k))
        << "trial " << trial << " lo " << lo << " hi " << hi << " k " << k;
  }
}

TEST(SpeculativeConfig, ParsesVllmsJson) {
  EXPECT_FALSE(ParseSpeculativeConfig("")->enabled());
  SpeculativeOptions o = *ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3})");
  EXPECT_EQ(o.num_tokens, 4);
  EXPECT_EQ(o.lookup_max, 3);
  EXPECT_EQ(o.lookup_min, 3);  // vLLM: the other bound
  o = *ParseSpeculativeConfig(R"({"model": "[ngram]", "num_speculative_tokens": 2, "prompt_lookup_min": 2,
                                  "disable_by_batch_size": 8})");
  EXPECT_EQ(o.lookup_min, 2);
  EXPECT_EQ(o.lookup_max, 2);
  EXPECT_EQ(o.disable_by_batch_size, 8);
  o = *ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": null})");
  EXPECT_EQ(o.lookup_min, 5);  // both absent: 5 and 5
  EXPECT_EQ(o.lookup_max, 5);

  const struct {
    const char* text;
    const char* names;
  } bad[] = {
      {"[]", "JSON object"},
      {"{", "JSON object"},
      {R"({"num_speculative_tokens": 4})", "'method'"},
      {R"({"method": "eagle", "num_speculative_tokens": 4})", "'method'"},
      {R"({"model": "/models/glm-draft", "num_speculative_tokens": 4})", "'model'"},
      {R"({"method": "ngram"})", "'num_speculative_tokens' is required"},
      {R"({"method": "ngram", "num_speculative_tokens": 0})", "'num_speculative_tokens'"},
      {R"({"method": "ngram", "num_speculative_tokens": 33})", "'num_speculative_tokens'"},
      {R"({"method": "ngram", "num_speculative_tokens": 2.5})", "'num_speculative_tokens'"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 0})", "'prompt_lookup_max'"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})",
       "'prompt_lookup_min'"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": -1})", "'disable_by_batch_size'"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1})",
       "'draft_tensor_parallel_size' is not a setting"},
  };
  for (const auto& c : bad) {
    absl::StatusOr<SpeculativeOptions> r = ParseSpeculativeConfig(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.names), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("--speculative-config"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace ag::runtime
