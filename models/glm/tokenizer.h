// The GLM-4 tokenizer: byte-level BPE by rank over the GLM-4 vocabulary.
//
// Reads either glm-4-9b-chat's tiktoken `tokenizer.model` (one
// `base64(token bytes) rank` per line) or an HF `tokenizer.json` (byte-level
// BPE: tokens spelled in GPT-2's byte-to-unicode alphabet, added tokens with
// their ids). Encoding follows tiktoken: the pre-tokenizer's pieces, each one
// token if it is in the vocabulary, else merged from bytes, always merging the
// adjacent pair whose concatenation has the lowest rank (leftmost on ties).
#ifndef AUTOGLM_MODELS_GLM_TOKENIZER_H_
#define AUTOGLM_MODELS_GLM_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/glm/encoded_runs.h"
#include "models/glm/pretokenizer.h"

namespace ag::glm {

class Tokenizer {
 public:
  // From a checkpoint directory: tokenizer.model if present, else tokenizer.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTiktoken(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfJson(const std::string& path);

  // Ordinary encoding; with `allow_special`, special-token text ("<|user|>")
  // in the input becomes the special token's id.
  std::vector<int32_t> Encode(absl::string_view text, bool allow_special = false) const;
  // The bytes of the tokens, special tokens as their text. Ids outside the
  // vocabulary are an error.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

  // The token's bytes; false for an unknown id.
  bool TokenBytes(int32_t id, std::string* bytes) const;
  // The id of the ordinary token with exactly these bytes, or -1.
  int32_t TokenId(absl::string_view bytes) const;
  // The id of a special token ("[gMASK]", "<|user|>"), or -1.
  int32_t SpecialId(absl::string_view text) const;
  bool IsSpecial(int32_t id) const { return special_by_id_.contains(id); }
  // Whether generated text leaves the token out (Hugging Face's skip_special_tokens): added tokens
  // are, unless tokenizer.json marks them "special": false -- GLM-4.1V's <think>, </think>,
  // <answer> and </answer>, which the phone agent reads in the answer.
  bool HiddenInOutput(int32_t id) const { return IsSpecial(id) && !shown_in_output_.contains(id); }
  // Remember encoded runs of ordinary text within `budget_bytes` (EncodedRuns; 0: none). Loading
  // sets kEncodedRunsBytes; call before the tokenizer is shared between threads.
  void KeepEncodedRuns(size_t budget_bytes);
  static constexpr size_t kEncodedRunsBytes = size_t{32} << 20;
  const EncodedRuns* encoded_runs() const { return runs_.get(); }

  // One past the largest id.
  int32_t vocab_size() const { return vocab_size_; }
  int32_t num_ordinary() const { return static_cast<int32_t>(offsets_.size()) - 1; }

 private:
  Tokenizer() = default;
  absl::Status Finish(const std::string& source);
  void EncodeOrdinary(absl::string_view text, std::vector<int32_t>* out) const;
  // Appends the next ordinary token (ids are 0, 1, 2, ...).
  void AddOrdinary(absl::string_view bytes) {
    bytes_.append(bytes.data(), bytes.size());
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  absl::string_view Ordinary(int32_t id) const {
    return absl::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* out) const;
  int32_t Rank(absl::string_view bytes) const;

  std::unique_ptr<Pretokenizer> pretokenizer_;
  std::unique_ptr<EncodedRuns> runs_;  // thread-safe; null keeps none
  // The ordinary tokens' bytes, back to back: token i is bytes_[offsets_[i], offsets_[i+1]).
  std::string bytes_;
  std::vector<uint32_t> offsets_ = {0};
  absl::flat_hash_map<absl::string_view, int32_t> rank_;  // views into bytes_ -> id
  absl::flat_hash_map<std::string, int32_t> special_;
  absl::flat_hash_map<int32_t, std::string> special_by_id_;
  absl::flat_hash_set<int32_t> shown_in_output_;  // added tokens marked "special": false
  std::vector<std::string> specials_longest_first_;
  int32_t vocab_size_ = 0;
};

// GLM-4's special tokens and their ids (they follow the 151329 ordinary tokens).
struct SpecialToken {
  const char* text;
  int32_t id;
};
extern const SpecialToken kGlm4SpecialTokens[14];

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_TOKENIZER_H_
