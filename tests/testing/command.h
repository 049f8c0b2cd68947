// Test helper: run a command line, capture its output and exit status.
#ifndef AUTOGLM_TESTS_TESTING_COMMAND_H_
#define AUTOGLM_TESTS_TESTING_COMMAND_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ag::testing {

struct CommandResult {
  int exit_code = -1;
  bool signaled = false;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` through the shell, with `input` on stdin when given.
inline CommandResult RunCommand(const std::string& command, const std::string* input = nullptr) {
  namespace fs = std::filesystem;
  static int counter = 0;
  const std::string base = (fs::temp_directory_path() / ("autoglm_cmd_" + std::to_string(::getpid()) + "_" +
                                                         std::to_string(counter++)))
                               .string();
  std::string line = command + " >" + base + ".out 2>" + base + ".err";
  if (input != nullptr) {
    std::ofstream(base + ".in", std::ios::binary) << *input;
    line += " <" + base + ".in";
  }
  const int status = std::system(line.c_str());
  CommandResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.signaled = WIFSIGNALED(status);
  r.out = ReadWhole(base + ".out");
  r.err = ReadWhole(base + ".err");
  for (const char* ext : {".out", ".err", ".in"}) fs::remove(base + ext);
  return r;
}

inline std::string Tool(const char* env, const char* fallback) {
  const char* p = std::getenv(env);
  return p != nullptr ? p : fallback;
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_COMMAND_H_
