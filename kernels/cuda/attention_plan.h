// How paged attention divides its work (kernels/cuda/attention.cu): per
// (query row, KV head), blocks over chunks of the group's query heads and
// slices of the context. Plain C++, so that a CPU test checks the cover.
#ifndef AUTOGLM_KERNELS_CUDA_ATTENTION_PLAN_H_
#define AUTOGLM_KERNELS_CUDA_ATTENTION_PLAN_H_

#include <algorithm>
#include <cstdint>

namespace ag::cuda {

inline constexpr int kAttentionTile = 32;       // keys per tile, one per lane
inline constexpr int kAttentionMaxSlices = 64;  // slices per (row, KV head), at most

// The most blocks a grid's y or z dimension takes (x takes 2^31 - 1).
inline constexpr int64_t kMaxGridYZ = 65535;

// Launches cover `rows` query rows in chunks of at most kMaxGridYZ (the
// attention kernels put rows on grid y or z): chunk i starts at row
// i * kMaxGridYZ. A plan allows 2^20 rows a step.
inline int64_t RowChunks(int64_t rows) { return (std::max<int64_t>(rows, 0) + kMaxGridYZ - 1) / kMaxGridYZ; }
inline int64_t RowChunkSize(int64_t rows, int64_t chunk) {
  return std::min(kMaxGridYZ, rows - chunk * kMaxGridYZ);
}

struct AttentionGeometry {
  int heads_per_warp = 1;  // 1, 2, 4 or 8: the kernel instance; a block takes 4 * heads_per_warp query heads
  int head_chunks = 1;     // blocks per (row, KV head, slice)
  int slices = 1;
  int slice_keys = kAttentionTile;  // a multiple of kAttentionTile
};

// Fills the GPU (two blocks per multiprocessor) at every context length: a
// decode step (few query rows) first gives each block fewer of the group's
// query heads, then splits the context into more slices; prefill (many rows)
// needs neither.
inline AttentionGeometry PlanAttention(int64_t rows_of_queries, int64_t kv_heads, int64_t group, int64_t max_context,
                                       int multiprocessors) {
  const int64_t target = 2 * static_cast<int64_t>(multiprocessors > 0 ? multiprocessors : 132);
  const int64_t ctx = std::max<int64_t>(max_context, 1);
  const int64_t rows = std::max<int64_t>(rows_of_queries * kv_heads, 1);
  const int64_t most_slices = std::min<int64_t>(kAttentionMaxSlices, (ctx + kAttentionTile - 1) / kAttentionTile);
  auto chunks = [&](int hpw) { return (group + 4 * hpw - 1) / (4 * hpw); };
  int hpw = 1;
  while (hpw < 8 && 4 * hpw < group) hpw *= 2;
  while (hpw > 1 && rows * chunks(hpw) * most_slices < target) hpw /= 2;
  const int64_t blocks_per_slice = rows * chunks(hpw);
  const int64_t wanted = std::clamp<int64_t>((target + blocks_per_slice - 1) / blocks_per_slice, 1, most_slices);
  int64_t keys = (ctx + wanted - 1) / wanted;
  keys = (keys + kAttentionTile - 1) / kAttentionTile * kAttentionTile;
  return {hpw, static_cast<int>(chunks(hpw)), static_cast<int>((ctx + keys - 1) / keys), static_cast<int>(keys)};
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_ATTENTION_PLAN_H_
