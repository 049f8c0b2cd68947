// GLM-4.1V against transformers (tests/data/tiny-glm4v, made by
// make_glm4v_fixture.py): the compiled plan's two programs, the vision tower's
// rows, M-RoPE positions, and whole prompts with images through the engine.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "compiler/driver.h"
#include "compiler/plan_file.h"
#include "models/glm/safetensors.h"
#include "models/glm4v/config.h"
#include "models/glm4v/positions.h"
#include "runtime/cpu_backend.h"
#include "runtime/weights.h"
#include "tests/testing/golden.h"
#include "tests/testing/golden_tensors.h"

namespace ag {
namespace {

std::string Dir() { return testing::TestDataDir() + "/tiny-glm4v"; }

const nlohmann::json& GoldenJson() {
  static const nlohmann::json* j = [] {
    std::ifstream in(Dir() + "/golden.json");
    return new nlohmann::json(nlohmann::json::parse(in));
  }();
  return *j;
}
const std::map<std::string, testing::GoldenTensor>& GoldenTensors() {
  static const auto* t = new std::map<std::string, testing::GoldenTensor>(
      testing::LoadGoldenTensors(Dir() + "/golden.safetensors"));
  return *t;
}

glm4v::Config LoadConfig() {
  absl::StatusOr<glm4v::Config> c = glm4v::LoadConfig(Dir());
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::vector<glm4v::ImageGrid> Grids(const nlohmann::json& c) {
  std::vector<glm4v::ImageGrid> grids;
  for (const auto& g : c["image_grid_thw"]) grids.push_back({g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()});
  return grids;
}

TEST(Glm4v, CompilesToADecoderAndAVisionProgram) {
  const glm4v::Config config = LoadConfig();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(config, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const compiler::Plan& plan = compiled->plan;
  ASSERT_EQ(plan.programs.size(), 2u);
  EXPECT_EQ(plan.model.image_token_id, 314);
  EXPECT_EQ(plan.model.patches_per_token, 4);
  const compiler::Program& vision = *plan.FindProgram(compiler::kVisionProgram);
  EXPECT_GT(vision.steps.size(), 10u);
  // The plan file holds both programs and reads back to the same bytes.
  const std::string bytes = compiler::SerializePlan(plan);
  absl::StatusOr<compiler::Plan> back = compiler::DeserializePlan(bytes, "x.agplan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(compiler::SerializePlan(*back), bytes);
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(Dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE(compiler::CheckPlanAgainstModel(plan, config, &*ckpt).ok());
  EXPECT_FALSE(compiler::CheckPlanAgainstModel(plan, config.text, nullptr).ok()) << "a text model's check refuses it";
}

TEST(Glm4v, RopeIndexIsTransformers) {
  for (const auto& c : GoldenJson()["cases"]) {
    const std::vector<int32_t> ids = c["input_ids"].get<std::vector<int32_t>>();
    absl::StatusOr<glm4v::RopeIndex> r = glm4v::ComputeRopeIndex(ids, 314, Grids(c), 2);
    ASSERT_TRUE(r.ok()) << r.status();
    const auto want = c["position_ids"].get<std::vector<std::vector<int32_t>>>();  // over prompt + new tokens
    const int64_t length = static_cast<int64_t>(ids.size());
    for (int s = 0; s < 3; ++s) {
      for (int64_t i = 0; i < length; ++i) ASSERT_EQ(r->positions[s * length + i], want[s][i]) << c["title"] << " " << s << "," << i;
      // Decode tokens: index + delta in every stream.
      for (size_t i = ids.size(); i < want[s].size(); ++i) EXPECT_EQ(want[s][i], static_cast<int64_t>(i) + r->delta);
    }
    EXPECT_EQ(r->delta, c["rope_delta"].get<int64_t>());
  }
}

TEST(Glm4v, VisionProgramGivesTransformersRows) {
  const glm4v::Config config = LoadConfig();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(config, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(Dir());
  ASSERT_TRUE(ckpt.ok());
  runtime::CheckpointWeights weights(*ckpt);
  runtime::CpuBackend backend;
  ASSERT_TRUE(backend.Load(compiled->plan, weights, 4).ok());
  int cases = 0;
  for (size_t i = 0; i < GoldenJson()["cases"].size(); ++i) {
    const nlohmann::json& c = GoldenJson()["cases"][i];
    if (c["images"].empty()) continue;
    runtime::StepBatch batch;
    const std::vector<float> pixels = GoldenTensors().at("case" + std::to_string(i) + ".pixel_values").f32();
    batch.pixels = runtime::FloatParts(pixels);
    batch.image_offsets = {0};
    for (const glm4v::ImageGrid& g : Grids(c)) {
      glm4v::AppendPatchPositions(g, 2, &batch.patch_pos);
      batch.image_offsets.push_back(static_cast<int32_t>(batch.image_offsets.back() + g.t * g.h * g.w));
    }
    batch.num_patches = batch.image_offsets.back();
    batch.num_images = static_cast<int64_t>(batch.image_offsets.size()) - 1;
    batch.num_merged_rows = batch.num_patches / 4;
    UninitializedVector<float> rows;
    ASSERT_TRUE(backend.RunProgram(compiler::kVisionProgram, batch, "image_embeds", &rows).ok());
    const std::vector<float> want = GoldenTensors().at("case" + std::to_string(i) + ".vision").f32();
    ASSERT_EQ(rows.size(), want.size());
    double worst = 0;
    for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::fabs(double{rows[k]} - want[k]));
    EXPECT_LE(worst, 1e-4) << c["title"];
    std::printf("%s: vision rows within %.3g of transformers\n", c["title"].get<std::string>().c_str(), worst);
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

}  // namespace
}  // namespace ag
