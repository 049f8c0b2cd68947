#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/ref/exp4.h"
#include "kernels/ref/ref.h"

namespace ag::ref {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(Ref, RmsNormMatchesTheFormula) {
  const std::vector<float> x = {1, 2, 3, 4, -1, -1, -1, -1};
  const std::vector<float> w = {1, 0.5f, 2, 1};
  std::vector<float> out(8);
  RmsNorm(x.data(), w.data(), 2, 4, 0.0f, out.data());
  const float s = 1.0f / std::sqrt(30.0f / 4);
  EXPECT_FLOAT_EQ(out[0], 1 * s);
  EXPECT_FLOAT_EQ(out[1], 0.5f * 2 * s);
  EXPECT_FLOAT_EQ(out[2], 2 * 3 * s);
  EXPECT_FLOAT_EQ(out[4], -1.0f);
  EXPECT_FLOAT_EQ(out[6], -2.0f);
}

TEST(Ref, LinearMatchesDoublePrecision) {
  const int64_t rows = 3, in = 37, out = 17;
  const std::vector<float> x = Random(rows * in, 1), w = Random(out * in, 2), b = Random(out, 3);
  std::vector<float> y(rows * out);
  Linear(x.data(), w.data(), b.data(), rows, in, out, y.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double expect = b[o];
      for (int64_t k = 0; k < in; ++k) expect += static_cast<double>(x[r * in + k]) * w[o * in + k];
      EXPECT_NEAR(y[r * out + o], expect, 1e-4);
    }
  }
}

TEST(Ref, RotaryIsInterleavedAndPartial) {
  // One head of 8 channels, rot 4: pairs (0,1) and (2,3) rotate, 4..7 pass through.
  const std::vector<float> x = {1, 0, 0, 1, 5, 6, 7, 8};
  const int32_t pos = 3;
  std::vector<float> out(8);
  Rotary(x.data(), {&pos, 1}, 1, 1, 8, 4, 10000.0f, out.data());
  const float a0 = 3.0f, a1 = 3.0f / 100.0f;  // inv_freq = 1, 1/10000^(2/4)
  EXPECT_NEAR(out[0], std::cos(a0), 1e-6);
  EXPECT_NEAR(out[1], std::sin(a0), 1e-6);
  EXPECT_NEAR(out[2], -std::sin(a1), 1e-6);
  EXPECT_NEAR(out[3], std::cos(a1), 1e-6);
  EXPECT_EQ(out[4], 5);
  EXPECT_EQ(out[7], 8);
  // Position 0 is the identity; in place gives the same as out of place.
  const int32_t zero = 0;
  std::vector<float> same = x;
  Rotary(same.data(), {&zero, 1}, 1, 1, 8, 4, 10000.0f, same.data());
  EXPECT_EQ(same, x);
}

TEST(Ref, ArgmaxTakesTheFirstOfEqualMaxima) {
  const std::vector<float> x = {1, 3, 3, 0, -5, -4, -4, -9};
  int32_t out[2];
  Argmax(x.data(), 2, 4, out);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 1);
}

// Against std::max_element (the first of the maxima; a NaN never wins, unless it comes first) on
// rows of every length up to 40 with repeats, infinities, signed zeros and NaNs.
TEST(Ref, ArgmaxIsMaxElement) {
  std::mt19937 rng(5);
  const float pool[] = {0.0f, -0.0f, 1.5f, -2.0f, 7.0f, INFINITY, -INFINITY, NAN, 3.25f, 7.0f};
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = pool[rng() % (trial % 2 == 0 ? 7 : 10)];
    int32_t got = -1;
    Argmax(x.data(), 1, n, &got);
    ASSERT_EQ(got, std::max_element(x.begin(), x.end()) - x.begin()) << trial;
  }
}

