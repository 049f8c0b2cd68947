// Reference kernels: plain C++, fp32 storage and accumulation, one function
// per IR op. They are the oracle every CUDA kernel is tested against, and the
// CPU backend runs them. Raw pointers and sizes only: no IR, no runtime.
//
// Matrices are row-major. A linear weight W is [out, in] and y = x W^T + b.
#ifndef AUTOGLM_KERNELS_REF_REF_H_
#define AUTOGLM_KERNELS_REF_REF_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/ref/quant.h"

namespace ag::ref {

// ---- the paged KV cache ----
//
// Per layer, K and V each live in a pool of `num_blocks` blocks of
// `block_size` tokens: element (block, slot, kv_head, d) of K is at
//   k[((block * block_size + slot) * kv_heads + kv_head) * head_dim + d]
// (the state tensor [2, NB, B, KV, D]: K is index 0, V index 1). A token's
// cache slot is block * block_size + slot. A sequence's block table lists
// its blocks in order; token j of the sequence is in block table[j / B] at
// slot j % B.
struct KvCache {
  float* k = nullptr;
  float* v = nullptr;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// The sequences of one step. Sequence s owns rows [seq_offsets[s],
// seq_offsets[s+1]) of the step's tokens; after this step's cache write it
// has context_lens[s] tokens in the cache, the step's tokens being the last
// ones; its blocks are block_tables[s * max_blocks ...].
struct SeqBatch {
  const int32_t* seq_offsets = nullptr;  // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;
};

// ---- builder-level ops ----

// out[t] = table[ids[t]]; ids must be in [0, vocab).
void Embedding(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden, float* out);
// out = w * (x * rsqrt(mean(x^2) + eps)), per row of n.
void RmsNorm(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* out);
// y[rows, out_features] = x[rows, in] W^T (+ bias). bias may be null.
void Linear(const float* x, const float* w, const float* bias, int64_t rows, int64_t in, int64_t out_features,
            float* y);
// inv_freq[i] = 1 / theta^(2i / rot) for i < rot / 2, in fp32 whatever the
// checkpoint's dtype (transformers computes it fresh in fp32 at every load).
void RotaryInvFreq(int64_t rot, float theta, float* inv_freq);

// The positions of a rotary step: one stream [tokens], or M-RoPE's three
// [3, tokens] (temporal, height, width), rotary pair p taking stream 0 below
// `section0`, stream 1 below `section1`, stream 2 from there (GLM-4.1V's
// mrope_section [8, 12, 12] gives section0 8, section1 20).
struct RotaryPositions {
  const int32_t* data = nullptr;
  int64_t tokens = 0;
  bool mrope = false;
  int64_t section0 = 0, section1 = 0;

