#include "runtime/json_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>

#include "nlohmann/json.hpp"
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "tests/testing/byte_vocabulary.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

bool Whole(absl::string_view text) {
  JsonState s;
  return s.Feed(text) && s.Complete();
}

// Whitespace outside strings in runs of none, one space, or a newline and at most 20 spaces or tabs.
bool SpacesBounded(const std::string& text) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
      continue;
    }
    in_string = c == '"';
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') continue;
    size_t j = i;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\n' || text[j] == '\t' || text[j] == '\r')) ++j;
    const std::string run = text.substr(i, j - i);
    const bool indent = run[0] == '\n' && run.size() <= 21 && run.find_first_not_of(" \t", 1) == std::string::npos;
    if (run != " " && !indent) return false;
    i = j - 1;
  }
  return true;
}

// The reference: nlohmann's validator (RFC 8259, UTF-8 checked), an object, nothing around it, and
// whitespace as bounded.
bool WholeByReference(const std::string& text) {
  return !text.empty() && text.front() == '{' && text.back() == '}' && nlohmann::json::accept(text) && SpacesBounded(text);
}

TEST(JsonState, TakesObjectsAndEveryPrefixOfThem) {
  for (const std::string& text : {
           std::string(R"({})"), std::string(R"({"a":1})"), std::string("{ \"a\" : [1, -2.5e+3, 0, 0.25, 1E9, -0] ,\n\t\"b\":{}}"),
           std::string(R"({"s":"esc \" \\ \/ \b\f\n\r\t \u00e9\uD83D\uDE00","t":true,"f":false,"n":null})"),
           std::string("{\"utf8\":\"h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xED\x9F\xBF\"}"),
           std::string(R"({"deep":[[[{"x":[]}]],[{}],"",[null]]})")}) {
    JsonState s;
    for (size_t i = 0; i < text.size(); ++i) {
      EXPECT_FALSE(s.Complete()) << text << " at " << i;
      ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i]))) << text << " at byte " << i;
    }
    EXPECT_TRUE(s.Complete()) << text;
    EXPECT_FALSE(s.Feed(' ')) << "nothing after the object";
    EXPECT_TRUE(WholeByReference(text)) << text;
  }
}

TEST(JsonState, RefusesWhatJsonDoesNot) {
  for (const std::string& text : {
           std::string(" {}"), std::string("[1]"), std::string("\"s\""), std::string("1"), std::string("{}x"),
           std::string("{} "), std::string(R"({"a":01})"), std::string(R"({"a":1.})"), std::string(R"({"a":-})"),
           std::string(R"({"a":.5})"), std::string(R"({"a":1e})"), std::string(R"({a:1})"), std::string(R"({"a":1,})"),
           std::string(R"({,})"), std::string(R"({"a" 1})"), std::string(R"({"a":[1,]})"), std::string(R"({"a":[1 2]})"),
           std::string(R"({"a":"\q"})"), std::string(R"({"a":"\u12G4"})"), std::string(R"({"a":tru})"),
           std::string(R"({"a":True})"), std::string(R"({"a":1]})"), std::string(R"({"a":[1}})"),
           std::string("{\"a\":\"\x01\"}"), std::string("{\"a\":\"\xC0\x80\"}"), std::string("{\"a\":\"\xED\xA0\x80\"}"),
           std::string("{\"a\":\"\xF5\x80\x80\x80\"}"), std::string("{\"a\":\"\xE0\x80\xAF\"}"),
           std::string("{\"a\":\"\xF4\x90\x80\x80\"}"), std::string("{\"a\":\"\xC3\"}"), std::string("{\"a\":\"\x80\"}"),
           // whitespace past the bound: two spaces, a tab alone, two newlines, 21 spaces of indentation
           std::string("{\"a\":  1}"), std::string("{\"a\":\t1}"), std::string("{\n\n\"a\":1}"),
           std::string("{\n") + std::string(21, ' ') + "\"a\":1}"}) {
    EXPECT_FALSE(Whole(text)) << text;
    EXPECT_FALSE(WholeByReference(text)) << text;
  }
  JsonState deep;  // nesting is bounded: the object and kMaxDepth - 1 arrays, then no more
  ASSERT_TRUE(deep.Feed("{\"a\":"));
  for (size_t i = 1; i < JsonState::kMaxDepth; ++i) ASSERT_TRUE(deep.Feed('[')) << i;
  EXPECT_FALSE(deep.Feed('['));
}

