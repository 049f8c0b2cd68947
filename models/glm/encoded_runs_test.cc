#include "models/glm/encoded_runs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "tests/testing/vocab.h"

namespace ag::glm {
namespace {

using Ids = std::vector<int32_t>;

std::string Text(char c, size_t n) { return std::string(n, c); }

TEST(EncodedRuns, FindsWhatItRemembersAndAppends) {
  EncodedRuns runs(1 << 20);
  const std::string a = Text('a', 100), b = Text('b', 100);
  Ids out = {7};
  EXPECT_FALSE(runs.Find(a, &out));
  EXPECT_EQ(out, Ids({7}));
  runs.Remember(a, Ids({1, 2, 3}));
  EXPECT_TRUE(runs.Find(a, &out));
  EXPECT_EQ(out, Ids({7, 1, 2, 3}));
  EXPECT_FALSE(runs.Find(b, &out)) << "same length, other bytes";
  EXPECT_FALSE(runs.Find(a.substr(1), &out)) << "a prefix is another run";
  runs.Remember(a, Ids({9}));  // already there: kept as it was
  out.clear();
  EXPECT_TRUE(runs.Find(a, &out));
  EXPECT_EQ(out, Ids({1, 2, 3}));
  EXPECT_EQ(runs.runs(), 1u);
}

TEST(EncodedRuns, KeepsNeitherShortRunsNorRunsPastAnEighthOfTheBudget) {
  EncodedRuns runs(8000);
  const std::string short_run = Text('s', EncodedRuns::kMinBytes - 1), long_run = Text('l', 1000);
  runs.Remember(short_run, Ids({1}));
  runs.Remember(long_run, Ids({2}));
  Ids out;
  EXPECT_FALSE(runs.Find(short_run, &out));
  EXPECT_FALSE(runs.Find(long_run, &out));
  EXPECT_EQ(runs.runs(), 0u);
  EXPECT_TRUE(runs.Keeps(Text('k', EncodedRuns::kMinBytes)));
  EncodedRuns none(0);
  EXPECT_FALSE(none.Keeps(Text('k', 100)));
}

TEST(EncodedRuns, EvictsTheLeastRecentlyUsedWithinItsBudget) {
  EncodedRuns runs(2200);  // each 100-byte run of 10 ids costs 236: nine fit, not ten
  std::vector<std::string> texts;
  for (char c = 'a'; c < 'a' + 10; ++c) texts.push_back(Text(c, 100));
  for (int i = 0; i < 9; ++i) runs.Remember(texts[i], Ids(10, i));
  EXPECT_EQ(runs.runs(), 9u);
  Ids out;
  ASSERT_TRUE(runs.Find(texts[0], &out));  // 'a' is now the most recent; 'b' the least
  runs.Remember(texts[9], Ids(10, 9));
  EXPECT_LE(runs.bytes(), 2200u);
  EXPECT_EQ(runs.runs(), 9u);
  EXPECT_FALSE(runs.Find(texts[1], &out)) << "the least recently used goes first";
  for (int i : {0, 2, 3, 4, 5, 6, 7, 8, 9}) {
    out.clear();
    ASSERT_TRUE(runs.Find(texts[i], &out)) << i;
    EXPECT_EQ(out, Ids(10, i));
  }
  EXPECT_EQ(runs.hits(), 10u);
}

TEST(EncodedRuns, ThreadsFindAndRememberTheSameRuns) {
  EncodedRuns runs(64 << 10);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&runs, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 2000; ++i) {
        const int key = static_cast<int>(rng() % 300);
        const std::string text = std::string(80, 'x') + std::to_string(key);
        Ids out;
        if (runs.Find(text, &out)) {
          EXPECT_EQ(out, Ids(3, key));
        } else {
          runs.Remember(text, Ids(3, key));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(runs.bytes(), size_t{64} << 10);
}

// The tokenizer with remembered runs encodes exactly as without, the second time from memory.
TEST(EncodedRuns, ChatsEncodeTheSameFromMemory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("autoglm_runs_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  testing::WriteTiktoken((dir / "tokenizer.model").string(), testing::SyntheticRanks());
  absl::StatusOr<std::unique_ptr<Tokenizer>> with = Tokenizer::Load(dir.string());
  absl::StatusOr<std::unique_ptr<Tokenizer>> without = Tokenizer::Load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(with.ok() && without.ok());
  (*without)->KeepEncodedRuns(0);
  ASSERT_NE((*with)->encoded_runs(), nullptr);
  EXPECT_EQ((*without)->encoded_runs(), nullptr);

  std::mt19937 rng(11);
  static const char* kWords[] = {"the ", "thing ", "abc ", "ing", "12", "你好", "\n\n", "  ", "\xff"};
  static const char* kSpecials[] = {"<|user|>", "[gMASK]"};  // text that cuts a run in two
  auto words = [&](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
      s += rng() % 40 == 0 ? kSpecials[rng() % 2] : kWords[rng() % (sizeof(kWords) / sizeof(*kWords))];
    }
    return s;
  };
  std::vector<ChatMessage> chat = {{"system", words(400), {}, false}};
  ChatOptions options;
  options.chat_template = ChatTemplate::kGlm4v;
  for (int step = 0; step < 12; ++step) {  // an agent's loop: the whole history, a turn longer each step
    chat.push_back({"user", words(5 + static_cast<int>(rng() % 40)), {}, false});
    chat.push_back({"assistant", words(5 + static_cast<int>(rng() % 60)), {}, false});
    const absl::StatusOr<Ids> fresh = EncodeChat(**without, chat, options);
    const EncodedRuns& runs = *(*with)->encoded_runs();
    const size_t kept = runs.runs(), hits = runs.hits();
    const absl::StatusOr<Ids> remembered = EncodeChat(**with, chat, options);
    ASSERT_TRUE(fresh.ok() && remembered.ok());
    EXPECT_EQ(*remembered, *fresh) << "step " << step;
    // Every run kept so far belongs to an earlier step's chat, which this one extends.
    EXPECT_GE(runs.hits() - hits, kept) << "step " << step;
    const size_t hits_again = runs.hits();
    EXPECT_EQ(*EncodeChat(**with, chat, options), *fresh) << "step " << step << ", again";
    EXPECT_EQ(runs.hits() - hits_again, runs.runs()) << "step " << step << ": every kept run, found";
  }
  EXPECT_GT((*with)->encoded_runs()->runs(), 12u);
  for (int i = 0; i < 20; ++i) {  // the plain path (special-token text stays text)
    const std::string text = words(10 + i * 20);
    EXPECT_EQ((*with)->Encode(text), (*without)->Encode(text));
    EXPECT_EQ((*with)->Encode(text), (*without)->Encode(text));
  }
}

}  // namespace
}  // namespace ag::glm
