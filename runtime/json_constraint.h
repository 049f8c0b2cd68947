// OpenAI's JSON mode (response_format {"type": "json_object"}): the answer is one JSON object
// (RFC 8259: strings valid UTF-8 with their escapes, numbers in JSON's grammar, true/false/null,
// whitespace between tokens bounded: TakeJsonSpace), with nothing before its '{' and nothing after its
// '}' -- the sequence ends there. Enforced token by token: a token may come next when all of its
// bytes continue a prefix of such an object.
#ifndef AUTOGLM_RUNTIME_JSON_CONSTRAINT_H_
#define AUTOGLM_RUNTIME_JSON_CONSTRAINT_H_

#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/glm/tokenizer.h"
#include "runtime/constraint.h"
#include "runtime/lru_cache.h"

namespace ag::runtime {

// Whitespace between JSON tokens, as llama.cpp's JSON grammars allow it: none, one space, or a
// newline and up to 20 spaces or tabs of indentation -- a model that keeps writing whitespace still
// ends (JSON itself allows any run). `run` counts the current run (0: none yet, 1-21: a newline and
// run-1 more, 0xFF: a space, nothing more); the caller zeroes it at any other byte. False: refused.
inline bool TakeJsonSpace(uint8_t& run, uint8_t c) {
  constexpr uint8_t kMaxIndent = 20, kSpaced = 0xFF;
  if (run == 0) {
    run = c == '\n' ? 1 : c == ' ' ? kSpaced : 0;
    return run != 0;
  }
  if (run == kSpaced || run > kMaxIndent || (c != ' ' && c != '\t')) return false;
  ++run;
  return true;
}

// Where a byte stream is in the grammar of one JSON object. Small and copied freely.
class JsonState {
 public:
  // Consumes one byte; false (and the state unspecified) when no JSON object text continues so.
  bool Feed(uint8_t c);
  bool Feed(absl::string_view bytes);
  // The object closed: the text is whole, and no byte may follow.
  bool Complete() const { return mode_ == kDone; }
  // Everything that decides what may follow, as bytes (the mask cache's key).
  std::string Key() const;
  // Inside a string's text at a character boundary: how many characters may still come before its
  // closing quote (no bound here: UINT32_MAX). Empty anywhere else (JsonVocabulary::Walk's shortcut).
  std::optional<uint32_t> PlainStringRoom() const {
    if (mode_ == kString && utf8_left_ == 0) return UINT32_MAX;
    return std::nullopt;
  }

  static constexpr size_t kMaxDepth = 64;  // nested objects and arrays; deeper ones are not opened

 private:
  enum Mode : uint8_t { kStart, kValue, kArrayFirst, kObjectFirst, kKey, kColon, kAfter, kString, kEscape,
                        kUnicode, kNumber, kLiteral, kDone };
  enum Number : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };
  bool StartValue(uint8_t c);
  bool Close(uint8_t c);
  void AfterValue() { mode_ = stack_.empty() ? kDone : kAfter; }

  Mode mode_ = kStart;
  bool key_ = false;                           // kString: the string is an object's key
  uint8_t utf8_left_ = 0, utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // kString: continuation bytes owed, the next one's range
  uint8_t hex_left_ = 0;                       // kUnicode: hex digits owed
  Number number_ = kMinus;                     // kNumber
  uint8_t literal_ = 0, literal_pos_ = 0;      // kLiteral: true, false or null, the next letter
  uint8_t space_ = 0;                          // between tokens: the whitespace run (TakeJsonSpace)
  std::string stack_;                          // '{' and '[' of the open containers
};

using Mask = std::shared_ptr<const std::vector<uint64_t>>;  // a bit an id
using MaskCache = LruCache<Mask>;                             // masks by state key

// Tokens as bytes, sorted so that tokens sharing a prefix feed it once (a walk of the trie).
struct SortedTokens {
  std::string bytes;                 // back to back, in sorted order
  std::vector<uint32_t> offsets{0};  // sorted token i is bytes[offsets[i], offsets[i + 1])
  std::vector<int32_t> ids;          // sorted token i's id
  std::vector<uint32_t> shared;      // bytes sorted token i shares with i - 1
  size_t longest = 0;

