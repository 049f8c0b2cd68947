// Helpers for the libFuzzer targets: inputs as files (the loaders read
// paths), a scratch directory per process, and the fixture checkpoints.
#ifndef AUTOGLM_TESTS_FUZZ_FUZZ_UTIL_H_
#define AUTOGLM_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ag::fuzz {

// A directory for this fuzzing process, removed at exit.
inline const std::filesystem::path& ScratchDir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("autoglm_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(ScratchDir()); });
    return d;
  }();
  return dir;
}

// Writes the input to `name` in the scratch directory; returns its path.
inline std::string WriteInput(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (ScratchDir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// The fixtures folder (AUTOGLM_TEST_DATA, else tests/data from the source tree).
inline std::string FixtureDir(const char* fixture) {
  const char* dir = std::getenv("AUTOGLM_TEST_DATA");
  return std::string(dir != nullptr ? dir : AUTOGLM_SOURCE_ROOT "/tests/data") + "/" + fixture;
}

}  // namespace ag::fuzz

#endif  // AUTOGLM_TESTS_FUZZ_FUZZ_UTIL_H_
