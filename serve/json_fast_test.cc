#include "serve/json_fast.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ag::serve {
namespace {

using json = nlohmann::json;

json Nlohmann(std::string_view text) { return json::parse(text.begin(), text.end(), nullptr, false); }

// A phone-agent-shaped body: a long base64 run between escapes and non-ASCII text.
std::string AgentBody() {
  std::string base64;
  for (int i = 0; i < 100000; ++i) base64.push_back("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i * 7 % 64]);
  return R"({"model": "autoglm-phone-9b", "messages": [{"role": "system", "content": "You are an agent.\n\t\"Tap\" \u2014 )"
         "\xe7\x82\xb9\xe5\x87\xbb \\ud83d\\ude00\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
         "\"** Screen Info **\\n{\\\"current_app\\\": \\\"System Home\\\"}\"}, {\"type\": \"image_url\", "
         "\"image_url\": {\"url\": \"data:image/png;base64," +
         base64 + "\"}}]}], \"max_tokens\": 3000, \"temperature\": 0.0, \"top_p\": 0.85, \"frequency_penalty\": 0.2, "
                  "\"stream\": true, \"extra\": [null, false, -1, 1e-3, 12345678901234567890, -0]}\r\n";
}

// A member's text, found without parsing the rest: it parses to the member nlohmann finds.
TEST(JsonFast, FindsAMembersText) {
  const std::string body = AgentBody();
  const json whole = Nlohmann(body);
  for (const char* key : {"model", "messages", "max_tokens", "temperature", "stream", "extra"}) {
    const std::optional<std::string_view> text = FindMemberText(body, key);
    ASSERT_TRUE(text.has_value()) << key;
    EXPECT_EQ(Nlohmann(*text), whole[key]) << key;
  }
  EXPECT_FALSE(FindMemberText(body, "absent").has_value());
  EXPECT_FALSE(FindMemberText(body, "content").has_value()) << "only the object's own members";
  EXPECT_EQ(FindMemberText(R"({"a": 1, "b": {"a": 2}, "a": [3, "]}"]})", "a"), R"([3, "]}"])") << "the last one, as parsed";
  EXPECT_EQ(FindMemberText(R"( { "a" :"x\"}" } )", "a"), R"("x\"}")");
  EXPECT_EQ(FindMemberText(R"({"a":true,"b":-1.5e3})", "b"), "-1.5e3");
  EXPECT_EQ(FindMemberText(R"({"a":{}})", "a"), "{}");
  // Declined: a key written with escapes, an array, broken text.
  EXPECT_FALSE(FindMemberText(R"({"\u0061": 1})", "a").has_value());
  EXPECT_FALSE(FindMemberText(R"([1])", "a").has_value());
  EXPECT_FALSE(FindMemberText(R"({"a": [1, 2})", "a").has_value());
  EXPECT_FALSE(FindMemberText(R"({"a": "x)", "a").has_value());
  EXPECT_FALSE(FindMemberText("", "a").has_value());
}

TEST(JsonFast, TakesWhatNlohmannTakesAndGivesTheSame) {
  const std::vector<std::string> texts = {
      AgentBody(),
      "{}",
      " [ ] ",
      "\"\"",
      "0",
      R"("\" \\ \/ \b \f \n \r \t \u0000 \u00e9 \u20AC \uD834\uDD1E")",
      "\"\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xef\xbf\xbf \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf\"",
      "[0, -0, 1, -1, 0.5, -0.0, 1e2, 1E+2, 1e-2, 2.5E-1, 18446744073709551615, 18446744073709551616, "
      "-9223372036854775808, -9223372036854775809, 5e-324, 1.7976931348623157e308, 0.1, 3.141592653589793238462]",
      R"({"a": 1, "b": {"c": [true, false, null]}, "a": 2})",
      "\t\n\r {\"k\"\t:\n\"v\"\r}\n",
      "\"" + std::string(1000, 'x') + "\\n" + std::string(17, 'y') + "\"",
  };
  for (const std::string& text : texts) {
    const std::optional<json> fast = ParseJsonFast(text, 64);
    const json slow = Nlohmann(text);
    ASSERT_FALSE(slow.is_discarded()) << text.substr(0, 80);
    ASSERT_TRUE(fast.has_value()) << text.substr(0, 80);
    EXPECT_EQ(fast->dump(), slow.dump()) << text.substr(0, 80);
  }
}