  // The tokens `ids` of `tokens` (indexed by id).
  static SortedTokens Of(const std::vector<std::string>& tokens, std::vector<int32_t> ids);
  // Sets the bit of each of these tokens whose bytes a byte automaton takes from `state` (State:
  // copyable, Feed(uint8_t)).
  template <class State>
  void Walk(const State& state, std::vector<uint64_t>& mask) const;
};

// A tokenizer's ordinary tokens as bytes, sorted so that tokens sharing a prefix feed it once, and
// the masks of the states met so far (a long string's every step is one state: one lookup).
class JsonVocabulary : public std::enable_shared_from_this<JsonVocabulary> {
 public:
  // `token_bytes(id, &bytes)` for the ordinary ids [0, ordinary); ids from there to `vocab` (special
  // tokens, padding rows) are never allowed. Every printable ASCII byte must be a token of its own
  // (byte-level BPE vocabularies, GLM-4's, have all 256), or some JSON could not be written.
  static absl::StatusOr<std::shared_ptr<JsonVocabulary>> Build(
      int32_t ordinary, int32_t vocab, const std::function<bool(int32_t, std::string*)>& token_bytes);
  // The same over a tokenizer's ordinary tokens, its special ones never allowed (~50 ms for GLM-4's).
  static absl::StatusOr<std::shared_ptr<JsonVocabulary>> Build(const glm::Tokenizer& tokenizer);

  // The tokens that may follow `state`, a bit an id ([vocab / 64 + 1] words). Thread-safe.
  Mask Allowed(const JsonState& state);
  // The same, computed afresh (what a state not met before costs).
  std::vector<uint64_t> Compute(const JsonState& state) const { return Walk(state); }
  // The tokens whose bytes a byte automaton takes from `state` (State: copyable, Feed(uint8_t)).
  // Inside a string's text at a character boundary (State::PlainStringRoom: JSON mode's) nearly
  // every token is taken whole (GLM-4: ~146,700 of 151,329), and feeding each cost 3-10 ms: there
  // the text tokens' bits come from sets made once, by how many characters each writes, and only
  // the tokens with a quote or a backslash (which may end the string or start an escape) are fed.
  // (A schema's and an expression's grammars put the same parts together themselves, with their
  // patterns' tables: JsonSchemaGrammar::Compute, RegexGrammar::Compute.)
  template <class State>
  std::vector<uint64_t> Walk(const State& state) const {
    if constexpr (requires(const State& s) { s.PlainStringRoom(); }) {
      if (const std::optional<uint32_t> room = state.PlainStringRoom()) {
        std::vector<uint64_t> mask(static_cast<size_t>(vocab_) / 64 + 1, 0);
        SetTextTokens(*room, mask);
        WalkQuoted(state, mask);
        return mask;
      }
    }
    return WalkEveryToken(state);
  }
  // Text tokens: no quote, no backslash, and taken whole inside a string's text from a character
  // boundary (control characters and broken UTF-8 are not; the last character may be a first part).
  // Sets the bits of those that write at most `room` characters (a character counted at its first
  // byte, as maxLength counts).
  void SetTextTokens(uint32_t room, std::vector<uint64_t>& mask) const;
  const std::vector<int32_t>& text_tokens() const { return text_ids_; }
  // Feeds the tokens with a quote or a backslash (a string's text takes the others from sets)...
  template <class State>
  void WalkQuoted(const State& state, std::vector<uint64_t>& mask) const {
    quoted_.Walk(state, mask);
  }
  // ... and those neither text nor quoted (control characters, broken UTF-8: a text that is no JSON
  // string's, a regular expression's, may take them).
  template <class State>
  void WalkNonText(const State& state, std::vector<uint64_t>& mask) const {
    others_.Walk(state, mask);
  }
  // Walk without the text tokens' sets: every token fed (what they must agree with; tests, benchmarks).
  template <class State>
  std::vector<uint64_t> WalkEveryToken(const State& state) const {
    std::vector<uint64_t> mask(static_cast<size_t>(vocab_) / 64 + 1, 0);
    all_.Walk(state, mask);
    return mask;
  }
  // Tokens longer than kShortToken bytes are few (GLM-4: 227 of 151,329, 15 KB together); a state
  // whose counts matter further ahead than that (JsonSchema's lengths and items) has its mask made
  // from one computed for a state that agrees on everything short tokens can reach, their bits set
  // afresh here.
  static constexpr uint32_t kShortToken = 32;
  template <class State>
  void RedoLongTokens(const State& state, std::vector<uint64_t>& mask) const {
    for (const int32_t id : long_.ids) mask[static_cast<size_t>(id) / 64] &= ~(uint64_t{1} << (id % 64));
    long_.Walk(state, mask);
  }
  int32_t vocab() const { return vocab_; }
  // An ordinary token's bytes; false for any other id.
  bool TokenBytesOf(int32_t id, std::string* bytes) const;
  // Whether the byte is a token of its own (then any text can be written byte by byte).
  bool HasByteToken(uint8_t byte) const { return byte_tokens_[byte]; }
  // A fresh JSON-object constraint over this vocabulary (a request's n choices: one each).
  std::unique_ptr<TokenConstraint> NewConstraint();

