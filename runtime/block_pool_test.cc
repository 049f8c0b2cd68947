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

}  // namespace
}  // namespace ag::runtime
