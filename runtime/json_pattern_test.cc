#include "runtime/json_pattern.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "nlohmann/json.hpp"
#include "runtime/json_schema.h"
#include "runtime/regex_grammar.h"
#include "tests/testing/byte_vocabulary.h"

namespace ag::runtime {
namespace {

// The DFA's answer for an ASCII string: every character taken, and whole at the end.
bool Takes(const PatternDfa& dfa, const std::string& text) {
  uint32_t s = dfa.start();
  for (const char c : text) {
    s = dfa.Next(s, static_cast<uint8_t>(c));
    if (s == PatternDfa::kDead) return false;
  }
  return dfa.Accepting(s);
}

std::shared_ptr<const PatternDfa> MustCompile(const std::string& pattern, uint32_t min = 0,
                                              uint32_t max = PatternDfa::kUnbounded) {
  absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa = PatternDfa::Compile(pattern, min, max);
  EXPECT_TRUE(dfa.ok()) << pattern << ": " << dfa.status();
  return dfa.ok() ? *dfa : nullptr;
}

const std::vector<std::string>& Patterns() {
  static const auto* const kPatterns = new std::vector<std::string>{
      "abc", "^abc$", "^[a-z]+$", R"(\d{3}-\d{4})", R"(^\d{4}-\d{2}-\d{2}$)", "^(foo|bar)+baz?$", "a.c",
      R"(^[^\s@]+@[^\s@]+\.[^\s@]+$)", "colou?r", R"(^\w{2,5}$)", "(ab)*c", "^$", "x|^y$", R"([\]\-])", "a{2,}b",
      R"(\.)", R"(^[A-Z]{2}\d{0,3}$)", "(?:a|b){3}", "a+?b", "^a|b$", R"(^[\d\s]*$)", "[^abc]{2}", R"(^\W+$)",
      "^x{0}y$", "", "(|a)b"};
  return *kPatterns;
}

// Every pattern against ECMAScript's search (std::regex) on random and on every short string.
TEST(PatternDfa, AgreesWithEcmaScriptSearch) {
  const std::string alphabet = "abcfoxyzr019-@. \n_AZ]{},";
  std::mt19937 rng(3);
  for (const std::string& pattern : Patterns()) {
    std::shared_ptr<const PatternDfa> dfa = MustCompile(pattern);
    ASSERT_NE(dfa, nullptr);
    const std::regex re(pattern, std::regex::ECMAScript);
    int matched = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text;
      const size_t length = rng() % 11;
      for (size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_search(text, re);
      ASSERT_EQ(Takes(*dfa, text), want) << "/" << pattern << "/ on '" << text << "'";
      matched += want;
    }
    for (const std::string& text : {std::string("abc"), std::string("2024-01-31"), std::string("foobarbaz"), std::string("a@b.c"),
                                    std::string("colour"), std::string("ababc"), std::string("AB12"), std::string("aab"),
                                    std::string("y"), std::string("abb"), std::string("555-1234"), std::string("]"), std::string("ABC"),
                                    std::string("-")}) {
      ASSERT_EQ(Takes(*dfa, text), std::regex_search(text, re)) << "/" << pattern << "/ on '" << text << "'";
      matched += std::regex_search(text, re);
    }
    EXPECT_GT(matched, 0) << pattern;
  }
  // A brace that is no quantifier is itself (std::regex refuses it); a named group is a group.
  EXPECT_TRUE(Takes(*MustCompile("^a{,2}$"), "a{,2}"));
  EXPECT_TRUE(Takes(*MustCompile(R"(^(?<year>\d{4})$)"), "2026"));
  EXPECT_FALSE(Takes(*MustCompile(R"(^(?<year>\d{4})$)"), "20261"));
}

// Random patterns of the constructs taken, against ECMAScript's search on random strings.
std::string RandomPattern(std::mt19937& rng, int depth) {
  static const char* const kAtoms[] = {"a", "b", "c", ".", "[ab]", "[^a]", "[a-c]", R"(\d)", R"(\w)", R"(\s)", R"(\.)", "-", "1"};
  static const char* const kQuantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?"};
  // Groups repeat at most twice: std::regex backtracks, and nested unbounded repeats take it exponential time.
  static const char* const kGroupQuantifiers[] = {"", "", "?", "{2}", "{0,2}"};
  std::string out;
  const int pieces = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < pieces; ++i) {
    if (depth < 2 && rng() % 4 == 0) {  // one draw a statement: the same patterns from every compiler
      out += rng() % 2 ? "(" : "(?:";
      out += RandomPattern(rng, depth + 1);
      if (rng() % 3 == 0) out += "|" + RandomPattern(rng, depth + 1);
      out += ")";
      out += kGroupQuantifiers[rng() % std::size(kGroupQuantifiers)];
    } else {
      out += kAtoms[rng() % std::size(kAtoms)];
      out += kQuantifiers[rng() % std::size(kQuantifiers)];
    }
  }
  return out;
}

TEST(PatternDfa, RandomPatternsAgreeWithEcmaScriptSearch) {
  std::mt19937 rng(17);
  const std::string alphabet = "abc1 -.\nx";
  int compared = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string pattern = RandomPattern(rng, 0);
    if (rng() % 3 == 0) pattern = "^" + pattern;
    if (rng() % 3 == 0) pattern += "$";
    if (rng() % 5 == 0) pattern += "|" + RandomPattern(rng, 1);
    absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa = PatternDfa::Compile(pattern);
    if (!dfa.ok()) {  // a blown-up automaton is refused; nothing else may be
      ASSERT_NE(dfa.status().message().find("too large"), std::string::npos) << pattern << ": " << dfa.status();
      ++refused;
      continue;
    }
    const std::regex re(pattern, std::regex::ECMAScript);
    for (int k = 0; k < 200; ++k) {
      std::string text;
      const size_t length = rng() % 9;
      for (size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(Takes(**dfa, text), std::regex_search(text, re)) << "/" << pattern << "/ on '" << text << "'";
      ++compared;
    }
  }
  EXPECT_LE(refused, 10);
  EXPECT_EQ(compared, (300 - refused) * 200);
}

// Intersect: a string is whole in the product exactly when it is in both (random patterns against
// std::regex on random strings), and the product's walks are never stuck.
TEST(PatternDfa, IntersectTakesWhatBothTake) {
  std::mt19937 rng(41);
  const std::string alphabet = "abc1 -.x";
  int compared = 0, empty = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::string p = RandomPattern(rng, 0);
    const std::string q = RandomPattern(rng, 0);
    const uint32_t max = rng() % 2 ? 6 : PatternDfa::kUnbounded;
    absl::StatusOr<std::shared_ptr<const PatternDfa>> a = PatternDfa::Compile(p, 0, max);
    absl::StatusOr<std::shared_ptr<const PatternDfa>> b = PatternDfa::Compile(q, 0, max, /*search=*/false);
    if (!a.ok() || !b.ok()) continue;
    absl::StatusOr<std::shared_ptr<const PatternDfa>> both = PatternDfa::Intersect(**a, **b);
    if (!both.ok()) {
      ASSERT_NE(both.status().message().find("no string matches both"), std::string::npos) << both.status();
      ++empty;
      continue;
    }
    const std::regex rp(p, std::regex::ECMAScript), rq(q, std::regex::ECMAScript);
    for (int k = 0; k < 100; ++k) {
      std::string text;
      const size_t length = rng() % 8;
      for (size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
      const bool in_both = std::regex_search(text, rp) && std::regex_match(text, rq) && (max == PatternDfa::kUnbounded || text.size() <= max);
      ASSERT_EQ(Takes(**both, text), in_both) << "/" << p << "/ and whole /" << q << "/ on '" << text << "'";
      ++compared;
    }
    for (uint32_t s = 0; s < (*both)->states(); ++s) {  // every state live: accepting, or some class goes on
      bool goes_on = (*both)->Accepting(s);
      for (size_t c = 0; c < (*both)->classes() && !goes_on; ++c) goes_on = (*both)->Step(s, c) != PatternDfa::kDead;
      ASSERT_TRUE(goes_on) << p << " & " << q;
    }
  }
  EXPECT_GT(compared, 5000);
  EXPECT_LT(empty, 120);
}

// Lengths folded in: whole exactly when the search matches and the length is within them, and from
// every state reached some character continues it or it is whole (random walks never stuck).
TEST(PatternDfa, LengthsAreFoldedInAndNoWalkIsStuck) {
  const std::string alphabet = "abcfoxyzr019-@. \n_AZ";
  std::mt19937 rng(5);
  for (const std::string& pattern : Patterns()) {
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const auto& [min, max] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 6}, {2, PatternDfa::kUnbounded}, {3, 9}}) {
      absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa = PatternDfa::Compile(pattern, min, max);
      if (!dfa.ok()) {  // only when nothing of those lengths matches
        EXPECT_NE(dfa.status().message().find("no string"), std::string::npos) << pattern << " " << dfa.status();
        continue;
      }
      for (int trial = 0; trial < 1000; ++trial) {
        std::string text;
        const size_t length = rng() % 12;
        for (size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
        ASSERT_EQ(Takes(**dfa, text), std::regex_search(text, re) && text.size() >= min && text.size() <= max)
            << "/" << pattern << "/ [" << min << ", " << max << "] on '" << text << "'";
      }
      for (int walk = 0; walk < 100; ++walk) {
        uint32_t s = (*dfa)->start();
        std::string written;
        for (int step = 0; step < 40; ++step) {
          ASSERT_TRUE((*dfa)->Accepting(s) || (*dfa)->AnyLive(s, 0, 0x10FFFF)) << "stuck: /" << pattern << "/ after '" << written << "'";
          if ((*dfa)->Accepting(s) && rng() % 3 == 0) break;
          std::vector<uint32_t> next;
          for (const uint32_t cp : {0x0Au, 0x20u, 0x2Du, 0x2Eu, 0x30u, 0x39u, 0x40u, 0x41u, 0x5Au, 0x5Fu, 0x61u, 0x62u,
                                    0x63u, 0x66u, 0x6Fu, 0x72u, 0x78u, 0x79u, 0x7Au, 0xE9u, 0x4E2Du, 0x1F600u}) {
            if ((*dfa)->Next(s, cp) != PatternDfa::kDead) next.push_back(cp);
          }
          if (next.empty()) break;  // only characters outside those tried go on
          const uint32_t cp = next[rng() % next.size()];
          s = (*dfa)->Next(s, cp);
          if (cp < 0x80) written += static_cast<char>(cp);
        }
      }
    }
  }
}

