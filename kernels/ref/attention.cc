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

namespace {

// Scores of one query head against keys [0, visible): four keys at a time, each key's dot product
// summed in input order as a one-key loop would (the same bits), but four independent sums in
// flight. `rows` holds each key's offset in the cache.
void Scores(const float* qh, const float* kh, const int64_t* rows, int64_t visible, int64_t d, float scale,
            float* scores) {
  int64_t j = 0;
  for (; j + 4 <= visible; j += 4) {
    const float *k0 = kh + rows[j], *k1 = kh + rows[j + 1], *k2 = kh + rows[j + 2], *k3 = kh + rows[j + 3];
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      const float qi = qh[i];
      d0 += qi * k0[i];
      d1 += qi * k1[i];
      d2 += qi * k2[i];
      d3 += qi * k3[i];
    }
    scores[j] = d0 * scale;
    scores[j + 1] = d1 * scale;
    scores[j + 2] = d2 * scale;
    scores[j + 3] = d3 * scale;
  }
  for (; j < visible; ++j) {
    const float* kj = kh + rows[j];
    float dot = 0.0f;
    for (int64_t i = 0; i < d; ++i) dot += qh[i] * kj[i];
    scores[j] = dot * scale;
  }
}

}  // namespace

void PagedAttention(const float* q, int64_t heads, const KvCache& cache, const SeqBatch& batch, float* out) {
  const int64_t d = cache.head_dim, kv_width = cache.kv_heads * d, q_width = heads * d;
  const int64_t group = heads / cache.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> scores;
  std::vector<int64_t> rows;  // the sequence's keys' offsets in the cache, looked up in its block table once
  for (int64_t s = 0; s < batch.num_seqs; ++s) {
    const int64_t begin = batch.seq_offsets[s], end = batch.seq_offsets[s + 1];
    const int64_t context = batch.context_lens[s];
    const int32_t* table = batch.block_tables + s * batch.max_blocks;
    scores.resize(static_cast<size_t>(context));
    rows.resize(static_cast<size_t>(context));
    for (int64_t j = 0; j < context; ++j) {
      const int64_t slot = static_cast<int64_t>(table[j / cache.block_size]) * cache.block_size + j % cache.block_size;
      rows[j] = slot * kv_width;
    }
    for (int64_t t = begin; t < end; ++t) {
      const int64_t visible = context - (end - begin) + (t - begin) + 1;  // keys [0, visible) are visible
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvh = h / group;
        Scores(q + t * q_width + h * d, cache.k + kvh * d, rows.data(), visible, d, scale, scores.data());
        float max_score = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) max_score = std::max(max_score, scores[j]);
        float denom = 0.0f;
        for (int64_t j = 0; j < visible; ++j) {
          scores[j] = std::exp(scores[j] - max_score);
          denom += scores[j];
        }
        float* oh = out + t * q_width + h * d;
        std::fill(oh, oh + d, 0.0f);
        const float* vh = cache.v + kvh * d;
        int64_t j = 0;
        for (; j + 4 <= visible; j += 4) {  // four keys a pass, added to each output in key order (the same bits)
          const float *v0 = vh + rows[j], *v1 = vh + rows[j + 1], *v2 = vh + rows[j + 2], *v3 = vh + rows[j + 3];
          const float p0 = scores[j] / denom, p1 = scores[j + 1] / denom, p2 = scores[j + 2] / denom,
                      p3 = scores[j + 3] / denom;
          for (int64_t i = 0; i < d; ++i) {
            float o = oh[i];
            o += p0 * v0[i];
            o += p1 * v1[i];
            o += p2 * v2[i];
            o += p3 * v3[i];
            oh[i] = o;
          }
        }
        for (; j < visible; ++j) {
          const float* vj = vh + rows[j];
          const float p = scores[j] / denom;
          for (int64_t i = 0; i < d; ++i) oh[i] += p * vj[i];
        }
      }
    }
  }
}

}  // namespace ag::ref
