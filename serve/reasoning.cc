#include "serve/reasoning.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace ag::serve {
namespace {

constexpr absl::string_view kOpen = "<think>", kClose = "</think>";

// The length of the longest suffix of `text` that begins `tag` (a tag that may still be forming).
size_t PartialTag(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (absl::StartsWith(tag, text.substr(text.size() - n))) return n;
  }
  return 0;
}

}  // namespace

ReasoningSplitter::Parts ReasoningSplitter::Add(absl::string_view text) {
  held_.append(text.data(), text.size());
  Parts out;
  if (state_ == State::kStart) {
    if (held_.size() < kOpen.size() && absl::StartsWith(kOpen, held_)) return out;  // "<thi": wait
    if (absl::StartsWith(held_, kOpen)) {
      held_.erase(0, kOpen.size());
      state_ = State::kReasoning;
    } else {
      state_ = State::kContent;
    }
  }
  if (state_ == State::kReasoning) {
    const size_t close = held_.find(kClose.data(), 0, kClose.size());
    if (close == std::string::npos) {
      const size_t keep = PartialTag(held_, kClose);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    state_ = State::kContent;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplitter::Parts ReasoningSplitter::Finish() {
  Parts out;
  (state_ == State::kReasoning ? out.reasoning : out.content) = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace ag::serve
