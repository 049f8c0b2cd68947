// A small thread-safe cache by string key that drops the least recently used entry when full: the
// masks of a grammar's states, the grammars of the schemas a server has met, the CUDA graphs of the
// step shapes a backend has run (a value that owns a resource frees it in its destructor).
#ifndef AUTOGLM_RUNTIME_LRU_CACHE_H_
#define AUTOGLM_RUNTIME_LRU_CACHE_H_

#include <cstddef>
#include <iterator>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ag::runtime {

template <class V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The value under `key` (now the most recently used), or nullopt.
  std::optional<V> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    entries_.splice(entries_.end(), entries_, it->second);
    return it->second->second;
  }

  // Keeps `value` under `key` unless one is there already (then that one is returned: the first
  // made stays); the least recently used entry goes when the cache is full.
  V Put(const std::string& key, V value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) return it->second->second;
    if (entries_.size() >= capacity_ && !entries_.empty()) {
      index_.erase(entries_.front().first);
      entries_.pop_front();
    }
    entries_.emplace_back(key, std::move(value));
    index_.emplace(key, std::prev(entries_.end()));
    return entries_.back().second;
  }

  // The value under `key`, made by `make()` (an absl::StatusOr<V>, outside the lock: it may take
  // milliseconds) when absent. A failure is returned, not kept.
  template <class Make>
  absl::StatusOr<V> Get(const std::string& key, const Make& make) {
    if (std::optional<V> found = Find(key)) return *std::move(found);
    absl::StatusOr<V> made = make();
    if (!made.ok()) return made;
    return Put(key, *std::move(made));
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    index_.clear();
    entries_.clear();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, V>> entries_;  // least recently used first
  absl::flat_hash_map<std::string, typename std::list<std::pair<std::string, V>>::iterator> index_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_LRU_CACHE_H_
