// The in-process communicator: sums in rank order (f32 and bf16), all-gather,
// barrier, ranks that disagree, and an abort that wakes a waiting rank.
#include "runtime/communicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "kernels/ref/half.h"

namespace ag::runtime {
namespace {

// Runs `body(rank)` on `n` threads; returns each rank's status.
std::vector<absl::Status> OnRanks(int n, const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = body(r); });
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(InProcessGroup, AllReduceSumsInRankOrderForF32AndBf16) {
  constexpr int kRanks = 4, kCount = 1000;
  InProcessGroup group(kRanks);
  std::vector<std::vector<float>> f(kRanks);
  std::vector<std::vector<uint16_t>> h(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kCount; ++i) {
      f[r].push_back(0.1f * static_cast<float>(r + 1) + 1e-7f * static_cast<float>(i));
      h[r].push_back(FloatToBF16(static_cast<float>(r) - 1.5f + 0.01f * static_cast<float>(i % 7)));
    }
  }
  const std::vector<std::vector<float>> f_in = f;
  const std::vector<std::vector<uint16_t>> h_in = h;
  for (const absl::Status& s : OnRanks(kRanks, [&](int r) {
         absl::Status ok = group.rank(r).AllReduceSum(f[r].data(), kCount, ir::DType::kF32, nullptr);
         return ok.ok() ? group.rank(r).AllReduceSum(h[r].data(), kCount, ir::DType::kBF16, nullptr) : ok;
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int i = 0; i < kCount; ++i) {
    float fs = f_in[0][i], hs = BF16ToFloat(h_in[0][i]);
    for (int r = 1; r < kRanks; ++r) {
      fs += f_in[r][i];
      hs += BF16ToFloat(h_in[r][i]);
    }
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(f[r][i], fs) << "the same bits on every rank, rank order";
      ASSERT_EQ(h[r][i], FloatToBF16(hs));
    }
  }
}

TEST(InProcessGroup, AllGatherPlacesEachRankAtItsOffsetAndBarrierMeets) {
  constexpr int kRanks = 3;
  InProcessGroup group(kRanks);
  std::vector<std::vector<float>> got(kRanks, std::vector<float>(2 * kRanks));
  for (const absl::Status& s : OnRanks(kRanks, [&](int r) {
         const float mine[2] = {static_cast<float>(r), static_cast<float>(10 * r)};
         absl::Status ok = group.rank(r).AllGather(mine, got[r].data(), 2, ir::DType::kF32, nullptr);
         return ok.ok() ? group.rank(r).Barrier() : ok;
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[r], (std::vector<float>{0, 0, 1, 10, 2, 20}));
}

TEST(InProcessGroup, RanksThatDisagreeFailInsteadOfMixingBuffers) {
  InProcessGroup group(2);
  std::vector<float> a(8), b(4);
  const std::vector<absl::Status> s = OnRanks(2, [&](int r) {
    return r == 0 ? group.rank(0).AllReduceSum(a.data(), 8, ir::DType::kF32, nullptr)
                  : group.rank(1).AllReduceSum(b.data(), 4, ir::DType::kF32, nullptr);
  });
  for (const absl::Status& st : s) {
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("disagree"), std::string::npos) << st;
  }
}

TEST(InProcessGroup, AbortWakesAWaitingRankAndStaysAborted) {
  InProcessGroup group(2);
  float x = 1.0f;
  absl::Status waited;
  std::thread rank0([&] { waited = group.rank(0).AllReduceSum(&x, 1, ir::DType::kF32, nullptr); });
  group.Abort(absl::AbortedError("rank 1 failed"));  // rank 1 never arrives
  rank0.join();
  EXPECT_TRUE(absl::IsAborted(waited)) << waited;
  EXPECT_EQ(waited.message(), "rank 1 failed");
  EXPECT_TRUE(absl::IsAborted(group.rank(1).Barrier()));
  EXPECT_FALSE(group.rank(0).AllReduceSum(&x, 1, ir::DType::kF16, nullptr).ok()) << "f16 is not offered";
}

}  // namespace
}  // namespace ag::runtime
