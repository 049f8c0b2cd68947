// Checkpoint variants the fixtures do not cover, written here with random
// weights: tied embeddings without an lm_head tensor, no attention bias,
// full rotary (glm-edge), F16 weights in a sharded checkpoint, and an
// original-layout (chatglm) model without multi-query attention. Each must
// load, compile and run, fused equal to unfused and batched equal to alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "runtime/tp_backend.h"
#include "tests/testing/engine_runner.h"
#include "tests/testing/safetensors_writer.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using testing::FakeTensor;

std::vector<float> Random(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class Variants : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("autoglm_variant_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes config.json and random weights (F32, BF16 or F16), in one file or two shards with an index.
  void WriteModel(const std::string& config, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                  const std::string& dtype, bool sharded) {
    std::ofstream(dir_ / "config.json") << config;
    std::mt19937 rng(42);
    std::vector<FakeTensor> all;
    for (const auto& [name, shape] : tensors) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      const bool norm = name.find("norm") != std::string::npos;
      std::vector<float> values = Random(static_cast<size_t>(n), rng, norm ? 0.1f : 0.2f);
      if (norm) {
        for (float& v : values) v += 1.0f;
      }
      all.push_back({name, dtype, shape, values});
    }
    if (!sharded) {
      testing::WriteSafetensors((dir_ / "model.safetensors").string(), all);
      return;
    }
    const size_t half = all.size() / 2;
    testing::WriteSafetensors((dir_ / "part-1.safetensors").string(), {all.begin(), all.begin() + half});
    testing::WriteSafetensors((dir_ / "part-2.safetensors").string(), {all.begin() + half, all.end()});
    nlohmann::json index;
    for (size_t i = 0; i < all.size(); ++i) index["weight_map"][all[i].name] = i < half ? "part-1.safetensors" : "part-2.safetensors";
    std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  }

  // Runs two prompts alone and together, fused and unfused: all must agree.
  void ExpectConsistent() {
    std::vector<testing::GoldenCase> cases(2);
    cases[0].input_ids = {3, 17, 5, 9, 1, 30, 2};
    cases[0].new_tokens.resize(6);
    cases[1].input_ids = {8, 8, 8, 40, 41, 2, 2, 2, 2, 7, 11};
    cases[1].new_tokens.resize(5);
    compiler::CompileOptions unfused;
    unfused.pipeline.disabled = {"fuse"};
    testing::FixtureRunner fused(FixturePath(), compiler::CompileOptions{});
    testing::FixtureRunner plain(FixturePath(), unfused);
    const std::vector<testing::Generation> together = fused.Run(cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      const testing::Generation alone = fused.Run({cases[i]})[0];
      const testing::Generation reference = plain.Run({cases[i]})[0];
      EXPECT_EQ(alone.tokens.size(), cases[i].new_tokens.size());
      EXPECT_EQ(alone.tokens, reference.tokens);
      EXPECT_LE(testing::MaxAbsDiff(alone.logits, reference.logits), 1e-4);
      EXPECT_EQ(together[i].tokens, alone.tokens);
      EXPECT_LE(testing::MaxAbsDiff(together[i].logits, alone.logits), 1e-5);
      for (const auto& row : alone.logits) {
        for (float v : row) ASSERT_TRUE(std::isfinite(v));
      }
    }
  }
  // Runs the two prompts at each degree as in-process ranks: the logits must be
  // the single rank's within 1e-5 and the tokens the same.
  void ExpectTensorParallelAgrees(const std::vector<int>& degrees) {
    std::vector<testing::GoldenCase> cases(2);
    cases[0].input_ids = {3, 17, 5, 9, 1, 30, 2};
    cases[0].new_tokens.resize(6);
    cases[1].input_ids = {8, 8, 8, 40, 41, 2, 2, 2, 2, 7, 11};
    cases[1].new_tokens.resize(5);
    const std::vector<testing::Generation> single =
        testing::FixtureRunner(FixturePath(), compiler::CompileOptions{}).Run(cases, /*stagger=*/true);
    for (int tp : degrees) {
      compiler::CompileOptions options;
      options.tp = tp;
      testing::FixtureRunner runner(FixturePath(), options, runtime::CreateCpuTensorParallel(tp));
      ASSERT_EQ(runner.plan().tp, tp);
      const std::vector<testing::Generation> sharded = runner.Run(cases, /*stagger=*/true);
      for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_EQ(sharded[i].tokens, single[i].tokens) << "tp " << tp;
        EXPECT_LE(testing::MaxAbsDiff(sharded[i].logits, single[i].logits), 1e-5) << "tp " << tp;
      }
    }
  }

  // FixtureRunner reads TestDataDir()/NAME: point it at the temporary folder.
  std::string FixturePath() const { return fs::relative(dir_, testing::TestDataDir()).string(); }

  fs::path dir_;
};

