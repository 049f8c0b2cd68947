// The GLM-4 pre-tokenizer: splits text into the pieces that BPE encodes
// separately, with the regex of tiktoken's GLM-4 encoding (PCRE2, JIT):
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Bytes that are not valid UTF-8 cannot go through the regex; each becomes
// a piece of its own, so any byte string round-trips through the tokenizer.
#ifndef AUTOGLM_MODELS_GLM_PRETOKENIZER_H_
#define AUTOGLM_MODELS_GLM_PRETOKENIZER_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ag::glm {

class Pretokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Pretokenizer>> Create();
  ~Pretokenizer();

  // Calls `piece` for each piece of `text`, in order; the pieces concatenate to `text`.
  void Split(absl::string_view text, const std::function<void(absl::string_view)>& piece) const;

 private:
  Pretokenizer() = default;
  void SplitValid(absl::string_view text, const std::function<void(absl::string_view)>& piece) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Length of the valid UTF-8 prefix of `text` (at most text.size()).
size_t ValidUtf8Prefix(absl::string_view text);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_PRETOKENIZER_H_
