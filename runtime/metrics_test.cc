#include "runtime/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ag::runtime {
namespace {

TEST(Metrics, RendersThePrometheusTextFormat) {
  MetricsRegistry registry;
  registry.AddGauge("autoglm:num_requests_running", "Requests in the engine.").Set(3);
  registry.AddCounter("autoglm:request_success_total", "Finished requests.", "finished_reason=\"length\"").Add(5);
  registry.AddCounter("autoglm:request_success_total", "Finished requests.", "finished_reason=\"stop\"").Add();
  Histogram& ttft = registry.AddHistogram("autoglm:time_to_first_token_seconds", "TTFT.", {0.1, 0.01, 1});
  for (double v : {0.005, 0.01, 0.5, 7.0}) ttft.Observe(v);
  EXPECT_EQ(registry.Render(),
            "# HELP autoglm:num_requests_running Requests in the engine.\n"
            "# TYPE autoglm:num_requests_running gauge\n"
            "autoglm:num_requests_running 3\n"
            "# HELP autoglm:request_success_total Finished requests.\n"
            "# TYPE autoglm:request_success_total counter\n"
            "autoglm:request_success_total{finished_reason=\"length\"} 5\n"
            "autoglm:request_success_total{finished_reason=\"stop\"} 1\n"
            "# HELP autoglm:time_to_first_token_seconds TTFT.\n"
            "# TYPE autoglm:time_to_first_token_seconds histogram\n"
            "autoglm:time_to_first_token_seconds_bucket{le=\"0.01\"} 2\n"
            "autoglm:time_to_first_token_seconds_bucket{le=\"0.1\"} 2\n"
            "autoglm:time_to_first_token_seconds_bucket{le=\"1\"} 3\n"
            "autoglm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n"
            "autoglm:time_to_first_token_seconds_sum 7.515\n"
            "autoglm:time_to_first_token_seconds_count 4\n");
  // The same name and label is the same counter.
  registry.AddCounter("autoglm:request_success_total", "Finished requests.", "finished_reason=\"stop\"").Add();
  EXPECT_NE(registry.Render().find("finished_reason=\"stop\"} 2\n"), std::string::npos);
}

TEST(Metrics, ThreadsCountWithoutLosingUpdates) {
  MetricsRegistry registry;
  Counter& tokens = registry.AddCounter("autoglm:generation_tokens_total", "Tokens.");
  Histogram& tpot = registry.AddHistogram("autoglm:time_per_output_token_seconds", "TPOT.", {0.001, 0.01});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        tokens.Add();
        tpot.Observe(0.005);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(tokens.value(), 80000);
  EXPECT_EQ(tpot.Cumulative(), (std::vector<uint64_t>{0, 80000, 80000}));
}

}  // namespace
}  // namespace ag::runtime