  int32_t At(int64_t token, int64_t pair) const {
    if (!mrope) return data[token];
    const int64_t stream = pair < section0 ? 0 : pair < section1 ? 1 : 2;
    return data[stream * tokens + token];
  }
};

// Interleaved (GPT-J style) partial rotary on the first `rot` channels of each head.
// In place is allowed (out == x).
void Rotary(const float* x, const RotaryPositions& positions, int64_t tokens, int64_t heads, int64_t head_dim,
            int64_t rot, float theta, float* out);
void Add(const float* a, const float* b, int64_t n, float* out);
void Mul(const float* a, const float* b, int64_t n, float* out);
void Silu(const float* x, int64_t n, float* out);
// Columns [start, start + size) of a [rows, cols] matrix.
void SliceColumns(const float* x, int64_t rows, int64_t cols, int64_t start, int64_t size, float* out);
// out[r] = x[rows[r]]; rows must be valid.
void GatherRows(const float* x, const int32_t* rows, int64_t num_rows, int64_t width, float* out);
// out[r] = index of the largest element of row r (the first one on ties).
void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out);

// ---- the vision tower (GLM-4.1V) ----

// out = x, then out[rows[i]] = src[i] for i < m (rows must be valid). In place is allowed.
void ScatterRows(const float* x, int64_t tokens, const float* src, const int32_t* rows, int64_t m, int64_t width,
                 float* out);
// out = w * (x - mean) / sqrt(var + eps) + b per row of n (var: the biased one), in fp32.
void LayerNorm(const float* x, const float* w, const float* b, int64_t rows, int64_t n, float eps, float* out);
// The exact GELU: x * (1 + erf(x / sqrt 2)) / 2.
void Gelu(const float* x, int64_t n, float* out);
// out = x + the [side, side, width] position table sampled bicubically at each
// patch's place in its grid (torch grid_sample: bicubic, A = -0.75, corners
// not aligned, border padding). `patch_pos` rows are (h, w, grid_h, grid_w).
void VisionPosEmbed(const float* x, const float* table, int64_t side, const int32_t* patch_pos, int64_t rows,
                    int64_t width, float* out);
// The 2-D rotary of the vision heads: with f[k] = theta^(-4k / head_dim),
// k < head_dim / 4, angle a = [h f, w f] duplicated to [a, a] over the head,
// out = x cos + rotate_half(x) sin (rotate_half(x) = [-x2, x1] of the halves).
void VisionRotary(const float* x, const int32_t* patch_pos, int64_t rows, int64_t heads, int64_t head_dim, float theta,
                  float* out);
// The same over the first `heads` heads of rows `x_stride` floats apart, into rows `out_stride`
// apart (out may be x): the q and k heads of a packed [q | k | v] matrix in place.
void VisionRotaryRows(const float* x, int64_t x_stride, const int32_t* patch_pos, int64_t rows, int64_t heads,
                      int64_t head_dim, float theta, float* out, int64_t out_stride);
// Non-causal attention within each segment [offsets[s], offsets[s + 1]) of the
// rows, per head (q, k and v have the same heads); softmax in fp32, scale 1/sqrt(head_dim).
// q, k and v rows are `in_stride` floats apart (0: heads x head_dim; 3 heads x head_dim when
// they are the columns of one packed matrix); out's are heads x head_dim.
void SegmentAttention(const float* q, const float* k, const float* v, const int32_t* offsets, int64_t segments,
                      int64_t heads, int64_t head_dim, float* out, int64_t in_stride = 0);
// out[e, c * group + j] = x[e * group + j, c]: groups of rows side by side, channel-major.
void MergeRows(const float* x, int64_t rows, int64_t width, int64_t group, float* out);

// ---- collectives of tensor parallelism (what every communicator computes) ----

// all_reduce: out[i] = parts[0][i] + parts[1][i] + ..., added in rank order in
// fp32 so that every rank gets the same bits. `out` may be one of the parts.
void SumParts(const float* const* parts, int num_parts, int64_t n, float* out);
// all_gather of column blocks: part p is [rows, cols]; out [rows, num_parts * cols]
// holds it at columns [p * cols, (p + 1) * cols). `rank_major` holds the parts
// one after another (what a communicator's all-gather returns).
void InterleaveColumns(const float* rank_major, int num_parts, int64_t rows, int64_t cols, float* out);

// ---- token selection where the logits are (the device sampler's rule) ----

struct SampleParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  int32_t vocab_limit = 0;   // only ids below it (0: all)
  float uniform = 0.0f;      // the draw, in [0, 1)
  float min_p = 0.0f;        // 0: off
};
// Picks one id from a logits row by thresholds and an inverse CDF in id
// order, so that a GPU can do it without sorting: z = x * (1 / T); keep ids
// whose z is at least the k-th largest (top-k, ties kept) and at least
// max z + ln(min_p) (min-p: a probability at least min_p times the largest), then, going down
// in z, those up to where the kept weights exp(z - max) first hold top_p of
// the kept mass (top-p, ties kept); return the first
// kept id at which the running kept mass exceeds uniform * (kept mass).
// Greedy (T = 0 or k = 1) is Argmax. NaN logits are never kept.
int32_t SampleFiltered(const float* logits, int64_t vocab, const SampleParams& params);
// The k-th largest of `n` values (1 <= k <= n; no NaN), ties counted: top-k's floor. One pass
// counts the values by their top 12 bits in an order-keeping key, a second keeps only the bucket
// that holds the k-th, and only that bucket is partially sorted (a whole row was, before: ~1 ms at
// GLM-4's 151,552 ids).
float KthLargest(const float* values, int64_t n, int64_t k);
// What happens to one id's logit before sampling, in vLLM's order: OpenAI's logit_bias added
// first, then transformers' repetition penalty (a positive logit divided by `scale`, a negative
// one multiplied), then OpenAI's frequency and presence penalties (delta = frequency x count +
// presence), subtracted.
struct Penalty {
  int32_t id = 0;
  float delta = 0.0f;
  float scale = 1.0f;  // 1: no repetition penalty on this id
  float bias = 0.0f;   // the request's logit_bias for this id
};
// Each entry with an id in [0, vocab), in that order; the ids are distinct.
void ApplyPenalties(float* logits, int64_t vocab, std::span<const Penalty> penalties);

