#include "runtime/backend.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/ref/half.h"

namespace ag::runtime {
namespace {

std::vector<float> Ramp(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + 0.37f * static_cast<float>(i) - 1000.0f;
  return v;
}

TEST(FloatParts, AppendMergesPiecesThatFollowEachOther) {
  const std::vector<float> a = Ramp(100, 0);
  FloatParts parts;
  EXPECT_TRUE(parts.empty());
  parts.Append(a.data(), 40);
  parts.Append(a.data() + 40, 60);  // follows the first: one piece
  EXPECT_EQ(parts.pieces(), 1);
  parts.Append(a.data(), 0);  // nothing: no piece
  EXPECT_EQ(parts.pieces(), 1);
  parts.Append(a.data(), 10);  // does not follow: a second piece
  EXPECT_EQ(parts.pieces(), 2);
  EXPECT_EQ(parts.size(), 110);
  EXPECT_EQ(FloatParts(a).pieces(), 1);
  const std::vector<float> none;
  EXPECT_EQ(FloatParts(none).pieces(), 0);
}

// Pieces big enough to be split over the cores, and small ones, read in order into one buffer:
// as they are, and rounded to bf16 exactly as the one-value conversion rounds.
TEST(FloatParts, CopiesEveryPieceInOrder) {
  const std::vector<float> big = Ramp(3 << 19, 1), small = Ramp(7, 2), other = Ramp(1 << 20, 3);
  FloatParts parts;
  parts.Append(big.data(), static_cast<int64_t>(big.size()));
  parts.Append(small.data(), 7);
  parts.Append(other.data() + 5, 1000);
  parts.Append(other.data() + 1005, static_cast<int64_t>(other.size()) - 1005);
  ASSERT_EQ(parts.pieces(), 3);
  std::vector<float> want(big);
  want.insert(want.end(), small.begin(), small.end());
  want.insert(want.end(), other.begin() + 5, other.end());
  ASSERT_EQ(parts.size(), static_cast<int64_t>(want.size()));

  std::vector<float> got(want.size(), -1.0f);
  parts.CopyTo(got.data());
  EXPECT_EQ(got, want);
  std::vector<uint16_t> halves(want.size(), 0xFFFF);
  parts.CopyToBF16(halves.data());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(halves[i], FloatToBF16(want[i])) << "value " << i;
}

// The decode rows a mixed step leads with (the engine schedules them first): one-row sequences up
// to the first longer one; a one-row sequence after a prompt is not counted (the attention's flash
// launch takes the sequences after the count, in order).
TEST(StepBatch, LeadingDecodeSeqsCountsOneRowSequencesFirst) {
  StepBatch b;
  b.num_seqs = 5;
  b.seq_offsets = {0, 1, 2, 3, 133, 134};  // three decode rows, a 130-token prompt, one more row
  EXPECT_EQ(b.LeadingDecodeSeqs(), 3);
  b.seq_offsets = {0, 5, 6, 7, 8, 9};
  EXPECT_EQ(b.LeadingDecodeSeqs(), 0);
  b.seq_offsets = {0, 1, 2, 3, 4, 5};  // a decode step: every sequence
  EXPECT_EQ(b.LeadingDecodeSeqs(), 5);
  b.num_seqs = 0;
  b.seq_offsets = {0};
  EXPECT_EQ(b.LeadingDecodeSeqs(), 0);
}

}  // namespace
}  // namespace ag::runtime
