#include "models/glm/builder.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "ir/text.h"
#include "ir/verifier.h"
#include "models/glm/weight_map.h"
#include "tests/testing/golden.h"

namespace ag::glm {
namespace {

ModelConfig Glm4_9B() {
  const char* text = R"({"model_type":"glm","hidden_size":4096,"intermediate_size":13696,"num_hidden_layers":40,
    "num_attention_heads":32,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,"rms_norm_eps":1.5625e-07,
    "attention_bias":true,"max_position_embeddings":131072,"eos_token_id":[151329,151336,151338]})";
  return *ParseModelConfig(text, "glm-4-9b/config.json");
}

int CountOps(const ir::Graph& g, ir::OpId op) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(Builder, FixturesBuildVerifyAndRoundTrip) {
  for (const char* name : {"tiny-glm", "tiny-glm4", "tiny-chatglm"}) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(testing::TestDataDir() + "/" + name);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<ir::Graph> g = BuildGlmGraph(*c, {});
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(ir::Verify(*g).ok()) << ir::Verify(*g);
    const std::string text = ir::PrintGraph(*g);
    absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(ir::PrintGraph(*parsed), text) << name;
    const int norms_per_layer = c->layout == Layout::kGlm4 ? 4 : 2;
    EXPECT_EQ(CountOps(*g, ir::OpId::k_rms_norm), c->num_layers * norms_per_layer + 1) << name;
    EXPECT_EQ(CountOps(*g, ir::OpId::k_attention), c->num_layers);
    EXPECT_EQ(g->outputs().size(), 2u);
  }
}

TEST(Builder, Glm4_9BGraphRoundTripsAndHasTheRightParameterCount) {
  const ModelConfig c = Glm4_9B();
  absl::StatusOr<ir::Graph> g = BuildGlmGraph(c, {.dtype = ir::DType::kBF16});
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = ir::PrintGraph(*g);
  absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ir::PrintGraph(*parsed), text);
  int64_t params = 0;
  for (ir::ValueId v : g->ValuesOfKind(ir::ValueKind::kParam)) params += *g->value(v).type.NumElements({});
  EXPECT_EQ(params, c.NumParameters());
  EXPECT_NEAR(static_cast<double>(params), 9.40e9, 0.01e9);
  // 17 nodes per layer (DESIGN.md's sketch, with split as two slices and
  // silu apart from mul), plus embedding, gather_rows, final norm, LM head, argmax.
  EXPECT_EQ(g->nodes().size(), 40u * 17 + 5);
}

TEST(Builder, RotaryAttributesFollowTheConfig) {
  const ModelConfig c = Glm4_9B();
  absl::StatusOr<ir::Graph> g = BuildGlmGraph(c, {});
  ASSERT_TRUE(g.ok());
  for (const ir::Node& node : g->nodes()) {
    if (node.op != ir::OpId::k_rotary) continue;
    EXPECT_EQ(*ir::GetInt(node.attrs, "rot"), 64);
    EXPECT_EQ(*ir::GetFloat(node.attrs, "theta"), 10000.0);
  }
}

TEST(WeightMap, ChatGlmSlicesTheFusedQkv) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(testing::TestDataDir() + "/tiny-chatglm");
  ASSERT_TRUE(c.ok());
  absl::StatusOr<WeightSource> k = MapWeight(*c, "model.layers.1.self_attn.k_proj.weight");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->tensor, "transformer.encoder.layers.1.self_attention.query_key_value.weight");
  EXPECT_EQ(k->tensor_shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(k->row_begin, 64);
  EXPECT_EQ(k->row_end, 96);
  absl::StatusOr<WeightSource> head = MapWeight(*c, "lm_head.weight");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->tensor, "transformer.output_layer.weight");
  EXPECT_FALSE(MapWeight(*c, "model.layers.1.self_attn.rogue.weight").ok());
}

TEST(WeightMap, TiedEmbeddingsShareTheTable) {
  ModelConfig c = Glm4_9B();
  c.tie_word_embeddings = true;
  absl::StatusOr<WeightSource> head = MapWeight(c, "lm_head.weight");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->tensor, "model.embed_tokens.weight");
}

TEST(WeightMap, FixtureCheckpointsHaveEveryParameter) {
  for (const char* name : {"tiny-glm", "tiny-glm4", "tiny-chatglm"}) {
    const std::string dir = testing::TestDataDir() + "/" + name;
    absl::StatusOr<ModelConfig> c = LoadModelConfig(dir);
    absl::StatusOr<Checkpoint> ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(c.ok() && ckpt.ok()) << ckpt.status();
    absl::StatusOr<ir::Graph> g = BuildGlmGraph(*c, {});
    ASSERT_TRUE(g.ok());
    for (ir::ValueId v : g->ValuesOfKind(ir::ValueKind::kParam)) {
      absl::StatusOr<WeightSource> src = MapWeight(*c, g->value(v).name);
      ASSERT_TRUE(src.ok()) << src.status();
      absl::StatusOr<const TensorView*> view = FindSourceTensor(*ckpt, *src);
      EXPECT_TRUE(view.ok()) << name << ": " << view.status();
    }
  }
}

}  // namespace
}  // namespace ag::glm
