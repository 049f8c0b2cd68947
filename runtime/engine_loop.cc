#include "runtime/engine_loop.h"

#include <algorithm>
#include <utility>

namespace ag::runtime {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() {
  Stop();
  thread_.join();
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
}

int64_t EngineLoop::Submit(Request request, Callback on_event, int n, int top_logprobs) {
  if (top_logprobs >= 0) request.logprobs = std::min(top_logprobs, kMaxTopLogprobs);
  int64_t handle;
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle = next_handle_++;
    if (!stopping_) {
      queued_.push_back({handle, std::move(request), std::move(on_event), n});
      ++in_flight_;
      queued = true;
    }
  }
  if (queued) {
    wake_.notify_all();
    return handle;
  }
  // Stopped: the engine thread may have taken its last requests already, so nobody else would answer.
  StreamEvent refused;
  refused.finished = true;
  refused.reason = FinishReason::kCancelled;
  refused.error = absl::UnavailableError("the engine is shutting down");
  on_event(refused);
  return handle;
}

void EngineLoop::CancelChoice(int64_t handle, int choice) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back({handle, choice});
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
  const auto [handle, choice] = it->second;
  Active& active = active_.at(handle);
  StreamEvent e = event;
  e.choice = choice;
  if (!e.finished) {
    active.callback(e);
    return;
  }
  by_engine_id_.erase(it);
  (void)engine_->Release(engine_id);
  if (--active.unfinished > 0) {
    active.callback(e);
    return;
  }
  // Forget the request before the last callback, so that whoever it wakes sees it gone.
  const Callback callback = std::move(active.callback);
  active_.erase(handle);
  --in_flight_;
  callback(e);
}

void EngineLoop::TakeQueued() {
  std::deque<Pending> queued;
  std::vector<std::pair<int64_t, int>> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queued_);
    cancels.swap(cancels_);
  }
  for (Pending& p : queued) {
    absl::StatusOr<std::vector<int>> ids = engine_->SubmitChoices(std::move(p.request), p.n);
    if (!ids.ok()) {
      StreamEvent refused;
      refused.finished = true;
      refused.error = ids.status();
      --in_flight_;
      p.callback(refused);
      continue;
    }
    for (size_t c = 0; c < ids->size(); ++c) by_engine_id_[(*ids)[c]] = {p.handle, static_cast<int>(c)};
    active_[p.handle] = {std::move(p.callback), *ids, static_cast<int>(ids->size())};
  }
  for (const auto& [handle, choice] : cancels) {
    auto it = active_.find(handle);
    if (it == active_.end()) continue;  // finished already, or never seen
    std::vector<int> ids = it->second.ids;
    if (choice >= 0) ids = choice < static_cast<int>(ids.size()) ? std::vector<int>{ids[choice]} : std::vector<int>{};
    for (int id : ids) {
      if (!by_engine_id_.contains(id) || !engine_->Cancel(id).ok()) continue;  // that choice is done
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
    if (!engine_->HasWork()) {
      UpdateStats(/*stepped=*/false);  // cancellations and refusals change the counts without a step
      continue;
    }
    absl::StatusOr<std::vector<TokenEvent>> events = engine_->Step();
    if (!events.ok()) {
      // A failed step fails every request in it; the engine keeps no half state for them.
      StreamEvent failed;
      failed.finished = true;
      failed.error = events.status();
      EndAll(failed);
      continue;
    }
    UpdateStats(/*stepped=*/true);  // first: a client woken by its last event must see the step's state
    // A request's tokens of the step come together (more than one where drafts were kept), and its
    // logprobs with them, one each, in order: taken before the first is delivered (the last may release it).
    std::vector<TokenLogprobs> logprobs;
    size_t next_logprob = 0;
    for (size_t i = 0; i < events->size(); ++i) {
      const TokenEvent& e = (*events)[i];
      if (i == 0 || (*events)[i - 1].request != e.request) {
        logprobs.clear();  // the engine keeps them only for requests that asked
        if (by_engine_id_.contains(e.request)) logprobs = engine_->TakeLogprobs(e.request);
        next_logprob = 0;
      }
      StreamEvent event;  // Deliver fills the choice
      event.token = e.token;
      event.finished = e.finished;
      event.reason = engine_->finish_reason(e.request);
      if (next_logprob < logprobs.size()) {
        const TokenLogprobs& lp = logprobs[next_logprob++];
        event.logprob = lp.logprob;
        for (size_t j = 0; j < lp.top_ids.size(); ++j) event.top.push_back({lp.top_ids[j], lp.top_logprobs[j]});
      }
      Deliver(e.request, event);
    }
  }
  // Shutting down: whatever is still in flight is cancelled, and told why.
  TakeQueued();
  StreamEvent cancelled;
  cancelled.finished = true;
  cancelled.reason = FinishReason::kCancelled;
  cancelled.error = absl::UnavailableError("the engine is shutting down");
  EndAll(cancelled);
}

void EngineLoop::UpdateStats(bool stepped) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = engine_->num_running();
  stats_.waiting = engine_->num_waiting() + static_cast<int64_t>(queued_.size());
  stats_.kv_blocks = engine_->kv_blocks();
  stats_.kv_blocks_free = engine_->kv_blocks_free();
  stats_.preemptions = engine_->preemptions();
  stats_.prefix_queries = engine_->prefix_cache_queries();
  stats_.prefix_hits = engine_->prefix_cache_hits();
  stats_.encoder_cache_hits = engine_->encoder_cache_hits();
  stats_.spec_drafts = engine_->spec_drafts();
  stats_.spec_draft_tokens = engine_->spec_draft_tokens();
  stats_.spec_accepted_tokens = engine_->spec_accepted_tokens();
  if (stepped) {
    ++stats_.steps;
    const StepStats& step = engine_->last_step();
    stats_.images_encoded += step.images_encoded;
    if (step.images_encoded > 0 && encoder_seconds_.size() < 4096) encoder_seconds_.push_back(step.encoder_seconds);
  }
}

std::vector<double> EngineLoop::TakeEncoderSeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(encoder_seconds_, {});
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
