// The command-line tools end to end: autoglm-compile -> autoglm-inspect ->
// autoglm-run --plan, on every fixture, against golden.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/command.h"
#include "tests/testing/golden.h"
#include "tests/testing/vocab.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;
using testing::Tool;

std::string Compile() { return Tool("AUTOGLM_COMPILE", "build/tools/autoglm-compile"); }
std::string Inspect() { return Tool("AUTOGLM_INSPECT", "build/tools/autoglm-inspect"); }
std::string RunTool() { return Tool("AUTOGLM_RUN", "build/tools/autoglm-run"); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("autoglm_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

// autoglm-run's --output-json file for golden case `g`: its tokens, and its logits rows (prompt and
// new tokens but the last) within 1e-3. Call through ASSERT_NO_FATAL_FAILURE.
void ExpectGoldenOutput(const std::string& path, const testing::GoldenCase& g, const std::string& fixture) {
  const nlohmann::json o = nlohmann::json::parse(testing::ReadWhole(path));
  EXPECT_EQ(o.at("new_tokens").get<std::vector<int32_t>>(), g.new_tokens) << fixture;
  const auto logits = o.at("logits").get<std::vector<std::vector<float>>>();
  ASSERT_EQ(logits.size(), g.input_ids.size() + g.new_tokens.size() - 1) << fixture;
  for (size_t row = 0; row < logits.size(); ++row) {
    for (size_t i = 0; i < logits[row].size(); ++i) ASSERT_NEAR(logits[row][i], g.logits[row][i], 1e-3) << fixture;
  }
}

TEST_F(Cli, CompileInspectAndRunEveryFixtureThroughAPlanFile) {
  for (const char* fixture : testing::kFixtures) {
    const std::string model = testing::TestDataDir() + "/" + fixture;
    const std::string plan = Path(std::string(fixture) + ".agplan");
    CommandResult c = RunCommand(Compile() + " --model " + model + " -o " + plan);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_NE(c.out.find("passes: canonicalize"), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("per layer"), std::string::npos);
    EXPECT_NE(c.out.find("arena:"), std::string::npos);
    EXPECT_NE(c.out.find("bytes per token"), std::string::npos);

    CommandResult inspect = RunCommand(Inspect() + " --json " + plan);
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    const nlohmann::json j = nlohmann::json::parse(inspect.out);
    const bool glm4 = std::string(fixture) == "tiny-glm4";
    EXPECT_LE(j.at("steps_per_layer").get<int>(), glm4 ? 8 : 6) << fixture;
    EXPECT_EQ(j.at("total_steps").get<int>(),
              j.at("steps_per_layer").get<int>() * j.at("layers").get<int>() + j.at("steps_outside_layers").get<int>());
    EXPECT_GT(j.at("arena_bytes").get<int64_t>(), 0);
    EXPECT_EQ(j.at("kernels").at("paged_attention").get<int>(), j.at("layers").get<int>());
    // CUDA launches per layer: at least a step each; more rows never fewer (the norm prologues).
    const nlohmann::json& launches = j.at("cuda_launches_per_layer");
    EXPECT_GE(launches.at("decode_1").get<int>(), j.at("steps_per_layer").get<int>());
    EXPECT_GE(launches.at("decode_8").get<int>(), launches.at("decode_1").get<int>());
    EXPECT_GE(launches.at("prefill_512").get<int>(), j.at("steps_per_layer").get<int>());
    CommandResult text = RunCommand(Inspect() + " " + plan);
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("norm_qkv_rope_kv_write"), std::string::npos);
    EXPECT_NE(text.out.find("CUDA launches per layer (the backend's dispatch at context 512): decode_1 "),
              std::string::npos);

    for (const testing::GoldenCase& g : testing::LoadGolden(model)) {
      const std::string out = Path("out.json");
      CommandResult r = RunCommand(RunTool() + " --model " + model + " --plan " + plan + " --prompt-ids " +
                                   Ids(g.input_ids) + " --max-new-tokens " + std::to_string(g.new_tokens.size()) +
                                   " --output-json " + out);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_NE(r.out.find("ms/token"), std::string::npos) << r.out;
      ASSERT_NO_FATAL_FAILURE(ExpectGoldenOutput(out, g, fixture));
    }
  }
}

// autoglm-run --speculative-config: prompt-lookup drafts give every fixture's golden tokens and
// logits (the rows of kept drafts among them); a bad config is a one-line error naming the field.
TEST_F(Cli, SpeculativeRunsGiveTheGoldenAnswers) {
  const std::string spec = R"('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}')";
  for (const char* fixture : testing::kFixtures) {
    const std::string model = testing::TestDataDir() + "/" + fixture;
    for (const testing::GoldenCase& g : testing::LoadGolden(model)) {
      const std::string out = Path("spec.json");
      CommandResult r = RunCommand(RunTool() + " --model " + model + " --prompt-ids " + Ids(g.input_ids) +
                                   " --max-new-tokens " + std::to_string(g.new_tokens.size()) +
                                   " --speculative-config " + spec + " --output-json " + out);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_NE(r.out.find("drafts: "), std::string::npos) << r.out;
      ASSERT_NO_FATAL_FAILURE(ExpectGoldenOutput(out, g, fixture));
    }
  }
  // The goldens are short: a long answer that repeats itself keeps drafts, and is the plain run's.
  const std::string model = testing::TestDataDir() + "/tiny-glm4";
  const std::string args = " --model " + model + " --prompt-ids 5,17,42,5,17 --max-new-tokens 40 --output-json ";
  CommandResult plain = RunCommand(RunTool() + args + Path("plain.json"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  CommandResult drafted = RunCommand(RunTool() + args + Path("drafted.json") + " --speculative-config " + spec);
  ASSERT_EQ(drafted.exit_code, 0) << drafted.err;
  const size_t at = drafted.out.find("drafts: ");
  ASSERT_NE(at, std::string::npos) << drafted.out;
  long long run = 0, kept = 0;
  ASSERT_EQ(std::sscanf(drafted.out.c_str() + at, "drafts: %lld run, %lld kept", &run, &kept), 2) << drafted.out;
  EXPECT_GT(kept, 0) << drafted.out;
  const nlohmann::json a = nlohmann::json::parse(testing::ReadWhole(Path("plain.json")));
  const nlohmann::json b = nlohmann::json::parse(testing::ReadWhole(Path("drafted.json")));
  EXPECT_EQ(b.at("new_tokens"), a.at("new_tokens"));
  const auto want = a.at("logits").get<std::vector<std::vector<float>>>();
  const auto got = b.at("logits").get<std::vector<std::vector<float>>>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t row = 0; row < want.size(); ++row) {
    for (size_t i = 0; i < want[row].size(); ++i) ASSERT_NEAR(got[row][i], want[row][i], 1e-4) << row;
  }
  CommandResult bad = RunCommand(RunTool() + " --model " + testing::TestDataDir() + "/tiny-glm --prompt-ids 5 " +
                                 R"(--speculative-config '{"method": "ngram", "num_speculative_tokens": 99}')");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("num_speculative_tokens"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

// autoglm-run --tp N, through --model (compiled at that degree) and through a
// plan compiled with autoglm-compile --tp N, reproduces --tp 1's tokens and
// logits on every fixture at every degree its heads allow.
TEST_F(Cli, TensorParallelRunsReproduceOneRank) {
  const struct {
    const char* fixture;
    std::vector<int> degrees;
  } fixtures[] = {{"tiny-glm", {2, 4}}, {"tiny-chatglm", {2, 4}}, {"tiny-glm4", {2}}, {"tiny-glm-mqa", {2, 4, 8}}};
  auto logits_of = [&](const std::string& args) {
    const std::string out = Path("out.json");
    CommandResult r = RunCommand(RunTool() + " " + args + " --output-json " + out);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(testing::ReadWhole(out)) : nlohmann::json();
  };
  for (const auto& f : fixtures) {
    const std::string model = testing::TestDataDir() + "/" + f.fixture;
    const testing::GoldenCase g = testing::LoadGolden(model)[0];
    const std::string prompt = " --prompt-ids " + Ids(g.input_ids) + " --max-new-tokens " +
                               std::to_string(g.new_tokens.size());
    const nlohmann::json single = logits_of("--model " + model + prompt);
    ASSERT_EQ(single.at("new_tokens").get<std::vector<int32_t>>(), g.new_tokens);
    const auto expected = single.at("logits").get<std::vector<std::vector<float>>>();
    for (int tp : f.degrees) {
      const std::string plan = Path("tp.agplan");
      CommandResult c = RunCommand(Compile() + " --model " + model + " --tp " + std::to_string(tp) + " -o " + plan);
      ASSERT_EQ(c.exit_code, 0) << c.err;
      EXPECT_NE(c.out.find("tp " + std::to_string(tp)), std::string::npos) << c.out;
      CommandResult inspect = RunCommand(Inspect() + " --json " + plan);
      ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
      const nlohmann::json j = nlohmann::json::parse(inspect.out);
      EXPECT_EQ(j.at("tp").get<int>(), tp);
      EXPECT_EQ(j.at("collectives_per_layer").get<int>(), 2) << "one all-reduce after o_proj, one after down_proj";
      EXPECT_EQ(j.at("kernels").at("all_gather").get<int>(), 1) << "the vocabulary-split LM head";
      for (const std::string& source : {"--model " + model + " --tp " + std::to_string(tp),
                                        "--model " + model + " --plan " + plan}) {
        const nlohmann::json sharded = logits_of(source + prompt);
        ASSERT_FALSE(sharded.is_null());
        EXPECT_EQ(sharded.at("new_tokens").get<std::vector<int32_t>>(), g.new_tokens) << source;
        const auto logits = sharded.at("logits").get<std::vector<std::vector<float>>>();
        ASSERT_EQ(logits.size(), expected.size());
        for (size_t row = 0; row < logits.size(); ++row) {
          for (size_t i = 0; i < logits[row].size(); ++i) ASSERT_NEAR(logits[row][i], expected[row][i], 1e-5) << source;
        }
      }
    }
  }
  // A plan's degree wins; another --tp is a one-line error, and so is a degree the heads refuse.
  const std::string model = testing::TestDataDir() + "/tiny-glm";
  ASSERT_EQ(RunCommand(Compile() + " --model " + model + " --tp 2 -o " + Path("two.agplan")).exit_code, 0);
  CommandResult conflict = RunCommand(RunTool() + " --model " + model + " --plan " + Path("two.agplan") +
                                      " --tp 4 --prompt-ids 1,2");
  EXPECT_EQ(conflict.exit_code, 1);
  EXPECT_EQ(conflict.err, "autoglm-run: error: --tp 4 conflicts with " + Path("two.agplan") +
                              ", compiled for tp=2 (drop --tp or recompile)\n");
  CommandResult heads = RunCommand(RunTool() + " --model " + model + " --tp 3 --prompt-ids 1,2");
  EXPECT_EQ(heads.exit_code, 1);
  EXPECT_EQ(heads.err, "autoglm-run: error: pass shard: --tp 3 does not divide the 4 attention heads "
                       "(num_attention_heads)\n");
  CommandResult devices = RunCommand(RunTool() + " --model " + model + " --tp 2 --devices 0,1 --prompt-ids 1,2");
  EXPECT_EQ(devices.exit_code, 1);
  EXPECT_NE(devices.err.find("--devices, --nnodes and --master are for --device cuda"), std::string::npos)
      << devices.err;
}

TEST_F(Cli, HelpListsEachToolsFlagsWithDefaults) {
  const std::string tokenize = Tool("AUTOGLM_TOKENIZE", "build/tools/autoglm-tokenize");
  for (const auto& [tool, flag] : {std::pair{Compile(), "--max-batch-tokens [256]"},
                                   std::pair{Inspect(), "--roofline [false]"}, std::pair{RunTool(), "--max-new-tokens ["},
                                   std::pair{RunTool(), "--tp [0]"}, std::pair{tokenize, "--tokenizer ["}}) {
    const CommandResult r = RunCommand(tool + " --help");
    EXPECT_EQ(r.exit_code, 0) << tool;
    const std::string text = r.out + r.err;
    EXPECT_NE(text.find(flag), std::string::npos) << tool << " --help does not list " << flag << ":\n" << text;
  }
}

TEST_F(Cli, DumpAfterAndDisablePass) {
  const std::string model = testing::TestDataDir() + "/tiny-glm";
  CommandResult c = RunCommand(Compile() + " --model " + model + " -o " + Path("p.agplan") + " --dump-after=fuse");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("// IR after fuse"), std::string::npos);
  EXPECT_NE(c.out.find("norm_gate_up_silu("), std::string::npos);
  c = RunCommand(Compile() + " --model " + model + " -o " + Path("p.agplan") + " --disable-pass=fuse");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  CommandResult inspect = RunCommand(Inspect() + " --json " + Path("p.agplan"));
  const nlohmann::json j = nlohmann::json::parse(inspect.out);
  EXPECT_FALSE(j.at("kernels").contains("norm_gate_up_silu"));
  c = RunCommand(Compile() + " --model " + model + " -o " + Path("p.agplan") + " --disable-pass=fusion");
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("unknown pass 'fusion'"), std::string::npos) << c.err;
}

TEST_F(Cli, RooflinePerStep) {
  const std::string model = testing::TestDataDir() + "/tiny-glm4";
  ASSERT_EQ(RunCommand(Compile() + " --model " + model + " -o " + Path("p.agplan")).exit_code, 0);
  CommandResult r = RunCommand(Inspect() + " " + Path("p.agplan") + " --roofline --batch 3 --context 40 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json counts = nlohmann::json::parse(RunCommand(Inspect() + " --json " + Path("p.agplan")).out);
  ASSERT_EQ(j.at("steps").size(), counts.at("total_steps").get<size_t>());
  double floor = 0, bytes = 0;
  for (const nlohmann::json& step : j.at("steps")) {
    floor += step.at("floor_us").get<double>();
    bytes += step.at("bytes").get<double>();
    EXPECT_FALSE(step.at("name").get<std::string>().empty());
  }
  EXPECT_NEAR(floor, j.at("floor_us").get<double>(), 1e-9 * floor);
  // Every weight but the embedding table is read once, whatever the batch.
  EXPECT_GT(bytes, counts.at("weight_bytes").get<double>() - 300 * 64 * 4);
  CommandResult text = RunCommand(Inspect() + " " + Path("p.agplan") + " --roofline --batch 3 --context 40");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("paged_attention"), std::string::npos);
  EXPECT_NE(text.out.find("total"), std::string::npos);
  CommandResult bad = RunCommand(Inspect() + " " + Path("p.agplan") + " --roofline --batch 100000");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("exceed the plan's"), std::string::npos) << bad.err;
}

TEST_F(Cli, BadPlansGiveOneLineErrors) {
  const std::string model = testing::TestDataDir() + "/tiny-glm";
  const std::string plan = Path("p.agplan");
  ASSERT_EQ(RunCommand(Compile() + " --model " + model + " -o " + plan).exit_code, 0);
  const std::string bytes = testing::ReadWhole(plan);
  struct Case {
    std::string bytes, expected;
  };
  std::string corrupt = bytes;
  corrupt[bytes.size() - 10] ^= 1;
  std::string version = bytes;
  version[8] = 9;
  const Case cases[] = {{bytes.substr(0, bytes.size() / 2), "truncated"},
                        {corrupt, "checksum mismatch"},
                        {version, "version 9"},
                        {"hello", "not an .agplan file"}};
  for (const Case& c : cases) {
    std::ofstream(Path("bad.agplan"), std::ios::binary) << c.bytes;
    for (const std::string& command :
         {RunTool() + " --model " + model + " --plan " + Path("bad.agplan") + " --prompt-ids 1,2", Inspect() + " " + Path("bad.agplan")}) {
      CommandResult r = RunCommand(command);
      EXPECT_EQ(r.exit_code, 1) << command;
      EXPECT_FALSE(r.signaled);
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("bad.agplan"), std::string::npos) << "names the file: " << r.err;
    }
  }
  // A plan for another model.
  ASSERT_EQ(RunCommand(Compile() + " --model " + testing::TestDataDir() + "/tiny-glm4 -o " + Path("g4.agplan")).exit_code, 0);
  CommandResult r = RunCommand(RunTool() + " --model " + model + " --plan " + Path("g4.agplan") + " --prompt-ids 1,2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("different model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ag

namespace ag {
namespace {

TEST_F(Cli, TextPromptsStreamTextAndAgreeWithIds) {
  // The tiny model with a synthetic tokenizer (ids fit its 300-token vocabulary).
  const std::string model = Path("model");
  fs::copy(testing::TestDataDir() + "/tiny-glm", model);
  for (const auto& entry : fs::directory_iterator(model)) {
    fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write);
  }
  testing::WriteTiktoken(model + "/tokenizer.model", testing::SyntheticRanks());
  const std::string tokenize = Tool("AUTOGLM_TOKENIZE", "build/tools/autoglm-tokenize");
  const std::string prompt = "the thing";
  CommandResult ids = RunCommand(tokenize + " --tokenizer " + model, &prompt);
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  const std::vector<int32_t> prompt_ids = nlohmann::json::parse(ids.out).get<std::vector<int32_t>>();

  CommandResult text = RunCommand(RunTool() + " --model " + model + " --prompt '" + prompt +
                                  "' --max-new-tokens 12 --ignore-eos --output-json " + Path("o.json"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("ms/token"), std::string::npos) << text.err;
  const nlohmann::json o = nlohmann::json::parse(testing::ReadWhole(Path("o.json")));
  EXPECT_EQ(o.at("new_tokens").size(), 12u);
  EXPECT_EQ(o.at("logits").size(), prompt_ids.size() + 11) << "the prompt was encoded as autoglm-tokenize does";
  const std::string decode_input = o.at("new_tokens").dump();
  CommandResult decoded = RunCommand(tokenize + " --tokenizer " + model + " --decode", &decode_input);
  ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
  EXPECT_EQ(text.out, decoded.out + "\n") << "streamed text equals the decoded ids";

  CommandResult chat = RunCommand(RunTool() + " --model " + model + " --prompt hi --chat --max-new-tokens 4 "
                                  "--temperature 0.8 --top-p 0.9 --top-k 50 --repetition-penalty 1.1 --seed 7");
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  CommandResult again = RunCommand(RunTool() + " --model " + model + " --prompt hi --chat --max-new-tokens 4 "
                                   "--temperature 0.8 --top-p 0.9 --top-k 50 --repetition-penalty 1.1 --seed 7");
  EXPECT_EQ(chat.out, again.out) << "same seed, same text";
  CommandResult bad = RunCommand(RunTool() + " --model " + model + " --prompt hi --temperature -1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("temperature"), std::string::npos) << bad.err;
  // --logit-bias: +100 on one id makes every new token that id; bad ones are one-line errors.
  std::string id_list;
  for (const int32_t id : prompt_ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id);
  CommandResult forced = RunCommand(RunTool() + " --model " + model + " --prompt-ids " + id_list +
                                    " --max-new-tokens 5 --logit-bias=7:-3,42:100 --output-json " + Path("b.json"));
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(nlohmann::json::parse(testing::ReadWhole(Path("b.json"))).at("new_tokens"),
            nlohmann::json::parse("[42, 42, 42, 42, 42]"));
  for (const std::string& flag : {"5", "5:x", "5:1,5:2", "5:101", "-1:1", "99999:1"}) {
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --prompt hi --logit-bias=" + flag);
    EXPECT_EQ(r.exit_code, 1) << flag;
    EXPECT_NE(r.err.find("logit"), std::string::npos) << flag << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flag << ": " << r.err;
  }
  CommandResult no_tokenizer =
      RunCommand(RunTool() + " --model " + testing::TestDataDir() + "/tiny-glm --prompt hi");
  EXPECT_EQ(no_tokenizer.exit_code, 1);
  EXPECT_NE(no_tokenizer.err.find("no tokenizer.model or tokenizer.json"), std::string::npos) << no_tokenizer.err;
}

// --json-object (JSON mode): the streamed answer is one JSON object, whatever the seed (the random model
// is pushed towards its end-of-sequence id 1, allowed only once the object closed, and towards closing
// strings); without a tokenizer's text or with --ignore-eos, a one-line error.
TEST_F(Cli, JsonObjectAnswers) {
  const std::string model = testing::TestDataDir() + "/tiny-glm4";
  for (const char* seed : {"1", "2", "3"}) {
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --prompt 'an object' --chat --json-object " +
                                 "--max-new-tokens 100 --temperature 0.8 --logit-bias 1:100,34:4,125:2,58:3 --seed " + seed);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_FALSE(r.out.empty());
    const std::string text = r.out.substr(0, r.out.size() - 1);  // the newline after the stream
    EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_object()) << text;
    EXPECT_NE(r.err.find("finish: eos"), std::string::npos) << r.err;
  }
  for (const std::string flags : {" --prompt-ids 5 --json-object", " --prompt x --json-object --ignore-eos"}) {
    CommandResult bad = RunCommand(RunTool() + " --model " + model + flags);
    EXPECT_EQ(bad.exit_code, 1) << flags;
    EXPECT_NE(bad.err.find("--json-object"), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
}

// --regex EXPR: the whole answer matches the expression, and ends there; a refused expression or
// flags that cannot go with it are one-line errors.
TEST_F(Cli, RegexAnswers) {
  const std::string model = testing::TestDataDir() + "/tiny-glm4";
  const std::regex whole(R"([a-c]{2,4}-\d{1,3}(\.[xy])?)");
  for (const char* seed : {"1", "2", "3"}) {
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --prompt 'a code' --chat --regex '[a-c]{2,4}-\\d{1,3}(\\.[xy])?'" +
                                 " --max-new-tokens 40 --temperature 1 --logit-bias 1:100 --seed " + seed);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string text = r.out.substr(0, r.out.size() - 1);
    EXPECT_TRUE(std::regex_match(text, whole)) << text;
    EXPECT_NE(r.err.find("finish: eos"), std::string::npos) << r.err;
  }
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {" --prompt x --regex '(?=a)a'", "lookaround is not supported"},
           {" --prompt-ids 5 --regex a", "needs --prompt"},
           {" --prompt x --regex a --ignore-eos", "not with --ignore-eos"},
           {" --prompt x --json-object --regex a", "one of them"}}) {
    CommandResult bad = RunCommand(RunTool() + " --model " + model + flags);
    EXPECT_EQ(bad.exit_code, 1) << flags;
    EXPECT_NE(bad.err.find(says), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("--regex"), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
}

// --json-schema FILE: the answer is a document the schema validates (its properties in the schema's
// order); a schema the compiler refuses is a one-line error naming the file, the place and the keyword.
TEST_F(Cli, JsonSchemaAnswers) {
  const std::string model = testing::TestDataDir() + "/tiny-glm4";
  std::ofstream(Path("step.json")) << R"({"type": "object", "properties": {
      "thought": {"type": "string", "maxLength": 10},
      "action": {"enum": ["tap", "swipe", "finish"]}, "n": {"type": "integer"}}, "required": ["thought", "action"]})";
  for (const char* seed : {"1", "2", "3"}) {
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --prompt 'a step' --chat --json-schema " +
                                 Path("step.json") + " --max-new-tokens 200 --temperature 0.8 --logit-bias 1:100,34:3,44:3 --seed " + seed);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string text = r.out.substr(0, r.out.size() - 1);
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << text;
    auto it = j.begin();
    EXPECT_EQ(it.key(), "thought") << text;
    EXPECT_LE(it.value().get<std::string>().size(), 40u);  // 10 characters of up to 4 bytes
    EXPECT_EQ((++it).key(), "action") << text;
    EXPECT_TRUE(it.value() == "tap" || it.value() == "swipe" || it.value() == "finish") << text;
    EXPECT_TRUE(++it == j.end() || (it.key() == "n" && it.value().is_number_integer())) << text;
    EXPECT_NE(r.err.find("finish: eos"), std::string::npos) << r.err;
  }
  std::ofstream(Path("bad.json")) << R"js({"type": "object", "properties": {"x": {"type": "string", "pattern": "(?!a)"}}})js";
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {" --prompt x --json-schema " + Path("bad.json"), "'#/properties/x': 'pattern': lookaround is not supported"},
           {" --prompt x --json-schema " + Path("missing.json"), "cannot read"},
           {" --prompt-ids 5 --json-schema " + Path("step.json"), "needs --prompt"},
           {" --prompt x --json-object --json-schema " + Path("step.json"), "one or the other"}}) {
    CommandResult bad = RunCommand(RunTool() + " --model " + model + flags);
    EXPECT_EQ(bad.exit_code, 1) << flags;
    EXPECT_NE(bad.err.find(says), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("--json-schema"), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
}

TEST_F(Cli, TokenizeChatAndDecode) {
  const std::string tokenize = Tool("AUTOGLM_TOKENIZE", "build/tools/autoglm-tokenize");
  testing::WriteTiktoken(Path("tokenizer.model"), testing::SyntheticRanks());
  const std::string chat = R"([{"role":"user","content":"the"}])";
  CommandResult r = RunCommand(tokenize + " --tokenizer " + dir_.string() + " --chat", &chat);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<int32_t> ids = nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 5u);
  const int32_t first_special = static_cast<int32_t>(testing::SyntheticRanks().size());
  EXPECT_EQ(ids[0], first_special + 2) << "[gMASK]";
  EXPECT_EQ(ids[1], first_special + 4) << "<sop>";
  EXPECT_EQ(ids[2], first_special + 7) << "<|user|>";
  EXPECT_EQ(ids.back(), first_special + 8) << "<|assistant|>";
  const std::string bad = "[1, 2, 99999]";
  r = RunCommand(tokenize + " --tokenizer " + dir_.string() + " --decode", &bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("99999"), std::string::npos) << r.err;
  const std::string bad_chat = R"([{"role":"wizard","content":"x"}])";
  r = RunCommand(tokenize + " --tokenizer " + dir_.string() + " --chat", &bad_chat);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("wizard"), std::string::npos);
}

}  // namespace
}  // namespace ag