TEST(PatternDfa, RefusesWhatItCannotEnforce) {
  for (const auto& [pattern, why] : std::vector<std::pair<std::string, std::string>>{
           {"(?=a)", "lookaround"}, {"(?<!a)b", "lookaround"}, {R"((a)\1)", "escape \\1"}, {R"(\bword)", "word boundary"},
           {"a^b", "anchors"}, {"a$b", "anchors"}, {"(^a)", "anchors"}, {"*a", "nothing to repeat"}, {"a**", "after a quantifier"},
           {"(a", "unclosed group"}, {"a)", "unmatched ')'"}, {"[a", "unclosed '['"}, {"a{3,2}", "n > m"},
           {"a{1001}", "over 1000"}, {R"([^\s\S])", "no string"}, {R"(\p{L})", "escape \\p"}, {R"([z-a])", "out of order"},
           {R"([\d-z])", "between class escapes"}, {R"(\x4)", "two hex digits"}, {"\\", "ends in a backslash"},
           {R"(\012)", "octal"}, {std::string(65, '(') + std::string(65, ')'), "nested too deep"},
           {"(a|b|c|d|e|f|g|h){1000}x{1000}", "too large"}}) {
    absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa = PatternDfa::Compile(pattern);
    ASSERT_FALSE(dfa.ok()) << pattern;
    EXPECT_NE(dfa.status().message().find(why), std::string::npos) << pattern << ": " << dfa.status();
  }
  EXPECT_FALSE(PatternDfa::Compile(".{5}", 0, 3).ok()) << "five characters within three";
  EXPECT_FALSE(PatternDfa::Compile("\xC3", 0, 3).ok()) << "not UTF-8";
}