// Random objects (printed compact and indented), each mutated by a byte inserted, dropped or
// replaced: the state machine takes a text exactly when the reference validator does.
TEST(JsonState, AgreesWithAValidatorOnMutatedObjects) {
  std::mt19937 rng(3);
  // No e or E: an exponent made of the digits after it overflows a double, which the reference refuses.
  const std::string alphabet = "{}[],:\"\\/ \n\t-+.0123456789trufalsnbu\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x01\x7F";
  std::function<nlohmann::json(int)> make = [&](int depth) -> nlohmann::json {
    switch (rng() % (depth > 3 ? 4 : 6)) {
      case 0: return static_cast<int64_t>(rng() % 2000) - 1000;
      case 1: return std::ldexp(static_cast<double>(rng() % 1000), static_cast<int>(rng() % 40) - 20);
      case 2: return std::string("s\xC3\xA9\"\\\n") + std::to_string(rng() % 100);
      case 3: return rng() % 3 == 0 ? nlohmann::json(nullptr) : nlohmann::json(rng() % 2 == 0);
      case 4: {
        nlohmann::json a = nlohmann::json::array();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(make(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 9)] = make(depth + 1);
        return o;
      }
    }
  };
  int valid = 0, invalid = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    nlohmann::json object = nlohmann::json::object();
    for (int i = static_cast<int>(rng() % 4); i > 0; --i) object["key" + std::to_string(i)] = make(1);
    std::string text = object.dump(trial % 3 == 0 ? 2 : -1);
    if (trial % 4 != 0) {
      const size_t at = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        case 1: if (at < text.size()) text.erase(at, 1); break;
        default: if (at < text.size()) text[at] = c; break;
      }
    }
    const bool want = WholeByReference(text);
    ASSERT_EQ(Whole(text), want) << text;
    (want ? valid : invalid) += 1;
  }
  EXPECT_GT(valid, 500);
  EXPECT_GT(invalid, 500);
}

