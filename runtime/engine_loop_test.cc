#include "runtime/engine_loop.h"

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <thread>

#include "runtime/cpu_backend.h"
#include "runtime/weights.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

const std::vector<int32_t> kPrompt = {15, 292, 121, 86, 283, 147, 287};

class EngineLoopTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(CpuBackend& backend, int64_t kv_tokens = 0) {
    EngineOptions options;
    options.kv_cache_tokens = kv_tokens;
    return std::move(*Engine::Create(tiny_.plan, backend, *tiny_.weights, options));
  }
  static Request Make(int variant) {
    Request r;
    r.prompt = kPrompt;
    r.prompt[0] = 10 + variant % 5;
    r.max_new_tokens = 4 + variant % 7;
    return r;
  }

  testing::TinyGlm tiny_{8};
};

// Submits and waits for the whole stream.
struct Result {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  absl::Status error;
};
Result RunOne(EngineLoop& loop, Request r) {
  auto result = std::make_shared<Result>();
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  loop.Submit(std::move(r), [result, done](const StreamEvent& e) {
    if (e.token >= 0) result->tokens.push_back(e.token);
    if (e.finished) {
      result->reason = e.reason;
      result->error = e.error;
      done->set_value();
    }
  });
  finished.wait();
  return *result;
}

TEST_F(EngineLoopTest, SixtyFourClientsGetWhatEachWouldAlone) {
  std::map<int, std::vector<int32_t>> solo;
  {
    CpuBackend backend;
    std::unique_ptr<Engine> engine = MakeEngine(backend);
    for (int v = 0; v < 35; ++v) {
      const int id = *engine->Submit(Make(v));
      while (engine->HasWork()) ASSERT_TRUE(engine->Step().ok());
      solo[v] = engine->new_tokens(id);
    }
  }
  CpuBackend backend;
  EngineLoop loop(MakeEngine(backend, 64));  // a small cache: preemptions too
  std::vector<std::thread> clients;
  std::atomic<int> mismatches{0}, completed{0};
  for (int c = 0; c < 64; ++c) {
    clients.emplace_back([&, c] {
      for (int k = 0; k < 3; ++k) {
        const int v = (c * 3 + k) % 35;
        const Result r = RunOne(loop, Make(v));
        if (!r.error.ok() || r.tokens != solo[v] || r.reason != FinishReason::kLength) ++mismatches;
        ++completed;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(completed.load(), 192);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(loop.in_flight(), 0);
  const LoopStats stats = loop.stats();
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks);
  EXPECT_EQ(stats.running, 0);
  EXPECT_GT(stats.preemptions + stats.prefix_hits, 0);
}

TEST_F(EngineLoopTest, RefusalsCancellationAndShutdown) {
  CpuBackend backend;
  auto loop = std::make_unique<EngineLoop>(MakeEngine(backend));
  Request empty;
  const Result refused = RunOne(*loop, empty);
  EXPECT_FALSE(refused.error.ok());
  EXPECT_NE(refused.error.message().find("prompt is empty"), std::string::npos);

  // Cancelled from its first token's callback (on the engine thread): the
  // cancel is taken before the next step, and nothing else can end the
  // request first (no eos stop, a length far off), so exactly one token comes.
  Request longer = Make(0);
  longer.max_new_tokens = 200;
  longer.stop_on_eos = false;
  auto got = std::make_shared<Result>();
  std::promise<int64_t> handle_promise;
  std::shared_future<int64_t> handle = handle_promise.get_future().share();
  std::promise<void> last;
  EngineLoop* raw = loop.get();
  handle_promise.set_value(loop->Submit(longer, [&, got, handle, raw](const StreamEvent& e) {
    if (e.token >= 0) {
      got->tokens.push_back(e.token);
      if (got->tokens.size() == 1) raw->Cancel(handle.get());
    }
    if (e.finished) {
      got->reason = e.reason;
      last.set_value();
    }
  }));
  last.get_future().wait();
  EXPECT_EQ(got->reason, FinishReason::kCancelled);
  EXPECT_EQ(got->tokens.size(), 1u);
  EXPECT_EQ(loop->in_flight(), 0);

  // Shutdown with requests in flight: each hears it was cancelled. The engine
  // thread is held in a token callback while the requests are queued and Stop
  // is called, so none of them can finish (or even start) before the stop.
  std::atomic<int> cancelled{0}, tokens_after_gate{0};
  std::promise<void> entered, gate;
  std::shared_future<void> gate_open = gate.get_future().share();
  Request held = Make(1);
  held.max_new_tokens = 200;
  held.stop_on_eos = false;
  bool first = true;
  loop->Submit(held, [&, gate_open](const StreamEvent& e) {
    if (e.finished && e.reason == FinishReason::kCancelled) ++cancelled;
    if (e.token < 0) return;
    if (!first) ++tokens_after_gate;
    if (std::exchange(first, false)) {
      entered.set_value();
      gate_open.wait();
    }
  });
  entered.get_future().wait();
  for (int i = 0; i < 5; ++i) {
    Request r = Make(i);
    r.max_new_tokens = 200;
    r.stop_on_eos = false;
    loop->Submit(r, [&](const StreamEvent& e) {
      if (e.token >= 0) ++tokens_after_gate;
      if (e.finished && e.reason == FinishReason::kCancelled) ++cancelled;
    });
  }
  loop->Stop();
  gate.set_value();
  loop.reset();
  EXPECT_EQ(cancelled.load(), 6);
  EXPECT_EQ(tokens_after_gate.load(), 0) << "no step after the stop";
}

// With speculative drafts a step may give a request several tokens: each streams on its own, with
// its own logprob and alternatives, in order (the plain engine's).
TEST_F(EngineLoopTest, SeveralTokensAStepStreamEachWithItsLogprob) {
  Request r;
  r.prompt = {5, 17, 42, 5, 17};
  r.max_new_tokens = 40;
  r.stop_on_eos = false;
  r.logprobs = 2;
  r.sampling.frequency_penalty = 0.2f;
  CpuBackend plain_backend;
  std::unique_ptr<Engine> plain = MakeEngine(plain_backend);
  const int id = *plain->Submit(r);
  while (plain->HasWork()) ASSERT_TRUE(plain->Step().ok());
  const std::vector<TokenLogprobs> want = plain->TakeLogprobs(id);

  CpuBackend backend;
  EngineOptions options;
  options.speculative = {4, 1, 3, 0};
  EngineLoop loop(std::move(*Engine::Create(tiny_.plan, backend, *tiny_.weights, options)));
  std::vector<StreamEvent> events;
  std::promise<void> done;
  loop.Submit(r, [&](const StreamEvent& e) {
    events.push_back(e);
    if (e.finished) done.set_value();
  });
  done.get_future().wait();
  ASSERT_EQ(events.size(), want.size());
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < events.size(); ++i) {
    tokens.push_back(events[i].token);
    EXPECT_NEAR(events[i].logprob, want[i].logprob, 1e-4) << i;
    ASSERT_EQ(events[i].top.size(), want[i].top_ids.size()) << i;
    for (size_t j = 0; j < events[i].top.size(); ++j) EXPECT_EQ(events[i].top[j].first, want[i].top_ids[j]) << i;
  }
  EXPECT_EQ(tokens, plain->new_tokens(id));
  EXPECT_GT(loop.stats().spec_accepted_tokens, 0);
  EXPECT_LT(loop.stats().steps, static_cast<int64_t>(tokens.size()));  // some steps gave more than one
}

TEST_F(EngineLoopTest, SubmitAfterStopIsRefusedAtOnce) {
  CpuBackend backend;
  EngineLoop loop(MakeEngine(backend));
  loop.Stop();
  Result r;
  loop.Submit(Make(0), [&](const StreamEvent& e) {
    r.reason = e.reason;
    r.error = e.error;
  });
  EXPECT_TRUE(absl::IsUnavailable(r.error)) << r.error;
  EXPECT_EQ(loop.in_flight(), 0);
}

}  // namespace
}  // namespace ag::runtime
