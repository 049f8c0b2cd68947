// The device sampler's rule (ref.h: SampleFiltered), in plain C++: the oracle
// for kernels/cuda/vocab.cu's SampleRowsKernel and the CPU backend's own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/ref/exp4.h"
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

namespace {

// A float's bits as an unsigned key in the same order (-inf lowest, +inf highest).
uint32_t OrderKey(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}

}  // namespace

float KthLargest(const float* values, int64_t n, int64_t k) {
  constexpr int kShift = 20;  // 4,096 buckets by the key's top 12 bits
  std::vector<int64_t> count(size_t{1} << (32 - kShift), 0);
  for (int64_t i = 0; i < n; ++i) ++count[OrderKey(values[i]) >> kShift];
  int64_t above = 0;  // values in the buckets over the one that holds the k-th
  size_t bucket = count.size() - 1;
  while (above + count[bucket] < k) above += count[bucket--];
  std::vector<float> in_bucket;
  in_bucket.reserve(static_cast<size_t>(count[bucket]));
  for (int64_t i = 0; i < n; ++i) {
    if ((OrderKey(values[i]) >> kShift) == bucket) in_bucket.push_back(values[i]);
  }
  const auto at = in_bucket.begin() + (k - above - 1);
  std::nth_element(in_bucket.begin(), at, in_bucket.end(), std::greater<float>());
  return *at;
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
  // z, then (in place) each kept id's weight exp(z - max_z); -1 marks an id not kept. The host samples
  // a constrained row this way at 151,552 ids: four ids at a time (exp4.h), a float sum per block of
  // ids (which the draw then walks block by block), no value waiting on the one before.
  const int64_t padded = (n + 3) / 4 * 4;
  std::vector<float> w(static_cast<size_t>(padded), -INFINITY);  // past n: never kept
  auto scaled = [inv_t](float x) { return std::isnan(x) ? -INFINITY : x * inv_t; };
  Float4 lanes = Splat(-INFINITY);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const Float4 x = Load4(logits + i);
    const Float4 z = Select(x == x, x * Splat(inv_t), Splat(-INFINITY));
    Store4(w.data() + i, z);
    lanes = Select(lanes < z, z, lanes);  // a NaN z (0 x inf) never wins
  }
  float max_z = -INFINITY;
  for (int j = 0; j < 4; ++j) max_z = max_z < lanes[j] ? lanes[j] : max_z;
  for (; i < n; ++i) {
    w[i] = scaled(logits[i]);
    max_z = max_z < w[i] ? w[i] : max_z;
  }
  if (max_z == -INFINITY) return 0;  // nothing can be kept
  float floor_z = p.min_p > 0.0f ? max_z + std::log(p.min_p) : -INFINITY;  // min-p
  if (p.top_k > 0 && p.top_k < n) floor_z = std::max(floor_z, KthLargest(w.data(), n, p.top_k));
  std::vector<float> z;
  if (p.top_p < 1.0f) z = w;
  constexpr int64_t kBlock = 256;  // a multiple of 4
  std::vector<double> block((n + kBlock - 1) / kBlock);
  auto sum_blocks = [&] {
    double total = 0.0;
    for (size_t b = 0; b < block.size(); ++b) {
      Float4 sum = Splat(0.0f);
      for (int64_t k = static_cast<int64_t>(b) * kBlock; k < std::min(padded, static_cast<int64_t>(b + 1) * kBlock);
           k += 4) {
        const Float4 v = Load4(w.data() + k);
        sum += Select(v >= Splat(0.0f), v, Splat(0.0f));
      }
      block[b] = 0.0;
      for (int j = 0; j < 4; ++j) block[b] += sum[j];
      total += block[b];
    }
    return total;
  };
  for (i = 0; i < padded; i += 4) {
    const Float4 v = Load4(w.data() + i);
    const Int4 keep = (v > Splat(-INFINITY)) & (v >= Splat(floor_z));
    Store4(w.data() + i, Select(keep, ExpNonPositive(v - Splat(max_z)), Splat(-1.0f)));
  }
  double total = sum_blocks();
  if (p.top_p < 1.0f) {
    // In decreasing z, the z at which the kept mass first reaches top_p; every id with that z or more stays.
    std::vector<int64_t> order;
    for (i = 0; i < n; ++i) {
      if (w[i] >= 0.0f) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
    const double target = static_cast<double>(p.top_p) * total;
    double mass = 0.0;
    float threshold = z[order.back()];
    for (int64_t k : order) {
      mass += w[k];
      if (mass >= target) {
        threshold = z[k];
        break;
      }
    }
    for (i = 0; i < n; ++i) {
      if (w[i] >= 0.0f && z[i] < threshold) w[i] = -1.0f;
    }
    total = sum_blocks();
  }
  // The inverse CDF in id order: whole blocks while the draw lies past them, then id by id.
  const double target = static_cast<double>(p.uniform) * total;
  double acc = 0.0;
  size_t b = 0;
  while (b < block.size() && acc + block[b] <= target) acc += block[b++];
  for (i = static_cast<int64_t>(b) * kBlock; i < n; ++i) {
    if (w[i] < 0.0f) continue;
    acc += w[i];
    if (acc > target) return static_cast<int32_t>(i);
  }
  for (i = n - 1; i > 0 && w[i] < 0.0f; --i) {
  }
  return static_cast<int32_t>(i);  // rounding left the draw past every weight: the last kept id
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