// Log-probability of `token` under softmax(logits[0, n)), with n = vocab_limit
// (0: vocab), and the `k` most likely ids with theirs (largest first, lower id
// on ties) in `top_ids` / `top_logprobs`. NaN logits count as -inf.
float LogProbs(const float* logits, int64_t vocab, int32_t vocab_limit, int32_t token, int k,
               std::vector<int32_t>* top_ids, std::vector<float>* top_logprobs);

// ---- KV cache ----

// Writes each token's K and V ([tokens, kv_heads * head_dim]) to its slot; slot < 0 skips the token.
void KvCacheWrite(const float* k, const float* v, const int32_t* slots, int64_t tokens, const KvCache& cache);
// Causal attention of each token's query ([tokens, heads * head_dim]) over its
// sequence's cached keys and values, up to and including its own position.
// Softmax in fp32 with scale 1/sqrt(head_dim); query head h reads KV head h / (heads / kv_heads).
void PagedAttention(const float* q, int64_t heads, const KvCache& cache, const SeqBatch& batch, float* out);

// ---- fused ops (each equals the composition of the ops above) ----
// Those with a weight take `in`: the product's input rows (after the norm) are first rounded as
// QuantizeInputRows says (a W8A8 checkpoint's activations).

// x -> rms_norm -> [q | k | v] = x W^T + b -> rotary on q and k.
void NormQkvRope(const float* x, const float* norm_w, const float* w, const float* bias,
                 const RotaryPositions& positions, int64_t tokens, int64_t hidden, float eps, int64_t heads,
                 int64_t kv_heads, int64_t head_dim, int64_t rot, float theta, float* q, float* k, float* v,
                 InputQuant in = InputQuant::kNone);
// silu(gate) * up where [gate | up] = rms_norm(x) W^T; W is [2 * inter, hidden].
void NormGateUpSilu(const float* x, const float* norm_w, const float* w, int64_t rows, int64_t hidden, int64_t inter,
                    float eps, float* out, InputQuant in = InputQuant::kNone);
// out = residual + x W^T. out may alias residual.
void LinearResidual(const float* x, const float* w, const float* residual, int64_t rows, int64_t in,
                    int64_t out_features, float* out, InputQuant in_quant = InputQuant::kNone);
// out = residual + rms_norm(x). out may alias residual.
void RmsNormResidual(const float* x, const float* w, const float* residual, int64_t rows, int64_t n, float eps,
                     float* out);
// sum = a + b; normed = rms_norm(sum).
void AddRmsNorm(const float* a, const float* b, const float* w, int64_t rows, int64_t n, float eps, float* sum,
                float* normed);
// y = rms_norm(x) W^T.
void NormLinear(const float* x, const float* norm_w, const float* w, int64_t rows, int64_t in, int64_t out_features,
                float eps, float* y, InputQuant in_quant = InputQuant::kNone);

}  // namespace ag::ref

#endif  // AUTOGLM_KERNELS_REF_REF_H_