TEST(Ref, SliceGatherSilu) {
  const std::vector<float> x = {0, 1, 2, 3, 4, 5};
  std::vector<float> s(2);
  SliceColumns(x.data(), 2, 3, 1, 1, s.data());
  EXPECT_EQ(s, (std::vector<float>{1, 4}));
  const int32_t rows[2] = {1, 0};
  std::vector<float> g(6);
  GatherRows(x.data(), rows, 2, 3, g.data());
  EXPECT_EQ(g, (std::vector<float>{3, 4, 5, 0, 1, 2}));
  float y;
  const float one = 1.0f;
  Silu(&one, 1, &y);
  EXPECT_NEAR(y, 1.0f / (1.0f + std::exp(-1.0f)), 1e-7);
}

// A paged cache with `blocks` blocks and the given geometry.
struct Cache {
  Cache(int64_t blocks, int64_t block_size, int64_t kv_heads, int64_t head_dim)
      : k(blocks * block_size * kv_heads * head_dim), v(k.size()) {
    view = {k.data(), v.data(), blocks, block_size, kv_heads, head_dim};
  }
  std::vector<float> k, v;
  KvCache view;
};

// Attention for one sequence of `n` tokens through a block table, written in one step.
std::vector<float> AttendOneSequence(const std::vector<float>& q, const std::vector<float>& k,
                                     const std::vector<float>& v, int64_t n, int64_t heads, int64_t kv_heads,
                                     int64_t d, int64_t block_size, const std::vector<int32_t>& table) {
  Cache cache(16, block_size, kv_heads, d);
  std::vector<int32_t> slots(n);
  for (int64_t j = 0; j < n; ++j) slots[j] = table[j / block_size] * block_size + j % block_size;
  KvCacheWrite(k.data(), v.data(), slots.data(), n, cache.view);
  const int32_t offsets[2] = {0, static_cast<int32_t>(n)};
  const int32_t context = static_cast<int32_t>(n);
  SeqBatch batch{offsets, &context, table.data(), 1, static_cast<int64_t>(table.size())};
  std::vector<float> out(n * heads * d);
  PagedAttention(q.data(), heads, cache.view, batch, out.data());
  return out;
}

TEST(Ref, AttentionFirstTokenReturnsItsValue) {
  const int64_t heads = 3, kv_heads = 1, d = 4;
  const std::vector<float> q = Random(heads * d, 4), k = Random(d, 5), v = Random(d, 6);
  const std::vector<float> out = AttendOneSequence(q, k, v, 1, heads, kv_heads, d, 16, {0});
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d; ++i) EXPECT_FLOAT_EQ(out[h * d + i], v[i]);
  }
}

TEST(Ref, AttentionDoesNotDependOnTheBlockLayout) {
  const int64_t n = 11, heads = 6, kv_heads = 2, d = 8;
  const std::vector<float> q = Random(n * heads * d, 7), k = Random(n * kv_heads * d, 8),
                           v = Random(n * kv_heads * d, 9);
  const std::vector<float> contiguous = AttendOneSequence(q, k, v, n, heads, kv_heads, d, 16, {0});
  const std::vector<float> scattered = AttendOneSequence(q, k, v, n, heads, kv_heads, d, 3, {7, 2, 15, 4});
  const std::vector<float> page_one = AttendOneSequence(q, k, v, n, heads, kv_heads, d, 1,
                                                        {3, 1, 4, 15, 5, 9, 2, 6, 13, 8, 0});
  for (size_t i = 0; i < contiguous.size(); ++i) {
    EXPECT_FLOAT_EQ(scattered[i], contiguous[i]);
    EXPECT_FLOAT_EQ(page_one[i], contiguous[i]);
  }
}

