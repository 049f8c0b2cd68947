// Tensor parallelism on the CPU: every fixture at every degree its heads allow
// (2, 4, 8) runs as that many in-process ranks and must give the single
// rank's logits within 1e-5 (f32 plans), Hugging Face's within the golden
// tolerance, and the same greedy tokens; alone and in batches that mix prefill
// and decode. A rank that fails ends the run with that rank's error.
#include <gtest/gtest.h>

#include <map>

#include "compiler/summary.h"
#include "runtime/tp_backend.h"
#include "runtime/communicator.h"
#include "tests/testing/engine_runner.h"

namespace ag {
namespace {

using testing::GoldenCase;

// The degrees each fixture's shapes allow, stated so that a test cannot
// quietly lose one: tiny-glm and tiny-chatglm have 4 heads over 2 KV heads
// (tp 4 replicates each KV head on two ranks); tiny-glm4 has 6 heads, so 4
// and 8 do not divide them; tiny-glm-mqa has 8 heads over one KV head, which
// every rank holds.
struct FixtureDegrees {
  const char* fixture;
  std::vector<int> degrees;
};
const FixtureDegrees kDegrees[] = {
    {"tiny-glm", {2, 4}}, {"tiny-chatglm", {2, 4}}, {"tiny-glm4", {2}}, {"tiny-glm-mqa", {2, 4, 8}}};

compiler::CompileOptions Options(int tp) {
  compiler::CompileOptions options;
  options.build.max_batch_tokens = 64;
  options.tp = tp;
  return options;
}

testing::FixtureRunner Runner(const std::string& fixture, int tp) {
  return testing::FixtureRunner(fixture, Options(tp),
                                tp == 1 ? std::make_unique<runtime::CpuBackend>()
                                        : runtime::CreateCpuTensorParallel(tp));
}

class TensorParallel : public ::testing::TestWithParam<FixtureDegrees> {};

TEST_P(TensorParallel, EveryDegreeMatchesOneRankAndTransformers) {
  const FixtureDegrees& f = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + f.fixture);
  ASSERT_FALSE(cases.empty());
  const std::vector<testing::Generation> single = Runner(f.fixture, 1).Run(cases);
  for (int tp : f.degrees) {
    testing::FixtureRunner runner = Runner(f.fixture, tp);
    ASSERT_EQ(runner.plan().tp, tp);
    const std::vector<testing::Generation> sharded = runner.Run(cases);
    ASSERT_EQ(sharded.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const size_t rows = cases[i].input_ids.size() + cases[i].new_tokens.size() - 1;
      EXPECT_EQ(sharded[i].tokens, cases[i].new_tokens) << f.fixture << " tp " << tp << " case " << i;
      EXPECT_EQ(sharded[i].tokens, single[i].tokens);
      const double vs_single = testing::MaxAbsDiff(sharded[i].logits, single[i].logits);
      const double vs_golden = testing::MaxAbsDiff(sharded[i].logits, testing::FirstRows(cases[i].logits, rows));
      EXPECT_LE(vs_single, 1e-5) << f.fixture << " tp " << tp << " case " << i;
      EXPECT_LE(vs_golden, 1e-3) << f.fixture << " tp " << tp << " case " << i;
      std::printf("%s tp %d case %zu: max |logit - tp 1| = %.3g, max |logit - golden| = %.3g\n", f.fixture, tp, i,
                  vs_single, vs_golden);
    }
  }
}

TEST_P(TensorParallel, BatchesMixingPrefillAndDecodeMatchOneRank) {
  const FixtureDegrees& f = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + f.fixture);
  compiler::CompileOptions options = Options(1);
  options.build.max_batch_tokens = 7;  // prompts in chunks, next to other sequences' decode tokens
  options.build.kv_block_size = 3;
  testing::FixtureRunner single(f.fixture, options);
  const std::vector<testing::Generation> expected = single.Run(cases, /*stagger=*/true);
  for (int tp : f.degrees) {
    options.tp = tp;
    testing::FixtureRunner runner(f.fixture, options, runtime::CreateCpuTensorParallel(tp));
    const std::vector<testing::Generation> got = runner.Run(cases, /*stagger=*/true);
    EXPECT_GT(runner.mixed_steps(), 0) << "some steps must mix prefill and decode";
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(got[i].tokens, cases[i].new_tokens) << f.fixture << " tp " << tp << " case " << i;
      EXPECT_LE(testing::MaxAbsDiff(got[i].logits, expected[i].logits), 1e-5) << f.fixture << " tp " << tp;
    }
  }
}

