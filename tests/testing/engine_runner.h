// Test helper: compile a fixture and run prompts through the engine on the CPU.
#ifndef AUTOGLM_TESTS_TESTING_ENGINE_RUNNER_H_
#define AUTOGLM_TESTS_TESTING_ENGINE_RUNNER_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/driver.h"
#include "models/glm/config.h"
#include "models/glm/safetensors.h"
#include "runtime/backend.h"
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/weights.h"
#include "tests/testing/golden.h"

namespace ag::testing {

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// A fixture under the test data directory by name, or any model directory by absolute path.
inline std::string FixtureDir(const std::string& fixture) {
  return !fixture.empty() && fixture[0] == '/' ? fixture : TestDataDir() + "/" + fixture;
}

// A fixture's model, compiled with `options`, ready to run prompts.
class FixtureRunner {
 public:
  FixtureRunner(const std::string& fixture, const compiler::CompileOptions& options,
                std::unique_ptr<runtime::Backend> backend = std::make_unique<runtime::CpuBackend>())
      : dir_(FixtureDir(fixture)), backend_(std::move(backend)) {
    absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(dir_);
    EXPECT_TRUE(config.ok()) << config.status();
    absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(dir_);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::make_unique<glm::Checkpoint>(std::move(*ckpt));
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    plan_ = compiled->plan;
  }
  explicit FixtureRunner(const std::string& fixture, compiler::Plan plan,
                         std::unique_ptr<runtime::Backend> backend = std::make_unique<runtime::CpuBackend>())
      : dir_(FixtureDir(fixture)), backend_(std::move(backend)), plan_(std::move(plan)) {
    absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(dir_);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::make_unique<glm::Checkpoint>(std::move(*ckpt));
  }

  const compiler::Plan& plan() const { return plan_; }
  // The engine options of the next Run (speculative drafts, a cache size).
  void set_engine_options(const runtime::EngineOptions& options) { engine_options_ = options; }

  // Runs the cases as concurrent requests; `stagger` submits request i only
  // after i engine steps, so steps mix decode tokens with prefill chunks.
  std::vector<Generation> Run(const std::vector<GoldenCase>& cases, bool stagger = false) {
    weights_ = std::make_unique<runtime::CheckpointWeights>(*checkpoint_);
    absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan_, *backend_, *weights_, engine_options_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<int> ids;
    size_t submitted = 0;
    steps_ = 0;
    auto submit = [&](const GoldenCase& c) {
      runtime::Request r;
      r.prompt = c.input_ids;
      r.max_new_tokens = static_cast<int64_t>(c.new_tokens.size());
      r.prompt_logits = r.keep_logits = true;
      r.stop_on_eos = false;
      absl::StatusOr<int> id = (*engine)->Submit(r);
      EXPECT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    };
    if (!stagger) {
      for (const GoldenCase& c : cases) submit(c);
      submitted = cases.size();
    }
    while (submitted < cases.size() || (*engine)->HasWork()) {
      if (stagger && submitted < cases.size()) submit(cases[submitted++]);
      absl::StatusOr<std::vector<runtime::TokenEvent>> events = (*engine)->Step();
      EXPECT_TRUE(events.ok()) << events.status();
      if (!events.ok()) break;
      ++steps_;
      max_step_seqs_ = std::max(max_step_seqs_, (*engine)->last_step().sequences);
      mixed_steps_ += (*engine)->last_step().prefill_tokens > 0 && (*engine)->last_step().decode_tokens > 0;
    }
    draft_tokens_ = (*engine)->spec_draft_tokens();
    std::vector<Generation> out;
    for (int id : ids) out.push_back({(*engine)->new_tokens(id), (*engine)->logits(id)});
    return out;
  }

  int64_t max_step_seqs() const { return max_step_seqs_; }
  int64_t steps() const { return steps_; }  // engine steps of the last Run
  int64_t mixed_steps() const { return mixed_steps_; }
  int64_t draft_tokens() const { return draft_tokens_; }  // speculative drafts the last Run ran

 private:
  std::string dir_;
  std::unique_ptr<runtime::Backend> backend_;
  std::unique_ptr<glm::Checkpoint> checkpoint_;
  std::unique_ptr<runtime::CheckpointWeights> weights_;
  compiler::Plan plan_;
  runtime::EngineOptions engine_options_;
  int64_t draft_tokens_ = 0;
  int64_t max_step_seqs_ = 0;
  int64_t mixed_steps_ = 0;
  int64_t steps_ = 0;
};

// The largest |a - b| over two row lists, and the row it is in (infinite when the shapes differ).
struct WorstDiff {
  double err = 0.0;
  size_t row = 0;
};
inline WorstDiff MaxAbsDiffRow(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  WorstDiff worst{a.size() == b.size() ? 0.0 : INFINITY, 0};
  for (size_t r = 0; r < a.size() && r < b.size(); ++r) {
    if (a[r].size() != b[r].size()) return {INFINITY, r};
    for (size_t i = 0; i < a[r].size(); ++i) {
      const double d = std::fabs(double{a[r][i]} - double{b[r][i]});
      if (d > worst.err) worst = {d, r};
    }
  }
  return worst;
}
inline double MaxAbsDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  return MaxAbsDiffRow(a, b).err;
}

// The first `rows` rows of golden logits.
inline std::vector<std::vector<float>> FirstRows(const std::vector<std::vector<float>>& rows, size_t n) {
  return std::vector<std::vector<float>>(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(std::min(n, rows.size())));
}

// The largest |difference| over every case's prompt rows (teacher-forced: both sides computed them
// from the same tokens, whatever they generated after).
inline double WorstPromptDiff(const std::vector<Generation>& got, const std::vector<GoldenCase>& cases) {
  double worst = 0;
  for (size_t i = 0; i < cases.size() && i < got.size(); ++i) {
    const size_t prompt = cases[i].input_ids.size();
    worst = std::max(worst, MaxAbsDiff(FirstRows(got[i].logits, prompt), FirstRows(cases[i].logits, prompt)));
  }
  return worst;
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_ENGINE_RUNNER_H_
