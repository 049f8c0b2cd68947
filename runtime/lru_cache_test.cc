#include "runtime/lru_cache.h"

#include <gtest/gtest.h>

#include <memory>

namespace ag::runtime {
namespace {

TEST(LruCache, DropsTheLeastRecentlyUsed) {
  LruCache<int> cache(2);
  EXPECT_EQ(cache.Put("a", 1), 1);
  EXPECT_EQ(cache.Put("b", 2), 2);
  EXPECT_EQ(cache.Find("a"), 1);  // a is now the most recent: b goes first
  EXPECT_EQ(cache.Put("c", 3), 3);
  EXPECT_EQ(cache.Find("b"), std::nullopt);
  EXPECT_EQ(cache.Find("a"), 1);
  EXPECT_EQ(cache.Put("a", 9), 1) << "the first made stays";
  EXPECT_EQ(cache.size(), 2u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.Find("c"), std::nullopt);
}

TEST(LruCache, KeepsNoFailureAndFreesWhatItDrops) {
  LruCache<std::shared_ptr<int>> cache(1);
  int made = 0;
  auto make = [&]() -> absl::StatusOr<std::shared_ptr<int>> { return std::make_shared<int>(++made); };
  EXPECT_FALSE(cache.Get("x", [] { return absl::StatusOr<std::shared_ptr<int>>(absl::InvalidArgumentError("no")); }).ok());
  EXPECT_EQ(cache.size(), 0u);
  std::weak_ptr<int> first = *cache.Get("x", make);
  EXPECT_EQ(**cache.Get("x", make), 1) << "made once";
  EXPECT_FALSE(first.expired());
  EXPECT_EQ(**cache.Get("y", make), 2);
  EXPECT_TRUE(first.expired()) << "dropped and released";
}

}  // namespace
}  // namespace ag::runtime
