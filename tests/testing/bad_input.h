// Test fixture for bad input through the command line: a writable copy of a
// fixture checkpoint, helpers to rewrite its files, and the failure shape
// every bad input must have (exit status 1, one stderr line naming the fault,
// no crash).
#ifndef AUTOGLM_TESTS_TESTING_BAD_INPUT_H_
#define AUTOGLM_TESTS_TESTING_BAD_INPUT_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/command.h"
#include "tests/testing/golden.h"
#include "tests/testing/safetensors_writer.h"

namespace ag::testing {

namespace fs = std::filesystem;

inline std::string RunTool() { return Tool("AUTOGLM_RUN", "build/tools/autoglm-run"); }

// Exit status 1, one line on stderr containing `expected`, no signal.
inline void ExpectOneLineError(const CommandResult& r, const std::string& expected) {
  EXPECT_FALSE(r.signaled) << "crashed: " << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.err;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("autoglm_bad_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::copy(TestDataDir() + "/tiny-glm", dir_);
    for (const auto& entry : fs::directory_iterator(dir_)) {
      fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Replaces the copy with another fixture's.
  void UseFixture(const std::string& fixture) {
    fs::remove_all(dir_);
    fs::copy(TestDataDir() + "/" + fixture, dir_);
    for (const auto& entry : fs::directory_iterator(dir_)) {
      fs::permissions(entry.path(), fs::perms::owner_read | fs::perms::owner_write);
    }
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs autoglm-run on the copied model and checks the failure shape.
  void ExpectError(const std::string& args, const std::string& expected) {
    ExpectOneLineError(RunCommand(RunTool() + " --model " + dir_.string() + " " + args), expected);
  }
  void ExpectModelError(const std::string& expected) { ExpectError("--prompt-ids 1,2,3 --max-new-tokens 2", expected); }

  // The fixture's safetensors header and data, for rewriting.
  void ReadWeights(nlohmann::json* header, std::string* data) {
    std::ifstream in(Path("model.safetensors"), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string bytes = s.str();
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    *header = nlohmann::json::parse(bytes.substr(8, len));
    *data = bytes.substr(8 + len);
  }
  void WriteWeights(const nlohmann::json& header, const std::string& data, int64_t declared_len = -1) {
    WriteRaw(Path("model.safetensors"), header.dump(), data, declared_len);
  }

  fs::path dir_;
};

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_BAD_INPUT_H_