  static constexpr size_t kMaxCachedMasks = 256;

 private:
  int32_t vocab_ = 0;
  SortedTokens all_;                    // the ordinary tokens
  SortedTokens long_;                   // those longer than kShortToken bytes
  std::vector<uint32_t> sorted_index_;  // an ordinary id's place in all_
  // The text tokens: text_within_[k] those that write at most k characters, k <= kShortToken;
  // text_longer_ those that write more, with their counts.
  std::vector<int32_t> text_ids_;
  std::vector<std::vector<uint64_t>> text_within_;
  std::vector<std::pair<int32_t, uint32_t>> text_longer_;
  SortedTokens quoted_;  // the tokens with a quote or a backslash
  SortedTokens others_;  // neither text nor quoted
  std::bitset<256> byte_tokens_;
  MaskCache masks_{kMaxCachedMasks};  // by JsonState::Key
};

// Sets to -inf the logits of the tokens `allowed` leaves out (and of every id past `vocab`).
void ApplyMask(const std::vector<uint64_t>& allowed, int32_t vocab, float* logits, int64_t n);
// The same as bits over ids 0 .. n-1 ((n + 63) / 64 words; ids past `vocab` clear).
void CopyMask(const std::vector<uint64_t>& allowed, int32_t vocab, int64_t n, std::vector<uint64_t>* bits);
inline bool MaskAllows(const std::vector<uint64_t>& allowed, int32_t vocab, int32_t token) {
  return token >= 0 && token < vocab && ((allowed[static_cast<size_t>(token) / 64] >> (token % 64)) & 1) != 0;
}

