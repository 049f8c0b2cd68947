// Test helper: tiny-glm ready for engine tests — its checkpoint's weights and
// a plan compiled with 4-token KV blocks, so that a few tokens span blocks.
#ifndef AUTOGLM_TESTS_TESTING_TINY_GLM_H_
#define AUTOGLM_TESTS_TESTING_TINY_GLM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/driver.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "runtime/weights.h"
#include "tests/testing/golden.h"

namespace ag::testing {

struct TinyGlm {
  explicit TinyGlm(int64_t max_seqs = 16) {
    const std::string dir = TestDataDir() + "/tiny-glm";
    checkpoint = std::make_unique<glm::Checkpoint>(*glm::Checkpoint::Open(dir));
    weights = std::make_unique<runtime::CheckpointWeights>(*checkpoint);
    compiler::CompileOptions options;
    options.build.kv_block_size = 4;
    options.build.max_seqs = max_seqs;
    plan = compiler::Compile(*glm::LoadModelConfig(dir), options)->plan;
  }

  std::unique_ptr<glm::Checkpoint> checkpoint;
  std::unique_ptr<runtime::CheckpointWeights> weights;
  compiler::Plan plan;
};

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_TINY_GLM_H_
