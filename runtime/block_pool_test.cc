#include "runtime/block_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace ag::runtime {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(4);
  std::set<int32_t> got;
  for (int i = 0; i < 4; ++i) got.insert(*pool.Allocate());
  EXPECT_EQ(got, (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  absl::StatusOr<int32_t> none = pool.Allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(BlockPool, ReferenceCountsShareBlocks) {
  BlockPool pool(2);
  const int32_t b = *pool.Allocate();
  pool.Retain(b);
  EXPECT_EQ(pool.refcount(b), 2);
  pool.Release(b);
  EXPECT_EQ(pool.num_free(), 1) << "still held once";
  pool.Release(b);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.refcount(b), 0);
}

TEST(BlockTable, ReservesSlotsAndGivesBackOnFailure) {
  BlockPool pool(5);
  BlockTable a(4), b(4);
  ASSERT_TRUE(a.Reserve(pool, 9).ok());  // 3 blocks
  EXPECT_EQ(a.capacity(), 12);
  EXPECT_EQ(a.Slot(0), a.blocks()[0] * 4);
  EXPECT_EQ(a.Slot(9), a.blocks()[2] * 4 + 1);
  EXPECT_FALSE(b.Reserve(pool, 12).ok()) << "needs 3, 2 left";
  EXPECT_EQ(pool.num_free(), 2) << "a failed reservation keeps nothing";
  EXPECT_TRUE(b.Reserve(pool, 8).ok());
  a.ReleaseAll(pool);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(a.capacity(), 0);
}

TEST(BlockPool, PrefixCacheKeepsFindsAndEvictsLeastRecentlyUsed) {
  BlockPool pool(3);
  const std::vector<int32_t> t1 = {1, 2}, t2 = {3, 4}, t3 = {5, 6};
  const uint64_t h1 = PrefixHash(0, t1), h2 = PrefixHash(h1, t2), h3 = PrefixHash(0, t3);
  EXPECT_NE(PrefixHash(0, t2), h2) << "the same block after another prefix hashes apart";
  const int32_t a = *pool.Allocate(), b = *pool.Allocate();
  pool.Register(a, h1, t1);
  pool.Register(b, h2, t2);
  pool.Release(a);
  pool.Release(b);
  EXPECT_EQ(pool.num_free(), 3) << "cached blocks nobody holds can be handed out";
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.Lookup(h1, t1), a);  // found, and held again
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.Lookup(h1, t3), -1) << "same hash, other tokens: a collision never matches";
  pool.Release(a);  // now a is the most recently used
  const int32_t c = *pool.Allocate();  // the free block first
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  const int32_t evicted = *pool.Allocate();  // then the least recently used cached block: b
  EXPECT_EQ(evicted, b);
  EXPECT_EQ(pool.Lookup(h2, t2), -1);
  EXPECT_EQ(pool.Lookup(h1, t1), a);
  pool.Register(c, h3, t3);
  pool.Register(c, h3, t3);  // twice is once
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_FALSE(pool.Allocate().ok());
}

}  // namespace
}  // namespace ag::runtime
