// Paged attention's work split and the flash kernels' tiles, checked on the CPU (attention_plan.h):
// decode fills the GPU and its head chunks and context slices cover the group and the context; rows
// go on the grid in chunks within its limit; the flash kernels' tiles cover every row once, longest
// first; their mask is one 32-bit compare and whole tiles need none; the wgmma kernel's key tiles
// over the paged cache are boxes of one page each.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/attention_plan.h"

namespace ag::cuda {
namespace {

TEST(AttentionPlan, GlmDecodeFillsTheGpu) {
  // GLM-4-9B: 2 KV heads, groups of 16. Batch 1 at 512 tokens: one head per warp (4 chunks), 16 slices
  // of one tile: 128 blocks, where whole groups and 32-key slices gave 32.
  AttentionGeometry g = PlanAttention(1, 2, 16, 512, 132);
  EXPECT_EQ(g.heads_per_warp, 1);
  EXPECT_EQ(g.head_chunks, 4);
  EXPECT_EQ(g.slices, 16);
  // 4096 tokens: 256 blocks.
  g = PlanAttention(1, 2, 16, 4096, 132);
  EXPECT_EQ(2 * g.head_chunks * g.slices, 256);
  // Batch 32 at 512: whole groups, 4 slices: 256 blocks.
  g = PlanAttention(32, 2, 16, 512, 132);
  EXPECT_EQ(g.heads_per_warp, 4);
  EXPECT_EQ(32 * 2 * g.head_chunks * g.slices, 256);
  // A 512-token prefill: no split at all.
  g = PlanAttention(512, 2, 16, 512, 132);
  EXPECT_EQ(g.head_chunks, 1);
  EXPECT_EQ(g.slices, 1);
}

TEST(AttentionPlan, ChunksCoverTheGroupAndSlicesTheContext) {
  for (int64_t rows : {1, 2, 7, 64, 512}) {
    for (int64_t group : {1, 3, 4, 5, 16, 17, 32, 33, 96}) {
      for (int64_t ctx : {1, 31, 32, 33, 512, 4096, 131072}) {
        const AttentionGeometry g = PlanAttention(rows, 2, group, ctx, 132);
        SCOPED_TRACE(::testing::Message() << rows << " rows, group " << group << ", context " << ctx);
        const int64_t per_block = 4 * g.heads_per_warp;
        EXPECT_GE(g.head_chunks * per_block, group);
        EXPECT_LT((g.head_chunks - 1) * per_block, group);
        EXPECT_EQ(g.slice_keys % kAttentionTile, 0);
        EXPECT_GE(int64_t{g.slices} * g.slice_keys, ctx);
        EXPECT_LT(int64_t{g.slices - 1} * g.slice_keys, ctx);
        EXPECT_LE(g.slices, kAttentionMaxSlices);
      }
    }
  }
}

// The grouped-query decode kernel at GLM-4-9B's geometry (2 KV heads): at context 512 every decode
// batch the issue measures merges its slices in a cluster (no combine launch); batch 1 at 4096 keys
// keeps 64 slices and the combine step.
TEST(AttentionPlan, GlmGqaDecodeFoldsItsSlicesAtContext512) {
  for (int64_t batch : {1, 8, 32, 64}) {
    const GqaGeometry g = PlanGqaDecode(batch, 2, 512, 132);
    SCOPED_TRACE(batch);
    EXPECT_TRUE(g.fold);
    EXPECT_GE(g.slices, 2);
  }
  EXPECT_EQ(PlanGqaDecode(1, 2, 512, 132).slices, 8);   // a 64-key tile a block: 16 blocks
  EXPECT_EQ(PlanGqaDecode(32, 2, 512, 132).slices, 4);  // 128-key slices: 256 blocks
  // Context buckets of 1,024 fold too (8 slices of two tiles); 2,048 keeps 32 slices and the combine.
  for (int64_t batch : {1, 8}) {
    const GqaGeometry g = PlanGqaDecode(batch, 2, 1024, 132);
    EXPECT_TRUE(g.fold);
    EXPECT_EQ(g.slices, 8);
    EXPECT_EQ(g.slice_keys, 128);
    EXPECT_FALSE(PlanGqaDecode(batch, 2, 2048, 132).fold);
  }
  const GqaGeometry long_context = PlanGqaDecode(1, 2, 4096, 132);
  EXPECT_EQ(long_context.slices, 64);
  EXPECT_FALSE(long_context.fold);
  EXPECT_FALSE(PlanGqaDecode(200, 2, 512, 132).fold);  // 400 blocks in one slice: nothing to merge
  EXPECT_EQ(PlanGqaDecode(200, 2, 512, 132).slices, 1);
}

TEST(AttentionPlan, GqaSlicesAreWholeTilesCoveringTheContext) {
  for (int64_t rows : {1, 2, 7, 64, 512}) {
    for (int64_t kv_heads : {1, 2, 8}) {
      for (int64_t ctx : {1, 63, 64, 65, 300, 512, 4096, 131072}) {
        const GqaGeometry g = PlanGqaDecode(rows, kv_heads, ctx, 132);
        SCOPED_TRACE(::testing::Message() << rows << " rows, " << kv_heads << " KV heads, context " << ctx);
        EXPECT_EQ(g.slice_keys % kGqaKeys, 0);
        EXPECT_GE(int64_t{g.slices} * g.slice_keys, ctx);
        EXPECT_LT(int64_t{g.slices - 1} * g.slice_keys, ctx);
        EXPECT_LE(g.slices, kAttentionMaxSlices);
        EXPECT_EQ(g.fold, g.slices >= 2 && g.slices <= kGqaFoldMaxSlices);
      }
    }
  }
}

// A folding cluster's blocks finish every query head of the group once between them.
TEST(AttentionPlan, GqaFoldRowsCoverTheGroupOnce) {
  for (int slices = 2; slices <= kGqaFoldMaxSlices; ++slices) {
    for (int group = 4; group <= 16; ++group) {
      std::vector<int> finished(group, 0);
      for (int rank = 0; rank < slices; ++rank) {
        for (int i = 0; i < GqaFoldRows(group, rank, slices); ++i) {
          const int row = rank + slices * i;
          ASSERT_LT(row, group) << slices << " slices, group " << group << ", rank " << rank;
          ++finished[row];
        }
      }
      for (int row = 0; row < group; ++row) EXPECT_EQ(finished[row], 1) << slices << " slices, group " << group;
    }
  }
}

// Query rows go on grid y/z, at most 65,535 a launch: the chunks cover a plan's 2^20 rows once each.
TEST(AttentionPlan, RowChunksCoverEveryRowWithinTheGridLimit) {
  for (int64_t rows : {int64_t{1}, int64_t{65535}, int64_t{65536}, int64_t{200000}, int64_t{1} << 20}) {
    int64_t covered = 0;
    for (int64_t c = 0; c < RowChunks(rows); ++c) {
      const int64_t size = RowChunkSize(rows, c);
      EXPECT_GE(size, 1);
      EXPECT_LE(size, kMaxGridYZ);
      EXPECT_EQ(c * kMaxGridYZ, covered);  // each launch starts where the last stopped
      covered += size;
    }
    EXPECT_EQ(covered, rows);
  }
  EXPECT_EQ(RowChunks(int64_t{1} << 20), 17);
}

// The flash kernels' mask as one 32-bit limit a row: a column is visible exactly when its key is at
// most the row's last key and below `keys`, at every offset of the tile against both bounds (and
// at 64-bit key positions the kernels' int64 math allows).
TEST(AttentionPlan, LastVisibleColumnIsTheMask) {
  const int64_t big = int64_t{1} << 40;
  for (int64_t key0 : {int64_t{0}, int64_t{64}, int64_t{4096}, big}) {
    for (int64_t d_last = -70; d_last <= 70; d_last += 3) {
      for (int64_t d_keys = -70; d_keys <= 70; d_keys += 5) {
        const int64_t last_key = key0 + d_last, keys = key0 + d_keys;
        const int last = LastVisibleColumn(key0, last_key, keys, 64);
        EXPECT_GE(last, -1);
        EXPECT_LE(last, 63);
        for (int c = 0; c < 64; ++c) {
          const int64_t key = key0 + c;
          ASSERT_EQ(c <= last, key <= last_key && key < keys) << key0 << " " << d_last << " " << d_keys << " " << c;
        }
      }
    }
  }
}

// The wgmma flash kernel's unmasked tiles: every row of a warpgroup (64 rows from first_pos,
// causal, or a segment's rows) sees every key of a tile below WholeKeyTiles, and the next tile, if
// the rows see any of it, is not whole for some row -- at tile edges, inside tiles, past `keys`.
TEST(AttentionPlan, WholeKeyTilesNeedNoMask) {
  for (int64_t first_pos : {0, 1, 63, 64, 65, 100, 127, 128, 500}) {
    for (int64_t rows : {1, 2, 64}) {
      const int64_t keys = first_pos + rows;  // the causal tile's bound: its last row's keys
      for (const bool causal : {true, false}) {
        const int64_t least_last = causal ? first_pos : keys - 1;
        const int64_t whole = WholeKeyTiles(least_last, keys);
        auto sees = [&](int64_t row, int64_t key) { return key <= (causal ? first_pos + row : keys - 1) && key < keys; };
        for (int64_t t = 0; t < whole; ++t) {
          for (int64_t row = 0; row < 64; ++row) {
            for (int64_t c = 0; c < kFlashKeys; ++c) {
              ASSERT_TRUE(sees(row, t * kFlashKeys + c)) << first_pos << " " << rows << " " << causal << " " << t;
            }
          }
        }
        bool all = true;  // tile `whole` is not seen whole by every row
        for (int64_t row = 0; row < 64; ++row) {
          for (int64_t c = 0; c < kFlashKeys; ++c) all = all && sees(row, whole * kFlashKeys + c);
        }
        EXPECT_FALSE(all) << first_pos << " " << rows << " " << causal;
      }
    }
  }
  EXPECT_EQ(WholeKeyTiles(-1, 10), 0);
  EXPECT_EQ(WholeKeyTiles(5, 0), 0);
}

// PagedSlot's 32-bit page and offset are the 64-bit division's, for page sizes from 1 row to past
// 2^16 and keys up to the largest int32 position.
TEST(AttentionPlan, PagedSlotIsTheSixtyFourBitDivision) {
  const int64_t most_key = (int64_t{1} << 31) - 1;
  for (int64_t bs : {int64_t{1}, int64_t{16}, int64_t{192}, int64_t{65537}}) {
    const int64_t pages = most_key / bs + 1;
    std::vector<int32_t> table(static_cast<size_t>(std::min<int64_t>(pages, 1 << 22)));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7919) % table.size());
    for (int64_t key : {int64_t{0}, bs - 1, bs, 5 * bs + 3, most_key}) {
      if (key / bs >= static_cast<int64_t>(table.size())) continue;  // (a table that long is not allocated)
      SCOPED_TRACE(::testing::Message() << "block " << bs << ", key " << key);
      EXPECT_EQ(PagedSlot(table.data(), bs, key), int64_t{table[key / bs]} * bs + key % bs);
    }
    const int64_t last = static_cast<int64_t>(table.size()) * bs - 1;  // the last key the table holds
    EXPECT_EQ(PagedSlot(table.data(), bs, last), int64_t{table.back()} * bs + bs - 1);
  }
}

