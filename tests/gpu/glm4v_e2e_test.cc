// GLM-4.1V end to end on the GPU: tiny-glm4v's image prompts through the
// engine (the vision program on the CUDA backend, its rows scattered into the
// decoder's embeddings, M-RoPE positions) in bf16, against transformers'
// fp32 logits and the CPU running the same bf16 plan. Tolerances as
// e2e_test.cc explains: 3 % relative to golden, 1 % to the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compiler/driver.h"
#include "models/glm/safetensors.h"
#include "models/glm4v/config.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/engine.h"
#include "runtime/weights.h"
#include "tests/gpu/gpu_testing.h"
#include "tests/testing/glm4v_cases.h"

namespace ag {
namespace {

// Every case's logits rows (prompt and new tokens) and tokens, all cases in one batch.
std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> RunAll(const compiler::Plan& plan,
                                                                         runtime::Backend& backend) {
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(testing::Glm4vDir());
  EXPECT_TRUE(ckpt.ok());
  runtime::CheckpointWeights weights(*ckpt);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan, backend, weights, {});
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<int> ids;
  for (const testing::Case& c : testing::Cases()) {
    absl::StatusOr<int> id = (*engine)->Submit(testing::RequestFor(c));
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  while ((*engine)->HasWork()) {
    absl::Status s = (*engine)->Step().status();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
  }
  std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> out;
  for (const int id : ids) {
    std::vector<float> flat;
    for (const std::vector<float>& row : (*engine)->logits(id)) flat.insert(flat.end(), row.begin(), row.end());
    out.emplace_back((*engine)->new_tokens(id), std::move(flat));
  }
  return out;
}

TEST(GpuGlm4v, ImagePromptsInBf16MatchGoldenAndTheCpu) {
  SKIP_WITHOUT_GPU();
  const glm4v::Config config = *glm4v::LoadConfig(testing::Glm4vDir());
  compiler::CompileOptions options;
  options.build.dtype = ir::DType::kBF16;
  options.build.max_batch_tokens = 128;  // the cases' prompts take several chunks, some cutting through images
  const compiler::Plan plan = compiler::Compile(config, options)->plan;
  runtime::CpuBackend cpu_backend;
  std::unique_ptr<runtime::Backend> gpu_backend = std::move(*runtime::CreateCudaBackend({}));
  const auto gpu = RunAll(plan, *gpu_backend);
  const auto cpu = RunAll(plan, cpu_backend);
  for (size_t i = 0; i < testing::Cases().size(); ++i) {
    const testing::Case& c = testing::Cases()[i];
    // The prompt rows: no token chosen yet, so no divergence to excuse.
    const size_t rows = c.expanded.size(), vocab = c.logits[0].size();
    std::vector<float> want;
    for (size_t r = 0; r < rows; ++r) want.insert(want.end(), c.logits[r].begin(), c.logits[r].end());
    const std::vector<float> got(gpu[i].second.begin(), gpu[i].second.begin() + rows * vocab);
    const std::vector<float> emulated(cpu[i].second.begin(), cpu[i].second.begin() + rows * vocab);
    // As e2e_test.cc's ExpectMatchesGolden: the CPU's emulation of the same bf16 plan measures what
    // bf16 alone costs; the GPU must be about as close to transformers, and near the CPU as two
    // independent errors of those sizes are to each other.
    const double golden_err = testing::RelativeError(got, want), cpu_err = testing::RelativeError(got, emulated),
                 emulation_err = testing::RelativeError(emulated, want);
    EXPECT_LE(golden_err, 1.3 * emulation_err + 3e-3) << c.title;
    EXPECT_LE(cpu_err, std::max(1e-2, 1.25 * std::hypot(golden_err, emulation_err))) << c.title;
    std::printf("%s: gpu bf16 prompt logits, relative error %.4f to golden (the cpu's %.4f), %.4f to the cpu; tokens %s\n",
                c.title.c_str(), golden_err, emulation_err, cpu_err, gpu[i].first == c.new_tokens ? "as golden" : "differ");
  }
}

}  // namespace
}  // namespace ag
