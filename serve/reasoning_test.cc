#include "serve/reasoning.h"

#include <gtest/gtest.h>

namespace ag::serve {
namespace {

// Feeds `pieces` one by one; returns (reasoning, content) as concatenated.
std::pair<std::string, std::string> Split(const std::vector<std::string>& pieces) {
  ReasoningSplitter s;
  std::string reasoning, content;
  for (const std::string& p : pieces) {
    ReasoningSplitter::Parts parts = s.Add(p);
    reasoning += parts.reasoning;
    content += parts.content;
  }
  ReasoningSplitter::Parts rest = s.Finish();
  return {reasoning + rest.reasoning, content + rest.content};
}

TEST(Reasoning, ThinkingGoesToReasoningWhereverTheTagsAreCut) {
  const std::string answer = "<think>look at the screen</think><answer>do(action=\"Back\")";
  // Every way of cutting the answer in three gives the same split.
  for (size_t a = 0; a <= answer.size(); ++a) {
    for (size_t b = a; b <= answer.size(); b += 3) {
      const auto [reasoning, content] = Split({answer.substr(0, a), answer.substr(a, b - a), answer.substr(b)});
      ASSERT_EQ(reasoning, "look at the screen") << a << "," << b;
      ASSERT_EQ(content, "<answer>do(action=\"Back\")") << a << "," << b;
    }
  }
  EXPECT_EQ(Split({"no thinking here"}), std::make_pair(std::string(), std::string("no thinking here")));
  EXPECT_EQ(Split({"<thi"}), std::make_pair(std::string(), std::string("<thi")));  // never became a tag
  EXPECT_EQ(Split({"<think>cut off </thi"}), std::make_pair(std::string("cut off </thi"), std::string()));
  EXPECT_EQ(Split({"x<think>y</think>"}), std::make_pair(std::string(), std::string("x<think>y</think>")));
}

TEST(Reasoning, NothingIsHeldLongerThanATag) {
  ReasoningSplitter s;
  EXPECT_EQ(s.Add("<think>abc").reasoning, "abc");
  EXPECT_EQ(s.Add("de</").reasoning, "de");  // "</" may begin </think>
  const ReasoningSplitter::Parts p = s.Add("b>f");  // it did not
  EXPECT_EQ(p.reasoning, "</b>f");
  EXPECT_EQ(s.Add("</think>").content, "");
  EXPECT_EQ(s.Add("ok").content, "ok");
}

}  // namespace
}  // namespace ag::serve