TEST(Ref, AttentionIsCausalAndUsesTheRightKvHead) {
  const int64_t n = 5, heads = 4, kv_heads = 2, d = 4;
  const std::vector<float> q = Random(n * heads * d, 10), k = Random(n * kv_heads * d, 11);
  std::vector<float> v = Random(n * kv_heads * d, 12);
  const std::vector<float> base = AttendOneSequence(q, k, v, n, heads, kv_heads, d, 2, {0, 1, 2});
  // Changing the last token's value changes only the last token's output, and
  // changing KV head 1 of it changes only query heads 2 and 3.
  for (int64_t i = 0; i < d; ++i) v[(n - 1) * kv_heads * d + d + i] += 1.0f;
  const std::vector<float> changed = AttendOneSequence(q, k, v, n, heads, kv_heads, d, 2, {0, 1, 2});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < d; ++i) {
        const size_t idx = (t * heads + h) * d + i;
        if (t == n - 1 && h >= 2) {
          EXPECT_NE(changed[idx], base[idx]);
        } else {
          EXPECT_EQ(changed[idx], base[idx]) << t << " " << h;
        }
      }
    }
  }
}

TEST(Ref, AttentionMatchesDoublePrecisionSoftmax) {
  const int64_t n = 6, heads = 2, kv_heads = 1, d = 4;
  const std::vector<float> q = Random(n * heads * d, 13), k = Random(n * d, 14), v = Random(n * d, 15);
  const std::vector<float> out = AttendOneSequence(q, k, v, n, heads, kv_heads, d, 4, {1, 0});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> p(t + 1);
      double denom = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(q[(t * heads + h) * d + i]) * k[j * d + i];
        p[j] = std::exp(dot / std::sqrt(static_cast<double>(d)));
        denom += p[j];
      }
      for (int64_t i = 0; i < d; ++i) {
        double expect = 0;
        for (int64_t j = 0; j <= t; ++j) expect += p[j] / denom * v[j * d + i];
        EXPECT_NEAR(out[(t * heads + h) * d + i], expect, 1e-5);
      }
    }
  }
}

TEST(Ref, FusedOpsEqualTheirCompositions) {
  const int64_t rows = 3, hidden = 8, inter = 5;
  const std::vector<float> x = Random(rows * hidden, 16), nw = Random(hidden, 17), w = Random(2 * inter * hidden, 18);
  std::vector<float> fused(rows * inter);
  NormGateUpSilu(x.data(), nw.data(), w.data(), rows, hidden, inter, 1e-5f, fused.data());
  std::vector<float> normed(rows * hidden), gu(rows * 2 * inter), gate(rows * inter), up(rows * inter),
      expect(rows * inter);
  RmsNorm(x.data(), nw.data(), rows, hidden, 1e-5f, normed.data());
  Linear(normed.data(), w.data(), nullptr, rows, hidden, 2 * inter, gu.data());
  SliceColumns(gu.data(), rows, 2 * inter, 0, inter, gate.data());
  SliceColumns(gu.data(), rows, 2 * inter, inter, inter, up.data());
  Silu(gate.data(), rows * inter, gate.data());
  Mul(gate.data(), up.data(), rows * inter, expect.data());
  EXPECT_EQ(fused, expect);
}

}  // namespace
}  // namespace ag::ref

namespace ag::ref {
namespace {

TEST(Ref, MRopeWithEqualStreamsIsTheTextRope) {
  // A text-only GLM-4.1V prompt has three equal position streams: bit for bit glm4's rotary.
  const int64_t tokens = 5, heads = 2, head_dim = 16, rot = 8;
  std::vector<float> x(tokens * heads * head_dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
  std::vector<int32_t> one(tokens), three(3 * tokens);
  for (int64_t t = 0; t < tokens; ++t) one[t] = three[t] = three[tokens + t] = three[2 * tokens + t] = 100 + 7 * t;
  std::vector<float> text(x.size()), mrope(x.size());
  Rotary(x.data(), {one.data(), tokens}, tokens, heads, head_dim, rot, 10000.0f, text.data());
  Rotary(x.data(), {three.data(), tokens, true, 1, 3}, tokens, heads, head_dim, rot, 10000.0f, mrope.data());
  EXPECT_EQ(text, mrope);
  // Different streams: pair 0 follows stream 0, pairs 1-2 stream 1, pair 3 stream 2.
  for (int64_t t = 0; t < tokens; ++t) three[2 * tokens + t] += 9;
  Rotary(x.data(), {three.data(), tokens, true, 1, 3}, tokens, heads, head_dim, rot, 10000.0f, mrope.data());
  for (int64_t d = 0; d < head_dim; ++d) {
    EXPECT_EQ(mrope[d] == text[d], d < 6 || d >= rot) << "channel " << d;
  }
}

TEST(Ref, InvFreqIsFp32) {
  float f[4];
  RotaryInvFreq(8, 10000.0f, f);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 1.0f / std::pow(10000.0f, 0.25f)) << "0.1 in fp32, never rounded to bf16";
  EXPECT_NEAR(f[1], 0.1f, 1e-8f);
}

}  // namespace
}  // namespace ag::ref

