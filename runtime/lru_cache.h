// A small thread-safe cache by string key that drops the least recently used entry when full: the
// masks of a grammar's states, the grammars of the schemas a server has met.
#ifndef AUTOGLM_RUNTIME_LRU_CACHE_H_
#define AUTOGLM_RUNTIME_LRU_CACHE_H_

#include <cstddef>
#include <iterator>
#include <list>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ag::runtime {

template <class V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // The value under `key`, made by `make()` (an absl::StatusOr<V>, outside the lock: it may take
  // milliseconds) when absent. A failure is returned, not kept.
  template <class Make>
  absl::StatusOr<V> Get(const std::string& key, const Make& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (const auto it = index_.find(key); it != index_.end()) {
        entries_.splice(entries_.end(), entries_, it->second);
        return it->second->second;
      }
    }
    absl::StatusOr<V> made = make();
    if (!made.ok()) return made;
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = index_.find(key); it != index_.end()) return it->second->second;  // made twice: the first stays
    if (entries_.size() >= capacity_ && !entries_.empty()) {
      index_.erase(entries_.front().first);
      entries_.pop_front();
    }
    entries_.emplace_back(key, *made);
    index_.emplace(key, std::prev(entries_.end()));
    return made;
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
