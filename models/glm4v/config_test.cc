#include "models/glm4v/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/glm4v/weight_map.h"

namespace ag::glm4v {
namespace {

std::string Fixture() {
  const char* d = std::getenv("AUTOGLM_TEST_DATA");
  return std::string(d != nullptr ? d : "tests/data") + "/tiny-glm4v";
}

nlohmann::json FixtureConfig() {
  std::ifstream in(Fixture() + "/config.json");
  return nlohmann::json::parse(in);
}

TEST(Glm4vConfig, TheFixtureAsTransformersSavedIt) {
  absl::StatusOr<Config> c = LoadConfig(Fixture());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text.layout, glm::Layout::kGlm4v);
  EXPECT_EQ(c->text.hidden_size, 128);
  EXPECT_EQ(c->text.head_dim, 32) << "no head_dim key: hidden / heads";
  EXPECT_EQ(c->text.rotary_dim, 16);
  EXPECT_EQ(c->text.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_TRUE(c->text.attention_bias);
  EXPECT_EQ(c->text.rms_norm_eps, 1e-5);
  EXPECT_EQ(c->text.eos_token_ids, (std::vector<int64_t>{300, 307, 309, 319})) << "from generation_config.json";
  EXPECT_EQ(c->vision.depth, 2);
  EXPECT_EQ(c->vision.head_dim(), 16);
  EXPECT_EQ(c->vision.side(), 4);
  EXPECT_EQ(c->vision.patch_values(), 1176);
  EXPECT_EQ(c->image_token_id, 314);
  EXPECT_EQ(c->image_start_token_id, 310);
  EXPECT_TRUE(IsGlm4vCheckpoint(Fixture()));
}

TEST(Glm4vConfig, LegacyRopeLayoutReadsTheSame) {
  // The GLM-4.1V release's layout: rope_theta and partial_rotary_factor beside rope_scaling.mrope_section.
  nlohmann::json j = FixtureConfig();
  nlohmann::json& text = j["text_config"];
  text.erase("rope_parameters");
  text["rope_theta"] = 10000.0;
  text["partial_rotary_factor"] = 0.5;
  text["rope_scaling"] = {{"type", "default"}, {"mrope_section", {2, 3, 3}}};
  text["image_token_id"] = nullptr;  // older files repeat it here, sometimes null: ignored
  absl::StatusOr<Config> legacy = ParseConfig(j.dump(), "config.json");
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  absl::StatusOr<Config> current = ParseConfig(FixtureConfig().dump(), "config.json");
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(ConfigFingerprint(*legacy), ConfigFingerprint(*current));
}

TEST(Glm4vConfig, InconsistentConfigsNameTheKey) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string want;
  };
  const Case cases[] = {
      {[](nlohmann::json& j) { j["text_config"]["rope_parameters"]["mrope_section"] = {2, 3, 4}; }, "mrope_section"},
      {[](nlohmann::json& j) { j["text_config"]["rope_parameters"]["mrope_section"] = {2, 3}; }, "mrope_section"},
      {[](nlohmann::json& j) { j["vision_config"]["hidden_size"] = 36; }, "divisible by 4"},
      {[](nlohmann::json& j) { j["vision_config"]["num_heads"] = 3; }, "num_heads"},
      {[](nlohmann::json& j) { j["vision_config"]["out_hidden_size"] = 64; }, "out_hidden_size"},
      {[](nlohmann::json& j) { j.erase("image_token_id"); }, "image_token_id"},
      {[](nlohmann::json& j) { j["image_token_id"] = 5000; }, "image_token_id"},
      {[](nlohmann::json& j) { j.erase("vision_config"); }, "vision_config"},
      {[](nlohmann::json& j) { j["vision_config"]["image_size"] = 50; }, "image_size"},
      {[](nlohmann::json& j) { j["vision_config"]["attention_bias"] = true; }, "attention_bias"},
      {[](nlohmann::json& j) { j["text_config"]["hidden_size"] = -4; }, "hidden_size"},
      {[](nlohmann::json& j) { j["model_type"] = "glm4v_moe"; }, "model_type"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = FixtureConfig();
    c.edit(j);
    absl::StatusOr<Config> parsed = ParseConfig(j.dump(), "config.json");
    ASSERT_FALSE(parsed.ok()) << c.want;
    const std::string m(parsed.status().message());
    EXPECT_NE(m.find(c.want), std::string::npos) << c.want << " in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Glm4vWeightMap, ConvolutionsReadAsLinearsAndTheDecoderUnderLanguageModel) {
  absl::StatusOr<Config> c = LoadConfig(Fixture());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*VisionParamShape(*c, "model.visual.patch_embed.proj.weight"), (std::vector<int64_t>{32, 1176}));
  EXPECT_EQ(*VisionParamShape(*c, "model.visual.downsample.weight"), (std::vector<int64_t>{128, 128}));
  absl::StatusOr<glm::WeightSource> patch = MapWeight(*c, "model.visual.patch_embed.proj.weight");
  ASSERT_TRUE(patch.ok());
  EXPECT_EQ(patch->tensor_shape, (std::vector<int64_t>{32, 3, 2, 14, 14}));
  absl::StatusOr<glm::WeightSource> q = MapWeight(*c, "model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->tensor, "model.language_model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(MapWeight(*c, "lm_head.weight")->tensor, "lm_head.weight");
  EXPECT_FALSE(MapWeight(*c, "model.visual.blocks.2.norm1.weight").ok()) << "depth 2";
}

}  // namespace
}  // namespace ag::glm4v