std::vector<std::pair<std::string, std::vector<int64_t>>> HfTensors(int layers, int64_t hidden, int64_t inter,
                                                                     int64_t q, int64_t kv, int64_t vocab, bool bias,
                                                                     bool lm_head) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {{"model.embed_tokens.weight", {vocab, hidden}},
                                                                 {"model.norm.weight", {hidden}}};
  if (lm_head) t.push_back({"lm_head.weight", {vocab, hidden}});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {hidden}});
    t.push_back({p + "post_attention_layernorm.weight", {hidden}});
    t.push_back({p + "self_attn.q_proj.weight", {q, hidden}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, hidden}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, hidden}});
    if (bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}});
      t.push_back({p + "self_attn.k_proj.bias", {kv}});
      t.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    t.push_back({p + "self_attn.o_proj.weight", {hidden, q}});
    t.push_back({p + "mlp.gate_up_proj.weight", {2 * inter, hidden}});
    t.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
  }
  return t;
}

TEST_F(Variants, GlmEdgeStyleTiedEmbeddingsNoBiasFullRotaryBf16Sharded) {
  WriteModel(R"({"model_type":"glm","architectures":["GlmForCausalLM"],"hidden_size":64,"intermediate_size":96,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":64,
    "rms_norm_eps":1e-05,"attention_bias":false,"tie_word_embeddings":true,"max_position_embeddings":128,
    "rope_parameters":{"rope_theta":10000.0,"partial_rotary_factor":1.0,"rope_type":"default"},
    "eos_token_id":[60,61,62],"dtype":"bfloat16"})",
             HfTensors(2, 64, 96, 64, 32, 64, /*bias=*/false, /*lm_head=*/false), "BF16", /*sharded=*/true);
  absl::StatusOr<glm::ModelConfig> c = glm::LoadModelConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rotary_dim, 16);
  EXPECT_TRUE(c->tie_word_embeddings);
  ExpectConsistent();
  ExpectTensorParallelAgrees({2, 4});  // the tied head splits the embedding table's rows; the lookup keeps it whole
}

// Multi-query attention: one KV head for 8 query heads, replicated on every rank up to tp 8.
TEST_F(Variants, MultiQueryAttentionAtEveryDegree) {
  WriteModel(R"({"model_type":"glm","hidden_size":64,"intermediate_size":96,"num_hidden_layers":2,
    "num_attention_heads":8,"num_key_value_heads":1,"head_dim":8,"vocab_size":64,"attention_bias":true,
    "tie_word_embeddings":false,"max_position_embeddings":128,"partial_rotary_factor":0.5})",
             HfTensors(2, 64, 96, 64, 8, 64, /*bias=*/true, /*lm_head=*/true), "F32", false);
  absl::StatusOr<glm::ModelConfig> c = glm::LoadModelConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->num_kv_heads, 1);
  ExpectConsistent();
  ExpectTensorParallelAgrees({2, 4, 8});
  compiler::CompileOptions options;
  options.tp = 8;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*c, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(compiled->plan.kv.kv_heads, 1) << "each rank holds the one KV head";
}

TEST_F(Variants, F16WeightsWithDefaultRopeAtTheTopLevel) {
  WriteModel(R"({"model_type":"glm4","hidden_size":48,"intermediate_size":40,"num_hidden_layers":1,
    "num_attention_heads":3,"num_key_value_heads":1,"head_dim":16,"vocab_size":50,"rope_theta":500.0,
    "max_position_embeddings":64,"torch_dtype":"float16"})",
             [] {
               auto t = HfTensors(1, 48, 40, 48, 16, 50, true, true);
               t.push_back({"model.layers.0.post_self_attn_layernorm.weight", {48}});
               t.push_back({"model.layers.0.post_mlp_layernorm.weight", {48}});
               return t;
             }(),
             "F16", false);
  ExpectConsistent();
}

TEST_F(Variants, ChatGlmWithoutMultiQueryAttention) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {
      {"transformer.embedding.word_embeddings.weight", {64, 32}},
      {"transformer.encoder.final_layernorm.weight", {32}},
      {"transformer.output_layer.weight", {64, 32}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "transformer.encoder.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {32}});
    t.push_back({p + "post_attention_layernorm.weight", {32}});
    t.push_back({p + "self_attention.query_key_value.weight", {96, 32}});
    t.push_back({p + "self_attention.query_key_value.bias", {96}});
    t.push_back({p + "self_attention.dense.weight", {32, 32}});
    t.push_back({p + "mlp.dense_h_to_4h.weight", {80, 32}});
    t.push_back({p + "mlp.dense_4h_to_h.weight", {32, 40}});
  }
  WriteModel(R"({"model_type":"chatglm","hidden_size":32,"ffn_hidden_size":40,"num_layers":2,
    "num_attention_heads":4,"kv_channels":8,"padded_vocab_size":64,"add_qkv_bias":true,"seq_length":64,
    "rope_ratio":2,"eos_token_id":[1,2]})",
             t, "F32", false);
  absl::StatusOr<glm::ModelConfig> c = glm::LoadModelConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4) << "no multi-query attention: every head has its own K and V";
  EXPECT_EQ(c->rope_theta, 20000.0);
  ExpectConsistent();
  ExpectTensorParallelAgrees({2, 4});  // column slices of the fused query_key_value rows
}

}  // namespace
}  // namespace ag
