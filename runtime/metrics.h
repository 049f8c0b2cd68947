// Prometheus metrics for the server: counters, gauges and histograms that
// any thread may update (atomics, no locks on the hot path), rendered in
// the Prometheus text exposition format (version 0.0.4).
#ifndef AUTOGLM_RUNTIME_METRICS_H_
#define AUTOGLM_RUNTIME_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ag::runtime {

class Counter {
 public:
  void Add(double v = 1) { value_.fetch_add(v); }
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v); }
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound, then the +Inf count (= total).
  std::vector<uint64_t> Cumulative() const;
  double sum() const { return sum_.load(); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; the last is +Inf
  std::atomic<double> sum_{0};
};

// Metrics by name (and one optional label), rendered in registration order.
class MetricsRegistry {
 public:
  Counter& AddCounter(const std::string& name, const std::string& help, const std::string& label = "");
  Gauge& AddGauge(const std::string& name, const std::string& help);
  Histogram& AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  std::string Render() const;

 private:
  struct Family {
    std::string name, help, type;
    std::vector<std::pair<std::string, std::unique_ptr<Counter>>> counters;  // label value -> counter
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::string label_name;
  };
  Family& FamilyFor(const std::string& name, const std::string& help, const std::string& type);
  mutable std::mutex mu_;  // guards the families' structure, not the values
  std::vector<std::unique_ptr<Family>> families_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_METRICS_H_
