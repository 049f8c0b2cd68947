// GLM-4.1V prompts with images through the engine against transformers
// (tests/data/tiny-glm4v): decoded and preprocessed images, expanded image
// tokens, M-RoPE positions, image rows in the embeddings, every logits row and
// the greedy tokens — in one batch, in small prefill chunks that cut through
// images, under tensor parallelism, from a plan file, and with the encoder and
// prefix caches serving a screenshot sent again.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "compiler/driver.h"
#include "compiler/plan_file.h"
#include "image/image.h"
#include "image/preprocess.h"
#include "kernels/ref/quant.h"
#include "models/glm/safetensors.h"
#include "models/glm4v/config.h"
#include "models/quant/packed.h"
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/tp_backend.h"
#include "runtime/weights.h"
#include "tests/testing/engine_runner.h"
#include "tests/testing/golden.h"
#include "tests/testing/glm4v_cases.h"
#include "tests/testing/safetensors_writer.h"

namespace ag {
namespace {

using testing::Case;
using testing::Cases;
using testing::RequestFor;

std::string Dir() { return testing::TestDataDir() + "/tiny-glm4v"; }

compiler::Plan CompilePlan(const compiler::CompileOptions& options) {
  absl::StatusOr<glm4v::Config> config = glm4v::LoadConfig(Dir());
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled->plan;
}

class Glm4vEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(Dir());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::make_unique<glm::Checkpoint>(std::move(*ckpt));
    weights_ = std::make_unique<runtime::CheckpointWeights>(*checkpoint_);
  }

  // Runs every case at once (or one after another) and checks each against transformers.
  void RunAndCheck(const compiler::Plan& plan, runtime::Backend& backend, bool one_by_one = false,
                   runtime::EngineOptions options = {}) {
    absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan, backend, *weights_, options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    std::vector<int> ids;
    for (const Case& c : Cases()) {
      absl::StatusOr<int> id = engine_->Submit(RequestFor(c));
      ASSERT_TRUE(id.ok()) << id.status();
      EXPECT_EQ(engine_->prompt(*id), c.expanded) << c.title;
      ids.push_back(*id);
      while (one_by_one && engine_->HasWork()) ASSERT_TRUE(engine_->Step().ok());
    }
    while (engine_->HasWork()) {
      absl::StatusOr<std::vector<runtime::TokenEvent>> events = engine_->Step();
      ASSERT_TRUE(events.ok()) << events.status();
      max_step_images_ = std::max(max_step_images_, engine_->last_step().images_encoded);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const Case& c = Cases()[i];
      EXPECT_EQ(engine_->new_tokens(ids[i]), c.new_tokens) << c.title;
      const std::vector<std::vector<float>>& rows = engine_->logits(ids[i]);
      ASSERT_EQ(rows.size(), c.expanded.size() + c.new_tokens.size() - 1) << c.title;
      const testing::WorstDiff worst = testing::MaxAbsDiffRow(rows, testing::FirstRows(c.logits, rows.size()));
      EXPECT_LE(worst.err, 1e-3) << c.title << ": worst at row " << worst.row;
      std::printf("%s: logits within %.3g of transformers (worst row %zu of %zu)\n", c.title.c_str(), worst.err,
                  worst.row, rows.size());
    }
  }

  std::unique_ptr<glm::Checkpoint> checkpoint_;
  std::unique_ptr<runtime::CheckpointWeights> weights_;
  std::unique_ptr<runtime::Engine> engine_;
  int64_t max_step_images_ = 0;  // the most images one step encoded
};

TEST_F(Glm4vEngine, ImagePromptsInOneBatchAreTransformers) {
  runtime::CpuBackend backend;
  RunAndCheck(CompilePlan({}), backend);
  EXPECT_EQ(engine_->encoder_cache_hits(), 0);
  EXPECT_GE(max_step_images_, 2);  // several requests' images in one vision run
}

TEST_F(Glm4vEngine, PrefillChunksThatCutThroughImages) {
  compiler::CompileOptions options;
  options.build.max_batch_tokens = 7;  // no image of the fixture fits one step; nor do the two cases' decodes and a chunk
  options.build.max_seqs = 2;
  options.max_vision_patches = 192;  // the largest image (8 x 12 patches) and a little: images run in several batches
  options.max_images = 1;
  runtime::CpuBackend backend;
  RunAndCheck(CompilePlan(options), backend);
  EXPECT_EQ(max_step_images_, 1);  // the encoder budget: one image per step here
}

