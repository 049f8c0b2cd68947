#include "runtime/json_constraint.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ag::runtime {
namespace {

constexpr const char* kLiterals[] = {"true", "false", "null"};

bool IsSpace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonState::StartValue(uint8_t c) {
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= kMaxDepth) return false;
      stack_.push_back(static_cast<char>(c));
      mode_ = c == '{' ? kObjectFirst : kArrayFirst;
      return true;
    case '"':
      mode_ = kString;
      key_ = false;
      return true;
    case '-':
      mode_ = kNumber;
      number_ = kMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = kLiteral;
      literal_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      literal_pos_ = 1;
      return true;
    default:
      if (!IsDigit(c)) return false;
      mode_ = kNumber;
      number_ = c == '0' ? kZero : kInt;
      return true;
  }
}

bool JsonState::Close(uint8_t c) {
  if (stack_.empty() || static_cast<uint8_t>(stack_.back()) != (c == '}' ? '{' : '[')) return false;
  stack_.pop_back();
  AfterValue();
  return true;
}

bool JsonState::Feed(uint8_t c) {
  if (!IsSpace(c)) space_ = 0;
  switch (mode_) {
    case kStart:  // the answer starts with its object's brace
      if (c != '{') return false;
      stack_.push_back('{');
      mode_ = kObjectFirst;
      return true;
    case kValue:
      return IsSpace(c) ? TakeJsonSpace(space_, c) : StartValue(c);
    case kArrayFirst:
      return IsSpace(c) ? TakeJsonSpace(space_, c) : c == ']' ? Close(c) : StartValue(c);
    case kObjectFirst:
    case kKey:
      if (IsSpace(c)) return TakeJsonSpace(space_, c);
      if (c == '}' && mode_ == kObjectFirst) return Close(c);
      if (c != '"') return false;
      mode_ = kString;
      key_ = true;
      return true;
    case kColon:
      if (IsSpace(c)) return TakeJsonSpace(space_, c);
      if (c != ':') return false;
      mode_ = kValue;
      return true;
    case kAfter:
      if (IsSpace(c)) return TakeJsonSpace(space_, c);
      if (c == ',') {
        mode_ = stack_.back() == '{' ? kKey : kValue;
        return true;
      }
      return (c == '}' || c == ']') && Close(c);
    case kString:
      if (utf8_left_ > 0) {  // inside a multi-byte character
        if (c < utf8_lo_ || c > utf8_hi_) return false;
        --utf8_left_;
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        return true;
      }
      if (c == '"') {
        if (key_) {
          mode_ = kColon;
        } else {
          AfterValue();
        }
        return true;
      }
      if (c == '\\') {
        mode_ = kEscape;
        return true;
      }
      if (c < 0x20) return false;  // control characters are escaped in JSON
      if (c < 0x80) return true;
      // UTF-8's lead bytes and the range of the byte after each (no overlong forms, no surrogates, <= U+10FFFF).
      if (c >= 0xC2 && c <= 0xDF) {
        utf8_left_ = 1;
      } else if (c >= 0xE0 && c <= 0xEF) {
        utf8_left_ = 2;
        if (c == 0xE0) utf8_lo_ = 0xA0;
        if (c == 0xED) utf8_hi_ = 0x9F;
      } else if (c >= 0xF0 && c <= 0xF4) {
        utf8_left_ = 3;
        if (c == 0xF0) utf8_lo_ = 0x90;
        if (c == 0xF4) utf8_hi_ = 0x8F;
      } else {
        return false;
      }
      return true;
    case kEscape:
      if (c == 'u') {
        mode_ = kUnicode;
        hex_left_ = 4;
        return true;
      }
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
      mode_ = kString;
      return true;
    case kUnicode:
      if (!IsHex(c)) return false;
      if (--hex_left_ == 0) mode_ = kString;
      return true;
    case kNumber:
      switch (number_) {
        case kMinus:
          if (!IsDigit(c)) return false;
          number_ = c == '0' ? kZero : kInt;
          return true;
        case kZero:
        case kInt:
        case kFrac:
        case kExp:
          if (IsDigit(c) && number_ != kZero) return true;
          if (c == '.' && (number_ == kZero || number_ == kInt)) {
            number_ = kDot;
            return true;
          }
          if ((c == 'e' || c == 'E') && number_ != kExp) {
            number_ = kE;
            return true;
          }
          // The number ended here (a root is an object: it is inside one): the byte is what follows it.
          mode_ = kAfter;
          return Feed(c);
        case kDot:
          if (!IsDigit(c)) return false;
          number_ = kFrac;
          return true;
        case kE:
          if (c == '+' || c == '-') {
            number_ = kESign;
            return true;
          }
          [[fallthrough]];
        case kESign:
          if (!IsDigit(c)) return false;
          number_ = kExp;
          return true;
      }
      return false;
    case kLiteral: {
      const char* word = kLiterals[literal_];
      if (c != static_cast<uint8_t>(word[literal_pos_])) return false;
      if (word[++literal_pos_] == '\0') AfterValue();
      return true;
    }
    case kDone:
      return false;
  }
  return false;
}

