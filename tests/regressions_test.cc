// The fuzzers' regression corpora (tests/fuzz/corpus/TARGET/*) through the
// release command-line tools: every file is put where the tool reads that
// kind of input, and the tool must answer with exit status 1 and one error
// line — never a crash, an abort or a hang. Chat inputs may also be valid
// (some are there for speed): those must exit 0.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/plan_file.h"
#include "tests/testing/command.h"
#include "tests/testing/golden.h"
#include "tests/testing/vocab.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;
using testing::Tool;

std::string CorpusDir() { return testing::TestDataDir() + "/../fuzz/corpus"; }

class Regressions : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("autoglm_regressions_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A fresh writable copy of tiny-glm.
  fs::path ModelCopy() {
    const fs::path model = dir_ / "model";
    fs::remove_all(model);
    fs::copy(testing::TestDataDir() + "/tiny-glm", model);
    for (const auto& e : fs::directory_iterator(model)) {
      fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write);
    }
    return model;
  }
  // Runs `command` (bounded to 60 s) and checks the answer's shape.
  void Expect(const std::string& command, const fs::path& input, bool may_succeed = false) {
    SCOPED_TRACE(input.string());
    const CommandResult r = RunCommand("timeout 60 " + command);
    EXPECT_FALSE(r.signaled) << r.err;
    EXPECT_NE(r.exit_code, 124) << "hung";
    if (may_succeed && r.exit_code == 0) return;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "escape reached the terminal";
  }
  std::vector<fs::path> Files(const std::string& target) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(CorpusDir() + "/" + target)) files.push_back(e.path());
    EXPECT_FALSE(files.empty()) << target;
    return files;
  }

  fs::path dir_;
  const std::string run_ = Tool("AUTOGLM_RUN", "build/tools/autoglm-run");
  const std::string inspect_ = Tool("AUTOGLM_INSPECT", "build/tools/autoglm-inspect");
  const std::string tokenize_ = Tool("AUTOGLM_TOKENIZE", "build/tools/autoglm-tokenize");
};

TEST_F(Regressions, CheckpointFilesAndConfigs) {
  const struct {
    const char* target;
    const char* file;
  } kinds[] = {{"safetensors", "model.safetensors"}, {"index", "model.safetensors.index.json"},
               {"config", "config.json"}};
  for (const auto& kind : kinds) {
    for (const fs::path& input : Files(kind.target)) {
      const fs::path model = ModelCopy();
      fs::copy_file(input, model / kind.file, fs::copy_options::overwrite_existing);
      Expect(run_ + " --model " + model.string() + " --prompt-ids 1,2 --max-new-tokens 2", input);
    }
  }
}

TEST_F(Regressions, PlanFiles) {
  for (const fs::path& input : Files("plan")) {
    const fs::path plan = dir_ / "x.agplan";
    std::ofstream(plan, std::ios::binary) << compiler::SealPlanPayload(testing::ReadWhole(input));  // the corpus holds payloads
    // A plan whose header facts disagree with its config is a valid plan to inspect, never to run.
    const bool facts_only = input.filename() == "positions-4096" || input.filename() == "eos-list-gains-an-id";
    Expect(inspect_ + " " + plan.string(), input, /*may_succeed=*/facts_only);
    Expect(run_ + " --model " + testing::TestDataDir() + "/tiny-glm --plan " + plan.string() + " --prompt-ids 1",
           input);
  }
}

TEST_F(Regressions, TokenizerFilesAndChatInput) {
  const fs::path tok = dir_ / "tok";
  for (const auto& [target, file] : {std::pair{"tiktoken", "tokenizer.model"}, {"tokenizer_json", "tokenizer.json"}}) {
    for (const fs::path& input : Files(target)) {
      fs::remove_all(tok);
      fs::create_directories(tok);
      fs::copy_file(input, tok / file);
      Expect("echo hello | " + tokenize_ + " --tokenizer " + tok.string(), input);
    }
  }
  fs::remove_all(tok);
  fs::create_directories(tok);
  testing::WriteTiktoken((tok / "tokenizer.model").string(), testing::SyntheticRanks());
  for (const fs::path& input : Files("chat")) {
    Expect(tokenize_ + " --tokenizer " + tok.string() + " --chat < " + input.string(), input, true);
    Expect(tokenize_ + " --tokenizer " + tok.string() + " --allow-special < " + input.string(), input, true);
  }
}

// The schema part (up to the NUL) of each json_schema input as autoglm-run's --json-schema file: a
// schema that compiles answers, any other is a one-line error.
TEST_F(Regressions, JsonSchemas) {
  for (const fs::path& input : Files("json_schema")) {
    const std::string whole = testing::ReadWhole(input);
    const fs::path schema = dir_ / "schema.json";
    std::ofstream(schema, std::ios::binary) << whole.substr(0, whole.find('\0'));
    Expect(run_ + " --model " + testing::TestDataDir() + "/tiny-glm4 --prompt x --max-new-tokens 8 --json-schema " +
               schema.string(),
           input, /*may_succeed=*/true);
  }
}

}  // namespace
}  // namespace ag