TEST_F(Glm4vEngine, PreemptedImagePromptsAreRecomputedExactly) {
  runtime::EngineOptions options;
  options.kv_cache_tokens = 224;  // the longest request (188 tokens) fits; two at once do not
  options.encoder_cache_bytes = 0;  // and a recompute encodes its images again
  runtime::CpuBackend backend;
  RunAndCheck(CompilePlan({}), backend, /*one_by_one=*/false, options);
  EXPECT_GT(engine_->preemptions(), 0);
}

// Prompt-lookup drafts run at the M-RoPE positions after the image (each row's three streams):
// the tokens and every kept row stay transformers'.
TEST_F(Glm4vEngine, SpeculativeDraftsChangeNoToken) {
  runtime::EngineOptions options;
  options.speculative = {4, 1, 3, 0};
  runtime::CpuBackend backend;
  RunAndCheck(CompilePlan({}), backend, /*one_by_one=*/false, options);
  EXPECT_GT(engine_->spec_accepted_tokens(), 0);  // a kept draft's row is among those checked
  std::printf("drafts: %lld run, %lld kept\n", static_cast<long long>(engine_->spec_draft_tokens()),
              static_cast<long long>(engine_->spec_accepted_tokens()));
}

TEST_F(Glm4vEngine, TensorParallelAndThePlanFile) {
  compiler::CompileOptions options;
  options.tp = 2;
  const std::string bytes = compiler::SerializePlan(CompilePlan(options));
  absl::StatusOr<compiler::Plan> plan = compiler::DeserializePlan(bytes, "tiny-glm4v.agplan");
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::unique_ptr<runtime::Backend> backend = runtime::CreateCpuTensorParallel(2);
  RunAndCheck(*plan, *backend);
}

TEST_F(Glm4vEngine, AScreenshotSentAgainComesFromTheCaches) {
  // One after another: the second run of each image finds its rows in the
  // encoder cache and the prompt's full blocks in the prefix cache.
  runtime::CpuBackend backend;
  const compiler::Plan plan = CompilePlan({});
  RunAndCheck(plan, backend, /*one_by_one=*/true);
  for (const Case& c : Cases()) {
    if (c.images.empty()) continue;
    const int64_t prefix_hits = engine_->prefix_cache_hits();
    runtime::Request r = RequestFor(c);
    r.prompt_logits = false;  // prompt logits compute the whole prompt: no prefix cache
    absl::StatusOr<int> id = engine_->Submit(r);
    ASSERT_TRUE(id.ok()) << id.status();
    while (engine_->HasWork()) ASSERT_TRUE(engine_->Step().ok());
    EXPECT_EQ(engine_->new_tokens(*id), c.new_tokens) << c.title;
    EXPECT_GT(engine_->prefix_cache_hits(), prefix_hits) << c.title;
    const std::vector<std::vector<float>>& rows = engine_->logits(*id);
    const std::vector<std::vector<float>> want(c.logits.begin() + static_cast<std::ptrdiff_t>(c.expanded.size()) - 1,
                                               c.logits.end() - 1);
    EXPECT_LE(testing::MaxAbsDiff(rows, want), 1e-3) << c.title;
  }
  // A fresh engine without the prefix cache: every image comes from the encoder cache the second time.
  runtime::EngineOptions options;
  options.prefix_caching = false;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan, backend, *weights_, options);
  ASSERT_TRUE(engine.ok());
  for (int round = 0; round < 2; ++round) {
    for (const Case& c : Cases()) {
      absl::StatusOr<int> id = (*engine)->Submit(RequestFor(c));
      ASSERT_TRUE(id.ok());
      while ((*engine)->HasWork()) ASSERT_TRUE((*engine)->Step().ok());
      EXPECT_EQ((*engine)->new_tokens(*id), c.new_tokens) << c.title;
      EXPECT_LE(testing::MaxAbsDiff((*engine)->logits(*id), testing::FirstRows(c.logits, c.expanded.size() + c.new_tokens.size() - 1)), 1e-3);
    }
  }
  EXPECT_EQ((*engine)->encoder_cache_queries(), 8);  // four images, twice
  EXPECT_EQ((*engine)->encoder_cache_hits(), 4);
}

