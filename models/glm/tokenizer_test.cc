#include "models/glm/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "models/glm/bpe.h"
#include "models/glm/chat.h"
#include "tests/testing/vocab.h"

namespace ag::glm {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> SpecialTexts() {
  std::vector<std::string> s;
  for (const SpecialToken& t : kGlm4SpecialTokens) s.push_back(t.text);
  return s;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("autoglm_tok_" + std::to_string(::getpid()) + "_" +
                                                 ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// The real GLM-4 tokenizer, loaded once (null when ../shared is absent).
const Tokenizer* Glm4() {
  static const Tokenizer* t = [] {
    const std::string dir = testing::SharedGlm4Tokenizer();
    if (dir.empty()) return static_cast<Tokenizer*>(nullptr);
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::Load(dir);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return t;
}

#define REQUIRE_GLM4()                                                        \
  if (Glm4() == nullptr) GTEST_SKIP() << "../shared/tokenizers/glm4 absent"

// A string mixing ASCII words, digits, CJK, emoji, combining marks, whitespace runs and punctuation.
std::string RandomText(std::mt19937& rng, size_t parts, bool invalid_utf8) {
  static const std::vector<std::string> kParts = {
      "hello", " world", "The", " quick", "don't", "I'M", "12345678", "3.14159", "你好", "很高兴见到你", "，",
      "。", "👋", "🇨🇳", "👩‍👩‍👧", "é", "e\xcc\x81", "n\xcc\x83", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n",
      " \n ", "!!!", "...", "(x)", "<|user|>", "[gMASK]", "Привет", "مرحبا", "नमस्ते", "\xe3\x80\x80", "\xc2\xa0",
      "٣٤٥", "Ⅻ", "ß", "ǅ", "'s", "'ll", "AbC", "\x7f", "\x01"};
  std::string s;
  for (size_t i = 0; i < parts; ++i) {
    s += kParts[rng() % kParts.size()];
    if (invalid_utf8 && rng() % 6 == 0) {
      static const std::vector<std::string> kBad = {"\xff", "\xc3", "\xe4\xbd", "\x80", "\xed\xa0\x80", "\xf8\x88"};
      s += kBad[rng() % kBad.size()];
    }
  }
  return s;
}

TEST(Tokenizer, ReferenceVectors) {
  REQUIRE_GLM4();
  const Tokenizer& t = *Glm4();
  EXPECT_EQ(t.num_ordinary(), 151329);
  EXPECT_EQ(t.vocab_size(), 151343);
  EXPECT_EQ(t.Encode("你好"), std::vector<int32_t>({109377}));
  EXPECT_EQ(t.Encode("[gMASK]<sop>你好", /*allow_special=*/true), std::vector<int32_t>({151331, 151333, 109377}));
  EXPECT_EQ(t.Encode("\n你好👋！很高兴见到你，有什么可以帮助你的吗？"),
            std::vector<int32_t>({198, 109377, 9281, 239, 233, 6313, 118295, 103810, 98406, 3837, 101665, 110368,
                                  99444, 99212, 11314}));
  absl::StatusOr<std::vector<int32_t>> chat = EncodeChat(t, {{"user", "你好"}});
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*chat, std::vector<int32_t>({151331, 151333, 151336, 198, 109377, 151337}));
  chat = EncodeChat(t, {{"user", "你好"}, {"assistant", "你好👋！很高兴见到你，有什么可以帮助你的吗？"}, {"user", "晚上睡不着应该怎么办"}});
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(*chat, std::vector<int32_t>({151331, 151333, 151336, 198, 109377, 151337, 198, 109377, 9281, 239, 233,
                                         6313, 118295, 103810, 98406, 3837, 101665, 110368, 99444, 99212, 11314, 151336,
                                         198, 101160, 120410, 99379, 103298, 151337}));
}

TEST(Tokenizer, SpecialTokensOnlyWhenAsked) {
  REQUIRE_GLM4();
  const Tokenizer& t = *Glm4();
  const std::vector<int32_t> plain = t.Encode("<|user|>");
  EXPECT_GT(plain.size(), 1u) << "ordinary encoding spells the text";
  EXPECT_EQ(t.Encode("<|user|>", true), std::vector<int32_t>({151336}));
  EXPECT_EQ(*t.Decode({151336}), "<|user|>");
  EXPECT_EQ(*t.Decode(plain), "<|user|>");
  EXPECT_FALSE(t.Decode({151343}).ok());
  EXPECT_FALSE(t.Decode({-1}).ok());
  // In chat content, special-token text stays text.
  absl::StatusOr<std::vector<int32_t>> chat = EncodeChat(t, {{"user", "<|assistant|>"}}, false);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(std::count(chat->begin(), chat->end(), 151337), 0);
}

TEST(Tokenizer, RoundTripsAnyBytes) {
  REQUIRE_GLM4();
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; ++i) {
    const std::string s = RandomText(rng, 1 + rng() % 30, /*invalid_utf8=*/i % 2 == 1);
    const std::vector<int32_t> ids = Glm4()->Encode(s);
    EXPECT_EQ(*Glm4()->Decode(ids), s);
  }
}

TEST(Tokenizer, StreamingDecodeEqualsWholeDecode) {
  REQUIRE_GLM4();
  std::mt19937 rng(2);
  for (int i = 0; i < 500; ++i) {
    const std::string s = RandomText(rng, 1 + rng() % 30, i % 3 == 0);
    const std::vector<int32_t> ids = Glm4()->Encode(s);
    StreamDecoder stream(*Glm4());
    std::string streamed;
    for (int32_t id : ids) {
      absl::StatusOr<std::string> piece = stream.Next(id);
      ASSERT_TRUE(piece.ok());
      // Only whole characters come out while the input was valid UTF-8.
      if (i % 3 != 0) {
        EXPECT_EQ(ValidUtf8Prefix(*piece), piece->size());
      }
      streamed += *piece;
    }
    streamed += stream.Finish();
    EXPECT_EQ(streamed, s);
  }
  // An emoji split over byte tokens comes out whole, once.
  StreamDecoder stream(*Glm4());
  std::string out;
  for (int32_t id : Glm4()->Encode("👋")) out += *stream.Next(id) + "|";
  EXPECT_EQ(out.find("👋"), out.size() - std::string("👋|").size()) << out;
}

TEST(Tokenizer, PretokenizerSplitsLikeTiktoken) {
  absl::StatusOr<std::unique_ptr<Pretokenizer>> p = Pretokenizer::Create();
  ASSERT_TRUE(p.ok());
  auto split = [&](const std::string& text) {
    std::vector<std::string> pieces;
    (*p)->Split(text, [&](absl::string_view piece) { pieces.emplace_back(piece); });
    return pieces;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(split("don't DON'T"), (V{"don", "'t", " DON", "'T"}));
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(split("x \n\ny"), (V{"x", " \n\n", "y"}));
  EXPECT_EQ(split("end   "), (V{"end", "   "}));
  EXPECT_EQ(split("!!!\n"), (V{"!!!\n"}));
  EXPECT_EQ(split("你好，世界"), (V{"你好", "，世界"})) << "punctuation leads the next letters";
  EXPECT_EQ(split(",你好"), (V{",你好"}));
  EXPECT_EQ(split("a\xff" "b"), (V{"a", "\xff", "b"}));
}

// The synthetic vocabulary runs everywhere, ../shared or not.
TEST(Tokenizer, SyntheticVocabularyMergesByRank) {
  TempDir dir;
  testing::WriteTiktoken(dir.File("tokenizer.model"), testing::SyntheticRanks());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<std::string> ranks = testing::SyntheticRanks();
  auto id = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(ranks.begin(), ranks.end(), s) - ranks.begin());
  };
  // "abc": "bc" outranks "ab", so b+c merge first, then a + "bc" = "abc".
  EXPECT_EQ((*t)->Encode("abc"), std::vector<int32_t>({id("abc")}));
  EXPECT_EQ((*t)->Encode("abd"), std::vector<int32_t>({id("ab"), id("d")}));
  // a a a a a -> aa a a a -> aa aa a -> aa aaa ("aa" outranks "aaa", which outranks "aaaa").
  EXPECT_EQ((*t)->Encode("aaaaa"), std::vector<int32_t>({id("aa"), id("aaa")}));
  EXPECT_EQ((*t)->Encode(" the"), std::vector<int32_t>({id(" the")}));
  EXPECT_EQ((*t)->Encode("你好"), std::vector<int32_t>({id("你好")}));
  std::mt19937 rng(3);
  for (int i = 0; i < 500; ++i) {
    const std::string s = RandomText(rng, 1 + rng() % 20, i % 2 == 0);
    EXPECT_EQ(*(*t)->Decode((*t)->Encode(s)), s);
  }
}

TEST(Tokenizer, HeapMergeEqualsTiktokensLoop) {
  TempDir dir;
  testing::WriteTiktoken(dir.File("tokenizer.model"), testing::SyntheticRanks());
  absl::StatusOr<std::unique_ptr<Tokenizer>> synthetic = Tokenizer::Load(dir.path());
  ASSERT_TRUE(synthetic.ok());
  std::vector<const Tokenizer*> tokenizers = {synthetic->get()};
  if (Glm4() != nullptr) tokenizers.push_back(Glm4());
  std::mt19937 rng(4);
  for (const Tokenizer* t : tokenizers) {
    RankFn rank = [t](absl::string_view bytes) {
      const int32_t id = t->TokenId(bytes);
      return id < 0 ? kNoRank : id;
    };
    for (int i = 0; i < 300; ++i) {
      std::string piece;
      const size_t n = 1 + rng() % 150;
      const char alphabet[] = "aabbcthe ing12\xe4\xbd\xa0\xe5\xa5\xbd";
      for (size_t k = 0; k < n; ++k) piece += alphabet[rng() % (sizeof(alphabet) - 1)];
      std::vector<int32_t> simple, heap;
      BytePairMerge(piece, rank, &simple);
      BytePairMergeHeap(piece, rank, &heap);
      ASSERT_EQ(simple, heap) << "piece of " << n << " bytes";
    }
  }
}

TEST(Tokenizer, HfTokenizerJsonEncodesTheSame) {
  TempDir dir;
  const bool real = Glm4() != nullptr;
  const std::vector<std::string> ranks =
      real ? testing::ReadTiktokenRanks(testing::SharedGlm4Tokenizer() + "/tokenizer.model") : testing::SyntheticRanks();
  testing::WriteHfTokenizerJson(dir.File("tokenizer.json"), ranks, SpecialTexts());
  testing::WriteTiktoken(dir.File("ranks.model"), ranks);
  absl::StatusOr<std::unique_ptr<Tokenizer>> hf = Tokenizer::Load(dir.path());  // only tokenizer.json is found
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tiktoken = Tokenizer::LoadTiktoken(dir.File("ranks.model"));
  ASSERT_TRUE(tiktoken.ok()) << tiktoken.status();
  EXPECT_EQ((*hf)->vocab_size(), (*tiktoken)->vocab_size());
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    const std::string s = RandomText(rng, 1 + rng() % 20, false);
    EXPECT_EQ((*hf)->Encode(s, true), (*tiktoken)->Encode(s, true)) << s;
  }
  EXPECT_EQ((*hf)->SpecialId("<|user|>"), (*tiktoken)->SpecialId("<|user|>"));
}

