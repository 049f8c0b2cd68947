// Fuzz target: model.safetensors.index.json beside two valid shards.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "models/glm/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string ShardDir() {
  namespace fs = std::filesystem;
  const fs::path dir = ag::fuzz::ScratchDir() / "sharded";
  if (!fs::exists(dir)) {
    fs::create_directories(dir);
    // The fixture's file under two shard names: each tensor appears in both.
    const std::string source = ag::fuzz::FixtureDir("tiny-glm") + "/model.safetensors";
    fs::copy_file(source, dir / "model-00001-of-00002.safetensors");
    fs::copy_file(source, dir / "model-00002-of-00002.safetensors");
  }
  return dir.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = ShardDir();
  std::ofstream out(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  absl::StatusOr<ag::glm::Checkpoint> ckpt = ag::glm::Checkpoint::Open(dir);
  if (ckpt.ok()) (void)ckpt->Names();
  return 0;
}
