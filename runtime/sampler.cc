#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace ag::runtime {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top-k must be >= 0, got ", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top-p must be in (0, 1], got ", top_p));
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat("repetition penalty must be > 0, got ", repetition_penalty));
  }
  if (vocab_limit < 0) return absl::InvalidArgumentError("vocab limit must be >= 0");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return absl::InvalidArgumentError(absl::StrCat("min-p must be in [0, 1], got ", min_p));
  for (const auto& [name, value] : {std::pair{"frequency", frequency_penalty}, std::pair{"presence", presence_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " penalty must be in [-2, 2], got ", value));
    }
  }
  if (suppress_for < 0) return absl::InvalidArgumentError("suppressed ids' token count must be >= 0");
  absl::flat_hash_set<int32_t> biased;
  for (const Bias& b : logit_bias) {
    if (b.id < 0) return absl::InvalidArgumentError(absl::StrCat("logit bias names token id ", b.id));
    if (vocab_limit > 0 && b.id >= vocab_limit) {
      return absl::InvalidArgumentError(absl::StrCat("logit bias names token id ", b.id, ", outside the vocabulary [0, ",
                                                     vocab_limit, ")"));
    }
    if (!(b.bias >= -100.0f && b.bias <= 100.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("logit bias of token id ", b.id, " must be in [-100, 100], got ", b.bias));
    }
    if (!biased.insert(b.id).second) {
      return absl::InvalidArgumentError(absl::StrCat("logit bias names token id ", b.id, " twice"));
    }
  }
  return absl::OkStatus();
}

PenaltyTracker::PenaltyTracker(const SamplingParams& params, absl::Span<const int32_t> prompt)
    : repetition_(params.repetition_penalty),
      frequency_(params.frequency_penalty),
      presence_(params.presence_penalty),
      any_(repetition_ != 1.0f || frequency_ != 0.0f || presence_ != 0.0f) {
  // A biased id has its entry from the start, with no penalty until it is generated (or, with a
  // repetition penalty, found in the prompt just below).
  for (const SamplingParams::Bias& b : params.logit_bias) EntryOf(SeenOf(b.id)).bias = b.bias;
  // min_tokens: -inf on the suppressed ids until then (vLLM's logits processor), their own bias after.
  if (params.suppress_for > 0) {
    suppress_for_ = params.suppress_for;
    for (const int32_t id : params.suppressed_ids) {
      const Seen& seen = SeenOf(id);
      ref::Penalty& entry = EntryOf(seen);
      if (entry.bias == -INFINITY) continue;  // listed twice
      suppressed_.emplace_back(seen.entry, entry.bias);
      entry.bias = -INFINITY;
    }
  }
  if (repetition_ == 1.0f) return;  // the prompt's ids matter only to the repetition penalty
  for (const int32_t id : prompt) EntryOf(SeenOf(id)).scale = repetition_;
}

PenaltyTracker::Seen& PenaltyTracker::SeenOf(int32_t id) {
  const auto [it, added] = seen_.try_emplace(id, Seen{0, static_cast<int32_t>(entries_.size())});
  if (added) entries_.push_back({id});  // no penalty, no bias yet
  return it->second;
}

void PenaltyTracker::Add(int32_t generated_token) {
  if (!suppressed_.empty() && ++generated_ == suppress_for_) {
    for (const auto& [entry, bias] : suppressed_) entries_[static_cast<size_t>(entry)].bias = bias;
  }
  if (!any_) return;
  Seen& seen = SeenOf(generated_token);
  ++seen.generated;
  // An entry whose penalties cancel (delta 0, scale 1) stays: ApplyPenalties leaves its logit as it was.
  ref::Penalty& entry = EntryOf(seen);
  entry.scale = repetition_;  // generated now (a biased or suppressed id's entry came without it)
  entry.delta = frequency_ * static_cast<float>(seen.generated) + presence_;
}

void PenaltyTracker::EntriesAfter(absl::Span<const int32_t> more, std::vector<ref::Penalty>* out) const {
  out->assign(entries_.begin(), entries_.end());
  struct Touched {
    int32_t id;
    size_t entry;
    int32_t generated;
  };
  absl::InlinedVector<Touched, 8> touched;  // the ids of `more` so far, as Add would have left them
  for (size_t j = 0; j < more.size(); ++j) {
    if (!suppressed_.empty() && generated_ + static_cast<int64_t>(j) + 1 == suppress_for_) {
      for (const auto& [entry, bias] : suppressed_) (*out)[static_cast<size_t>(entry)].bias = bias;
    }
    if (!any_) continue;
    const int32_t id = more[j];
    auto t = std::find_if(touched.begin(), touched.end(), [&](const Touched& x) { return x.id == id; });
    if (t == touched.end()) {
      if (const auto it = seen_.find(id); it != seen_.end()) {
        touched.push_back({id, static_cast<size_t>(it->second.entry), it->second.generated});
      } else {
        out->push_back({id});  // as SeenOf makes it
        touched.push_back({id, out->size() - 1, 0});
      }
      t = touched.end() - 1;
    }
    ++t->generated;
    ref::Penalty& entry = (*out)[t->entry];
    entry.scale = repetition_;
    entry.delta = frequency_ * static_cast<float>(t->generated) + presence_;
  }
}

int32_t Sampler::Sample(std::vector<float>& logits, const std::vector<int32_t>& history, size_t prompt_size) {
  prompt_size = std::min(prompt_size, history.size());
  PenaltyTracker tracker(params_, absl::MakeConstSpan(history).first(prompt_size));
  for (size_t i = prompt_size; i < history.size(); ++i) tracker.Add(history[i]);
  return Sample(logits, tracker.entries());
}

int32_t Sampler::Sample(std::vector<float>& logits, std::span<const ref::Penalty> penalties) {
  if (params_.vocab_limit > 0 && params_.vocab_limit < static_cast<int32_t>(logits.size())) {
    logits.resize(static_cast<size_t>(params_.vocab_limit));
  }
  const int32_t n = static_cast<int32_t>(logits.size());
  ref::ApplyPenalties(logits.data(), n, penalties);
  if (params_.IsGreedy()) {
    int32_t best = 0;
    ref::Argmax(logits.data(), 1, n, &best);  // std::max_element's answer, vectorised
    return best;
  }
  // The rule and the draw of sampling where the logits are (ref::SampleFiltered, the CUDA sampler's
  // reference): a seed picks the same token on either side, and no sort is needed without top_p.
  const ref::SampleParams p{params_.temperature, params_.top_k, params_.top_p, 0, NextUniform(), params_.min_p};
  return ref::SampleFiltered(logits.data(), n, p);
}

}  // namespace ag::runtime

namespace ag::runtime {

float Sampler::Uniform(std::mt19937_64& rng) {
  const float u = static_cast<float>(std::uniform_real_distribution<double>(0.0, 1.0)(rng));
  return std::min(u, std::nextafter(1.0f, 0.0f));  // rounding to float must not reach 1
}

float Sampler::NextUniform() { return Uniform(rng_); }

void Sampler::PeekUniforms(int64_t n, std::vector<float>* out) const {
  std::mt19937_64 ahead = rng_;
  for (int64_t i = 0; i < n; ++i) out->push_back(Uniform(ahead));
}

void Sampler::SkipUniforms(int64_t n) {
  for (int64_t i = 0; i < n; ++i) Uniform(rng_);
}

}  // namespace ag::runtime