TEST(Tokenizer, BadFilesGiveErrorsNamingThem) {
  TempDir dir;
  std::ofstream(dir.File("tokenizer.model")) << "IQ== 0\nnot-base64! 1\n";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.model: line 2"), std::string::npos) << t.status();
  std::ofstream(dir.File("tokenizer.model")) << "IQ== 0\nIg== 5\n";
  t = Tokenizer::Load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("rank 5, expected 1"), std::string::npos) << t.status();
  std::ofstream(dir.File("tokenizer.model")) << "IQ== 0\n";
  t = Tokenizer::Load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("lacks the single byte"), std::string::npos) << t.status();
  fs::remove(dir.File("tokenizer.model"));
  std::ofstream(dir.File("tokenizer.json")) << R"({"model": {"type": "Unigram"}})";
  t = Tokenizer::Load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("BPE"), std::string::npos);
  fs::remove(dir.File("tokenizer.json"));
  t = Tokenizer::Load(dir.path());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("no tokenizer.model or tokenizer.json"), std::string::npos);
}

// Regression (fuzzing): hostile added_tokens ids and contents in tokenizer.json.
TEST(Tokenizer, HostileAddedTokensAreRejected) {
  TempDir dir;
  const std::string path = dir.File("tokenizer.json");
  testing::WriteHfTokenizerJson(path, testing::SyntheticRanks(), SpecialTexts());
  nlohmann::json good;
  std::ifstream(path) >> good;
  const struct {
    nlohmann::json id;
    std::string content, expected;
  } cases[] = {
      {uint64_t{1} << 63, "<a>", "too large"},               // read by_id[-1] before
      {(uint64_t{1} << 31) - 1, "<b>", "too large"},         // overflowed in Finish
      {(uint64_t{1} << 32) + 7, "<c>", "too large"},         // truncated to int32 before
      {good["model"]["vocab"].size() + 20, "", "empty content"},  // Encode(allow_special) looped forever
  };
  for (const auto& c : cases) {
    nlohmann::json j = good;
    j["added_tokens"].push_back({{"id", c.id}, {"content", c.content}});
    std::ofstream(path) << j.dump();
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::LoadHfJson(path);
    ASSERT_FALSE(t.ok()) << c.id;
    EXPECT_NE(t.status().message().find(c.expected), std::string::npos) << t.status();
  }
}