// In a schema: the answer's string is written as JSON (escapes of one character, UTF-8), every byte
// walk stays able to finish, and what is whole matches the pattern within its lengths.
TEST(PatternDfa, SchemaStringsFollowTheirPattern) {
  const std::string text = R"({"type": "object", "properties": {
      "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
      "code": {"type": "string", "pattern": "^[A-Z]{2}[\\n\\t\"]?\\d+$", "maxLength": 5},
      "word": {"type": "string", "pattern": "^[\\u00e9\\u4e2da-c]+$", "minLength": 2},
      "any": {"type": "string", "pattern": "ok"}}, "required": ["date", "code", "word", "any"]})";
  absl::StatusOr<std::shared_ptr<const JsonSchema>> schema = JsonSchema::Compile(text);
  ASSERT_TRUE(schema.ok()) << schema.status();
  const auto valid = [](const nlohmann::json& doc) {
    const auto chars = [](const std::string& s) {
      return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; });
    };
    const std::string date = doc.at("date"), code = doc.at("code"), word = doc.at("word"), any = doc.at("any");
    if (!std::regex_search(date, std::regex(R"(^\d{4}-\d{2}-\d{2}$)"))) return false;
    if (!std::regex_search(code, std::regex("^[A-Z]{2}[\\n\\t\"]?\\d+$")) || code.size() > 5) return false;
    if (chars(word) < 2 || !std::regex_match(word, std::regex("^(\xC3\xA9|\xE4\xB8\xAD|[a-c])+$"))) return false;
    return any.find("ok") != std::string::npos;
  };
  std::mt19937 rng(9);
  const std::string preferred = "\"{}:,0123456789-ABCabok\\nt\xC3\xA9\xE4\xB8\xAD";
  int whole = 0, escaped = 0;
  for (int walk = 0; walk < 300; ++walk) {
    SchemaState s = SchemaState(schema->get());
    std::string written;
    for (int step = 0; step < 400; ++step) {
      if (s.Complete()) {
        const nlohmann::json doc = nlohmann::json::parse(written, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << written;
        ASSERT_TRUE(valid(doc)) << written;
        ++whole;
        escaped += written.find("\\n") != std::string::npos || written.find("\\\"") != std::string::npos;
        break;
      }
      std::vector<uint8_t> next, likely;
      for (int b = 0; b < 256; ++b) {
        SchemaState t = s;
        if (!t.Feed(static_cast<uint8_t>(b))) continue;
        next.push_back(static_cast<uint8_t>(b));
        if (preferred.find(static_cast<char>(b)) != std::string::npos) likely.push_back(static_cast<uint8_t>(b));
      }
      ASSERT_FALSE(next.empty()) << "stuck after " << written;
      const std::vector<uint8_t>& pool = !likely.empty() && rng() % 5 != 0 ? likely : next;
      const uint8_t b = pool[rng() % pool.size()];
      ASSERT_TRUE(s.Feed(b));
      written += static_cast<char>(b);
    }
  }
  EXPECT_GT(whole, 40);
  EXPECT_GT(escaped, 3);
  SchemaState s(schema->get());
  EXPECT_FALSE(s.Feed(R"({"date": "20261)")) << "a fifth digit where the dash goes";
  SchemaState u(schema->get());
  EXPECT_FALSE(u.Feed(R"({"date": "2026-12-07", "code": "AB\u)")) << "no \\u escape in a pattern's string";
  SchemaState ok(schema->get());
  EXPECT_TRUE(ok.Feed("{\"date\": \"2026-12-07\", \"code\": \"AB\\n12\", \"word\": \"a\xE4\xB8\xAD\", \"any\": \"is ok!\"}"));
  EXPECT_TRUE(ok.Complete());
  SchemaState lead(schema->get());
  EXPECT_FALSE(lead.Feed("{\"date\": \"2026-12-07\", \"code\": \"AB1\", \"word\": \"\xC3\xA8")) << "\xC3\xA8 is no class member";
  SchemaState half(schema->get());
  EXPECT_FALSE(half.Feed("{\"date\": \"2026-12-07\", \"code\": \"AB1\", \"word\": \"\xC4")) << "no character begun so is";
}

// Masks over a vocabulary inside a pattern's string: each is exactly the tokens the state takes.
TEST(PatternDfa, MasksAreTheTokensAStateTakes) {
  const testing::ByteVocabulary voc({"20", "26", "-1", "2-", "\":\"", "\"}", "12-0", "\\n", "\xC3\xA9", "AB", "ok", "o\""});
  const std::vector<std::string>& tokens = voc.tokens;
  const int32_t ordinary = voc.ordinary;
  const std::shared_ptr<JsonVocabulary>& v = voc.v;
  std::shared_ptr<JsonSchemaGrammar> g = *JsonSchemaGrammar::Create(
      *JsonSchema::Compile(R"({"type": "object", "properties": {"d": {"type": "string", "pattern": "^\\d{4}-\\d{2}$"},
          "s": {"type": "string", "pattern": "o.?k|\u00e9", "maxLength": 4}}, "required": ["d", "s"]})"), v);
  const std::string text = "{\"d\":\"2026-12\",\"s\":\"\\no\xC3\xA9k\"}";
  SchemaState s = g->Start();
  for (size_t i = 0; i <= text.size(); ++i) {
    const Mask mask = g->Allowed(s);
    for (int32_t id = 0; id < ordinary; ++id) {
      SchemaState t = s;
      ASSERT_EQ(MaskAllows(*mask, ordinary, id), t.Feed(tokens[static_cast<size_t>(id)])) << i << " bytes, token " << id;
    }
    if (i < text.size()) {
      ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i]))) << i;
    }
  }
  EXPECT_TRUE(s.Complete());
}