namespace ag {
namespace {

// GLM-4.1V from the command line: compile (both programs), run image prompts
// by ids and by chat through a plan file, tokenize chat content lists, the
// vision roofline, and the one-line errors.
TEST_F(Cli, Glm4vImagePrompts) {
  const std::string model = testing::TestDataDir() + "/tiny-glm4v";
  std::ifstream in(model + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  const std::string plan = Path("v.agplan");
  CommandResult c = RunCommand(Compile() + " --model " + model + " -o " + plan);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("vision arena:"), std::string::npos) << c.out;

  for (const nlohmann::json& g : golden["cases"]) {
    std::vector<int32_t> prompt;  // one image token per image
    const std::vector<int32_t> expanded = g["input_ids"].get<std::vector<int32_t>>();
    for (size_t k = 0; k < expanded.size(); ++k) {
      if (expanded[k] != 314 || k == 0 || expanded[k - 1] != 314) prompt.push_back(expanded[k]);
    }
    std::string images;
    for (const auto& name : g["images"]) images += " --image " + model + "/" + name.get<std::string>();
    const std::vector<int32_t> want = g["new_tokens"].get<std::vector<int32_t>>();
    const std::string out = Path("out.json");
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --plan " + plan + images + " --prompt-ids " +
                                 Ids(prompt) + " --max-new-tokens " + std::to_string(want.size()) + " --output-json " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json o = nlohmann::json::parse(testing::ReadWhole(out));
    EXPECT_EQ(o.at("new_tokens").get<std::vector<int32_t>>(), want) << g["title"];
    EXPECT_EQ(o.at("logits").size(), expanded.size() + want.size() - 1) << "rows cover the expanded prompt";
  }
  // --prompt --chat: the images at the front of the user turn (GLM4V_SPEC 5.2); case 1 is rendered so.
  const nlohmann::json& g = golden["cases"][1];
  ASSERT_EQ(g["messages"].size(), 1u);
  if (fs::exists(model + "/tokenizer.json")) {
    const std::string out = Path("chat.json");
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --image " + model + "/screen-300x220.png" +
                                 " --prompt 'Open the chrome browser.' --chat --ignore-eos --max-new-tokens 6"
                                 " --output-json " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(testing::ReadWhole(out)).at("new_tokens"), g["new_tokens"]);
    const std::string tokenize = Tool("AUTOGLM_TOKENIZE", "build/tools/autoglm-tokenize");
    const std::string chat =
        R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.png"}}, {"type": "text", "text": "Open the chrome browser."}]}])";
    CommandResult t = RunCommand(tokenize + " --tokenizer " + model + " --chat --chat-template-content-format string", &chat);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    std::vector<int32_t> want;  // case 1's prompt, one image token
    for (const int32_t id : g["input_ids"].get<std::vector<int32_t>>()) {
      if (id != 314 || want.back() != 314) want.push_back(id);
    }
    EXPECT_EQ(nlohmann::json::parse(t.out).get<std::vector<int32_t>>(), want);
    t = RunCommand(tokenize + " --tokenizer " + model + " --chat", &chat);  // the template's default: parts in place
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_EQ(t.out.find("311, 10, 79"), std::string::npos) << t.out;
  }

  CommandResult roof = RunCommand(Inspect() + " " + plan + " --roofline --image-size 300x220,84x56");
  ASSERT_EQ(roof.exit_code, 0) << roof.err;
  EXPECT_NE(roof.out.find("patch grids (rows x columns) 16x22, 6x8"), std::string::npos) << roof.out;
  EXPECT_NE(roof.out.find("segment_attention"), std::string::npos);

  for (const auto& [args, error] : std::vector<std::pair<std::string, std::string>>{
           {" --prompt-ids 302,314,314", "the prompt has more image tokens (314) than images (1)"},
           {" --prompt-ids 302 --image " + model + "/screen-84x56.png", "2 images for 0 image tokens (314) in the prompt"},
           {" --prompt-ids 314 --image " + model + "/config.json", "/config.json: not a PNG, JPEG or WebP image"},
           {" --prompt-ids 314 --image /nonexistent.png", "/nonexistent.png"},
           {" --prompt x --image " + model + "/screen-84x56.png", "--image needs --chat or --prompt-ids"}}) {
    CommandResult r = RunCommand(RunTool() + " --model " + model + " --image " + model + "/screen-84x56.png" + args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find(error), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace ag