namespace ag::ref {
namespace {

// The sampler's exp: within 2 ulp of exp in double over [-87.3, 0] (every value a weight takes,
// z - max_z), exactly 1 at 0 (the largest weight), tiny and positive below (never NaN or negative).
TEST(Ref, ExpNonPositiveIsWithinTwoUlp) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-87.3f, 0.0f);
  double worst = 0.0;
  for (int i = 0; i < 400000; ++i) {
    const float x = i < 100000 ? -87.3f * static_cast<float>(i) / 1e5f : uniform(rng);
    const Float4 xs = Splat(x) * Float4{1.0f, 0.5f, 0.01f, 1e-4f};  // small magnitudes too
    const Float4 got = ExpNonPositive(xs);
    for (int j = 0; j < 4; ++j) {
      const double want = std::exp(static_cast<double>(xs[j]));
      worst = std::max(worst, std::fabs(got[j] - want) / want);
    }
  }
  EXPECT_LT(worst, 2 * 5.97e-8);  // 2^-24: half an ulp relative, at most
  const Float4 edges = ExpNonPositive(Float4{0.0f, -0.0f, -INFINITY, -1000.0f});
  EXPECT_EQ(edges[0], 1.0f);
  EXPECT_EQ(edges[1], 1.0f);
  for (int j = 2; j < 4; ++j) {
    EXPECT_GT(edges[j], 0.0f);
    EXPECT_LT(edges[j], 1e-37f);
  }
}

// Drawn many times over a row of 1,000 ids (a length no multiple of four), each id comes up as often
// as its probability says (softmax at temperature 0.7 in double, min-p and top-p cuts as their rules).
TEST(Ref, SampleFilteredDrawsInProportion) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  constexpr int kIds = 1001;
  std::vector<float> logits(kIds);
  for (float& l : logits) l = normal(rng);
  logits[17] = NAN;
  logits[400] = -INFINITY;
  const float t = 0.7f;
  std::vector<double> p(kIds, 0.0);
  const double peak = *std::max_element(logits.begin(), logits.end(), [](float a, float b) {
    return std::isnan(a) || (!std::isnan(b) && a < b);
  }) / t;
  double total = 0.0;
  for (int i = 0; i < kIds; ++i) {
    if (!std::isnan(logits[i])) total += p[i] = std::exp(logits[i] / t - peak);
  }
  std::vector<int> count(kIds, 0);
  constexpr int kDraws = 200000;
  for (int d = 0; d < kDraws; ++d) {
    const float u = (static_cast<float>(d) + 0.5f) / kDraws;  // stratified: every part of [0, 1)
    const int32_t id = SampleFiltered(logits.data(), kIds, {t, 0, 1.0f, 0, u});
    ASSERT_GE(id, 0);
    ASSERT_LT(id, kIds);
    ++count[id];
  }
  EXPECT_EQ(count[17], 0);
  EXPECT_EQ(count[400], 0);
  for (int i = 0; i < kIds; ++i) {
    const double want = p[i] / total * kDraws;
    EXPECT_NEAR(count[i], want, 1.0 + 1e-3 * want) << i;  // stratified draws: off by rounding only
  }
}