// GLM-4.1V's <think> and <answer> tags are added tokens marked "special": false: matched in the
// input like the others, but kept in generated text (the phone agent reads them there).
TEST(Tokenizer, AddedTokensMarkedNotSpecialStayInTheOutput) {
  TempDir dir;
  const std::string path = dir.File("tokenizer.json");
  testing::WriteHfTokenizerJson(path, testing::SyntheticRanks(), SpecialTexts());
  nlohmann::json j;
  std::ifstream(path) >> j;
  const int64_t think = j["model"]["vocab"].size() + 40, user = think + 1;
  j["added_tokens"].push_back({{"id", think}, {"content", "<think>"}, {"special", false}});
  j["added_tokens"].push_back({{"id", user}, {"content", "<|turn|>"}, {"special", true}});
  std::ofstream(path) << j.dump();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::LoadHfJson(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE((*t)->HiddenInOutput(think));
  EXPECT_TRUE((*t)->HiddenInOutput(user));
  EXPECT_TRUE((*t)->HiddenInOutput((*t)->SpecialId("<|user|>")));  // no "special" field: an added token is hidden
  EXPECT_FALSE((*t)->HiddenInOutput(5));                             // ordinary
  EXPECT_EQ((*t)->Encode("a<think>", true).back(), think);
  j["added_tokens"].back()["special"] = "yes";
  std::ofstream(path) << j.dump();
  t = Tokenizer::LoadHfJson(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'special' must be true or false"), std::string::npos) << t.status();
}

// Regression (fuzzing): 16,000 special tokens took 11.5 s, quadratic in the
// text. 64,000 would take minutes that way; linear, it is milliseconds.
TEST(Tokenizer, EncodingManySpecialTokensIsLinear) {
  TempDir dir;
  testing::WriteTiktoken(dir.File("tokenizer.model"), testing::SyntheticRanks());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  std::string text;
  for (int i = 0; i < 64000; ++i) text += i % 1000 == 999 ? "<|user|>x<|system" : "<|user|>";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = (*t)->Encode(text, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int32_t user = (*t)->SpecialId("<|user|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 64000);
  EXPECT_EQ(*(*t)->Decode(ids), text);
  EXPECT_LT(seconds, 5.0) << "quadratic again?";
}

TEST(Chat, RejectsUnknownRolesAndMalformedInput) {
  TempDir dir;
  testing::WriteTiktoken(dir.File("tokenizer.model"), testing::SyntheticRanks());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir.path());
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(EncodeChat(**t, {{"wizard", "hi"}}).ok());
  EXPECT_FALSE(ParseChatMessages("{\"role\":\"user\"}").ok());
  EXPECT_FALSE(ParseChatMessages("[{\"role\":\"user\",\"content\":3}]").ok());
  absl::StatusOr<std::vector<ChatMessage>> ok = ParseChatMessages(R"([{"role":"system","content":"be brief"}])");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[0].content, "be brief");
}

}  // namespace
}  // namespace ag::glm