// The text tokens' masks from a pattern's table (PatternTextTokens) against feeding every token,
// along random token walks through strings with fixed and random patterns and lengths (JSON Schema)
// and through guided_regex texts: multi-byte characters, first parts of characters, DEL, the line
// separator, quotes, escapes, control characters and broken UTF-8 among the tokens.
TEST(PatternTextTokens, MasksAreEveryTokensWalk) {
  const testing::ByteVocabulary voc(
      {"ab", "abc", "12", "2-", "-1", "ok", " o", "k ", "x1", "a.b", "@x", "\xC3\xA9", "a\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87",
       "\xF0\x9F\x98\x80", "\xC3", "a\xE4", "\xE4\xB8", "\xF0\x9F", "\xF0\x9F\x98", "\xA9" "b", "\x7F", "a\x7F",
       "\xE2\x80\xA8", "\n", "x\x01", "o\"", "\"}", "\\n", "\\\"", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
       std::string(40, 'a'), "aaaa", "1234"},
      /*padding=*/2);
  const std::vector<std::string>& tokens = voc.tokens;
  const std::shared_ptr<JsonVocabulary>& v = voc.v;
  std::vector<std::string> patterns = {"ok", "^\\d{4}-\\d{2}$", "[\\u00e9\\u4e2d]+", "^.{0,3}$", "[^a]", "^[a-c]*$",
                                       "\\w+@\\w+", "a|\\u00e9b", "^(ab|\\d)+$", "\\s", "[^\\u2028]"};
  std::mt19937 rng(23);
  for (int i = 0; i < 40; ++i) patterns.push_back(RandomPattern(rng, 0));
  int compared = 0, from_tables = 0;
  const auto walk = [&](auto& grammar, auto state, auto in_text, const std::string& what) {
    for (int step = 0; step < 24; ++step) {
      const std::vector<uint64_t> mask = grammar->Compute(state);
      ASSERT_EQ(mask, v->WalkEveryToken(state)) << what << " after " << step << " tokens";
      ++compared;
      from_tables += in_text(state);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < voc.ordinary; ++id) {
        if (MaskAllows(mask, voc.vocab, id)) allowed.push_back(id);
      }
      if (allowed.empty()) return;
      const int32_t id = allowed[rng() % allowed.size()];
      ASSERT_TRUE(state.Feed(tokens[static_cast<size_t>(id)])) << what;
    }
  };
  for (const std::string& pattern : patterns) {
    const uint32_t min = rng() % 3;
    const uint32_t max = rng() % 3 == 0 ? min + rng() % 6 : PatternDfa::kUnbounded;
    nlohmann::json schema = {{"type", "object"}, {"properties", {{"s", {{"type", "string"}, {"pattern", pattern}}}}},
                             {"required", {"s"}}};
    if (min > 0) schema["properties"]["s"]["minLength"] = min;
    if (max != PatternDfa::kUnbounded) schema["properties"]["s"]["maxLength"] = max;
    absl::StatusOr<std::shared_ptr<const JsonSchema>> compiled = JsonSchema::Compile(schema.dump());
    if (!compiled.ok()) continue;  // too large, or nothing of those lengths matches
    std::shared_ptr<JsonSchemaGrammar> g = *JsonSchemaGrammar::Create(*compiled, v);
    for (int w = 0; w < 3; ++w) {
      SchemaState s = g->Start();
      ASSERT_TRUE(s.Feed("{\"s\":\""));
      walk(g, s, [](const SchemaState& t) { return t.InText().has_value(); }, "/" + pattern + "/ in " + schema.dump());
    }
    absl::StatusOr<std::shared_ptr<RegexGrammar>> r = RegexGrammar::Create(pattern, v);
    if (!r.ok()) continue;
    for (int w = 0; w < 3; ++w) {
      walk(*r, (*r)->Start(), [](const RegexState& t) { return t.AtBoundary().has_value(); }, "guided_regex /" + pattern + "/");
    }
  }
  EXPECT_GT(compared, 2000);
  EXPECT_GT(from_tables, 1000);
}

