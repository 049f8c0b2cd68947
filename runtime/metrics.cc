#include "runtime/metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ag::runtime {
namespace {

std::string Number(double v) { return absl::StrFormat("%.10g", v); }

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[bucket].fetch_add(1);
  sum_.fetch_add(v);
}

std::vector<uint64_t> Histogram::Cumulative() const {
  std::vector<uint64_t> out;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load();
    out.push_back(total);
  }
  return out;
}

MetricsRegistry::Family& MetricsRegistry::FamilyFor(const std::string& name, const std::string& help,
                                                    const std::string& type) {
  for (const std::unique_ptr<Family>& f : families_) {
    if (f->name == name) return *f;
  }
  families_.push_back(std::make_unique<Family>());
  Family& f = *families_.back();
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

Counter& MetricsRegistry::AddCounter(const std::string& name, const std::string& help, const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = FamilyFor(name, help, "counter");
  for (auto& [l, counter] : f.counters) {
    if (l == label) return *counter;
  }
  f.counters.emplace_back(label, std::make_unique<Counter>());
  return *f.counters.back().second;
}

Gauge& MetricsRegistry::AddGauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = FamilyFor(name, help, "gauge");
  if (f.gauge == nullptr) f.gauge = std::make_unique<Gauge>();
  return *f.gauge;
}

Histogram& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = FamilyFor(name, help, "histogram");
  if (f.histogram == nullptr) f.histogram = std::make_unique<Histogram>(std::move(bounds));
  return *f.histogram;
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const std::unique_ptr<Family>& f : families_) {
    absl::StrAppend(&out, "# HELP ", f->name, " ", f->help, "\n# TYPE ", f->name, " ", f->type, "\n");
    for (const auto& [label, counter] : f->counters) {
      absl::StrAppend(&out, f->name, label.empty() ? "" : absl::StrCat("{", label, "}"), " ",
                      Number(counter->value()), "\n");
    }
    if (f->gauge != nullptr) absl::StrAppend(&out, f->name, " ", Number(f->gauge->value()), "\n");
    if (f->histogram != nullptr) {
      const Histogram& h = *f->histogram;
      const std::vector<uint64_t> cumulative = h.Cumulative();
      for (size_t i = 0; i < h.bounds().size(); ++i) {
        absl::StrAppend(&out, f->name, "_bucket{le=\"", Number(h.bounds()[i]), "\"} ", cumulative[i], "\n");
      }
      absl::StrAppend(&out, f->name, "_bucket{le=\"+Inf\"} ", cumulative.back(), "\n", f->name, "_sum ",
                      Number(h.sum()), "\n", f->name, "_count ", cumulative.back(), "\n");
    }
  }
  return out;
}

}  // namespace ag::runtime
