// Runs of ordinary text (the text between two special tokens) and their ids, remembered.
//
// A chat client sends its whole conversation every turn, and the phone agent does so every step:
// Open-AutoGLM's Chinese system prompt alone is 7.9 KB, and each step adds a thought, an action
// and the next screen's description. The chat template puts a special token before every turn,
// and the encoder never merges across one, so each turn's text encodes to the same ids every
// time: the tokenizer remembers the runs it encoded (keyed by their whole bytes, compared on a
// hit) and a step costs the encoding of its newest turns only. Least recently used runs go first
// once the budget is spent; short runs (cheaper to encode than to look up and keep) and runs
// larger than an eighth of the budget (one long prompt would flush everything else) are not kept.
#ifndef AUTOGLM_MODELS_GLM_ENCODED_RUNS_H_
#define AUTOGLM_MODELS_GLM_ENCODED_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ag::glm {

class EncodedRuns {
 public:
  // Runs shorter than this are encoded every time (under ~10 us).
  static constexpr size_t kMinBytes = 64;

  // `budget_bytes`: what the kept runs may take, their bytes and ids (4 bytes each) and a fixed
  // overhead an entry; 0 keeps nothing.
  explicit EncodedRuns(size_t budget_bytes) : budget_(budget_bytes) {}

  // Whether `text` would be kept (Find and Remember ignore other runs).
  bool Keeps(absl::string_view text) const { return text.size() >= kMinBytes && Cost(text.size(), 0) <= budget_ / 8; }
  // Appends the ids remembered for `text` to `out`; false (and `out` untouched) if there are none.
  bool Find(absl::string_view text, std::vector<int32_t>* out);
  // Remembers `ids` as the encoding of `text`, evicting the least recently used runs to fit.
  void Remember(absl::string_view text, absl::Span<const int32_t> ids);

  size_t bytes() const;
  size_t runs() const;
  size_t hits() const;  // Find's successes so far

 private:
  struct Run {
    std::string text;
    std::vector<int32_t> ids;
  };
  // An entry's share of the budget: its bytes, its ids, and the list node and index slot.
  static size_t Cost(size_t text_bytes, size_t ids) { return text_bytes + ids * sizeof(int32_t) + 96; }

  const size_t budget_;
  // std::mutex, not absl::Mutex: the system's absl is not built for ThreadSanitizer, which then
  // cannot see its locks (tools/tsan-tests). Guards everything below.
  mutable std::mutex mu_;
  std::list<Run> recent_;  // most recently used first
  // Views of the runs' own text (list nodes do not move).
  absl::flat_hash_map<absl::string_view, std::list<Run>::iterator> index_;
  size_t bytes_ = 0;
  size_t hits_ = 0;
};

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_ENCODED_RUNS_H_