// Top-k's floor against a full sort: rows with ties, both signs, zeros of both signs, infinities,
// subnormals and values a bucket apart, every k.
TEST(Ref, KthLargestIsTheSortedRowsKth) {
  std::mt19937 rng(5);
  const std::vector<float> special = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 1.0f, std::nextafter(1.0f, 2.0f),
                                      -1.0f, 3.0e38f};
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) {
      switch (rng() % 4) {
        case 0: v = special[rng() % special.size()]; break;
        case 1: v = static_cast<float>(static_cast<int>(rng() % 7) - 3); break;  // ties
        case 2: v = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, static_cast<int>(rng() % 40) - 20); break;
        default: v = 10.0f + static_cast<float>(rng() % 1000) * 1e-6f; break;  // one bucket, many values
      }
    }
    std::vector<float> sorted = row;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (int64_t k = 1; k <= n; ++k) {
      ASSERT_EQ(KthLargest(row.data(), n, k), sorted[static_cast<size_t>(k - 1)]) << "trial " << trial << " k " << k;
    }
  }
}

TEST(Ref, SampleFilteredFollowsItsRule) {
  const float l[4] = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  auto pick = [&](SampleParams p) { return SampleFiltered(l, 4, p); };
  // Inverse CDF in id order over .1 .2 .3 .4.
  for (auto [u, want] : {std::pair{0.05f, 0}, {0.15f, 1}, {0.45f, 2}, {0.95f, 3}, {0.0f, 0}}) {
    EXPECT_EQ(pick({1.0f, 0, 1.0f, 0, u}), want) << u;
  }
  EXPECT_EQ(pick({0.0f, 0, 1.0f, 0, 0.99f}), 3);  // greedy
  EXPECT_EQ(pick({1.0f, 1, 1.0f, 0, 0.0f}), 3);   // top-k 1 is greedy
  // Top-k 2 keeps .3 and .4: the first 3/7 of the mass is id 2.
  EXPECT_EQ(pick({1.0f, 2, 1.0f, 0, 0.0f}), 2);
  EXPECT_EQ(pick({1.0f, 2, 1.0f, 0, 0.42f}), 2);
  EXPECT_EQ(pick({1.0f, 2, 1.0f, 0, 0.44f}), 3);
  // Top-p: .4 alone holds 0.39 (not 0.4 exactly: there rounding in the weights decides); .4 + .3 reaches 0.5.
  EXPECT_EQ(pick({1.0f, 0, 0.39f, 0, 0.0f}), 3);
  EXPECT_EQ(pick({1.0f, 0, 0.5f, 0, 0.0f}), 2);
  EXPECT_EQ(pick({1.0f, 0, 0.5f, 0, 0.99f}), 3);
  // The vocabulary limit: only ids 0 and 1, 1/3 and 2/3.
  EXPECT_EQ(pick({1.0f, 0, 1.0f, 2, 0.3f}), 0);
  EXPECT_EQ(pick({1.0f, 0, 1.0f, 2, 0.4f}), 1);
  // Temperature flattens: at T = 1000 the four are nearly equal, so u = 0.3 lands in id 1.
  EXPECT_EQ(pick({1000.0f, 0, 1.0f, 0, 0.3f}), 1);
  // Min-p 0.6: ids at least 0.6 x 0.4 = 0.24 likely, .3 and .4 (3/7 of their mass is id 2); 0.8:
  // .4 alone; with top-k 1 of the two (the largest: still .4).
  EXPECT_EQ(pick({1.0f, 0, 1.0f, 0, 0.42f, 0.6f}), 2);
  EXPECT_EQ(pick({1.0f, 0, 1.0f, 0, 0.44f, 0.6f}), 3);
  EXPECT_EQ(pick({1.0f, 0, 1.0f, 0, 0.0f, 0.8f}), 3);
  EXPECT_EQ(pick({1.0f, 0, 1.0f, 0, 0.0f, 1.0f}), 3);
  // NaN is never kept.
  const float with_nan[3] = {std::nanf(""), 0.0f, 0.0f};
  EXPECT_EQ(SampleFiltered(with_nan, 3, {1.0f, 0, 1.0f, 0, 0.0f}), 1);
}

}  // namespace
}  // namespace ag::ref
