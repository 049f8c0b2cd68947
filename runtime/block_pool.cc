#include "runtime/block_pool.h"

#include <algorithm>
#include <cassert>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::runtime {

BlockPool::BlockPool(int32_t num_blocks)
    : refcounts_(num_blocks, 0), hash_of_(num_blocks, 0), registered_(num_blocks, false), unused_at_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out low ids first
}

absl::StatusOr<int32_t> BlockPool::Allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!unused_.empty()) {
    b = unused_.front();  // evict the least recently used cached block
    unused_.pop_front();
    by_hash_.erase(hash_of_[b]);
    registered_[b] = false;
  } else {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: all ", num_blocks(), " blocks are in use"));
  }
  refcounts_[b] = 1;
  return b;
}

void BlockPool::Retain(int32_t block) {
  assert(refcounts_[block] > 0);
  ++refcounts_[block];
}

void BlockPool::Release(int32_t block) {
  assert(refcounts_[block] > 0);
  if (--refcounts_[block] > 0) return;
  if (registered_[block]) {
    unused_at_[block] = unused_.insert(unused_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::Register(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  assert(refcounts_[block] > 0);
  if (registered_[block] || by_hash_.contains(hash)) return;
  by_hash_.emplace(hash, Cached{block, std::vector<int32_t>(tokens.begin(), tokens.end())});
  hash_of_[block] = hash;
  registered_[block] = true;
}

int32_t BlockPool::Lookup(uint64_t hash, std::span<const int32_t> tokens) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(),
                                          it->second.tokens.end())) {
    return -1;
  }
  const int32_t b = it->second.block;
  if (refcounts_[b] == 0) unused_.erase(unused_at_[b]);  // in use again
  ++refcounts_[b];
  return b;
}

uint64_t PrefixHash(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix64 steps over the parent and each token: a chain, so equal blocks
  // after different prefixes hash apart.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ull);
  for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull));
  return h;
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
