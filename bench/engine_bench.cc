// The engine's own time a decode step: Engine::Step with a backend that does no work, so what is
// timed is the host's share of every step -- admission, block accounting, the step's batch
// (positions, slots, block tables), sampling requests with their penalties, advancing each
// sequence -- which the GPU's step waits on (the engine steps synchronously).
//   BM_EngineDecodeStep/B/C/P: B sequences decoding at context C from a GLM-4-9B plan (max
//   batch 64); P = 1 with the phone agent's sampling (temperature 0, frequency_penalty 0.2: every
//   row sampled where the logits are, with its penalty entries), 0 plain greedy (the argmax's ids).
//   P = 2: JSON mode (response_format json_object), greedy (P = 3: at temperature 1, OpenAI's
//   default): each row's mask goes down with its sampling request and the device picks (the null
//   backend: the best allowed id); with AUTOGLM_MASK_WHERE_LOGITS=0 each row comes back instead (the
//   null backend writes it, as the CUDA backend widens bf16), is masked and chosen on the host; the
//   model writes one key's string for ever, a state whose mask is cached (needs GLM-4's tokenizer:
//   AUTOGLM_GLM4_TOKENIZER, default ../shared/tokenizers/glm4; skipped without it).
//   /S = 1: prompt-lookup drafts on (4 a step, n-grams of 1-3): the proposer's scan of each
//   sequence's whole context every step, and the draft rows' sampling requests (the null backend's
//   ids rarely equal a draft, so this is the cost of looking, the case where it buys nothing).
// Run: build/bench/engine_bench. Not the backend's own host work (input uploads, graph launch).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/glm4_9b.h"
#include "compiler/driver.h"
#include "models/glm/config.h"
#include "models/glm/tokenizer.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "runtime/json_constraint.h"

namespace ag::bench {
namespace {

// Runs nothing; answers every token read with an id that depends on the row and the call, never an
// end-of-sequence id (so that sequences keep decoding and penalties keep growing).
class NullBackend : public runtime::Backend {
 public:
  absl::string_view name() const override { return "null"; }
  absl::Status Load(const compiler::Plan&, const runtime::WeightSource&, int64_t) override {
    return absl::OkStatus();
  }
  absl::Status Execute(const runtime::StepBatch&) override {
    ++calls_;
    return absl::OkStatus();
  }
  absl::Status RunProgram(absl::string_view, const runtime::StepBatch&, absl::string_view,
                          UninitializedVector<float>*) override {
    return absl::UnimplementedError("no vision program here");
  }
  absl::Status ReadLogits(int64_t, std::vector<float>*) override {
    return absl::UnimplementedError("no logits here");
  }
  // Rows favouring 'a' (a JSON string's letter: JSON mode stays inside one), the rest a ramp: each
  // copied from one made once, as the CUDA backend widens a row from its pinned staging buffer.
  absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) override {
    out->resize(static_cast<size_t>(rows * vocab_));
    for (const int64_t r : wanted) std::copy(row_.begin(), row_.end(), out->begin() + r * vocab_);
    return absl::OkStatus();
  }
  void set_vocab(int64_t vocab) {
    vocab_ = vocab;
    row_.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) row_[static_cast<size_t>(i)] = static_cast<float>(i % 97) * 0.01f;
    row_['a'] = 10.0f;
    row_['{'] = 9.0f;
    row_['"'] = 8.0f;
  }
  absl::Status ReadNextTokens(int64_t rows, std::vector<int32_t>* out) override {
    out->resize(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) (*out)[static_cast<size_t>(r)] = Token(r);
    return absl::OkStatus();
  }
  // A masked row (a constrained sequence's) picks an id mixed from the row and the call where
  // allowed (inside a JSON string most are: it stays one state, and drafts are rarely taken, as when
  // sampled), else the first id allowed (GLM-4's '{' and '"' are its ids 90 and 1).
  absl::Status SampleRows(const std::vector<runtime::RowSampling>& rows, std::vector<int32_t>* out) override {
    out->resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::span<const uint64_t> allowed = rows[i].allowed;
      if (allowed.empty()) {
        (*out)[i] = Token(rows[i].row);
        continue;
      }
      int32_t pick = runtime::IsAllowed(allowed, Mixed(rows[i].row)) ? Mixed(rows[i].row) : -1;
      for (size_t w = 0; pick < 0 && w < allowed.size(); ++w) {
        if (allowed[w] != 0) pick = static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(allowed[w])));
      }
      (*out)[i] = std::max(pick, 0);  // nothing allowed (past a refused draft): a row never used
    }
    return absl::OkStatus();
  }
  bool SamplesWhereLogitsAre() const override { return true; }
  absl::Status RowLogprobs(const std::vector<runtime::LogprobRequest>&, std::vector<runtime::TokenLogprobs>*) override {
    return absl::UnimplementedError("no logprobs here");
  }
  absl::StatusOr<std::vector<double>> TimeExecute(const runtime::StepBatch&, int, int) override {
    return absl::UnimplementedError("nothing to time");
  }
  absl::StatusOr<std::vector<double>> ProfileExecute(const runtime::StepBatch&) override {
    return absl::UnimplementedError("nothing to profile");
  }

 private:
  // Ids 1000-5999: a few thousand distinct ids over a long decode, as text has.
  int32_t Token(int64_t row) const { return static_cast<int32_t>(1000 + (row * 7919 + calls_ * 104729) % 5000); }
  // An id mixed from the row and the call (no period the prompt-lookup drafts could follow).
  int32_t Mixed(int64_t row) const {
    uint64_t x = static_cast<uint64_t>(row + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(calls_) * 0xC2B2AE3D27D4EB4Full;
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
    return static_cast<int32_t>(1000 + (x ^ (x >> 29)) % 5000);
  }
  int64_t calls_ = 0;
  int64_t vocab_ = 0;
  std::vector<float> row_;
};

