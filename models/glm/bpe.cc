#include "models/glm/bpe.h"

#include <queue>
#include <tuple>

namespace ag::glm {

void BytePairMerge(absl::string_view piece, const RankFn& rank, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 0) return;
  // parts[i] = (start of part i, rank of part i joined with part i+1); two sentinels at the end.
  std::vector<std::pair<size_t, int32_t>> parts;
  parts.reserve(n + 1);
  for (size_t i = 0; i + 1 < n; ++i) parts.emplace_back(i, rank(piece.substr(i, 2)));
  parts.emplace_back(n - 1, kNoRank);
  parts.emplace_back(n, kNoRank);
  auto pair_rank = [&](size_t i) {
    return i + 3 < parts.size() ? rank(piece.substr(parts[i].first, parts[i + 3].first - parts[i].first)) : kNoRank;
  };
  while (true) {
    int32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].second < best) {
        best = parts[i].second;
        at = i;
      }
    }
    if (best == kNoRank) break;
    if (at > 0) parts[at - 1].second = pair_rank(at - 1);
    parts[at].second = pair_rank(at);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    out->push_back(rank(piece.substr(parts[i].first, parts[i + 1].first - parts[i].first)));
  }
}

void BytePairMergeHeap(absl::string_view piece, const RankFn& rank, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 0) return;
  // Parts are a linked list over their start offsets; n is the end sentinel.
  std::vector<size_t> next(n + 1), prev(n + 1);
  std::vector<uint32_t> version(n + 1, 0);
  std::vector<bool> alive(n + 1, true);
  for (size_t i = 0; i <= n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? 0 : i - 1;
  }
  using Entry = std::tuple<int32_t, size_t, uint32_t>;  // rank, start (leftmost wins ties), version
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](size_t i) {  // the pair (part i, the part after it)
    if (i >= n || next[i] >= n) return;
    const int32_t r = rank(piece.substr(i, next[next[i]] - i));
    if (r != kNoRank) heap.emplace(r, i, version[i]);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [r, i, v] = heap.top();
    heap.pop();
    if (!alive[i] || v != version[i] || next[i] >= n) continue;  // stale
    const size_t j = next[i];
    alive[j] = false;
    next[i] = next[j];
    prev[next[j]] = i;
    ++version[i];
    push(i);
    if (i > 0) {
      const size_t p = prev[i];
      ++version[p];
      push(p);
    }
  }
  for (size_t i = 0; i < n; i = next[i]) out->push_back(rank(piece.substr(i, next[i] - i)));
}

}  // namespace ag::glm