// The wgmma causal kernel loads a key tile over the paged cache box by box (PagedBoxRow): every key
// the tile sees lands on its own slot (no box crosses a page), boxes wholly past those keys go past
// the cache (zeros) without reading the table there. The table is exactly as long as the keys'
// pages, so an index past it is caught by the sanitizer build.
TEST(AttentionPlan, PagedBoxesTileTheKeysPageByPage) {
  for (int64_t bs : {8, 16, 32, 64, 128, 192, 256}) EXPECT_TRUE(PagedBoxesFit(bs)) << bs;
  for (int64_t bs : {0, 1, 4, 12, 24, 48, 96, 100}) EXPECT_FALSE(PagedBoxesFit(bs)) << bs;
  std::mt19937 rng(7);
  for (int64_t bs : {8, 16, 32, 64, 128, 192}) {
    const int box = PagedBoxRows(bs);
    EXPECT_EQ(kFlashKeys % box, 0);
    EXPECT_EQ(bs % box, 0);
    for (int64_t keys : {1, 63, 64, 65, 200, 700, 1000}) {
      SCOPED_TRACE(::testing::Message() << "pages of " << bs << ", " << keys << " keys");
      std::vector<int32_t> table((keys + bs - 1) / bs);
      std::iota(table.begin(), table.end(), 3);
      std::shuffle(table.begin(), table.end(), rng);
      const int64_t past = 1 << 20, tiles = (keys + kFlashKeys - 1) / kFlashKeys;
      int64_t seen = 0;
      for (int64_t key0 = 0; key0 < tiles * kFlashKeys; key0 += kFlashKeys) {
        for (int r = 0; r < kFlashKeys; r += box) {
          const int64_t row = PagedBoxRow(table.data(), bs, key0 + r, keys, past);
          if (key0 + r >= keys) {
            EXPECT_EQ(row, past);
            continue;
          }
          for (int i = 0; i < box && key0 + r + i < keys; ++i, ++seen) {
            const int64_t key = key0 + r + i;
            ASSERT_EQ(row + i, table[key / bs] * bs + key % bs) << "key " << key;
          }
        }
      }
      EXPECT_EQ(seen, keys);
    }
  }
}

