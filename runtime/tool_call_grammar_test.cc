#include "runtime/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "models/glm/tokenizer.h"
#include "models/glm/tools.h"
#include "tests/testing/byte_vocabulary.h"
#include "tests/testing/vocab.h"

namespace ag::runtime {
namespace {

constexpr char kWeather[] =
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]})";
constexpr char kNoArguments[] = R"({"type": "object", "additionalProperties": false})";
constexpr char kTap[] = R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 1080},
    "y": {"type": "integer", "minimum": 0, "maximum": 2400}}, "required": ["x", "y"]})";

// Every byte a token, and pieces that cross from a name into its arguments.
struct Vocabulary : testing::ByteVocabulary {
  Vocabulary()
      : ByteVocabulary({"get", "_weather", "get_weather", "weather\n", "\n{", "\n{\"", "get\n{}", "tap\n{\"x\":", "\"city",
                        "\":\"", "\"}", "12", "},", "\n", "ge", "t\n", "\n\n", "{\"x\":1,\"y\":2}"},
                       /*padding=*/3) {}
};

std::shared_ptr<ToolCallGrammar> Grammar(const std::shared_ptr<JsonVocabulary>& v,
                                         const std::vector<std::pair<std::string, const char*>>& functions,
                                         ToolCallGrammar::Call call = ToolCallGrammar::Call::kForced,
                                         std::shared_ptr<MaskCache> name_masks = nullptr) {
  std::vector<ToolCallGrammar::Function> fs;
  for (const auto& [name, schema] : functions) {
    fs.push_back({name, *JsonSchemaGrammar::Create(*JsonSchema::Compile(schema), v)});
  }
  absl::StatusOr<std::shared_ptr<ToolCallGrammar>> g = ToolCallGrammar::Create(std::move(fs), v, call, std::move(name_masks));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

// The state's mask is exactly the tokens whose bytes it takes, each fed on its own.
void ExpectMaskIsTheTokensTaken(const Vocabulary& voc, ToolCallGrammar& g, const ToolCallState& s) {
  const Mask mask = g.Allowed(s);
  for (int32_t id = 0; id < voc.vocab; ++id) {
    ToolCallState t = s;
    const bool takes = id < voc.ordinary && t.Feed(voc.tokens[static_cast<size_t>(id)]);
    ASSERT_EQ(MaskAllows(*mask, voc.vocab, id), takes) << "token " << id;
  }
}

bool Whole(ToolCallGrammar& g, const std::string& text) {
  ToolCallState s = g.Start();
  return s.Feed(text) && s.Complete();
}

TEST(ToolCallGrammar, TakesANameANewlineAndArgumentsItsSchemaValidates) {
  Vocabulary voc;
  std::shared_ptr<ToolCallGrammar> g = Grammar(voc.v, {{"get_weather", kWeather}, {"get", kNoArguments}, {"tap", kTap}});
  ASSERT_NE(g, nullptr);
  for (const char* call : {"get_weather\n{\"city\":\"Paris\"}", "get\n{}", "tap\n{\"x\":1080,\"y\":0}",
                           "tap\n{\"x\": 5, \"y\": 2399}"}) {
    EXPECT_TRUE(Whole(*g, call)) << call;
  }
  for (const char* refused : {
           "get_weather\n{}",                          // city is required
           "get_weather\n{\"city\":\"Amsterdam!\"}",   // maxLength
           "get\n{\"a\":1}",                           // no arguments
           "tap\n{\"x\":1081,\"y\":0}",                // maximum
           "get_weathe\n{\"city\":\"a\"}",             // not a function's name
           "\nget\n{}",                                // a reply, not a call
           "get_weather{\"city\":\"a\"}",              // the newline
           "get_weather \n{\"city\":\"a\"}",
           "Get\n{}",
           "get\n{}\n",                                // nothing after the arguments
       }) {
    EXPECT_FALSE(Whole(*g, refused)) << refused;
  }
}

// Along calls, every state's mask is exactly the tokens whose bytes the state takes -- in the name,
// across the newline and in the arguments -- and the constraint takes the call token by token.
TEST(ToolCallGrammar, MasksAreTheTokensAStateTakes) {
  Vocabulary voc;
  std::shared_ptr<ToolCallGrammar> g = Grammar(voc.v, {{"get_weather", kWeather}, {"get", kNoArguments}, {"tap", kTap}});
  ASSERT_NE(g, nullptr);
  int states = 0;
  for (const std::string text : {"get_weather\n{\"city\":\"Paris\"}", "get\n{}", "tap\n{\"x\":12,\"y\":2400}"}) {
    ToolCallState s = g->Start();
    for (size_t i = 0; i <= text.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(ExpectMaskIsTheTokensTaken(voc, *g, s)) << "after " << i << " bytes of " << text;
      ++states;
      if (i < text.size()) {
        ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i])));
      }
    }
    EXPECT_TRUE(s.Complete());
    std::unique_ptr<TokenConstraint> c = g->NewConstraint();
    c->Prepare({});
    for (const char ch : text) {
      ASSERT_TRUE(c->Accept(static_cast<uint8_t>(ch))) << text;
    }
    EXPECT_TRUE(c->Complete());
  }
  EXPECT_GT(states, 40);
  // Tokens that cross from the name into the arguments are taken whole.
  std::unique_ptr<TokenConstraint> c = g->NewConstraint();
  const auto id_of = [&](const std::string& t) {
    return static_cast<int32_t>(std::find(voc.tokens.begin(), voc.tokens.end(), t) - voc.tokens.begin());
  };
  EXPECT_TRUE(c->Accept(id_of("tap\n{\"x\":")));
  EXPECT_FALSE(c->Complete());
  EXPECT_TRUE(c->Accept(id_of("12")));
  EXPECT_TRUE(c->Accept(id_of(",")));
  std::unique_ptr<TokenConstraint> whole = g->NewConstraint();
  EXPECT_TRUE(whole->Accept(id_of("get\n{}")));
  EXPECT_TRUE(whole->Complete());
}

