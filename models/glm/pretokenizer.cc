#include "models/glm/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::glm {
namespace {

constexpr char kPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The length of the UTF-8 sequence starting at `s` if it is valid, else 0.
size_t Utf8SequenceLength(const unsigned char* s, size_t left) {
  const unsigned char c = s[0];
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (left < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;  // overlong, out of range or a surrogate
  }
  return n;
}

}  // namespace

size_t ValidUtf8Prefix(absl::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = Utf8SequenceLength(s + i, text.size() - i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Pretokenizer::~Pretokenizer() = default;

absl::StatusOr<std::unique_ptr<Pretokenizer>> Pretokenizer::Create() {
  std::unique_ptr<Pretokenizer> p(new Pretokenizer());
  p->impl_ = std::make_unique<Impl>();
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \p{..} and case folding follow Unicode, as tiktoken's regex does.
  p->impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (p->impl_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InternalError(absl::StrCat("pre-tokenizer regex: ", reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(p->impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  return p;
}

void Pretokenizer::SplitValid(absl::string_view text, const std::function<void(absl::string_view)>& piece) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // The text was checked to be valid UTF-8: skip PCRE2's own check (it would rescan the whole subject).
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) {  // cannot happen: the last alternative matches any whitespace and the others everything else
      piece(text.substr(start));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    if (ovector[0] > start) piece(text.substr(start, ovector[0] - start));  // unmatched text (not expected)
    if (ovector[1] == ovector[0]) {  // an empty match cannot advance: take one character
      size_t n = 1;
      while (ovector[0] + n < text.size() && (static_cast<unsigned char>(text[ovector[0] + n]) & 0xC0) == 0x80) ++n;
      piece(text.substr(ovector[0], n));
      start = ovector[0] + n;
      continue;
    }
    piece(text.substr(ovector[0], ovector[1] - ovector[0]));
    start = ovector[1];
  }
  pcre2_match_data_free(match);
}

void Pretokenizer::Split(absl::string_view text, const std::function<void(absl::string_view)>& piece) const {
  while (!text.empty()) {
    const size_t valid = ValidUtf8Prefix(text);
    if (valid > 0) SplitValid(text.substr(0, valid), piece);
    if (valid == text.size()) break;
    piece(text.substr(valid, 1));  // one invalid byte, encoded by its byte token
    text.remove_prefix(valid + 1);
  }
}

}  // namespace ag::glm