// Flash attention's grid depends on the row and sequence counts only; its blocks find the tiles
// of every sequence (empty ones too) and leave past the last one.
// Both tilings: the mma.sync kernel's 64 rows and the wgmma kernel's 128.
TEST(AttentionPlan, FlashTilesCoverEveryRowOnce) {
  const std::vector<std::vector<int32_t>> cases = {
      {0, 1}, {0, 64}, {0, 65}, {0, 512}, {0, 5, 5, 200, 201, 263}, {0, 0, 0, 1000}, {0, 63, 127, 191, 13416}};
  for (int64_t tile_rows : {int64_t{kFlashRows}, int64_t{128}}) {
    for (const std::vector<int32_t>& offsets : cases) {
      SCOPED_TRACE(::testing::Message() << tile_rows << "-row tiles over " << offsets.back() << " rows");
      const int64_t seqs = static_cast<int64_t>(offsets.size()) - 1, rows = offsets.back();
      std::vector<int> covered(rows, 0);
      int64_t used = 0;
      for (int64_t block = 0; block < FlashGridTiles(rows, seqs, tile_rows); ++block) {
        const FlashTile t = FlashTileOf(offsets.data(), seqs, block, tile_rows);
        if (t.seq < 0) continue;
        ++used;
        EXPECT_GE(t.rows, 1);
        EXPECT_LE(t.rows, tile_rows);
        EXPECT_GE(t.first, offsets[t.seq]);
        EXPECT_LE(t.first + t.rows, offsets[t.seq + 1]);
        for (int r = 0; r < t.rows; ++r) ++covered[t.first + r];
      }
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(covered[r], 1) << "row " << r;
      int64_t want = 0;
      for (int64_t s = 0; s < seqs; ++s) want += (offsets[s + 1] - offsets[s] + tile_rows - 1) / tile_rows;
      EXPECT_EQ(used, want);
      EXPECT_EQ(FlashTileOf(offsets.data(), seqs, FlashGridTiles(rows, seqs, tile_rows), tile_rows).seq, -1);
      // Longest first: a sequence's first block takes its last rows, and its first rows come last.
      int64_t block = 0;
      for (int64_t s = 0; s < seqs; ++s) {
        const int64_t n = offsets[s + 1] - offsets[s], tiles = (n + tile_rows - 1) / tile_rows;
        if (tiles == 0) continue;
        const FlashTile first = FlashTileOf(offsets.data(), seqs, block, tile_rows);
        EXPECT_EQ(first.first + first.rows, offsets[s + 1]);
        EXPECT_EQ(FlashTileOf(offsets.data(), seqs, block + tiles - 1, tile_rows).first, offsets[s]);
        block += tiles;
      }
    }
  }
}

TEST(AttentionPlan, FlashTakesPrefillNotDecode) {
  EXPECT_TRUE(UseFlashAttention(512, 1));     // a prompt
  EXPECT_TRUE(UseFlashAttention(13416, 1));   // a screenshot's patches
  EXPECT_TRUE(UseFlashAttention(543, 32));    // a 512-token chunk beside 31 decode rows
  EXPECT_FALSE(UseFlashAttention(64, 64));    // a decode step
  EXPECT_FALSE(UseFlashAttention(9, 3));
  EXPECT_FALSE(UseFlashAttention(8, 0));
}

}  // namespace
}  // namespace ag::cuda
