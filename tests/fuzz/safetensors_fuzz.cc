// Fuzz target: one safetensors file (header and data), as Checkpoint::Open reads it.
#include <cstddef>
#include <cstdint>

#include "models/glm/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ag::fuzz::WriteInput("model.safetensors", data, size);
  absl::StatusOr<ag::glm::Checkpoint> ckpt = ag::glm::Checkpoint::Open(ag::fuzz::ScratchDir().string());
  if (!ckpt.ok()) return 0;
  // Every view the header admits must be readable in full.
  float sink = 0;
  for (const std::string& name : ckpt->Names()) {
    const ag::glm::TensorView* view = *ckpt->Find(name);
    for (int64_t i = 0; i < view->bytes; ++i) sink += static_cast<float>(view->data[i]);
  }
  return sink == -1.0f ? 1 : 0;
}
