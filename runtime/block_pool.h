// The paged KV cache's block pool and per-sequence block tables.
//
// Layers of the cache (after vLLM's): a pool of block ids with reference
// counts and an O(1) free list; a block table per sequence that maps token
// positions to cache slots; the scheduler above decides who gets blocks.
// Reference counts let sequences share prefix blocks.
#ifndef AUTOGLM_RUNTIME_BLOCK_POOL_H_
#define AUTOGLM_RUNTIME_BLOCK_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ag::runtime {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refcounts_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t refcount(int32_t block) const { return refcounts_[block]; }

  // A free block with reference count 1, or ResourceExhausted.
  absl::StatusOr<int32_t> Allocate();
  // Another holder of an allocated block.
  void Retain(int32_t block);
  // Drops one reference; the block is free again at zero.
  void Release(int32_t block);

 private:
  std::vector<int32_t> refcounts_;
  std::vector<int32_t> free_;  // a stack of free block ids
};

class BlockTable {
 public:
  explicit BlockTable(int64_t block_size) : block_size_(block_size) {}

  // Allocates blocks until `tokens` positions fit. On failure nothing is kept
  // beyond what was held before.
  absl::Status Reserve(BlockPool& pool, int64_t tokens);
  void ReleaseAll(BlockPool& pool);

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
