#include "runtime/speculative.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ag::runtime {
namespace {

absl::Status FieldError(const std::string& key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--speculative-config: '", key, "' ", what));
}

// An integer field in [lo, hi], or nothing when it is absent or null.
absl::StatusOr<std::optional<int32_t>> IntField(const nlohmann::json& j, const std::string& key, int32_t lo, int32_t hi) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    return FieldError(key, absl::StrCat("must be an integer in [", lo, ", ", hi, "]"));
  }
  return static_cast<int32_t>(it->get<int64_t>());
}

bool IsNgram(const nlohmann::json& value) {
  return value.is_string() && (value.get<std::string>() == "ngram" || value.get<std::string>() == "[ngram]");
}

}  // namespace

absl::StatusOr<SpeculativeOptions> ParseSpeculativeConfig(const std::string& text) {
  SpeculativeOptions options;
  if (text.empty()) return options;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("--speculative-config must be a JSON object, e.g. "
                                      "{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}");
  }
  bool ngram = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "method") {
      if (!IsNgram(value)) return FieldError(key, "must be \"ngram\" (prompt lookup is the one method here)");
      ngram = true;
    } else if (key == "model") {  // vLLM's older spelling of the method; a path would be a draft model
      if (!value.is_null() && !IsNgram(value)) return FieldError(key, "names a draft model; only \"ngram\" is supported");
      ngram = ngram || !value.is_null();
    } else if (key != "num_speculative_tokens" && key != "prompt_lookup_max" && key != "prompt_lookup_min" &&
               key != "disable_by_batch_size") {
      return FieldError(key, "is not a setting here (method, num_speculative_tokens, prompt_lookup_max, "
                             "prompt_lookup_min, disable_by_batch_size)");
    }
  }
  if (!ngram) return absl::InvalidArgumentError("--speculative-config: 'method' must be \"ngram\"");
  absl::StatusOr<std::optional<int32_t>> tokens = IntField(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens);
  if (!tokens.ok()) return tokens.status();
  if (!tokens->has_value()) return FieldError("num_speculative_tokens", "is required");
  absl::StatusOr<std::optional<int32_t>> lookup_max = IntField(j, "prompt_lookup_max", 1, kMaxLookup);
  if (!lookup_max.ok()) return lookup_max.status();
  absl::StatusOr<std::optional<int32_t>> lookup_min = IntField(j, "prompt_lookup_min", 1, kMaxLookup);
  if (!lookup_min.ok()) return lookup_min.status();
  absl::StatusOr<std::optional<int32_t>> batch = IntField(j, "disable_by_batch_size", 1, 1 << 20);
  if (!batch.ok()) return batch.status();
  options.num_tokens = **tokens;
  // vLLM's defaults: each bound the other's, or 5 and 5.
  options.lookup_max = lookup_max->value_or(lookup_min->value_or(5));
  options.lookup_min = lookup_min->value_or(options.lookup_max);
  if (options.lookup_min > options.lookup_max) {
    return FieldError("prompt_lookup_min", absl::StrCat("(", options.lookup_min, ") must be at most prompt_lookup_max (",
                                                        options.lookup_max, ")"));
  }
  options.disable_by_batch_size = batch->value_or(0);
  return options;
}

namespace {

// Calls visit(offset + i) for each i < n where p[i] == value, in order, until visit returns false. Blocks of
// 16 are compared without branches first (a loop the compiler vectorises): most of a long prompt has no hit.
template <typename Visit>
bool ForEachEqual(const int32_t* p, int64_t n, int32_t value, int64_t offset, Visit&& visit) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    int any = 0;
    for (int j = 0; j < 16; ++j) any |= p[i + j] == value;
    if (any == 0) continue;
    for (int j = 0; j < 16; ++j) {
      if (p[i + j] == value && !visit(offset + i + j)) return false;
    }
  }
  for (; i < n; ++i) {
    if (p[i] == value && !visit(offset + i)) return false;
  }
  return true;
}

}  // namespace

void ProposeNgramDrafts(absl::Span<const int32_t> head, absl::Span<const int32_t> tail, int32_t lookup_min,
                        int32_t lookup_max, int64_t max_drafts, std::vector<int32_t>* drafts) {
  const int64_t split = static_cast<int64_t>(head.size());
  const int64_t total = split + static_cast<int64_t>(tail.size());
  if (total < 2 || max_drafts <= 0 || lookup_min < 1 || lookup_max < lookup_min) return;
  auto at = [&](int64_t i) { return i < split ? head[i] : tail[i - split]; };
  const int32_t last = at(total - 1);
  // Every earlier occurrence of the last token is where a match could end; the longest match
  // (capped at lookup_max) wins, the earliest among equals. One pass, no index: a 25,000-token
  // agent prompt is scanned in microseconds (engine_bench's /S rows).
  int64_t best = 0, end = -1;
  auto visit = [&](int64_t e) {
    int64_t n = 1;
    while (n < lookup_max && n <= e && at(e - n) == at(total - 1 - n)) ++n;
    if (n > best) {
      best = n;
      end = e;
    }
    return best < lookup_max;  // the longest possible: no later one can replace it
  };
  // Ends before the last token: the prompt, then the answer but its last.
  if (ForEachEqual(head.data(), std::min(split, total - 1), last, 0, visit) && split < total - 1) {
    ForEachEqual(tail.data(), total - 1 - split, last, split, visit);
  }
  if (best < lookup_min) return;
  const int64_t count = std::min(max_drafts, total - 1 - end);
  for (int64_t i = 1; i <= count; ++i) drafts->push_back(at(end + i));
}

}  // namespace ag::runtime