// vLLM's guided_regex: the whole text matches (anchored at both ends), masks are the tokens each
// state takes, and the constraint may end exactly where the text is whole.
TEST(RegexGrammar, TheWholeTextMatches) {
  const testing::ByteVocabulary voc({"12", "3-", "-4", "123", "4\n", "ab", "\xC3\xA9", "\xE4\xB8", "x1"}, /*padding=*/2);
  const std::vector<std::string>& tokens = voc.tokens;
  const int32_t ordinary = voc.ordinary;
  const std::shared_ptr<JsonVocabulary>& v = voc.v;
  std::shared_ptr<RegexGrammar> g = *RegexGrammar::Create(R"(\d{3}(-\d+)?(\n|[\u00e9\u4e2d]{1,2})?)", v);
  const auto whole = [&](const std::string& text) {
    RegexState s = g->Start();
    return s.Feed(text) && s.Complete();
  };
  EXPECT_TRUE(whole("123"));
  EXPECT_TRUE(whole("123-45"));
  EXPECT_TRUE(whole("123\n"));
  EXPECT_TRUE(whole("123-4\xE4\xB8\xAD\xC3\xA9"));
  EXPECT_FALSE(whole("123-"));
  EXPECT_FALSE(whole("12"));
  EXPECT_FALSE(whole("x123")) << "anchored at the start";
  EXPECT_FALSE(whole("1234")) << "and at the end";
  RegexState s = g->Start();
  EXPECT_FALSE(s.Feed("123\xC3\xA8")) << "\xC3\xA8 is no member";
  RegexState lead = g->Start();
  EXPECT_FALSE(lead.Feed("123\xC4")) << "no member begins so";
  const std::string text = "123-4\xE4\xB8\xAD";
  RegexState at = g->Start();
  for (size_t i = 0; i <= text.size(); ++i) {
    const Mask mask = g->Allowed(at);
    for (int32_t id = 0; id < ordinary + 2; ++id) {
      RegexState t = at;
      const bool takes = id < ordinary && t.Feed(tokens[static_cast<size_t>(id)]);
      ASSERT_EQ(MaskAllows(*mask, ordinary + 2, id), takes) << i << " bytes, token " << id;
    }
    if (i < text.size()) {
      ASSERT_TRUE(at.Feed(static_cast<uint8_t>(text[i]))) << i;
    }
  }
  EXPECT_TRUE(at.Complete());
  std::unique_ptr<TokenConstraint> c = g->NewConstraint();
  EXPECT_FALSE(c->Accept('a'));
  std::unique_ptr<TokenConstraint> d = g->NewConstraint();
  ASSERT_TRUE(d->Accept(voc.Id("123")));
  EXPECT_TRUE(d->Complete());
  EXPECT_FALSE(RegexGrammar::Create("(?=x)", v).ok());
  EXPECT_FALSE(RegexGrammar::Create("[^\\s\\S]", v).ok()) << "matches nothing";
}

}  // namespace
}  // namespace ag::runtime