bool JsonState::Feed(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

std::string JsonState::Key() const {
  std::string key = {static_cast<char>(mode_), static_cast<char>(key_), static_cast<char>(utf8_left_),
                     static_cast<char>(utf8_lo_), static_cast<char>(utf8_hi_), static_cast<char>(hex_left_),
                     static_cast<char>(number_), static_cast<char>(literal_), static_cast<char>(literal_pos_),
                     static_cast<char>(space_)};
  return key + stack_;
}

absl::StatusOr<std::shared_ptr<JsonVocabulary>> JsonVocabulary::Build(
    int32_t ordinary, int32_t vocab, const std::function<bool(int32_t, std::string*)>& token_bytes) {
  if (ordinary < 0 || ordinary > vocab) {
    return absl::InvalidArgumentError(absl::StrCat("JSON mode: ", ordinary, " ordinary tokens in a vocabulary of ", vocab));
  }
  auto v = std::make_shared<JsonVocabulary>();
  v->vocab_ = vocab;
  std::vector<std::string> tokens(static_cast<size_t>(ordinary));
  for (int32_t id = 0; id < ordinary; ++id) {
    if (!token_bytes(id, &tokens[id])) return absl::InternalError(absl::StrCat("JSON mode: no bytes for token ", id));
    if (tokens[id].size() == 1) v->byte_tokens_[static_cast<uint8_t>(tokens[id][0])] = true;
  }
  for (int c = 0x20; c < 0x7F; ++c) {
    if (!v->byte_tokens_[c]) {
      return absl::FailedPreconditionError(
          absl::StrCat("JSON mode needs a token for each printable ASCII character; this vocabulary has none for '",
                       std::string(1, static_cast<char>(c)), "'"));
    }
  }
  std::vector<int32_t> all(tokens.size()), longer;
  std::iota(all.begin(), all.end(), 0);
  for (const int32_t id : all) {
    if (tokens[static_cast<size_t>(id)].size() > kShortToken) longer.push_back(id);
  }
  // The text tokens, by the characters each writes, and the quoted ones (JsonVocabulary::Walk).
  JsonState in_text;
  in_text.Feed(absl::string_view("{\"a\":\""));
  const size_t words = static_cast<size_t>(vocab) / 64 + 1;
  v->text_within_.assign(kShortToken + 1, std::vector<uint64_t>(words, 0));
  std::vector<int32_t> quoted, others;
  for (const int32_t id : all) {
    const std::string& t = tokens[static_cast<size_t>(id)];
    if (t.find_first_of("\"\\") != std::string::npos) {
      quoted.push_back(id);
      continue;
    }
    JsonState s = in_text;
    if (t.empty() || !s.Feed(t)) {
      if (!t.empty()) others.push_back(id);
      continue;
    }
    v->text_ids_.push_back(id);
    const auto chars = static_cast<uint32_t>(std::count_if(t.begin(), t.end(), [](char c) { return (c & 0xC0) != 0x80; }));
    if (chars > kShortToken) {
      v->text_longer_.emplace_back(id, chars);
    } else {
      v->text_within_[chars][static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
    }
  }
  for (uint32_t k = 1; k <= kShortToken; ++k) {  // at most k: those of k, and those of fewer
    for (size_t w = 0; w < words; ++w) v->text_within_[k][w] |= v->text_within_[k - 1][w];
  }
  v->quoted_ = SortedTokens::Of(tokens, std::move(quoted));
  v->others_ = SortedTokens::Of(tokens, std::move(others));
  v->all_ = SortedTokens::Of(tokens, std::move(all));
  v->long_ = SortedTokens::Of(tokens, std::move(longer));
  v->sorted_index_.resize(tokens.size());
  for (size_t i = 0; i < v->all_.ids.size(); ++i) v->sorted_index_[static_cast<size_t>(v->all_.ids[i])] = static_cast<uint32_t>(i);
  return v;
}

SortedTokens SortedTokens::Of(const std::vector<std::string>& tokens, std::vector<int32_t> ids) {
  SortedTokens t;
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  const std::string* previous = nullptr;
  for (const int32_t id : ids) {
    const std::string& token = tokens[static_cast<size_t>(id)];
    size_t shared = 0;
    if (previous != nullptr) {
      while (shared < token.size() && shared < previous->size() && token[shared] == (*previous)[shared]) ++shared;
    }
    t.shared.push_back(static_cast<uint32_t>(shared));
    t.bytes += token;
    t.offsets.push_back(static_cast<uint32_t>(t.bytes.size()));
    t.longest = std::max(t.longest, token.size());
    previous = &token;
  }
  t.ids = std::move(ids);
  return t;
}

absl::StatusOr<std::shared_ptr<JsonVocabulary>> JsonVocabulary::Build(const glm::Tokenizer& tokenizer) {
  return Build(tokenizer.num_ordinary(), tokenizer.vocab_size(),
               [&](int32_t id, std::string* bytes) { return tokenizer.TokenBytes(id, bytes); });
}

bool JsonVocabulary::TokenBytesOf(int32_t id, std::string* bytes) const {
  if (id < 0 || static_cast<size_t>(id) >= sorted_index_.size()) return false;
  const uint32_t i = sorted_index_[static_cast<size_t>(id)];
  bytes->assign(all_.bytes, all_.offsets[i], all_.offsets[i + 1] - all_.offsets[i]);
  return true;
}

void JsonVocabulary::SetTextTokens(uint32_t room, std::vector<uint64_t>& mask) const {
  const std::vector<uint64_t>& within = text_within_[std::min(room, kShortToken)];
  for (size_t w = 0; w < mask.size(); ++w) mask[w] |= within[w];
  if (room <= kShortToken) return;
  for (const auto& [id, chars] : text_longer_) {
    if (chars <= room) mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  }
}

Mask JsonVocabulary::Allowed(const JsonState& state) {
  return *masks_.Get(state.Key(), [&]() -> absl::StatusOr<Mask> { return std::make_shared<const std::vector<uint64_t>>(Compute(state)); });
}

void ApplyMask(const std::vector<uint64_t>& allowed, int32_t vocab, float* logits, int64_t n) {
  const int64_t known = std::min<int64_t>(n, vocab);
  for (int64_t word = 0; word * 64 < known; ++word) {  // only the refused ids are touched: few in a string
    uint64_t refused = ~allowed[static_cast<size_t>(word)];
    if (known - word * 64 < 64) refused &= (uint64_t{1} << (known - word * 64)) - 1;
    for (; refused != 0; refused &= refused - 1) logits[word * 64 + std::countr_zero(refused)] = -INFINITY;
  }
  for (int64_t id = known; id < n; ++id) logits[id] = -INFINITY;  // past the tokenizer: padding rows
}

void CopyMask(const std::vector<uint64_t>& allowed, int32_t vocab, int64_t n, std::vector<uint64_t>* bits) {
  const int64_t known = std::min<int64_t>(n, vocab);
  bits->assign(AllowedWords(n), 0);
  const size_t whole = static_cast<size_t>(known / 64);
  std::copy(allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(whole), bits->begin());
  if (known % 64 != 0) (*bits)[whole] = allowed[whole] & ((uint64_t{1} << (known % 64)) - 1);
}

std::unique_ptr<TokenConstraint> JsonVocabulary::NewConstraint() {
  return std::make_unique<AutomatonConstraint<JsonVocabulary, JsonState>>(shared_from_this(), *this, JsonState());
}

}  // namespace ag::runtime