TEST_P(TensorParallel, DegreesTheHeadsDoNotAllowAreOneLineErrors) {
  const FixtureDegrees& f = GetParam();
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/" + f.fixture);
  ASSERT_TRUE(config.ok());
  for (int tp : {3, 5, 6, 8}) {
    if (std::find(f.degrees.begin(), f.degrees.end(), tp) != f.degrees.end()) continue;
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, Options(tp));
    ASSERT_FALSE(compiled.ok()) << f.fixture << " tp " << tp;
    const std::string message(compiled.status().message());
    EXPECT_NE(message.find(absl::StrCat("--tp ", tp)), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// A one-rank plan that keeps its collectives (how the gpu suite tests NCCL on
// one GPU) runs alone or over a one-rank group and matches the plain plan.
TEST_P(TensorParallel, OneRankWithCollectivesMatchesThePlainPlan) {
  const FixtureDegrees& f = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + f.fixture);
  const std::vector<testing::Generation> plain = Runner(f.fixture, 1).Run(cases);
  compiler::CompileOptions options = Options(1);
  options.collectives_at_tp1 = true;
  for (bool group : {false, true}) {
    testing::FixtureRunner runner(f.fixture, options,
                                  group ? runtime::CreateCpuTensorParallel(1) : std::make_unique<runtime::CpuBackend>());
    EXPECT_EQ(runner.plan().tp, 1);
    int collectives = 0;
    for (const compiler::PlanStep& step : runner.plan().decoder().steps) collectives += ir::GetOpInfo(step.kernel).Has(ir::kCollective);
    EXPECT_EQ(collectives, 2 * runner.plan().model.num_layers + 1);
    const std::vector<testing::Generation> got = runner.Run(cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(got[i].tokens, plain[i].tokens);
      EXPECT_LE(testing::MaxAbsDiff(got[i].logits, plain[i].logits), 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallel, ::testing::ValuesIn(kDegrees), [](const auto& info) {
  std::string n = info.param.fixture;
  for (char& ch : n) ch = ch == '-' ? '_' : ch;
  return n;
});

// Each piece's rank slices tile it: `parts` distinct, disjoint slices that
// cover the whole range, each read by tp / parts ranks.
TEST(TensorParallelWeights, RankSlicesTileEveryPiece) {
  for (const auto& [fixture, tp] : {std::pair{"tiny-glm", 4}, std::pair{"tiny-chatglm", 2}, std::pair{"tiny-glm-mqa", 8}}) {
    const compiler::Plan plan =
        compiler::Compile(*glm::LoadModelConfig(testing::TestDataDir() + "/" + fixture), Options(tp))->plan;
    int sharded = 0;
    for (const compiler::WeightEntry& w : plan.weights) {
      for (const compiler::WeightPiece& p : w.pieces) {
        std::map<std::pair<int64_t, int64_t>, int> readers;  // (row begin, col begin) -> ranks
        int64_t area = 0;
        for (int r = 0; r < tp; ++r) {
          const compiler::PieceSlice s = compiler::SliceForRank(p, r, tp);
          if (++readers[{s.row_begin, s.col_begin}] == 1) area += (s.row_end - s.row_begin) * (s.col_end - s.col_begin);
        }
        const int64_t row_elems = compiler::SliceForRank(p, 0, tp).row_elems;
        EXPECT_EQ(area, (p.row_end - p.row_begin) * row_elems) << w.name;
        EXPECT_EQ(readers.size(), static_cast<size_t>(p.shard.parts)) << w.name;
        for (const auto& [at, ranks] : readers) EXPECT_EQ(ranks, tp / p.shard.parts) << w.name;
        sharded += p.shard.sharded();
      }
    }
    EXPECT_GT(sharded, 0) << fixture;
  }
}

// GLM-4-9B at tp 4: a rank streams a quarter of the weights it streamed alone
// (a little more: the KV heads are replicated) and holds that plus the whole
// embedding table (NOTES.md: 30 % of the checkpoint's bytes).
TEST(TensorParallelWeights, AtTp4ARankHoldsAboutAQuarterOfGlm4_9B) {
  const char* text = R"({"model_type":"glm","hidden_size":4096,"intermediate_size":13696,"num_hidden_layers":40,
    "num_attention_heads":32,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,"attention_bias":true,
    "max_position_embeddings":131072,"partial_rotary_factor":0.5,"tie_word_embeddings":false,"dtype":"bfloat16"})";
  const glm::ModelConfig config = *glm::ParseModelConfig(text, "config.json");
  compiler::CompileOptions options = Options(1);
  options.build.dtype = ir::DType::kBF16;
  const compiler::PlanSummary one = compiler::Summarize(compiler::Compile(config, options)->plan);
  options.tp = 4;
  const compiler::PlanSummary four = compiler::Summarize(compiler::Compile(config, options)->plan);
  const double streamed = static_cast<double>(four.weight_bytes_read_per_step) / one.weight_bytes_read_per_step;
  const double held = static_cast<double>(four.weight_bytes) / one.weight_bytes;
  std::printf("tp 4: a rank streams %.3f and holds %.3f of the single GPU's weight bytes\n", streamed, held);
  EXPECT_GT(streamed, 0.25);
  EXPECT_LT(streamed, 0.26);
  EXPECT_LT(held, 0.33);
}

// A rank backend that fails its `fail_at`-th Execute: the other ranks are then
// waiting for it in the step's first collective.
class FailingBackend : public runtime::CpuBackend {
 public:
  FailingBackend(runtime::Communicator* comm, int fail_at) : CpuBackend(false, comm), fail_at_(fail_at) {}
  absl::Status Execute(const runtime::StepBatch& batch) override {
    if (++executes_ == fail_at_) return absl::DataLossError("injected failure");
    return CpuBackend::Execute(batch);
  }

 private:
  const int fail_at_;
  int executes_ = 0;
};

TEST(TensorParallelFailure, ARankThatFailsStopsEveryRankWithItsError) {
  const std::string dir = testing::TestDataDir() + "/tiny-glm";
  glm::Checkpoint checkpoint = *glm::Checkpoint::Open(dir);
  runtime::CheckpointWeights weights(checkpoint);
  const compiler::Plan plan = compiler::Compile(*glm::LoadModelConfig(dir), Options(4))->plan;
  for (int failing_rank : {0, 1, 3}) {
    // Through the engine: steps 1 and 2 work, step 3 fails on one rank.
    auto group = std::make_shared<runtime::InProcessGroup>(4);
    std::vector<std::unique_ptr<runtime::Backend>> ranks;
    for (int r = 0; r < 4; ++r) {
      ranks.push_back(r == failing_rank ? std::unique_ptr<runtime::Backend>(new FailingBackend(&group->rank(r), 3))
                                         : std::make_unique<runtime::CpuBackend>(false, &group->rank(r)));
    }
    runtime::MultiRankBackend multi(std::move(ranks), group);
    absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan, multi, weights, {});
    ASSERT_TRUE(engine.ok()) << engine.status();
    runtime::Request request;
    request.prompt = {5, 17, 42, 7};
    request.max_new_tokens = 8;
    ASSERT_TRUE((*engine)->Submit(request).ok());
    absl::Status failed;
    for (int step = 0; step < 8 && failed.ok(); ++step) failed = (*engine)->Step().status();
    ASSERT_FALSE(failed.ok()) << "rank " << failing_rank;
    EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss) << failed;
    EXPECT_NE(failed.message().find(absl::StrCat("rank ", failing_rank, ": injected failure")), std::string::npos)
        << failed;
    // The group stays stopped: the next step fails at once instead of waiting.
    EXPECT_FALSE(multi.Execute(runtime::StepBatch{}).ok());
  }
}

TEST(TensorParallelFailure, APlanRunOnTheWrongNumberOfRanksIsRefused) {
  const std::string dir = testing::TestDataDir() + "/tiny-glm";
  glm::Checkpoint checkpoint = *glm::Checkpoint::Open(dir);
  runtime::CheckpointWeights weights(checkpoint);
  const compiler::Plan plan = compiler::Compile(*glm::LoadModelConfig(dir), Options(2))->plan;
  runtime::CpuBackend alone;
  absl::Status loaded = alone.Load(plan, weights, 8);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.message().find("compiled for tensor parallelism tp=2, but it is run on 1 rank"),
            std::string::npos)
      << loaded;
  auto four = runtime::CreateCpuTensorParallel(4);
  loaded = four->Load(plan, weights, 8);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.message().find("tp=2, but it is run on 4 ranks"), std::string::npos) << loaded;
}

}  // namespace
}  // namespace ag