class NoWeights : public runtime::WeightSource {
 public:
  absl::Status Fill(const compiler::WeightEntry&, runtime::RankInfo, float*) const override {
    return absl::OkStatus();
  }
};

constexpr int64_t kSteps = 2000;  // decode steps timed, at most (each run's iterations)

void BM_EngineDecodeStep(benchmark::State& state) {
  const int64_t batch = state.range(0), context = state.range(1);
  const bool agent_sampling = state.range(2) == 1, json_mode = state.range(2) >= 2, speculate = state.range(3) == 1;
  std::shared_ptr<runtime::JsonVocabulary> json_vocabulary;
  if (json_mode) {
    const char* dir = std::getenv("AUTOGLM_GLM4_TOKENIZER");
    absl::StatusOr<std::unique_ptr<glm::Tokenizer>> tokenizer = glm::Tokenizer::Load(dir != nullptr ? dir : "../shared/tokenizers/glm4");
    if (!tokenizer.ok()) {
      state.SkipWithError(tokenizer.status().ToString().c_str());
      return;
    }
    json_vocabulary = *runtime::JsonVocabulary::Build(**tokenizer);
  }
  absl::StatusOr<glm::ModelConfig> config = glm::ParseModelConfig(kGlm4_9BConfig, "GLM-4-9B");
  compiler::CompileOptions options;
  options.build.dtype = ir::DType::kBF16;
  options.build.max_batch_tokens = 512;
  options.build.max_seqs = 64;
  absl::StatusOr<compiler::CompileResult> compiled =
      config.ok() ? compiler::Compile(*config, options) : absl::StatusOr<compiler::CompileResult>(config.status());
  if (!compiled.ok()) {
    state.SkipWithError(compiled.status().ToString().c_str());
    return;
  }
  NullBackend backend;
  backend.set_vocab(compiled->plan.model.vocab_size);
  NoWeights weights;
  runtime::EngineOptions engine_options;
  engine_options.kv_cache_tokens = batch * (context + 2 * kSteps + 64);
  if (speculate) engine_options.speculative = {4, 1, 3, 0};
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::Create(compiled->plan, backend, weights, engine_options);
  if (!engine.ok()) {
    state.SkipWithError(engine.status().ToString().c_str());
    return;
  }
  for (int64_t s = 0; s < batch; ++s) {
    runtime::Request r;
    r.prompt.resize(static_cast<size_t>(context));
    for (int64_t i = 0; i < context; ++i) {
      r.prompt[static_cast<size_t>(i)] = static_cast<int32_t>(100 + (s * 31 + i) % 90000);
    }
    r.max_new_tokens = 2 * kSteps;  // past the timed steps, however staggered the prefills left the sequences
    if (agent_sampling) r.sampling.frequency_penalty = 0.2f;
    if (json_mode) {
      r.sampling.temperature = state.range(2) == 3 ? 1.0f : 0.0f;
      r.sampling.vocab_limit = json_vocabulary->vocab();
      r.constraint = [json_vocabulary] { return json_vocabulary->NewConstraint(); };
    }
    if (absl::StatusOr<int> id = (*engine)->Submit(std::move(r)); !id.ok()) {
      state.SkipWithError(id.status().ToString().c_str());
      return;
    }
  }
  // The prompts' prefill (its steps are not timed), then one decode step a sequence each iteration.
  while ((*engine)->last_step().sequences < batch || (*engine)->last_step().prefill_tokens > 0) {
    if (absl::StatusOr<std::vector<runtime::TokenEvent>> e = (*engine)->Step(); !e.ok()) {
      state.SkipWithError(e.status().ToString().c_str());
      return;
    }
  }
  for (auto _ : state) {
    absl::StatusOr<std::vector<runtime::TokenEvent>> events = (*engine)->Step();
    // A step gives each sequence a token (more where a draft happened to be kept); fewer: one finished.
    if (!events.ok() || static_cast<int64_t>(events->size()) < batch ||
        (!speculate && static_cast<int64_t>(events->size()) != batch)) {
      const std::string why =
          events.ok() ? absl::StrCat("a decode step gave ", events->size(), " tokens for ", batch, " sequences (",
                                     (*engine)->num_running(), " running, ", (*engine)->num_waiting(), " waiting, ",
                                     (*engine)->preemptions(), " preemptions)")
                      : events.status().ToString();
      state.SkipWithError(why.c_str());
      return;
    }
    benchmark::DoNotOptimize(events);
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_EngineDecodeStep)
    ->ArgsProduct({{1, 8, 64}, {512, 4096}, {0, 1, 2, 3}, {0, 1}})
    ->Iterations(kSteps)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ag::bench

BENCHMARK_MAIN();
