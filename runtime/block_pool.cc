#include "runtime/block_pool.h"

#include <cassert>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::runtime {

BlockPool::BlockPool(int32_t num_blocks) : refcounts_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out low ids first
}

absl::StatusOr<int32_t> BlockPool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: all ", num_blocks(), " blocks are in use"));
  }
  const int32_t b = free_.back();
  free_.pop_back();
  refcounts_[b] = 1;
  return b;
}

void BlockPool::Retain(int32_t block) {
  assert(refcounts_[block] > 0);
  ++refcounts_[block];
}

void BlockPool::Release(int32_t block) {
  assert(refcounts_[block] > 0);
  if (--refcounts_[block] == 0) free_.push_back(block);
}

absl::Status BlockTable::Reserve(BlockPool& pool, int64_t tokens) {
  const size_t before = blocks_.size();
  while (capacity() < tokens) {
    absl::StatusOr<int32_t> b = pool.Allocate();
    if (!b.ok()) {
      while (blocks_.size() > before) {
        pool.Release(blocks_.back());
        blocks_.pop_back();
      }
      return b.status();
    }
    blocks_.push_back(*b);
  }
  return absl::OkStatus();
}

void BlockTable::ReleaseAll(BlockPool& pool) {
  for (int32_t b : blocks_) pool.Release(b);
  blocks_.clear();
}

}  // namespace ag::runtime
