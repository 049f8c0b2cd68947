#include "kernels/ref/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace ag {
namespace {

// Every item is visited exactly once, the parts are contiguous and in order, and the calling
// thread's part is part 0, whatever the number of items and parts.
TEST(Parallel, PartsCoverTheRangeExactlyOnce) {
  for (int64_t n : {0, 1, 2, 7, 64, 1000, 1001}) {
    for (int64_t parts : {1, 2, 3, 8, 5000}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      std::vector<std::pair<int64_t, int64_t>> ranges(static_cast<size_t>(std::max<int64_t>(parts, 1)), {-1, -1});
      ParallelParts(n, parts, [&](int64_t begin, int64_t end, int64_t part) {
        ranges[static_cast<size_t>(part)] = {begin, end};
        for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(visits[static_cast<size_t>(i)], 1) << "n " << n << " parts " << parts;
      EXPECT_EQ(ranges[0].first, 0);
      const int64_t used = std::clamp<int64_t>(parts, 1, std::max<int64_t>(n, 1));
      for (int64_t p = 1; p < used; ++p) EXPECT_EQ(ranges[p].first, ranges[p - 1].second) << "n " << n;
      EXPECT_EQ(ranges[used - 1].second, n);
      for (int64_t p = used; p < parts; ++p) EXPECT_EQ(ranges[p].first, -1) << "part " << p << " of " << n << " items";
    }
  }
}

TEST(Parallel, SmallLoopsStayOnOneThread) {
  EXPECT_EQ(ThreadsFor(0, 100), 1);
  EXPECT_EQ(ThreadsFor(199, 100), 1);
  EXPECT_GE(ThreadsFor(1 << 30, 1), 1);
  EXPECT_LE(ThreadsFor(1 << 30, 1), std::max<int64_t>(1, std::thread::hardware_concurrency()));
  // ParallelFor with a minimum above the count runs the whole loop on the caller.
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  ParallelFor(50, 100, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 50);
  });
  EXPECT_EQ(calls, 1);
}

TEST(Parallel, UninitializedVectorKeepsGivenValues) {
  UninitializedVector<float> filled(5, 2.5f);
  for (float v : filled) EXPECT_EQ(v, 2.5f);
  UninitializedVector<float> grown;
  grown.push_back(1.0f);
  grown.resize(1000);  // the new values are unspecified; the old one is kept
  EXPECT_EQ(grown.front(), 1.0f);
  EXPECT_EQ(grown.size(), 1000u);
}

}  // namespace
}  // namespace ag
