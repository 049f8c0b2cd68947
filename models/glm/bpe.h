// Byte-pair merging by rank, as tiktoken does it: start from single bytes and
// repeatedly merge the adjacent pair whose concatenation has the lowest rank
// (the leftmost such pair on ties) until no adjacent pair is a token.
#ifndef AUTOGLM_MODELS_GLM_BPE_H_
#define AUTOGLM_MODELS_GLM_BPE_H_

#include <climits>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/strings/string_view.h"

namespace ag::glm {

inline constexpr int32_t kNoRank = INT32_MAX;
// Rank of a byte string, kNoRank when it is not a token. Single bytes must be tokens.
using RankFn = std::function<int32_t(absl::string_view)>;

// tiktoken's loop, O(n^2) in the piece length: best for short pieces.
void BytePairMerge(absl::string_view piece, const RankFn& rank, std::vector<int32_t>* out);
// The same merges in the same order with a heap over linked parts: O(n log n).
void BytePairMergeHeap(absl::string_view piece, const RankFn& rank, std::vector<int32_t>* out);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_BPE_H_
