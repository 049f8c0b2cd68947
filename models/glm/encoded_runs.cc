#include "models/glm/encoded_runs.h"

namespace ag::glm {

bool EncodedRuns::Find(absl::string_view text, std::vector<int32_t>* out) {
  if (!Keeps(text)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(text);
  if (it == index_.end()) return false;
  recent_.splice(recent_.begin(), recent_, it->second);  // most recent now; iterators stay valid
  out->insert(out->end(), it->second->ids.begin(), it->second->ids.end());
  ++hits_;
  return true;
}

void EncodedRuns::Remember(absl::string_view text, absl::Span<const int32_t> ids) {
  if (!Keeps(text)) return;
  const size_t cost = Cost(text.size(), ids.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.contains(text)) return;  // another thread encoded it meanwhile
  while (bytes_ + cost > budget_ && !recent_.empty()) {
    const Run& oldest = recent_.back();
    bytes_ -= Cost(oldest.text.size(), oldest.ids.size());
    index_.erase(absl::string_view(oldest.text));
    recent_.pop_back();
  }
  recent_.push_front(Run{std::string(text), std::vector<int32_t>(ids.begin(), ids.end())});
  index_.emplace(absl::string_view(recent_.front().text), recent_.begin());
  bytes_ += cost;
}

size_t EncodedRuns::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t EncodedRuns::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recent_.size();
}

size_t EncodedRuns::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace ag::glm
