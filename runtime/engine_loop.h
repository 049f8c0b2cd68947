// The engine behind a thread: one thread runs steps; any other thread
// (a server's connection handlers) submits and cancels requests through
// thread-safe queues and hears back through callbacks.
//
// Callbacks run on the engine thread, after each step: one event per new
// token, the last one marked finished with its reason; then the request is
// released from the engine, so memory stays flat however many it serves.
// A request the engine refuses (bad prompt, too long) gets one event with the error.
#ifndef AUTOGLM_RUNTIME_ENGINE_LOOP_H_
#define AUTOGLM_RUNTIME_ENGINE_LOOP_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "runtime/engine.h"

namespace ag::runtime {

struct StreamEvent {
  int choice = 0;      // which of the request's n choices (0 for a refusal)
  int32_t token = -1;  // the new token, or -1 (an error, a cancellation before any token)
  bool finished = false;  // this choice is done (a refusal or a failed step ends them all)
  FinishReason reason = FinishReason::kNone;
  absl::Status error;  // not OK: the request was refused or the step failed
  // When the request asked for logprobs: the token's log-probability and the
  // `top_logprobs` most likely tokens with theirs, most likely first.
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

// Counts a metrics endpoint reads, as of the last step.
struct LoopStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks = 0, kv_blocks_free = 0;
  int64_t preemptions = 0, prefix_queries = 0, prefix_hits = 0;
  int64_t steps = 0;
  // GLM-4.1V: images encoded (vision runs' images), images found in the encoder cache.
  int64_t images_encoded = 0, encoder_cache_hits = 0;
  // Speculative decoding (Engine::spec_drafts and the rest).
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class EngineLoop {
 public:
  using Callback = std::function<void(const StreamEvent&)>;

  explicit EngineLoop(std::unique_ptr<Engine> engine);
  // Stop(), then joins the thread.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Stops taking steps, without waiting: at the next step boundary whatever is
  // in flight or queued is cancelled (each callback hears kCancelled with an
  // Unavailable error) and the thread ends. A request submitted after Stop is
  // refused at once, the same way.
  void Stop();
  // Queues a request; returns the handle Cancel takes. Never blocks on a step.
  // `n` choices of one prompt (Engine::SubmitChoices) each hear their own
  // events; `top_logprobs` >= 0 adds log-probabilities to every token event.
  int64_t Submit(Request request, Callback on_event, int n = 1, int top_logprobs = -1);
  // Ends the request (every choice) at the next step boundary (each hears kCancelled).
  void Cancel(int64_t handle) { CancelChoice(handle, -1); }
  // Ends one choice of the request (-1: all of them), as Cancel does.
  void CancelChoice(int64_t handle, int choice);
  LoopStats stats() const;
  // The seconds of each vision-program run since the last call (for a histogram).
  std::vector<double> TakeEncoderSeconds();
  // Requests accepted and not yet finished (queued or in the engine).
  int64_t in_flight() const { return in_flight_.load(); }

 private:
  struct Pending {
    int64_t handle;
    Request request;
    Callback callback;
    int n;
  };
  struct Active {  // a request in the engine
    Callback callback;
    std::vector<int> ids;  // engine ids, by choice
    int unfinished;
  };
  void Run();
  void TakeQueued();  // on the engine thread
  void UpdateStats(bool stepped);
  void Deliver(int engine_id, const StreamEvent& event);
  void EndAll(const StreamEvent& last);  // cancels every request in the engine, each hearing `last`

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mu_;
  std::vector<double> encoder_seconds_;  // guarded by mu_
  std::condition_variable wake_;
  std::deque<Pending> queued_;           // guarded by mu_
  std::vector<std::pair<int64_t, int>> cancels_;  // (handle, choice or -1); guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  LoopStats stats_;                      // guarded by mu_
  int64_t next_handle_ = 0;              // guarded by mu_
  std::atomic<int64_t> in_flight_{0};
  // Engine thread only.
  absl::flat_hash_map<int64_t, Active> active_;                  // by handle
  absl::flat_hash_map<int, std::pair<int64_t, int>> by_engine_id_;  // engine id -> (handle, choice)
  std::thread thread_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_ENGINE_LOOP_H_