TEST_F(Glm4vEngine, AnImagePromptsPrefillDoesNotStallOtherStreams) {
  // Eight streams decode while a prompt with three images prefills: every step carries a
  // decode token for each of the eight, and no step passes the token or encoder budgets.
  compiler::CompileOptions options;
  options.build.max_batch_tokens = 32;
  options.build.max_seqs = 16;
  options.max_vision_patches = 200;
  options.max_images = 2;
  const compiler::Plan plan = CompilePlan(options);
  runtime::CpuBackend backend;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan, backend, *weights_, {});
  ASSERT_TRUE(engine.ok());
  std::vector<int> streams;
  for (int i = 0; i < 8; ++i) {
    runtime::Request r;
    r.prompt = {302, 304, static_cast<int32_t>(20 + i)};
    r.max_new_tokens = 200;
    r.stop_on_eos = false;
    streams.push_back(*(*engine)->Submit(r));
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*engine)->Step().ok());  // all eight are decoding now
  runtime::Request big = RequestFor(Cases()[2]);  // two images
  big.prompt.insert(big.prompt.end(), {310, testing::kImageToken, 311});
  big.images.push_back(Cases()[1].images[0]);  // and a third
  big.max_new_tokens = 1;
  const int id = *(*engine)->Submit(big);
  const int64_t total = static_cast<int64_t>((*engine)->prompt(id).size());
  int prefill_steps = 0;
  while ((*engine)->new_tokens(id).empty()) {
    ASSERT_TRUE((*engine)->Step().ok());
    const runtime::StepStats& s = (*engine)->last_step();
    EXPECT_EQ(s.decode_tokens, 8) << "step " << prefill_steps;
    EXPECT_LE(s.prefill_tokens + s.decode_tokens, 32);
    EXPECT_LE(s.images_encoded, 2);
    ++prefill_steps;
  }
  EXPECT_GE(prefill_steps, total / 24);
  for (const int s : streams) EXPECT_EQ((*engine)->new_tokens(s).size(), static_cast<size_t>(3 + prefill_steps));
}

TEST_F(Glm4vEngine, ImagesThatDoNotFitTheirTokensAreRefused) {
  runtime::CpuBackend backend;
  const compiler::Plan plan = CompilePlan({});
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(plan, backend, *weights_, {});
  ASSERT_TRUE(engine.ok());
  const Case& two = Cases()[2];
  ASSERT_EQ(two.images.size(), 2u);
  runtime::Request r = RequestFor(two);
  r.images.pop_back();
  absl::StatusOr<int> id = (*engine)->Submit(r);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("more image tokens"), std::string::npos) << id.status();
  r = RequestFor(two);
  r.images.push_back(r.images[0]);
  id = (*engine)->Submit(r);
  EXPECT_NE(id.status().message().find("3 images for 2 image tokens"), std::string::npos) << id.status();
  // A vision program too small for the image.
  compiler::CompileOptions small;
  small.max_vision_patches = 32;
  const compiler::Plan tight = CompilePlan(small);
  runtime::CpuBackend backend2;
  engine = runtime::Engine::Create(tight, backend2, *weights_, {});
  ASSERT_TRUE(engine.ok());
  id = (*engine)->Submit(RequestFor(Cases()[0]));
  EXPECT_NE(id.status().message().find("more than the plan's vision program takes"), std::string::npos) << id.status();
  EXPECT_FALSE((*engine)->HasWork());
}

// Writes tiny-glm4v with its language model's linears stored as compressed-tensors FP8 (E4M3
// codes, a scale a row; the FP8 GLM-4.xV releases' format) into `fp8_dir`, and the same model with
// those linears as dense f32 values s * e4m3(q) into `dense_dir`; `ignore` is the config's list of
// modules left dense.
void WriteFp8Glm4v(const std::string& fp8_dir, const std::string& dense_dir, const nlohmann::json& ignore) {
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(Dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<testing::FakeTensor> fp8, dense;
  for (const std::string& name : ckpt->Names()) {
    const glm::TensorView& v = **ckpt->Find(name);
    testing::FakeTensor t{name, "F32", v.shape, {}};
    int64_t count = 1;
    for (const int64_t d : v.shape) count *= d;
    t.values.resize(static_cast<size_t>(count));
    glm::ConvertToFloat(v.dtype, v.data, count, t.values.data());
    const bool linear = absl::StartsWith(name, "model.language_model.layers.") && v.shape.size() == 2 &&
                        (absl::EndsWith(name, "_proj.weight"));
    if (!linear) {
      fp8.push_back(t);
      dense.push_back(std::move(t));
      continue;
    }
    const int64_t n = v.shape[0], k = v.shape[1];
    testing::FakeTensor codes{name, "F8_E4M3", v.shape, {}}, scale{absl::StrCat(quant::PackedModule(name), ".weight_scale"),
                                                                   "F32", {n, 1}, {}};
    for (int64_t r = 0; r < n; ++r) {
      float amax = 0.0f;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(t.values[r * k + j]));
      const float s = amax / 448.0f;
      scale.values.push_back(s);
      for (int64_t j = 0; j < k; ++j) {
        const float q = ref::E4M3ToFloat(ref::FloatToE4M3(t.values[r * k + j] / s));
        codes.values.push_back(q);
        t.values[r * k + j] = s * q;
      }
    }
    fp8.push_back(std::move(codes));
    fp8.push_back(std::move(scale));
    dense.push_back(std::move(t));
  }
  nlohmann::json config = nlohmann::json::parse(testing::ReadFile(Dir() + "/config.json"));
  for (const std::string& dir : {fp8_dir, dense_dir}) {
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(Dir() + "/generation_config.json", dir + "/generation_config.json",
                               std::filesystem::copy_options::overwrite_existing);
    nlohmann::json c = config;
    if (dir == fp8_dir) {
      c["quantization_config"] = {
          {"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"group_size", nullptr},
                           {"strategy", "channel"}, {"dynamic", false}}},
              {"input_activations", nullptr}}}}},
          {"ignore", ignore}};
    }
    std::ofstream(dir + "/config.json") << c.dump(2);
    testing::WriteSafetensors(dir + "/model.safetensors", dir == fp8_dir ? fp8 : dense);
  }
}