// Random walks by byte: never stuck before a call is whole, and every whole one is a call GLM-4's
// parser reads back with its function's name.
TEST(ToolCallGrammar, NeverStuckAndWholeOnlyAsACall) {
  Vocabulary voc;
  std::shared_ptr<ToolCallGrammar> g = Grammar(voc.v, {{"get_weather", kWeather}, {"get", kNoArguments}, {"tap", kTap}});
  ASSERT_NE(g, nullptr);
  const std::vector<std::string> names = {"get_weather", "get", "tap"};
  std::mt19937 rng(3);
  const std::string structural = "\"{}:,0123456789\n_getwarp";
  int whole = 0;
  for (int walk = 0; walk < 300; ++walk) {
    ToolCallState s = g->Start();
    std::string written;
    for (int step = 0; step < 200 && !s.Complete(); ++step) {
      std::vector<uint8_t> next, preferred;
      for (int b = 0; b < 256; ++b) {
        ToolCallState t = s;
        if (!t.Feed(static_cast<uint8_t>(b))) continue;
        next.push_back(static_cast<uint8_t>(b));
        if (structural.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(static_cast<uint8_t>(b));
      }
      ASSERT_FALSE(next.empty()) << "stuck after " << written;
      const std::vector<uint8_t>& pool = !preferred.empty() && rng() % 4 != 0 ? preferred : next;
      const uint8_t b = pool[rng() % pool.size()];
      ASSERT_TRUE(s.Feed(b));
      written += static_cast<char>(b);
    }
    if (!s.Complete()) continue;
    ++whole;
    const std::optional<glm::ToolCall> call = glm::ParseToolCall(written, names);
    ASSERT_TRUE(call.has_value()) << written;
    EXPECT_EQ(call->name, names[static_cast<size_t>(s.tool())]);
  }
  EXPECT_GT(whole, 100);
}

std::shared_ptr<ToolCallGrammar> Optional(const Vocabulary& voc) {
  return Grammar(voc.v, {{"get_weather", kWeather}, {"get", kNoArguments}, {"tap", kTap}},
                 ToolCallGrammar::Call::kOptional);
}

// tool_choice "auto": a reply that starts as a call is held to one; any other reply is free from
// the byte that shows it is not one, and may end anywhere then.
TEST(ToolCallGrammar, AnOptionalCallIsEnforcedOnceTheReplyStartsAsOne) {
  Vocabulary voc;
  std::shared_ptr<ToolCallGrammar> g = Optional(voc);
  ASSERT_NE(g, nullptr);
  for (const char* call : {"get_weather\n{\"city\":\"Paris\"}", "get\n{}", "  tap \t\n{\"x\":1,\"y\":2}"}) {
    ToolCallState s = g->Start();
    ASSERT_TRUE(s.Feed(call)) << call;
    EXPECT_TRUE(s.Complete()) << call;
    EXPECT_FALSE(s.Released()) << call;
    EXPECT_GE(s.tool(), 0) << call;
  }
  // Replies, and the bytes that free them: every later byte is taken, and the reply may end.
  for (const auto& [reply, freed_at] : std::vector<std::pair<std::string, size_t>>{
           {"\nThe weather is fine.", 0}, {"Sure, get_weather\n{", 0}, {"get the", 4}, {"get_w x", 5},
           {"  tapping", 5}, {"get_weather2\n{\"city\":1}", 11}, {"tap\t x", 5}, {"Get\n{}", 0}}) {
    ToolCallState s = g->Start();
    for (size_t i = 0; i < reply.size(); ++i) {
      ASSERT_TRUE(s.Feed(static_cast<uint8_t>(reply[i]))) << reply;
      EXPECT_EQ(s.Released(), i >= freed_at) << reply << " after " << i + 1 << " bytes";
      EXPECT_EQ(s.Complete(), i >= freed_at) << reply;
    }
  }
  // A call's arguments are its schema's, as when forced.
  for (const char* refused : {"get_weather\n{}", "get\n{\"a\":1}", "tap\n{\"x\":1081,\"y\":0}", "get\n{}\n"}) {
    ToolCallState s = g->Start();
    EXPECT_FALSE(s.Feed(refused) && s.Complete()) << refused;
  }
}

// Along replies and calls, every state's mask is exactly the tokens whose bytes it takes (a freed
// one: every ordinary token), and the constraint says it is released exactly when the state is.
TEST(ToolCallGrammar, AnOptionalCallsMasksAreTheTokensAStateTakes) {
  Vocabulary voc;
  std::shared_ptr<ToolCallGrammar> g = Optional(voc);
  ASSERT_NE(g, nullptr);
  int freed = 0;
  for (const std::string text : {"get_weather\n{\"city\":\"Paris\"}", " get \n{}", "\nHello", "get_w x", "tap\t2"}) {
    ToolCallState s = g->Start();
    std::unique_ptr<TokenConstraint> c = g->NewConstraint();
    for (size_t i = 0; i <= text.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(ExpectMaskIsTheTokensTaken(voc, *g, s)) << "after " << i << " bytes of " << text;
      ASSERT_EQ(c->Released(), s.Released()) << text << " after " << i << " bytes";
      freed += s.Released();
      if (i < text.size()) {
        ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i])));
        ASSERT_TRUE(c->Accept(static_cast<uint8_t>(text[i])));
      }
    }
    EXPECT_TRUE(c->Complete()) << text;
  }
  EXPECT_GT(freed, 5);
}