// A vocabulary of all 256 bytes and multi-byte pieces (JSON punctuation runs, words, a UTF-8
// character split across tokens): the mask of every state met along some objects is exactly the
// set of tokens whose bytes the state takes, and a state seen again comes from the cache.
TEST(JsonVocabulary, MasksAreTheTokensAStateTakes) {
  const testing::ByteVocabulary voc(
      {"{\"", "\":", "\"}", "\",\"", "true", "false", "null", "12", "0.", "-1", "e+", "},", "}}", "]}", "[{", " {", "\\u", "\\n",
       "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC\"", "  ", "\n ", "\":\"", "\"a", "ab", "{}", "[]", ",\n", "1e5", "\"}}",
       // Text tokens (taken whole inside a string, from sets: JsonVocabulary::Walk) and near misses: whole
       // and partial characters, DEL, a control byte, an overlong form, a stray continuation byte, escapes inside.
       "\xC3\xA9\xC3\xA9", "a\xE2\x82", "x\x7F", "a\tb", "\xC0\xAF", "\xA9" "a", "b\\nc", "\xED\xA0\x80", "\xF0\x9F\x98\x80ok",
       std::string(40, 'q'), "\xE4\xB8\xAD" + std::string(35, 'z')},
      /*padding=*/5);  // 5 special / padding ids
  const std::vector<std::string>& tokens = voc.tokens;
  const int32_t ordinary = voc.ordinary, vocab = voc.vocab;
  const std::shared_ptr<JsonVocabulary>& v = voc.v;
  int states = 0, in_text = 0;
  for (const std::string& text : {std::string(R"({"a": [1, -2.5e+3, true, {"b": null}], "c": "x\u00e9\n"})"),
                                 std::string("{\"\xC3\xA9\xE2\x82\xAC\":\"}}\"}")}) {
    JsonState s;
    for (size_t i = 0; i <= text.size(); ++i) {
      const std::shared_ptr<const std::vector<uint64_t>> mask = v->Allowed(s);
      in_text += s.PlainStringRoom().has_value();
      for (int32_t id = 0; id < vocab; ++id) {
        JsonState t = s;
        const bool takes = id < ordinary && t.Feed(tokens[static_cast<size_t>(id)]);
        ASSERT_EQ(((*mask)[static_cast<size_t>(id) / 64] >> (id % 64) & 1) == 1, takes)
            << "state after " << i << " bytes of " << text << ", token " << id;
      }
      EXPECT_EQ(v->Allowed(s), mask) << "cached";
      ++states;
      if (i < text.size()) {
        ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i])));
      }
    }
    EXPECT_TRUE(s.Complete());
  }
  EXPECT_GT(states, 60);
  EXPECT_GE(in_text, 8) << "the text tokens' sets were used";

  // The constraint: masks logits, takes allowed tokens, refuses others, ends complete.
  std::unique_ptr<TokenConstraint> c = v->NewConstraint();
  std::vector<float> logits(static_cast<size_t>(vocab) + 3, 1.0f);
  c->Mask(logits.data(), static_cast<int64_t>(logits.size()));
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    const bool open = id < ordinary && tokens[static_cast<size_t>(id)].front() == '{';
    EXPECT_EQ(std::isinf(logits[static_cast<size_t>(id)]), !open) << id;
  }
  EXPECT_FALSE(c->Accept('['));
  ASSERT_TRUE(c->Accept(voc.Id("{}")));
  EXPECT_TRUE(c->Complete());
  std::fill(logits.begin(), logits.end(), 1.0f);
  c->Mask(logits.data(), static_cast<int64_t>(logits.size()));
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isinf(x); })) << "nothing after it";
}

// Prepare (what the engine calls while the device runs a step) changes no mask: along a document,
// with drafts the answer then takes (some or all) and drafts it does not, each mask is the one an
// unprepared constraint in the same state applies.
TEST(JsonVocabulary, PreparedMasksAreTheStatesOwn) {
  std::shared_ptr<JsonVocabulary> v = *JsonVocabulary::Build(256, 260, [](int32_t id, std::string* b) {
    *b = std::string(1, static_cast<char>(id));
    return true;
  });
  const std::string text = R"({"ab": [1, -2.5, {"c": "x y"}], "d": true})";
  std::unique_ptr<TokenConstraint> prepared = v->NewConstraint(), plain = v->NewConstraint();
  std::vector<float> a(260), b(260);
  int compared = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    // Every third position: drafts that follow the text for 0-3 tokens, then a wrong one.
    if (i % 3 == 0) {
      std::vector<int32_t> drafts;
      for (size_t k = i + 1; k < std::min(text.size(), i + 1 + i % 4); ++k) drafts.push_back(text[k]);
      if (i % 2 == 0) drafts.push_back('#');  // refused: the masks stop there
      prepared->Prepare(drafts);
    }
    std::fill(a.begin(), a.end(), 1.0f);
    std::fill(b.begin(), b.end(), 1.0f);
    prepared->Mask(a.data(), 260);
    plain->Mask(b.data(), 260);
    ASSERT_EQ(a, b) << "after " << i << " bytes";
    ++compared;
    ASSERT_TRUE(prepared->Accept(text[i]));
    ASSERT_TRUE(plain->Accept(text[i]));
  }
  EXPECT_TRUE(prepared->Complete());
  EXPECT_EQ(compared, static_cast<int>(text.size()));
  // Prepared for drafts the answer leaves: the next mask is still the state's own.
  std::unique_ptr<TokenConstraint> c = v->NewConstraint(), d = v->NewConstraint();
  const std::vector<int32_t> drafts = {'{', '"', 'a'};
  c->Prepare(drafts);
  for (const int32_t token : {'{', '}'}) {  // the first draft taken, then an object closed instead
    ASSERT_TRUE(c->Accept(token));
    ASSERT_TRUE(d->Accept(token));
    std::fill(a.begin(), a.end(), 1.0f);
    std::fill(b.begin(), b.end(), 1.0f);
    c->Mask(a.data(), 260);
    d->Mask(b.data(), 260);
    EXPECT_EQ(a, b) << static_cast<char>(token);
  }
}

