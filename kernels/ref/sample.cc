// The device sampler's rule (ref.h: SampleFiltered), in plain C++: the oracle
// for kernels/cuda/vocab.cu's SampleRowsKernel and the CPU backend's own.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/ref/ref.h"

namespace ag::ref {

void ApplyPenalties(float* logits, int64_t vocab, std::span<const Penalty> penalties) {
  for (const Penalty& p : penalties) {
    if (p.id < 0 || p.id >= vocab) continue;
    float& l = logits[p.id];
    l += p.bias;
    if (p.scale != 1.0f) l = l > 0 ? l / p.scale : l * p.scale;
    l -= p.delta;
  }
}

int32_t SampleFiltered(const float* logits, int64_t vocab, const SampleParams& p) {
  const int64_t n = p.vocab_limit > 0 ? std::min<int64_t>(p.vocab_limit, vocab) : vocab;
  if (n <= 0) return 0;
  if (p.temperature == 0.0f || p.top_k == 1) {
    int32_t best = 0;
    Argmax(logits, 1, n, &best);
    return best;
  }
  const float inv_t = 1.0f / p.temperature;
  std::vector<float> z(n);
  float max_z = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    z[i] = std::isnan(logits[i]) ? -INFINITY : logits[i] * inv_t;
    max_z = std::max(max_z, z[i]);
  }
  if (max_z == -INFINITY) return 0;  // nothing can be kept
  std::vector<char> keep(n);
  const float min_z = p.min_p > 0.0f ? max_z + std::log(p.min_p) : -INFINITY;  // min-p
  for (int64_t i = 0; i < n; ++i) keep[i] = z[i] > -INFINITY && z[i] >= min_z;
  if (p.top_k > 0 && p.top_k < n) {
    std::vector<float> sorted(z);
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<float>());
    const float kth = sorted[p.top_k - 1];
    for (int64_t i = 0; i < n; ++i) keep[i] = keep[i] && z[i] >= kth;
  }
  std::vector<float> w(n, 0.0f);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (keep[i]) total += w[i] = std::exp(z[i] - max_z);
  }
  if (p.top_p < 1.0f) {
    // In decreasing z, the z at which the kept mass first reaches top_p; every id with that z or more stays.
    std::vector<int64_t> order;
    for (int64_t i = 0; i < n; ++i) {
      if (keep[i]) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
    const double target = static_cast<double>(p.top_p) * total;
    double mass = 0.0;
    float threshold = z[order.back()];
    for (int64_t i : order) {
      mass += w[i];
      if (mass >= target) {
        threshold = z[i];
        break;
      }
    }
    total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      keep[i] = keep[i] && z[i] >= threshold;
      if (keep[i]) total += w[i];
    }
  }
  const double target = static_cast<double>(p.uniform) * total;
  double acc = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    acc += w[i];
    last = i;
    if (acc > target) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

float LogProbs(const float* logits, int64_t vocab, int32_t vocab_limit, int32_t token, int k,
               std::vector<int32_t>* top_ids, std::vector<float>* top_logprobs) {
  const int64_t n = vocab_limit > 0 ? std::min<int64_t>(vocab_limit, vocab) : vocab;
  auto value = [&](int64_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  float peak = -INFINITY;
  for (int64_t i = 0; i < n; ++i) peak = std::max(peak, value(i));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(value(i) - peak));
  const float lse = peak + static_cast<float>(std::log(sum));
  top_ids->clear();
  top_logprobs->clear();
  const int64_t take = std::min<int64_t>(std::max(k, 0), n);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + take, ids.end(),
                    [&](int32_t a, int32_t b) { return value(a) > value(b) || (value(a) == value(b) && a < b); });
  for (int64_t i = 0; i < take; ++i) {
    top_ids->push_back(ids[i]);
    top_logprobs->push_back(value(ids[i]) - lse);
  }
  return token >= 0 && token < n ? value(token) - lse : -INFINITY;
}

}  // namespace ag::ref
