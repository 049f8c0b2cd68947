#include "runtime/multimodal.h"

#include <gtest/gtest.h>

namespace ag::runtime {
namespace {

ImageRows Rows(size_t floats, float value) {
  return std::make_shared<const UninitializedVector<float>>(floats, value);
}

TEST(EncoderCache, EvictsTheLeastRecentlyUsedPastItsBudget) {
  EncoderCache cache(3 * 100 * sizeof(float));
  cache.Insert({1, 0}, Rows(100, 1));
  cache.Insert({2, 0}, Rows(100, 2));
  cache.Insert({3, 0}, Rows(100, 3));
  ASSERT_NE(cache.Find({1, 0}), nullptr);  // 1 is the most recent now: 2 goes first
  cache.Insert({4, 0}, Rows(100, 4));
  EXPECT_EQ(cache.Find({2, 0}), nullptr);
  EXPECT_EQ(cache.Find({1, 0})->front(), 1.0f);
  EXPECT_EQ(cache.Find({3, 0})->front(), 3.0f);
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_EQ(cache.bytes(), 300 * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(cache.hits(), 3);
  EXPECT_EQ(cache.misses(), 1);
  // Rows handed out stay valid after their entry is evicted; one entry over the budget is not kept.
  const ImageRows held = cache.Find({3, 0});
  cache.Insert({5, 0}, Rows(1000, 5));
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(held->size(), 100u);
  EncoderCache none(0);
  none.Insert({1, 1}, Rows(1, 1));
  EXPECT_EQ(none.Find({1, 1}), nullptr);
}

TEST(ImageKey, TellsImagesAndRowsApartAndNeverLooksLikeTokens) {
  std::vector<int32_t> a, b, c;
  AppendImageKey({1, 2}, 0, &a);
  AppendImageKey({1, 3}, 0, &b);
  AppendImageKey({1, 2}, 16, &c);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_LT(a.front(), 0);
  EXPECT_LT(c.front(), 0);
}

}  // namespace
}  // namespace ag::runtime