// Random walks by byte: at every prefix the grammar and GLM-4's own reading agree -- the state is
// freed exactly when the text can no longer become a call (the stream then shows it), and a whole
// call is one the parser reads back with its function; a freed reply never parses as a call.
TEST(ToolCallGrammar, AnOptionalCallAgreesWithGlm4sParser) {
  Vocabulary voc;
  std::shared_ptr<ToolCallGrammar> g = Optional(voc);
  ASSERT_NE(g, nullptr);
  const std::vector<std::string> names = {"get_weather", "get", "tap"};
  std::mt19937 rng(7);
  const std::string structural = "\"{}:,0123456789\n _getwarpxyci\t";
  int calls = 0, replies = 0;
  for (int walk = 0; walk < 400; ++walk) {
    ToolCallState s = g->Start();
    std::string written;
    for (int step = 0; step < 120 && !(s.Complete() && !s.Released()); ++step) {
      std::vector<uint8_t> next, preferred, calling;  // calling: preferred ones that keep it a call
      for (int b = 0; b < 256; ++b) {
        ToolCallState t = s;
        if (!t.Feed(static_cast<uint8_t>(b))) continue;
        next.push_back(static_cast<uint8_t>(b));
        if (structural.find(static_cast<char>(b)) == std::string::npos) continue;
        preferred.push_back(static_cast<uint8_t>(b));
        if (!t.Released()) calling.push_back(static_cast<uint8_t>(b));
      }
      ASSERT_FALSE(next.empty()) << "stuck after " << written;
      const std::vector<uint8_t>& pool = !calling.empty() && rng() % 8 != 0 ? calling
                                         : !preferred.empty() && rng() % 4 != 0 ? preferred
                                                                                : next;
      const uint8_t b = pool[rng() % pool.size()];
      ASSERT_TRUE(s.Feed(b));
      written += static_cast<char>(b);
      ASSERT_EQ(s.Released(), !glm::MayBecomeToolCall(written, names)) << "'" << written << "'";
    }
    const std::optional<glm::ToolCall> call = glm::ParseToolCall(written, names);
    if (s.Released()) {
      ++replies;
      EXPECT_FALSE(call.has_value()) << written;
    } else if (s.Complete()) {
      ++calls;
      ASSERT_TRUE(call.has_value()) << written;
      EXPECT_EQ(call->name, names[static_cast<size_t>(s.tool())]);
    }
  }
  EXPECT_GT(calls, 50);
  EXPECT_GT(replies, 50);
}

