// Fuzz target: config.json, then compiling the model it describes (a hostile
// config must be an error or a valid plan, never a crash or a hang).
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/driver.h"
#include "models/glm/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ag::glm::ModelConfig> config = ag::glm::ParseModelConfig(text, "config.json");
  if (!config.ok()) return 0;
  (void)ag::glm::ConfigFingerprint(*config);
  if (config->num_layers > 8) return 0;  // compile time grows with layers, not with sizes
  ag::compiler::CompileOptions options;
  options.build.max_batch_tokens = 8;
  options.build.max_seqs = 2;
  (void)ag::compiler::Compile(*config, options);
  return 0;
}
