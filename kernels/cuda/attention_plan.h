// How paged attention divides its work (kernels/cuda/attention.cu): per
// (query row, KV head), blocks over chunks of the group's query heads and
// slices of the context; and how the tensor-core flash kernel
// (flash_attention.cuh) tiles prefill rows. Plain C++, so that a CPU test
// checks the cover.
#ifndef AUTOGLM_KERNELS_CUDA_ATTENTION_PLAN_H_
#define AUTOGLM_KERNELS_CUDA_ATTENTION_PLAN_H_

#include <algorithm>
#include <cstdint>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ag::cuda {

inline constexpr int kAttentionTile = 32;       // keys per tile, one per lane
inline constexpr int kAttentionMaxSlices = 64;  // slices per (row, KV head), at most

// The most blocks a grid's y or z dimension takes (x takes 2^31 - 1).
inline constexpr int64_t kMaxGridYZ = 65535;

// Launches cover `rows` query rows in chunks of at most kMaxGridYZ (the
// attention kernels put rows on grid y or z): chunk i starts at row
// i * kMaxGridYZ. A plan allows 2^20 rows a step.
// The cache row (slot) holding key `key` of a sequence whose pages are `table`. Keys are positions
// below a context length (int32) and pages hold fewer than 2^31 rows, so the page and the offset come
// from a 32-bit division (a 64-bit one is a called routine of ~70 instructions on the GPU, paid per
// key copy in the paged kernels).
AG_HOST_DEVICE inline int64_t PagedSlot(const int32_t* table, int64_t block_size, int64_t key) {
  const uint32_t k = static_cast<uint32_t>(key), bs = static_cast<uint32_t>(block_size);
  const uint32_t page = k / bs;
  return static_cast<int64_t>(table[page]) * block_size + (k - page * bs);
}

// Keys a slice when `ctx` keys are cut into about `slices` slices of whole `tile`-key tiles (the
// decode kernels' split); ceil(ctx / that) slices then cover the context.
inline int64_t SliceKeys(int64_t ctx, int64_t slices, int64_t tile) {
  const int64_t keys = (ctx + slices - 1) / slices;
  return (keys + tile - 1) / tile * tile;
}

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
  const int64_t keys = SliceKeys(ctx, wanted, kAttentionTile);
  return {hpw, static_cast<int>(chunks(hpw)), static_cast<int>((ctx + keys - 1) / keys), static_cast<int>(keys)};
}

// ---- the grouped-query decode kernel (attention_gqa.cu) ----
//
// A block takes a query row, a KV head (all of its group's query heads) and a slice of the context
// in tiles of kGqaKeys, so its slices are whole tiles. Up to kGqaFoldMaxSlices slices a row are one
// thread-block cluster that merges its slices' answers through distributed shared memory: no
// partials in global memory and no combine launch (one launch a layer fewer at every decode batch
// of GLM-4-9B at context 512). More slices (long contexts at small batches) keep the combine step.
inline constexpr int kGqaKeys = 64;
inline constexpr int kGqaFoldMaxSlices = 8;  // a portable cluster's most blocks

// The heads it is built for (a bf16 cache besides): head_dim 64 or 128, 4-16 query heads a KV head
// (fewer leave most of the mma's 16 rows empty: the slice kernel takes them).
inline bool GqaDecodeShape(int64_t head_dim, int64_t group) {
  return (head_dim == 64 || head_dim == 128) && group >= 4 && group <= 16;
}

struct GqaGeometry {
  int slices = 1;
  int slice_keys = kGqaKeys;  // a multiple of kGqaKeys
  bool fold = false;          // slices merged in a cluster (2 .. kGqaFoldMaxSlices slices)
};

// The query heads block `rank` of a folding cluster of `slices` finishes: group rows rank,
// rank + slices, ... below `group`, this many.
AG_HOST_DEVICE inline int GqaFoldRows(int group, int rank, int slices) {
  return rank < group ? (group - rank + slices - 1) / slices : 0;
}

// Fills the GPU (two blocks a multiprocessor) with rows x kv_heads x slices blocks; but a context of
// at most kGqaFoldMaxSlices slices of two tiles takes that many and folds (at batch 1 and 1,024 keys:
// a second tile a block rather than a combine launch and twice the blocks).
inline constexpr int64_t kGqaFoldMaxContext = int64_t{kGqaFoldMaxSlices} * 2 * kGqaKeys;
inline GqaGeometry PlanGqaDecode(int64_t rows_of_queries, int64_t kv_heads, int64_t max_context, int multiprocessors) {
  const int64_t target = 2 * static_cast<int64_t>(multiprocessors > 0 ? multiprocessors : 132);
  const int64_t ctx = std::max<int64_t>(max_context, 1);
  const int64_t blocks_per_slice = std::max<int64_t>(rows_of_queries * kv_heads, 1);
  const int64_t most_slices = std::min<int64_t>(kAttentionMaxSlices, (ctx + kGqaKeys - 1) / kGqaKeys);
  int64_t wanted = std::clamp<int64_t>((target + blocks_per_slice - 1) / blocks_per_slice, 1, most_slices);
  if (ctx <= kGqaFoldMaxContext) wanted = std::min<int64_t>(wanted, kGqaFoldMaxSlices);
  const int64_t keys = SliceKeys(ctx, wanted, kGqaKeys);
  const int slices = static_cast<int>((ctx + keys - 1) / keys);
  return {slices, static_cast<int>(keys), slices > 1 && slices <= kGqaFoldMaxSlices};
}