// Over GLM-4's own vocabulary (../shared; skipped without it), forced and optional: each state's
// mask is the tokens it takes, each of the 151,329 fed on its own -- checking the trie walk's
// shared prefixes, its failed ones, and those after which an optional call's reply is free.
TEST(ToolCallGrammar, MasksOverGlm4sVocabularyAreTheTokensAStateTakes) {
  const std::string dir = testing::SharedGlm4Tokenizer();
  if (dir.empty()) GTEST_SKIP() << "../shared/tokenizers/glm4 absent";
  absl::StatusOr<std::unique_ptr<glm::Tokenizer>> tokenizer = glm::Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::shared_ptr<JsonVocabulary>> v = JsonVocabulary::Build(**tokenizer);
  ASSERT_TRUE(v.ok()) << v.status();
  int checked = 0;
  for (const ToolCallGrammar::Call call : {ToolCallGrammar::Call::kForced, ToolCallGrammar::Call::kOptional}) {
    std::shared_ptr<ToolCallGrammar> g = Grammar(*v, {{"get_weather", kWeather}, {"tap", kTap}}, call);
    ASSERT_NE(g, nullptr);
    for (const char* prefix : {"", "get_w", "get_weather", " get_weather \t", "get_weather\n", "get_weather\n{\"city\": \"Pa",
                               "tap\n{\"x\": 1", "\nThe", "Sure"}) {
      ToolCallState s = g->Start();
      if (!s.Feed(prefix)) continue;  // forced: no name's
      const Mask mask = g->Allowed(s);
      std::string bytes;
      for (int32_t id = 0; id < (*v)->vocab(); ++id) {
        ToolCallState t = s;
        const bool takes = (*v)->TokenBytesOf(id, &bytes) && !bytes.empty() && t.Feed(bytes);
        ASSERT_EQ(MaskAllows(*mask, (*v)->vocab(), id), takes) << "'" << prefix << "', token " << id << " '" << bytes << "'";
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 + 9);
}

// A server keeps the name masks of the tool sets it meets (ToolCallGrammar::NameMasksKey): the next
// request's grammar -- its schema grammars compiled afresh -- finds every name state's mask made,
// and each is still exactly the tokens its state takes.
TEST(ToolCallGrammar, GrammarsOfTheSameToolsShareTheirNameMasks) {
  Vocabulary voc;
  for (const ToolCallGrammar::Call call : {ToolCallGrammar::Call::kForced, ToolCallGrammar::Call::kOptional}) {
    auto shared = std::make_shared<MaskCache>(JsonVocabulary::kMaxCachedMasks);
    const std::vector<const char*> prefixes = {"", "ge", "get_w", "get_weather", " tap ", "nope"};
    std::vector<Mask> first;
    std::shared_ptr<ToolCallGrammar> a = Grammar(voc.v, {{"get_weather", kWeather}, {"tap", kTap}}, call, shared);
    for (const char* prefix : prefixes) {
      ToolCallState s = a->Start();
      first.push_back(s.Feed(prefix) ? a->Allowed(s) : nullptr);
    }
    const size_t made = shared->size();
    EXPECT_GE(made, 4u);
    std::shared_ptr<ToolCallGrammar> b = Grammar(voc.v, {{"get_weather", kWeather}, {"tap", kTap}}, call, shared);
    for (size_t i = 0; i < prefixes.size(); ++i) {
      ToolCallState s = b->Start();
      if (!s.Feed(prefixes[i])) continue;
      EXPECT_EQ(b->Allowed(s), first[i]) << "'" << prefixes[i] << "': the first grammar's mask";
      ExpectMaskIsTheTokensTaken(voc, *b, s);
    }
    EXPECT_EQ(shared->size(), made) << "nothing walked again";
  }
  using Call = ToolCallGrammar::Call;
  const auto key = [](Call call, std::vector<std::pair<std::string, std::string>> fs) {
    return ToolCallGrammar::NameMasksKey(call, fs);
  };
  const std::string k = key(Call::kForced, {{"ab", "{}"}, {"c", "{}"}});
  EXPECT_EQ(k, key(Call::kForced, {{"ab", "{}"}, {"c", "{}"}}));
  EXPECT_NE(k, key(Call::kOptional, {{"ab", "{}"}, {"c", "{}"}}));
  EXPECT_NE(k, key(Call::kForced, {{"a", "b{}"}, {"c", "{}"}}));
  EXPECT_NE(k, key(Call::kForced, {{"ab", "{}"}, {"c", R"({"type":"object"})"}}));
  EXPECT_NE(k, key(Call::kForced, {{"ab", "{}"}}));
}

TEST(ToolCallGrammar, RefusesWhatItCannotWrite) {
  Vocabulary voc;
  auto arguments = *JsonSchemaGrammar::Create(*JsonSchema::Compile(kNoArguments), voc.v);
  EXPECT_FALSE(ToolCallGrammar::Create({}, voc.v).ok());
  EXPECT_FALSE(ToolCallGrammar::Create({{"", arguments}}, voc.v).ok());
  EXPECT_FALSE(ToolCallGrammar::Create({{"a", arguments}, {"a", arguments}}, voc.v).ok());
  EXPECT_FALSE(ToolCallGrammar::Create({{"a\nb", arguments}}, voc.v).ok());
  // Arguments over another vocabulary.
  Vocabulary other;
  auto elsewhere = *JsonSchemaGrammar::Create(*JsonSchema::Compile(kNoArguments), other.v);
  EXPECT_FALSE(ToolCallGrammar::Create({{"a", elsewhere}}, voc.v).ok());
  // A vocabulary with no newline token.
  std::vector<std::string> printable;
  for (int b = 32; b < 127; ++b) printable.push_back(std::string(1, static_cast<char>(b)));
  std::shared_ptr<JsonVocabulary> narrow =
      *JsonVocabulary::Build(static_cast<int32_t>(printable.size()), static_cast<int32_t>(printable.size()),
                             [&](int32_t id, std::string* out) {
                               *out = printable[static_cast<size_t>(id)];
                               return true;
                             });
  auto narrow_arguments = *JsonSchemaGrammar::Create(*JsonSchema::Compile(kNoArguments), narrow);
  const absl::StatusOr<std::shared_ptr<ToolCallGrammar>> g = ToolCallGrammar::Create({{"a", narrow_arguments}}, narrow);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("newline"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace ag::runtime