// A pre-quantized GLM-4.1V: its language model's linears keep the checkpoint's FP8 storage (the
// plan says so) and give, bit for bit, what the same values stored dense give, images included;
// a config that would have the vision tower quantized is refused, naming a vision weight.
TEST(Glm4vPreQuantized, Fp8LanguageModelMatchesItsDenseValues) {
  const std::string root = ::testing::TempDir() + "glm4v_fp8";
  WriteFp8Glm4v(root + "/fp8", root + "/dense", {"lm_head", "re:model.visual.*"});
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<int32_t>> tokens;
  for (const std::string& dir : {root + "/fp8", root + "/dense"}) {
    absl::StatusOr<glm4v::Config> config = glm4v::LoadConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, compiler::CompileOptions{});
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    int packed = 0;
    for (const compiler::WeightEntry& w : compiled->plan.weights) {
      for (const compiler::WeightPiece& p : w.pieces) {
        if (p.packing == ir::QuantPacking::kNone) continue;
        ++packed;
        EXPECT_EQ(p.packing, ir::QuantPacking::kCtFp8) << p.tensor;
        EXPECT_TRUE(absl::StartsWith(p.tensor, "model.language_model.")) << p.tensor;
      }
    }
    EXPECT_EQ(packed, dir == root + "/fp8" ? 2 * 6 : 0) << "q, k, v, o, gate_up and down of both layers";
    absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    runtime::CheckpointWeights weights(*ckpt);
    runtime::CpuBackend backend;
    absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(compiled->plan, backend, weights, {});
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<int> ids;
    for (const Case& c : Cases()) ids.push_back(*(*engine)->Submit(RequestFor(c)));
    while ((*engine)->HasWork()) ASSERT_TRUE((*engine)->Step().ok());
    for (const int id : ids) {
      logits.push_back((*engine)->logits(id));
      tokens.push_back((*engine)->new_tokens(id));
    }
  }
  const size_t cases = Cases().size();
  for (size_t i = 0; i < cases; ++i) {
    EXPECT_EQ(tokens[i], tokens[cases + i]) << Cases()[i].title;
    EXPECT_EQ(logits[i], logits[cases + i]) << Cases()[i].title;
  }
  WriteFp8Glm4v(root + "/fp8-vision", root + "/dense", {"lm_head"});
  absl::StatusOr<glm4v::Config> config = glm4v::LoadConfig(root + "/fp8-vision");
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::Status refused = compiler::Compile(*config, compiler::CompileOptions{}).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << refused;
  EXPECT_NE(refused.message().find("covers the vision tower's model.visual."), std::string::npos) << refused;
}

TEST_F(Glm4vEngine, ATextModelRefusesImages) {
  testing::FixtureRunner text("tiny-glm4", compiler::CompileOptions{});
  runtime::CpuBackend backend;
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(testing::TestDataDir() + "/tiny-glm4");
  ASSERT_TRUE(ckpt.ok());
  runtime::CheckpointWeights weights(*ckpt);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(text.plan(), backend, weights, {});
  ASSERT_TRUE(engine.ok());
  runtime::Request r;
  r.prompt = {1, 2, 3};
  r.images = Cases()[0].images;
  absl::StatusOr<int> id = (*engine)->Submit(r);
  EXPECT_EQ(id.status().message(), "this model takes no images");
}

}  // namespace
}  // namespace ag