TEST(JsonVocabulary, NeedsEveryPrintableCharacter) {
  absl::StatusOr<std::shared_ptr<JsonVocabulary>> v = JsonVocabulary::Build(3, 3, [](int32_t id, std::string* bytes) {
    *bytes = std::string(1, "{}\""[id]);
    return true;
  });
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("printable ASCII"), std::string::npos) << v.status();
  // Every byte but '"', whose high-bit twin 0xA2 does not stand in for it.
  v = JsonVocabulary::Build(256, 256, [](int32_t id, std::string* bytes) {
    *bytes = std::string(1, static_cast<char>(id == '"' ? 0xA2 : id));
    return true;
  });
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("'\"'"), std::string::npos) << v.status();
}

// tiny-glm's 300 ids with the first 256 read as the bytes (the fixture's model is random; its
// vocabulary has no text): JSON mode on the engine, its random model choosing among what the mask leaves.
class ConstrainedEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::shared_ptr<JsonVocabulary>> v = JsonVocabulary::Build(256, 300, [](int32_t id, std::string* b) {
      *b = std::string(1, static_cast<char>(id));
      return true;
    });
    ASSERT_TRUE(v.ok()) << v.status();
    vocabulary_ = *v;
  }
  Request JsonRequest(uint64_t seed) const {
    Request r;
    r.prompt = {15, 292, 121, 86, 283, 147, 287};
    r.max_new_tokens = 48;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.sampling.logit_bias = {{1, 100.0f}, {'"', 2.0f}, {':', 2.0f}};  // end as soon as the object may (id 1 is eos)
    r.logprobs = 1;
    std::shared_ptr<JsonVocabulary> v = vocabulary_;
    r.constraint = [v] { return v->NewConstraint(); };
    return r;
  }
  static std::string Text(const std::vector<int32_t>& tokens) {
    std::string text;
    for (const int32_t t : tokens) text += static_cast<char>(t);
    return text;
  }

  testing::TinyGlm tiny_;
  std::shared_ptr<JsonVocabulary> vocabulary_;
};

