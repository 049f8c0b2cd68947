// --reasoning-parser glm45: a GLM answer's thinking, `<think>...</think>` at
// its start, goes to `reasoning_content` instead of `content` (vLLM's
// parser of that name), streamed as it comes. Text that does not start with
// <think> is all content; a tag split across tokens is held back until it is
// whole.
#ifndef AUTOGLM_SERVE_REASONING_H_
#define AUTOGLM_SERVE_REASONING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ag::serve {

class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning, content;
  };
  // The next piece of the answer's text: what of it is now known to be reasoning or content.
  Parts Add(absl::string_view text);
  // The end of the answer: whatever was held back.
  Parts Finish();

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_ = State::kStart;
  std::string held_;
};

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_REASONING_H_