TEST(JsonFast, NumbersKeepNlohmannsTypes) {
  const std::optional<json> j = ParseJsonFast("[5, -5, -0, 5.0, 18446744073709551616, -9223372036854775809]", 8);
  ASSERT_TRUE(j.has_value());
  EXPECT_TRUE((*j)[0].is_number_unsigned());
  EXPECT_TRUE((*j)[1].is_number_integer() && !(*j)[1].is_number_unsigned());
  EXPECT_TRUE((*j)[2].is_number_integer() && !(*j)[2].is_number_unsigned());
  EXPECT_TRUE((*j)[3].is_number_float());
  EXPECT_TRUE((*j)[4].is_number_float());
  EXPECT_TRUE((*j)[5].is_number_float());
  EXPECT_EQ((*j)[4].get<double>(), 18446744073709551616.0);
}

TEST(JsonFast, ARepeatedKeyKeepsItsLastValue) {
  const std::optional<json> j = ParseJsonFast(R"({"model": "a", "model": "b"})", 8);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->size(), 1u);
  EXPECT_EQ((*j)["model"], "b");
}

TEST(JsonFast, DeclinesWhatNlohmannRefuses) {
  const std::vector<std::string> texts = {
      "", " ", "{", "}", "[1,]", "[1 2]", "{\"a\" 1}", "{\"a\":}", "{1: 2}", "{\"a\": 1,}", "tru", "nul", "True",
      "01", "-", "1.", ".5", "1e", "1e+", "+1", "0x10", "NaN", "Infinity", "1e400", "-1e400", "{} {}", "[] x",
      "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\u12G4\"", "\"\\udc00\"", "\"\\ud800\"", "\"\\ud800\\u0041\"",
      "\"\\ud800x\"", "\"tab\there\"", std::string("\"nul\0\"", 6), "\"\x80\"", "\"\xc0\xaf\"", "\"\xc1\xbf\"",
      "\"\xe0\x9f\xbf\"", "\"\xed\xa0\x80\"", "\"\xf0\x8f\xbf\xbf\"", "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"",
      "\"\xc2\"", "\"\xe1\x80\"", "\"\xe1\x80", "\"\xff\"", "{\"a\":1}}", "[[]",
  };
  for (const std::string& text : texts) {
    EXPECT_TRUE(Nlohmann(text).is_discarded()) << "not invalid: " << text;
    EXPECT_FALSE(ParseJsonFast(text, 64).has_value()) << "taken: " << text;
  }
}

TEST(JsonFast, DeclinesValidTextItLeavesToNlohmann) {
  // A byte-order mark, a double that underflows (strtod's zero), nesting past the bound, and
  // anything after a NUL byte (nlohmann's lexer reads NUL as the end of its input).
  for (const std::string text : {std::string("\xef\xbb\xbf{}"), std::string("1e-400"), std::string("[[[1]]]"),
                                 std::string("[\"a\"]\0 trailing", 14)}) {
    EXPECT_FALSE(Nlohmann(text).is_discarded()) << text;
    EXPECT_FALSE(ParseJsonFast(text, 2).has_value()) << text;
  }
  EXPECT_TRUE(ParseJsonFast("[[[1]]]", 3).has_value());
  EXPECT_TRUE(ParseJsonFast("{\"a\": [{}]}", 3).has_value());
  EXPECT_FALSE(ParseJsonFast("{\"a\": [{\"b\": []}]}", 3).has_value());
}

}  // namespace
}  // namespace ag::serve
