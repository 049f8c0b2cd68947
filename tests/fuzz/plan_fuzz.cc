// Fuzz target: a plan file's payload behind a correct header and checksum, so
// that mutations reach validation. A plan that validates is checked against
// the fixture config it was compiled from (found by its fingerprint, as a
// real run would refuse any other), so mutated model facts reach that check
// too; then, when small enough, it runs for two steps on the CPU (a sharded
// plan as that many in-process ranks): validation must have made that safe.
#include <cstddef>
#include <cstdint>
#include <string>

#include <cstdlib>
#include <vector>

#include "compiler/driver.h"
#include "compiler/plan.h"
#include "compiler/plan_file.h"
#include "models/glm/config.h"
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/tp_backend.h"
#include "runtime/weights.h"

namespace {

// The fixtures' configs (AUTOGLM_TEST_DATA), the ones the seeds were compiled from.
const std::vector<ag::glm::ModelConfig>& FixtureConfigs() {
  static const std::vector<ag::glm::ModelConfig> configs = [] {
    std::vector<ag::glm::ModelConfig> out;
    const char* dir = std::getenv("AUTOGLM_TEST_DATA");
    const std::string data = dir != nullptr ? dir : "tests/data";
    for (const char* fixture : {"tiny-glm", "tiny-glm4", "tiny-chatglm", "tiny-glm-mqa"}) {
      absl::StatusOr<ag::glm::ModelConfig> c = ag::glm::LoadModelConfig(data + "/" + fixture);
      if (c.ok()) out.push_back(*c);
    }
    return out;
  }();
  return configs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<ag::compiler::Plan> plan = ag::compiler::DeserializePlan(
      ag::compiler::SealPlanPayload({reinterpret_cast<const char*>(data), size}), "fuzz.agplan");
  if (!plan.ok()) return 0;
  const ag::glm::ModelConfig* config = nullptr;
  for (const ag::glm::ModelConfig& c : FixtureConfigs()) {
    if (ag::glm::ConfigFingerprint(c) == plan->model.config) config = &c;
  }
  if (config == nullptr || !ag::compiler::CheckPlanAgainstModel(*plan, *config, nullptr).ok()) return 0;
  int64_t weights = 0;
  for (const ag::compiler::WeightEntry& w : plan->weights) weights += w.NumElements();
  int64_t arena = 0;
  for (const ag::compiler::Program& p : plan->programs) arena += p.arena_bytes;
  if (arena > (int64_t{64} << 20) || weights > (int64_t{16} << 20)) return 0;
  if (plan->tp > 4) return 0;
  std::unique_ptr<ag::runtime::Backend> backend =
      plan->tp == 1 ? std::make_unique<ag::runtime::CpuBackend>() : ag::runtime::CreateCpuTensorParallel(plan->tp);
  ag::runtime::RandomWeights random(7);
  ag::runtime::EngineOptions options;
  options.kv_cache_tokens = 64;
  options.max_context = std::min<int64_t>(plan->model.max_position_embeddings, 64);
  absl::StatusOr<std::unique_ptr<ag::runtime::Engine>> engine =
      ag::runtime::Engine::Create(*plan, *backend, random, options);
  if (!engine.ok()) return 0;
  ag::runtime::Request request;
  request.prompt = {0, static_cast<int32_t>(plan->model.vocab_size - 1)};
  request.max_new_tokens = 2;
  request.stop_on_eos = false;
  if (!(*engine)->Submit(request).ok()) return 0;
  while ((*engine)->HasWork()) {
    if (!(*engine)->Step().ok()) break;
  }
  return 0;
}