// Every answer is a prefix of a JSON object, every one that ended on eos a whole object (and the eos
// came right at its end), on every sampling path alike (the host's; where the logits are, the mask
// going down with the row -- each draft row's, the state the drafts before it lead to -- or, with
// that off, the row coming back to the host) and with speculative drafts alike, n choices apart,
// with preemption; unconstrained, the same seeds write no JSON.
TEST_F(ConstrainedEngine, AnswersAreJsonObjects) {
  std::vector<std::vector<int32_t>> first;
  struct Path {
    bool device_like, drafts, mask_where_logits_are;
  };
  for (const Path& path : {Path{false, false, true}, Path{true, false, true}, Path{true, false, false},
                           Path{false, true, true}, Path{true, true, true}}) {
    const auto [device_like, drafts, mask_where_logits_are] = path;
    CpuBackend backend(device_like);
    EngineOptions options;
    options.mask_where_logits_are = mask_where_logits_are;
    options.kv_cache_tokens = 96;  // a few requests at once: preemption
    if (drafts) options.speculative = {4, 1, 3, 0};  // drafts change no answer
    std::unique_ptr<Engine> engine = *Engine::Create(tiny_.plan, backend, *tiny_.weights, options);
    std::vector<int> ids;
    for (uint64_t seed = 0; seed < 12; ++seed) ids.push_back(*engine->Submit(JsonRequest(seed)));
    const std::vector<int> choices = *engine->SubmitChoices(JsonRequest(100), 3);
    ids.insert(ids.end(), choices.begin(), choices.end());
    Request greedy = JsonRequest(0);
    greedy.sampling.temperature = 0.0f;
    greedy.sampling.frequency_penalty = 0.5f;
    ids.push_back(*engine->Submit(greedy));
    Request plain = JsonRequest(1);
    plain.constraint = nullptr;
    const int unconstrained = *engine->Submit(plain);
    while (engine->HasWork()) ASSERT_TRUE(engine->Step().ok());
    EXPECT_GT(engine->preemptions(), 0);
    EXPECT_EQ(engine->spec_drafts() > 0, drafts);
    int whole = 0;
    std::vector<std::vector<int32_t>> answers;
    for (const int id : ids) {
      std::vector<int32_t> tokens = engine->new_tokens(id);
      answers.push_back(tokens);
      EXPECT_EQ(engine->TakeLogprobs(id).size(), tokens.size());
      const bool ended = engine->finish_reason(id) == FinishReason::kEos;
      if (ended) tokens.pop_back();
      JsonState state;
      ASSERT_TRUE(state.Feed(Text(tokens))) << Text(tokens);
      // It ends where the object does (or the object closed with the last token max_new_tokens allows).
      EXPECT_TRUE(state.Complete() == ended || tokens.size() == 48) << Text(tokens);
      if (ended) {
        // The reference validator refuses exponents past a double's range, which JSON allows: those
        // digits are made 1 first (inside strings too, where digits are any text).
        const std::string tamed = std::regex_replace(Text(tokens), std::regex("([eE][+-]?)[0-9]+"), "$011");
        EXPECT_TRUE(nlohmann::json::accept(tamed) && tamed.front() == '{') << Text(tokens);
        ++whole;
      } else {
        EXPECT_EQ(engine->finish_reason(id), FinishReason::kLength);
      }
    }
    EXPECT_GT(whole, 5);
    EXPECT_FALSE(answers[12] == answers[13] && answers[13] == answers[14]) << "choices sample apart";
    EXPECT_FALSE(JsonState().Feed(Text(engine->new_tokens(unconstrained))));
    if (first.empty()) {
      first = answers;
    } else {
      EXPECT_EQ(answers, first);
    }
  }
}

// The host samples a batch's constrained rows in parallel: each sequence answers as it does alone.
TEST_F(ConstrainedEngine, ABatchAnswersAsEachAlone) {
  for (const bool device_like : {false, true}) {
    CpuBackend backend(device_like);
    std::unique_ptr<Engine> together = *Engine::Create(tiny_.plan, backend, *tiny_.weights, {});
    std::vector<int> ids;
    for (uint64_t seed = 0; seed < 8; ++seed) ids.push_back(*together->Submit(JsonRequest(seed)));
    while (together->HasWork()) ASSERT_TRUE(together->Step().ok());
    for (uint64_t seed = 0; seed < 8; ++seed) {
      std::unique_ptr<Engine> alone = *Engine::Create(tiny_.plan, backend, *tiny_.weights, {});
      const int id = *alone->Submit(JsonRequest(seed));
      while (alone->HasWork()) ASSERT_TRUE(alone->Step().ok());
      EXPECT_EQ(alone->new_tokens(id), together->new_tokens(ids[seed])) << "seed " << seed;
    }
  }
}

TEST_F(ConstrainedEngine, RefusesRequestsThatCouldNotEnd) {
  CpuBackend backend;
  std::unique_ptr<Engine> engine = *Engine::Create(tiny_.plan, backend, *tiny_.weights, {});
  Request r = JsonRequest(0);
  r.stop_on_eos = false;
  EXPECT_FALSE(engine->Submit(r).ok());
  r.stop_ids = {'}'};
  EXPECT_TRUE(engine->Submit(r).ok());  // a stop id ends it
  r = JsonRequest(0);
  r.min_new_tokens = 3;
  EXPECT_FALSE(engine->Submit(r).ok());
}

}  // namespace
}  // namespace ag::runtime
