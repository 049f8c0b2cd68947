#include "runtime/engine_loop.h"

#include <utility>

namespace ag::runtime {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int64_t EngineLoop::Submit(Request request, Callback on_event) {
  int64_t handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle = next_handle_++;
    queued_.push_back({handle, std::move(request), std::move(on_event)});
    ++in_flight_;
  }
  wake_.notify_all();
  return handle;
}

void EngineLoop::Cancel(int64_t handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(handle);
  }
  wake_.notify_all();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EngineLoop::Deliver(int engine_id, const StreamEvent& event) {
  auto it = by_engine_id_.find(engine_id);
  if (it == by_engine_id_.end()) return;
  if (!event.finished) {
    it->second.second(event);
    return;
  }
  // Forget the request before the last callback, so that whoever it wakes sees it gone.
  const Callback callback = std::move(it->second.second);
  engine_id_.erase(it->second.first);
  by_engine_id_.erase(it);
  (void)engine_->Release(engine_id);
  --in_flight_;
  callback(event);
}

void EngineLoop::TakeQueued() {
  std::deque<Pending> queued;
  std::vector<int64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queued_);
    cancels.swap(cancels_);
  }
  for (Pending& p : queued) {
    absl::StatusOr<int> id = engine_->Submit(std::move(p.request));
    if (!id.ok()) {
      StreamEvent refused;
      refused.finished = true;
      refused.error = id.status();
      --in_flight_;
      p.callback(refused);
      continue;
    }
    engine_id_[p.handle] = *id;
    by_engine_id_[*id] = {p.handle, std::move(p.callback)};
  }
  for (int64_t handle : cancels) {
    auto it = engine_id_.find(handle);
    if (it == engine_id_.end()) continue;  // finished already, or never seen
    const int id = it->second;
    if (engine_->Cancel(id).ok()) {
      StreamEvent cancelled;
      cancelled.finished = true;
      cancelled.reason = FinishReason::kCancelled;
      Deliver(id, cancelled);
    }
  }
}

void EngineLoop::Run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !queued_.empty() || !cancels_.empty() || engine_->HasWork(); });
      if (stopping_) break;
    }
    TakeQueued();
    if (!engine_->HasWork()) continue;
    absl::StatusOr<std::vector<TokenEvent>> events = engine_->Step();
    if (!events.ok()) {
      // A failed step fails every request in it; the engine keeps no half state for them.
      StreamEvent failed;
      failed.finished = true;
      failed.error = events.status();
      EndAll(failed);
      continue;
    }
    {
      // Counts first: a client woken by its last event must see the step's state.
      std::lock_guard<std::mutex> lock(mu_);
      stats_.running = engine_->num_running();
      stats_.waiting = engine_->num_waiting() + static_cast<int64_t>(queued_.size());
      stats_.kv_blocks = engine_->kv_blocks();
      stats_.kv_blocks_free = engine_->kv_blocks_free();
      stats_.preemptions = engine_->preemptions();
      stats_.prefix_queries = engine_->prefix_cache_queries();
      stats_.prefix_hits = engine_->prefix_cache_hits();
      ++stats_.steps;
    }
    for (const TokenEvent& e : *events) {
      StreamEvent event;
      event.token = e.token;
      event.finished = e.finished;
      event.reason = engine_->finish_reason(e.request);
      Deliver(e.request, event);
    }
  }
  // Shutting down: whatever is still in flight is cancelled, and told so.
  TakeQueued();
  StreamEvent cancelled;
  cancelled.finished = true;
  cancelled.reason = FinishReason::kCancelled;
  EndAll(cancelled);
}

void EngineLoop::EndAll(const StreamEvent& last) {
  std::vector<int> ids;
  for (const auto& [id, entry] : by_engine_id_) ids.push_back(id);
  for (int id : ids) {
    (void)engine_->Cancel(id);
    Deliver(id, last);
  }
}

}  // namespace ag::runtime
