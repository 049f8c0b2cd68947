// Speculative decoding by prompt lookup (vLLM's "ngram" method): a decoding
// sequence whose last few tokens appeared earlier in its prompt or answer
// proposes the tokens that followed them there as drafts; one step feeds the
// last token and the drafts, and every row's logits choose a token as a plain
// step would. Drafts are kept while each equals the token chosen before it,
// so the answer is the one plain decoding gives, token for token, greedy or
// sampled (a sampled draft is kept with the probability the model gives it,
// and a rejected one is replaced by a draw from the rest of the distribution,
// which is what drawing a row's token and comparing it does). At one row the
// weights' bytes bound a step, so rows for drafts cost little more than one.
#ifndef AUTOGLM_RUNTIME_SPECULATIVE_H_
#define AUTOGLM_RUNTIME_SPECULATIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ag::runtime {

struct SpeculativeOptions {
  int32_t num_tokens = 0;  // drafts a step, at most; 0: off
  int32_t lookup_min = 0;  // the shortest and longest tail of the sequence looked up
  int32_t lookup_max = 0;
  int32_t disable_by_batch_size = 0;  // no drafts while more sequences than this run (0: never off)

  bool enabled() const { return num_tokens > 0; }
};

inline constexpr int32_t kMaxSpeculativeTokens = 32;
inline constexpr int32_t kMaxLookup = 64;

// vLLM's --speculative-config JSON: {"method": "ngram", "num_speculative_tokens": K,
// "prompt_lookup_max": N, "prompt_lookup_min": M, "disable_by_batch_size": B}; the lookup
// bounds default to each other, or both to 5 (vLLM's). Empty text: off. Anything else (a draft
// model, another method, a bad value) is an error naming the field.
absl::StatusOr<SpeculativeOptions> ParseSpeculativeConfig(const std::string& text);

// The drafts for a sequence whose tokens are `head` then `tail` (its prompt and answer):
// the longest n-gram, n in [lookup_min, lookup_max], that ends the sequence and also occurs
// earlier in it (the earliest such occurrence) names the tokens after that occurrence, up to
// `max_drafts` of them (fewer where the sequence ends first). Appends them to `drafts`.
void ProposeNgramDrafts(absl::Span<const int32_t> head, absl::Span<const int32_t> tail, int32_t lookup_min,
                        int32_t lookup_max, int64_t max_drafts, std::vector<int32_t>* drafts);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_SPECULATIVE_H_