// ---- flash attention (prefill) ----
//
// A block takes 64 query rows of one sequence (segment) and one query head,
// and streams the sequence's keys in tiles of 64. The grid does not depend on
// the row counts (CUDA graphs replay it): floor(rows / 64) + sequences blocks
// cover sum ceil(n_s / 64) tiles, and the blocks past the last tile leave.
inline constexpr int kFlashRows = 64;
inline constexpr int kFlashKeys = 64;
// The flash kernel takes a step when its sequences average this many new rows
// (below, the slice kernel wastes fewer tensor-core rows than flash would).
inline constexpr int kFlashMinRowsPerSequence = 16;

// The head sizes the flash kernel is built for (flash_attention_impl.cuh's instances).
inline bool FlashHeadDim(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// `tile_rows`: the wgmma kernel's blocks take 128 rows (two warpgroups of 64 sharing K and V).
inline int64_t FlashGridTiles(int64_t rows, int64_t sequences, int64_t tile_rows = kFlashRows) {
  return rows / tile_rows + sequences;
}

inline bool UseFlashAttention(int64_t rows, int64_t sequences) {
  return sequences > 0 && rows >= kFlashMinRowsPerSequence * sequences;
}

struct FlashTile {
  int seq = -1;        // -1: past the last tile
  int64_t first = 0;   // its first query row
  int rows = 0;        // 1..tile_rows
};

// Tile `index`: sequences in order (offsets [sequences + 1], non-decreasing), each sequence's tiles
// from its last. Under the causal mask a sequence's last tile sees the most keys, so the grid's
// first blocks are its longest and its last blocks the shortest: the final wave drains quickly
// instead of waiting on a full-length block that started last (a 4096-token prompt: 64 tiles a
// head, the longest 64 times the first's work). Tiles of `tile_rows` rows (FlashGridTiles's).
AG_HOST_DEVICE inline FlashTile FlashTileOf(const int32_t* offsets, int64_t sequences, int64_t index,
                                            int64_t tile_rows = kFlashRows) {
  FlashTile tile;
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t n = offsets[s + 1] - offsets[s];
    const int64_t tiles = n > 0 ? (n + tile_rows - 1) / tile_rows : 0;
    if (index < tiles) {
      const int64_t j = tiles - 1 - index;  // the tile's place in its sequence
      const int64_t left = n - j * tile_rows;
      tile.seq = static_cast<int>(s);
      tile.first = offsets[s] + j * tile_rows;
      tile.rows = static_cast<int>(left < tile_rows ? left : tile_rows);
      return tile;
    }
    index -= tiles;
  }
  return tile;
}

// The flash kernels' mask for one row of a score tile (keys key0 .. key0 + tile_keys - 1): the
// row sees key key0 + c when c <= LastVisibleColumn, i.e. when the key is at most last_key and
// below `keys`. Clamped to [-1, tile_keys - 1], so that each score costs one 32-bit compare rather
// than a 64-bit add and two 64-bit compares (a third of the softmax's instructions before).
AG_HOST_DEVICE inline int LastVisibleColumn(int64_t key0, int64_t last_key, int64_t keys, int tile_keys) {
  const int64_t last = (last_key < keys - 1 ? last_key : keys - 1) - key0;
  return static_cast<int>(last < -1 ? -1 : last >= tile_keys ? tile_keys - 1 : last);
}

// The key tiles (of kFlashKeys) that every row of a group of query rows sees whole, so that the
// wgmma flash kernel skips their mask: tiles 0 .. WholeKeyTiles - 1. `least_last_key` is the least
// of the rows' last keys (causal: the group's first row's position; a segment: keys - 1).
AG_HOST_DEVICE inline int64_t WholeKeyTiles(int64_t least_last_key, int64_t keys) {
  const int64_t last = least_last_key < keys - 1 ? least_last_key : keys - 1;
  return last < 0 ? 0 : (last + 1) / kFlashKeys;
}

// ---- the wgmma flash kernel over the paged cache: key tiles as TMA boxes ----
//
// A 64-key tile is loaded as boxes of PagedBoxRows rows: a whole page when pages are 8, 16 or 32
// rows, 64 rows of one page when pages are a multiple of 64, so that no box crosses a page. Boxes
// of whole 8-row swizzle atoms land 1,024-byte aligned, where the 128-byte swizzle lays them out
// as one 64-row box would.
AG_HOST_DEVICE inline bool PagedBoxesFit(int64_t block_size) {
  return block_size >= 8 && block_size % 8 == 0 && (kFlashKeys % block_size == 0 || block_size % kFlashKeys == 0);
}
AG_HOST_DEVICE inline int PagedBoxRows(int64_t block_size) {
  return static_cast<int>(block_size < kFlashKeys ? block_size : kFlashKeys);
}
// The cache row where the box of keys key .. key + box rows - 1 starts (key a multiple of the box's
// rows; table: the sequence's pages), or `past`, a row beyond the cache (TMA writes zeros), for a box
// wholly past the keys the tile sees: its pages may not exist. Rows of a box past `keys` within a
// real page are the page's (finite: the cache starts zeroed) and masked.
AG_HOST_DEVICE inline int64_t PagedBoxRow(const int32_t* table, int64_t block_size, int64_t key, int64_t keys,
                                          int64_t past) {
  return key >= keys ? past : PagedSlot(table, block_size, key);
}

}  // namespace ag::cuda

#undef AG_HOST_DEVICE

#endif  // AUTOGLM_KERNELS_CUDA_ATTENTION_PLAN_H_
