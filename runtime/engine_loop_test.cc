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

  // Cancelled after its first token, from another thread than the engine's.
  Request longer = Make(0);
  longer.max_new_tokens = 200;
  auto got = std::make_shared<Result>();
  std::promise<void> first, last;
  std::atomic<bool> seen_first{false};
  const int64_t handle = loop->Submit(longer, [&, got](const StreamEvent& e) {
    if (e.token >= 0) got->tokens.push_back(e.token);
    if (e.token >= 0 && !seen_first.exchange(true)) first.set_value();
    if (e.finished) {
      got->reason = e.reason;
      last.set_value();
    }
  });
  first.get_future().wait();
  loop->Cancel(handle);
  last.get_future().wait();
  EXPECT_EQ(got->reason, FinishReason::kCancelled);
  EXPECT_LT(got->tokens.size(), 200u);
  EXPECT_EQ(loop->in_flight(), 0);

  // Shutdown with requests in flight: each hears it was cancelled.
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 5; ++i) {
    Request r = Make(i);
    r.max_new_tokens = 200;
    loop->Submit(r, [&](const StreamEvent& e) {
      if (e.finished && e.reason == FinishReason::kCancelled) ++cancelled;
    });
  }
  loop.reset();
  EXPECT_EQ(cancelled.load(), 5);
}

}  // namespace
}  // namespace ag::runtime
