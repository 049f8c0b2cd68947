// Reference kernels for rotary embedding, the paged KV cache and attention.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ref/ref.h"

namespace ag::ref {

void RotaryInvFreq(int64_t rot, float theta, float* inv_freq) {
  for (int64_t i = 0; i < rot / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot));
  }
}

void Rotary(const float* x, const RotaryPositions& positions, int64_t tokens, int64_t heads, int64_t head_dim,
            int64_t rot, float theta, float* out) {
  const int64_t width = heads * head_dim;
  std::vector<float> inv_freq(rot / 2);
  RotaryInvFreq(rot, theta, inv_freq.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x + t * width + h * head_dim;
      float* oh = out + t * width + h * head_dim;
      for (int64_t i = 0; i < rot / 2; ++i) {
        const float angle = static_cast<float>(positions.At(t, i)) * inv_freq[i];
        const float c = std::cos(angle), s = std::sin(angle);
        const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        oh[2 * i] = x0 * c - x1 * s;
        oh[2 * i + 1] = x1 * c + x0 * s;
      }
      if (oh != xh) std::copy(xh + rot, xh + head_dim, oh + rot);
    }
  }
}

void KvCacheWrite(const float* k, const float* v, const int32_t* slots, int64_t tokens, const KvCache& cache) {
  const int64_t width = cache.kv_heads * cache.head_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t base = static_cast<int64_t>(slots[t]) * width;
    std::copy(k + t * width, k + (t + 1) * width, cache.k + base);
    std::copy(v + t * width, v + (t + 1) * width, cache.v + base);
  }
}

void PagedAttention(const float* q, int64_t heads, const KvCache& cache, const SeqBatch& batch, float* out) {
  const int64_t d = cache.head_dim, kv_width = cache.kv_heads * d, q_width = heads * d;
  const int64_t group = heads / cache.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> scores;
  for (int64_t s = 0; s < batch.num_seqs; ++s) {
    const int64_t begin = batch.seq_offsets[s], end = batch.seq_offsets[s + 1];
    const int64_t context = batch.context_lens[s];
    const int32_t* table = batch.block_tables + s * batch.max_blocks;
    scores.resize(static_cast<size_t>(context));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t position = context - (end - begin) + (t - begin);  // keys [0, position] are visible
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q + t * q_width + h * d;
        const int64_t kvh = h / group;
        float max_score = -INFINITY;
        for (int64_t j = 0; j <= position; ++j) {
          const int64_t slot = static_cast<int64_t>(table[j / cache.block_size]) * cache.block_size +
                               j % cache.block_size;
          const float* kj = cache.k + slot * kv_width + kvh * d;
          float dot = 0.0f;
          for (int64_t i = 0; i < d; ++i) dot += qh[i] * kj[i];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        float denom = 0.0f;
        for (int64_t j = 0; j <= position; ++j) {
          scores[j] = std::exp(scores[j] - max_score);
          denom += scores[j];
        }
        float* oh = out + t * q_width + h * d;
        std::fill(oh, oh + d, 0.0f);
        for (int64_t j = 0; j <= position; ++j) {
          const int64_t slot = static_cast<int64_t>(table[j / cache.block_size]) * cache.block_size +
                               j % cache.block_size;
          const float* vj = cache.v + slot * kv_width + kvh * d;
          const float p = scores[j] / denom;
          for (int64_t i = 0; i < d; ++i) oh[i] += p * vj[i];
        }
      }
    }
  }
}

}  // namespace ag::ref
