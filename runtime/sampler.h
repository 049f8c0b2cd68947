// Token selection from a logits row: greedy, temperature, top-k, top-p and
// repetition penalty (transformers' semantics), reproducible for a seed.
#ifndef AUTOGLM_RUNTIME_SAMPLER_H_
#define AUTOGLM_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/ref/ref.h"

namespace ag::runtime {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keep tokens at least min_p times as likely as the likeliest (vLLM's)
  float repetition_penalty = 1.0f;  // 1: off; transformers' rule over the prompt and the generated tokens
  // OpenAI's, over the generated tokens only: each id's logit less frequency_penalty x its count
  // and presence_penalty once if it appeared. In [-2, 2]; 0: off.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  // OpenAI's logit_bias: each id's logit plus its bias, before every penalty (vLLM's order).
  // Distinct ids, biases in [-100, 100]; empty: off.
  struct Bias {
    int32_t id = 0;
    float bias = 0.0f;
  };
  std::vector<Bias> logit_bias;
  // vLLM's min_tokens, set by the engine from Request::min_new_tokens: `suppressed_ids` (the
  // end-of-sequence and stop ids) cannot be drawn until `suppress_for` new tokens exist.
  std::vector<int32_t> suppressed_ids;
  int64_t suppress_for = 0;
  // Only ids below this can be chosen (0: any). A model's embedding is often
  // padded past its tokenizer's vocabulary; text generation must stay inside it.
  int32_t vocab_limit = 0;

  // Greedy, no penalty or bias, no limit: the device's argmax is the answer, no logits needed.
  bool IsPlainGreedy() const { return IsGreedy() && !HasPenalty() && vocab_limit == 0; }
  // Any penalty or bias: a logit changes before sampling (a PenaltyTracker's entries).
  bool HasPenalty() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f ||
           !logit_bias.empty() || (suppress_for > 0 && !suppressed_ids.empty());
  }
  bool IsGreedy() const { return temperature == 0.0f || top_k == 1; }
  absl::Status Validate() const;
};

// One sequence's penalties, kept as it grows: one map lookup and one entry updated per
// generated token, instead of a pass over the prompt and the answer at every draw (the agent's
// prompts run to 20,000 tokens), or over every id seen (rebuilding the entries each step cost
// ~10 us a sequence at ~1,600 distinct ids: engine_bench). entries() are ref::Penalty entries,
// one per id that has any, in the order the ids were first seen, for the host sampler and for
// sampling where the logits are alike.
class PenaltyTracker {
 public:
  PenaltyTracker(const SamplingParams& params, absl::Span<const int32_t> prompt);
  void Add(int32_t generated_token);
  std::span<const ref::Penalty> entries() const { return entries_; }
  // The entries Add would leave after `more` generated tokens, into `out`, the tracker unchanged
  // (a speculative step's draft rows): a copy of the entries and a patch for each of `more`.
  void EntriesAfter(absl::Span<const int32_t> more, std::vector<ref::Penalty>* out) const;

 private:
  float repetition_, frequency_, presence_;
  bool any_ = false;  // any penalty that generated tokens change
  // min_tokens: the suppressed ids' entries (their bias -inf) and the bias each gets back once
  // `suppress_for_` tokens were generated.
  int64_t generated_ = 0, suppress_for_ = 0;
  std::vector<std::pair<int32_t, float>> suppressed_;
  struct Seen {
    int32_t generated = 0;  // times among the generated tokens
    int32_t entry = 0;      // its entry in entries_
  };
  // An id's bookkeeping and its entry, made (no penalty, no bias) the first time the id is named.
  Seen& SeenOf(int32_t id);
  ref::Penalty& EntryOf(const Seen& seen) { return entries_[static_cast<size_t>(seen.entry)]; }
  absl::flat_hash_map<int32_t, Seen> seen_;  // ids with an entry: biased, suppressed, the prompt's (with a repetition penalty), generated
  std::vector<ref::Penalty> entries_;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

  // Picks a token from `logits` (modified in place) after ref::ApplyPenalties
  // with `penalties` (a PenaltyTracker's entries).
  int32_t Sample(std::vector<float>& logits, std::span<const ref::Penalty> penalties);
  // The same with the penalties of `history`: the prompt and what was
  // generated, its first `prompt_size` ids the prompt (the repetition penalty
  // sees all of it, the frequency and presence penalties the rest).
  int32_t Sample(std::vector<float>& logits, const std::vector<int32_t>& history, size_t prompt_size = 0);
  // The next draw in [0, 1) of this sampler's seeded stream, for sampling where the logits are
  // (Backend::SampleRows): a seed repeats its tokens there too.
  float NextUniform();
  // The next `n` draws NextUniform would give, not taken (a speculative step's rows each need one
  // before it is known how many tokens it keeps); SkipUniforms(k) then takes the first k.
  void PeekUniforms(int64_t n, std::vector<float>* out) const;
  void SkipUniforms(int64_t n);

 private:
  static float Uniform(std::mt19937_64& rng);
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_SAMPLER_H_
