#include "models/glm/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include "tests/testing/golden.h"

namespace ag::glm {
namespace {

TEST(Config, HfGlmFixture) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layout, Layout::kGlm);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rotary_dim, 8);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{1});
}

TEST(Config, ChatGlmFixtureMatchesGlm) {
  absl::StatusOr<ModelConfig> a = LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  absl::StatusOr<ModelConfig> b = LoadModelConfig(testing::TestDataDir() + "/tiny-chatglm");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(b->layout, Layout::kChatGlm);
  EXPECT_EQ(a->hidden_size, b->hidden_size);
  EXPECT_EQ(a->intermediate_size, b->intermediate_size);
  EXPECT_EQ(a->num_layers, b->num_layers);
  EXPECT_EQ(a->num_kv_heads, b->num_kv_heads);
  EXPECT_EQ(a->head_dim, b->head_dim);
  EXPECT_EQ(a->vocab_size, b->vocab_size);
  EXPECT_EQ(a->rotary_dim, b->rotary_dim);
  EXPECT_EQ(a->rope_theta, b->rope_theta);
  EXPECT_EQ(a->max_position_embeddings, b->max_position_embeddings);
}

TEST(Config, Glm4Fixture) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(testing::TestDataDir() + "/tiny-glm4");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layout, Layout::kGlm4);
  EXPECT_EQ(c->num_layers, 3);
  EXPECT_EQ(c->num_heads, 6);
}

TEST(Config, RopeParametersAtTopLevelOrNested) {
  const char* top = R"({"model_type":"glm","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,
    "num_attention_heads":4,"num_key_value_heads":4,"head_dim":16,"vocab_size":10,"rope_theta":500.0,
    "partial_rotary_factor":1.0})";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(top, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 500.0);
  EXPECT_EQ(c->rotary_dim, 16);
  const char* nested = R"({"model_type":"glm4","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,
    "num_attention_heads":4,"vocab_size":10,"rope_parameters":{"rope_theta":7.0e4,"rope_type":"default"}})";
  c = ParseModelConfig(nested, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 70000.0);
  EXPECT_EQ(c->rotary_dim, 64) << "head_dim defaults to 128, partial_rotary_factor to 0.5";
  EXPECT_EQ(c->num_kv_heads, 2) << "transformers' default";
}

TEST(Config, ChatGlmRopeRatioAndTiedEmbeddings) {
  const char* text = R"({"model_type":"chatglm","hidden_size":64,"ffn_hidden_size":8,"num_layers":1,
    "num_attention_heads":4,"multi_query_attention":true,"multi_query_group_num":2,"kv_channels":16,
    "padded_vocab_size":10,"rope_ratio":500,"eos_token_id":[1,2]})";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 5e6);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 2}));
}

struct BadConfig {
  std::string json;
  const char* expect;  // substring of the error
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, OneLineErrorNamingTheField) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(GetParam().json, "dir/config.json");
  ASSERT_FALSE(c.ok());
  const std::string message(c.status().message());
  EXPECT_NE(message.find(GetParam().expect), std::string::npos) << message;
  EXPECT_NE(message.find("dir/config.json"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

constexpr char kBase[] = R"("hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10)";

INSTANTIATE_TEST_SUITE_P(
    Config, BadConfigTest,
    ::testing::Values(BadConfig{"{", "not valid JSON"}, BadConfig{"[1]", "JSON object"},
                    BadConfig{R"({"hidden_size":64})", "model_type"},
                    BadConfig{R"({"model_type":"llama","hidden_size":64})", "'llama'"},
                    BadConfig{R"({"model_type":"glm","intermediate_size":8})", "hidden_size"},
                    BadConfig{R"({"model_type":"glm","hidden_size":"64"})", "hidden_size"},
                    BadConfig{R"({"model_type":"glm","hidden_size":-64})", "hidden_size"},
                    BadConfig{(std::string(R"({"model_type":"glm","num_key_value_heads":3,)") + kBase + "}"),
                              "multiple"},
                    BadConfig{(std::string(R"({"model_type":"glm","eos_token_id":99,)") + kBase + "}"),
                              "eos_token_id"},
                    BadConfig{(std::string(R"({"model_type":"glm","hidden_act":"gelu",)") + kBase + "}"),
                              "hidden_act"},
                    BadConfig{(std::string(R"({"model_type":"glm","rope_parameters":{"rope_type":"yarn"},)") + kBase +
                               "}"),
                              "rope_type"},
                    BadConfig{R"({"model_type":"chatglm","hidden_size":64,"ffn_hidden_size":8,"num_layers":1,
                      "num_attention_heads":4,"padded_vocab_size":10,"rmsnorm":false})",
                              "rmsnorm"}));

TEST(Config, MissingFileNamesThePath) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig("/nonexistent/model");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/model/config.json"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace ag::glm

namespace ag::glm {
namespace {

TEST(Config, EosDefaultsToGlm4sThreeIds) {
  const char* text = R"({"model_type":"glm4","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,
    "num_attention_heads":4,"vocab_size":151552})";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(text, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{151329, 151336, 151338}));
}

TEST(Config, CheckpointDtypeIsCheckedButChangesNoFingerprint) {
  // The rotary frequencies are fp32 whatever the dtype (transformers computes
  // inv_freq fresh at every load), so a bf16 and an fp32 config compile alike.
  std::string fingerprint;
  for (auto [key, value] : {std::pair{"dtype", "bfloat16"}, std::pair{"torch_dtype", "float16"},
                            std::pair{"torch_dtype", "float32"}}) {
    const std::string text = std::string(R"({"model_type":"glm","hidden_size":64,"intermediate_size":8,)") +
                             R"("num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,")" + key + "\":\"" +
                             value + "\"}";
    absl::StatusOr<ModelConfig> c = ParseModelConfig(text, "config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    if (fingerprint.empty()) fingerprint = ConfigFingerprint(*c);
    EXPECT_EQ(ConfigFingerprint(*c), fingerprint) << key << "=" << value;
  }
  absl::StatusOr<ModelConfig> bad = ParseModelConfig(
      R"({"model_type":"glm","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,)"
      R"("num_attention_heads":4,"vocab_size":10,"dtype":"int3"})",
      "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dtype"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace ag::glm