// The constraint of a byte automaton over a vocabulary: `masks->Allowed(state)` is a state's mask
// (JsonVocabulary for JSON mode, JsonSchemaGrammar for a schema), kept alive by the constraint.
template <class Masks, class State>
class AutomatonConstraint : public TokenConstraint {
 public:
  AutomatonConstraint(std::shared_ptr<Masks> masks, const JsonVocabulary& vocabulary, State start)
      : masks_(std::move(masks)), vocabulary_(vocabulary), state_(std::move(start)) {}
  void Mask(float* logits, int64_t n) override { ApplyMask(*Current(), vocabulary_.vocab(), logits, n); }
  void Allowed(std::vector<uint64_t>* bits, int64_t n) override { CopyMask(*Current(), vocabulary_.vocab(), n, bits); }
  bool KeepsDraftStates() const override { return true; }
  void AllowedAfter(size_t k, std::vector<uint64_t>* bits, int64_t n, bool* complete) override {
    const size_t at = next_ + k;
    if (at >= prepared_.size()) {  // past a refused draft (or no Prepare): never used
      bits->assign(AllowedWords(n), 0);
      *complete = false;
      return;
    }
    CopyMask(*prepared_[at], vocabulary_.vocab(), n, bits);
    *complete = prepared_complete_[at];
  }
  // A token is allowed exactly when its bytes feed (what Mask's walk tests), so it is fed directly.
  bool Accept(int32_t token) override {
    // The prepared masks stay right while the tokens taken are the drafts they were made for.
    if (next_ < drafts_.size() && token == drafts_[next_]) {
      ++next_;
    } else {
      prepared_.clear();
      prepared_complete_.clear();
      drafts_.clear();
      next_ = 0;
    }
    return Feed(state_, token);
  }
  bool Complete() const override { return state_.Complete(); }
  bool Released() const override {
    if constexpr (requires(const State& s) { s.Released(); }) {
      return state_.Released();
    } else {
      return false;
    }
  }
  void Prepare(std::span<const int32_t> drafts) override {
    drafts_.assign(drafts.begin(), drafts.end());
    next_ = 0;
    prepared_.clear();
    prepared_complete_.clear();
    State state = state_;
    prepared_.push_back(masks_->Allowed(state));
    prepared_complete_.push_back(state.Complete());
    for (const int32_t token : drafts) {
      if (!Feed(state, token)) break;
      prepared_.push_back(masks_->Allowed(state));
      prepared_complete_.push_back(state.Complete());
    }
  }

 private:
  runtime::Mask Current() { return next_ < prepared_.size() ? prepared_[next_] : masks_->Allowed(state_); }
  bool Feed(State& state, int32_t token) {
    bytes_.clear();
    return vocabulary_.TokenBytesOf(token, &bytes_) && !bytes_.empty() && state.Feed(bytes_);
  }

  std::shared_ptr<Masks> masks_;
  const JsonVocabulary& vocabulary_;  // owned by masks_
  State state_;
  std::string bytes_;
  std::vector<runtime::Mask> prepared_;  // Prepare's: the state's mask, then one a draft taken
  std::vector<bool> prepared_complete_;  // and whether the text is whole there
  std::vector<int32_t> drafts_;          // the drafts they were made for
  size_t next_ = 0;                      // prepared_[next_] is the current state's
};

template <class State>
void SortedTokens::Walk(const State& state, std::vector<uint64_t>& mask) const {
  // states[d]: the state after the current token's first d bytes; valid for d <= fed. Tokens in
  // sorted order share their prefix with the one before, whose states stand for it: each prefix is
  // fed once, and a prefix that failed fails every token under it. A prefix after which the state
  // takes anything for good (State::Released, where it has one: an optional tool call's reply) takes
  // every token under it, unfed.
  constexpr size_t kNone = SIZE_MAX;
  std::vector<State> states(longest + 1);
  states[0] = state;
  size_t fed = 0, released = kNone;  // released: the length of the current prefix that let everything through
  for (size_t i = 0; i < ids.size(); ++i) {
    const absl::string_view t(bytes.data() + offsets[i], offsets[i + 1] - offsets[i]);
    size_t d = shared[i];
    bool taken = d >= released;
    if (!taken) {
      released = kNone;
      if (d > fed) continue;  // its prefix includes the byte that failed (fed stays: the prefix is the same)
      for (; d < t.size(); ++d) {
        states[d + 1] = states[d];
        if (!states[d + 1].Feed(static_cast<uint8_t>(t[d]))) break;
        if constexpr (requires(const State& s) { s.Released(); }) {
          if (states[d + 1].Released()) {
            released = ++d;
            break;
          }
        }
      }
      fed = d;
      taken = released != kNone || d == t.size();
    }
    if (taken && !t.empty()) mask[static_cast<size_t>(ids[i]) / 64] |= uint64_t{1} << (ids[i] % 64);
  }
}

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_JSON_CONSTRAINT_H_
