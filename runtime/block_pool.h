// The paged KV cache's block pool and per-sequence block tables.
//
// Layers of the cache (after vLLM's): a pool of block ids with reference
// counts and an O(1) free list; a block table per sequence that maps token
// positions to cache slots; the scheduler above decides who gets blocks.
// Reference counts let sequences share prefix blocks.
//
// The prefix cache: a full block can be registered under the hash of its
// tokens and of every token before it (PrefixHash). Released to zero
// references, a registered block is not freed but kept, least recently used
// first in line to be taken when the free list is empty; until then a
// sequence whose prefix hashes the same finds it (Lookup) and skips computing it.
#ifndef AUTOGLM_RUNTIME_BLOCK_POOL_H_
#define AUTOGLM_RUNTIME_BLOCK_POOL_H_

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ag::runtime {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refcounts_.size()); }
  // Blocks Allocate can hand out: free ones and cached ones nobody holds.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + unused_.size()); }
  int32_t num_cached() const { return static_cast<int32_t>(by_hash_.size()); }
  int32_t refcount(int32_t block) const { return refcounts_[block]; }

  // A block with reference count 1: a free one, else the least recently used
  // cached one nobody holds (dropped from the cache); or ResourceExhausted.
  absl::StatusOr<int32_t> Allocate();
  // Another holder of an allocated block.
  void Retain(int32_t block);
  // Drops one reference; at zero the block is free again, or kept if cached.
  void Release(int32_t block);

  // Makes a held, full block findable under `hash`, which covers `tokens`
  // (its own). A hash already cached keeps its first block.
  void Register(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
  // The cached block under `hash` whose tokens are `tokens`, with a new
  // reference for the caller; -1 when there is none.
  int32_t Lookup(uint64_t hash, std::span<const int32_t> tokens);

 private:
  struct Cached {
    int32_t block;
    std::vector<int32_t> tokens;  // compared on a hit: a hash collision never gives wrong K/V
  };
  std::vector<int32_t> refcounts_;
  std::vector<int32_t> free_;  // a stack of free block ids
  absl::flat_hash_map<uint64_t, Cached> by_hash_;
  std::vector<uint64_t> hash_of_;  // per block, when registered
  std::vector<bool> registered_;
  std::list<int32_t> unused_;  // registered blocks at zero references, least recently used first
  std::vector<std::list<int32_t>::iterator> unused_at_;
};

// The hash of a block of `tokens` after a prefix whose hash is `parent` (0 for the first block).
uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> tokens);

class BlockTable {
 public:
  explicit BlockTable(int64_t block_size) : block_size_(block_size) {}

  // Allocates blocks until `tokens` positions fit. On failure nothing is kept
  // beyond what was held before.
  absl::Status Reserve(BlockPool& pool, int64_t tokens);
  void ReleaseAll(BlockPool& pool);
  // Appends a block the caller already holds a reference to (a prefix-cache hit).
  void Append(int32_t block) { blocks_.push_back(block); }

  int64_t capacity() const { return static_cast<int64_t>(blocks_.size()) * block_size_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  // The cache slot of token `position` (which must be < capacity()).
  int32_t Slot(int64_t position) const {
    return static_cast<int32_t>(blocks_[position / block_size_] * block_size_ + position % block_size_);
  }

 private:
  int64_t block_size_;
  std::vector<int32_t> blocks_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_BLOCK_POOL_H_
