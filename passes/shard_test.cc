// shard: IR text in and out at tp 2 and 4 (KV heads replicated), the
// nothing-to-do case (tp 1), the fuse rules it enables, and degrees the model
// cannot honour.
#include <gtest/gtest.h>

#include "ir/text.h"
#include "ir/verifier.h"
#include "passes/fuse.h"
#include "passes/shard.h"
#include "passes/test_layer.h"

namespace ag::passes {
namespace {

using testing::kLayer;

absl::StatusOr<std::string> Shard(const std::string& text, int32_t tp) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(text);
  if (!g.ok()) return g.status();
  ShardPass pass(tp);
  absl::StatusOr<bool> changed = pass.Run(*g);
  if (!changed.ok()) return changed.status();
  absl::Status ok = ir::Verify(*g);
  if (!ok.ok()) return ok;
  return ir::PrintGraph(*g);
}

// Q/K/V by heads (one KV head each), gate/up by SiLU pairs, o/down by input
// columns with an all_reduce after, the LM head by vocabulary with an all_gather.
constexpr char kTp2[] = R"(graph glm (R<=8, S<=2, T<=8) tp=2 {
  param @model.embed_tokens.weight : f32[40,32]
  param @model.layers.0.input_layernorm.weight : f32[32]
  param @model.layers.0.self_attn.q_proj.weight : f32[16,32] = concat(@model.layers.0.self_attn.q_proj.weight rows/2)
  param @model.layers.0.self_attn.q_proj.bias : f32[16] = concat(@model.layers.0.self_attn.q_proj.bias rows/2)
  param @model.layers.0.self_attn.k_proj.weight : f32[8,32] = concat(@model.layers.0.self_attn.k_proj.weight rows/2)
  param @model.layers.0.self_attn.k_proj.bias : f32[8] = concat(@model.layers.0.self_attn.k_proj.bias rows/2)
  param @model.layers.0.self_attn.v_proj.weight : f32[8,32] = concat(@model.layers.0.self_attn.v_proj.weight rows/2)
  param @model.layers.0.self_attn.v_proj.bias : f32[8] = concat(@model.layers.0.self_attn.v_proj.bias rows/2)
  param @model.layers.0.self_attn.o_proj.weight : f32[32,16] = concat(@model.layers.0.self_attn.o_proj.weight cols/2)
  param @model.layers.0.post_attention_layernorm.weight : f32[32]
  param @model.layers.0.mlp.gate_up_proj.weight : f32[16,32] = concat(@model.layers.0.mlp.gate_proj.weight rows/2, @model.layers.0.mlp.up_proj.weight rows/2)
  param @model.layers.0.mlp.down_proj.weight : f32[32,8] = concat(@model.layers.0.mlp.down_proj.weight cols/2)
  param @model.norm.weight : f32[32]
  param @lm_head.weight : f32[20,32] = concat(@lm_head.weight rows/2)
  input %tokens : i32[T]
  input %positions : i32[T]
  input %logit_rows : i32[R]
  state $kv.0 : f32[2,NB,16,1,8]
  %x = embedding(%tokens, @model.embed_tokens.weight) : f32[T,32]
  %l0.h = rms_norm(%x, @model.layers.0.input_layernorm.weight) {eps=1e-05} : f32[T,32] loc(0)
  %l0.q = linear(%l0.h, @model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.q_proj.bias) : f32[T,16] loc(0)
  %l0.k = linear(%l0.h, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.k_proj.bias) : f32[T,8] loc(0)
  %l0.v = linear(%l0.h, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.v_proj.bias) : f32[T,8] loc(0)
  %l0.q_rot = rotary(%l0.q, %positions) {head_dim=8, heads=2, rot=4, theta=10000.0} : f32[T,16] loc(0)
  %l0.k_rot = rotary(%l0.k, %positions) {head_dim=8, heads=1, rot=4, theta=10000.0} : f32[T,8] loc(0)
  %l0.attn = attention(%l0.q_rot, %l0.k_rot, %l0.v, $kv.0) {head_dim=8, heads=2, kv_heads=1} : f32[T,16] loc(0)
  %l0.o.partial = linear(%l0.attn, @model.layers.0.self_attn.o_proj.weight) : f32[T,32] loc(0)
  %l0.o = all_reduce(%l0.o.partial) : f32[T,32] loc(0)
  %l0.x1 = add(%x, %l0.o) : f32[T,32] loc(0)
  %l0.h1 = rms_norm(%l0.x1, @model.layers.0.post_attention_layernorm.weight) {eps=1e-05} : f32[T,32] loc(0)
  %l0.gate_up = linear(%l0.h1, @model.layers.0.mlp.gate_up_proj.weight) : f32[T,16] loc(0)
  %l0.gate = slice(%l0.gate_up) {axis=1, size=8, start=0} : f32[T,8] loc(0)
  %l0.up = slice(%l0.gate_up) {axis=1, size=8, start=8} : f32[T,8] loc(0)
  %l0.act = silu(%l0.gate) : f32[T,8] loc(0)
  %l0.m = mul(%l0.act, %l0.up) : f32[T,8] loc(0)
  %l0.down.partial = linear(%l0.m, @model.layers.0.mlp.down_proj.weight) : f32[T,32] loc(0)
  %l0.down = all_reduce(%l0.down.partial) : f32[T,32] loc(0)
  %l0.x2 = add(%l0.x1, %l0.down) : f32[T,32] loc(0)
  %last = gather_rows(%l0.x2, %logit_rows) : f32[R,32]
  %final_norm = rms_norm(%last, @model.norm.weight) {eps=1e-05} : f32[R,32]
  %logits.shard = linear(%final_norm, @lm_head.weight) : f32[R,20]
  %logits = all_gather(%logits.shard) {parts=2} : f32[R,40]
  %next_tokens = argmax(%logits) : i32[R]
  output %logits, %next_tokens
}
)";

// tp 4 > 2 KV heads: k/v rows split in 2 parts, each held by two ranks.
constexpr char kTp4[] = R"(graph glm (R<=8, S<=2, T<=8) tp=4 {
  param @model.embed_tokens.weight : f32[40,32]
  param @model.layers.0.input_layernorm.weight : f32[32]
  param @model.layers.0.self_attn.q_proj.weight : f32[8,32] = concat(@model.layers.0.self_attn.q_proj.weight rows/4)
  param @model.layers.0.self_attn.q_proj.bias : f32[8] = concat(@model.layers.0.self_attn.q_proj.bias rows/4)
  param @model.layers.0.self_attn.k_proj.weight : f32[8,32] = concat(@model.layers.0.self_attn.k_proj.weight rows/2)
  param @model.layers.0.self_attn.k_proj.bias : f32[8] = concat(@model.layers.0.self_attn.k_proj.bias rows/2)
  param @model.layers.0.self_attn.v_proj.weight : f32[8,32] = concat(@model.layers.0.self_attn.v_proj.weight rows/2)
  param @model.layers.0.self_attn.v_proj.bias : f32[8] = concat(@model.layers.0.self_attn.v_proj.bias rows/2)
  param @model.layers.0.self_attn.o_proj.weight : f32[32,8] = concat(@model.layers.0.self_attn.o_proj.weight cols/4)
  param @model.layers.0.post_attention_layernorm.weight : f32[32]
  param @model.layers.0.mlp.gate_up_proj.weight : f32[8,32] = concat(@model.layers.0.mlp.gate_proj.weight rows/4, @model.layers.0.mlp.up_proj.weight rows/4)
  param @model.layers.0.mlp.down_proj.weight : f32[32,4] = concat(@model.layers.0.mlp.down_proj.weight cols/4)
  param @model.norm.weight : f32[32]
  param @lm_head.weight : f32[10,32] = concat(@lm_head.weight rows/4)
  input %tokens : i32[T]
  input %positions : i32[T]
  input %logit_rows : i32[R]
  state $kv.0 : f32[2,NB,16,1,8]
  %x = embedding(%tokens, @model.embed_tokens.weight) : f32[T,32]
  %l0.h = rms_norm(%x, @model.layers.0.input_layernorm.weight) {eps=1e-05} : f32[T,32] loc(0)
  %l0.q = linear(%l0.h, @model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.q_proj.bias) : f32[T,8] loc(0)
  %l0.k = linear(%l0.h, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.k_proj.bias) : f32[T,8] loc(0)
  %l0.v = linear(%l0.h, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.v_proj.bias) : f32[T,8] loc(0)
  %l0.q_rot = rotary(%l0.q, %positions) {head_dim=8, heads=1, rot=4, theta=10000.0} : f32[T,8] loc(0)
  %l0.k_rot = rotary(%l0.k, %positions) {head_dim=8, heads=1, rot=4, theta=10000.0} : f32[T,8] loc(0)
  %l0.attn = attention(%l0.q_rot, %l0.k_rot, %l0.v, $kv.0) {head_dim=8, heads=1, kv_heads=1} : f32[T,8] loc(0)
  %l0.o.partial = linear(%l0.attn, @model.layers.0.self_attn.o_proj.weight) : f32[T,32] loc(0)
  %l0.o = all_reduce(%l0.o.partial) : f32[T,32] loc(0)
  %l0.x1 = add(%x, %l0.o) : f32[T,32] loc(0)
  %l0.h1 = rms_norm(%l0.x1, @model.layers.0.post_attention_layernorm.weight) {eps=1e-05} : f32[T,32] loc(0)
  %l0.gate_up = linear(%l0.h1, @model.layers.0.mlp.gate_up_proj.weight) : f32[T,8] loc(0)
  %l0.gate = slice(%l0.gate_up) {axis=1, size=4, start=0} : f32[T,4] loc(0)
  %l0.up = slice(%l0.gate_up) {axis=1, size=4, start=4} : f32[T,4] loc(0)
  %l0.act = silu(%l0.gate) : f32[T,4] loc(0)
  %l0.m = mul(%l0.act, %l0.up) : f32[T,4] loc(0)
  %l0.down.partial = linear(%l0.m, @model.layers.0.mlp.down_proj.weight) : f32[T,32] loc(0)
  %l0.down = all_reduce(%l0.down.partial) : f32[T,32] loc(0)
  %l0.x2 = add(%l0.x1, %l0.down) : f32[T,32] loc(0)
  %last = gather_rows(%l0.x2, %logit_rows) : f32[R,32]
  %final_norm = rms_norm(%last, @model.norm.weight) {eps=1e-05} : f32[R,32]
  %logits.shard = linear(%final_norm, @lm_head.weight) : f32[R,10]
  %logits = all_gather(%logits.shard) {parts=4} : f32[R,40]
  %next_tokens = argmax(%logits) : i32[R]
  output %logits, %next_tokens
}
)";

TEST(Shard, SplitsALayerOverTwoRanks) {
  absl::StatusOr<std::string> out = Shard(kLayer, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, kTp2);
}

TEST(Shard, ReplicatesKvHeadsWhenTheDegreeExceedsThem) {
  absl::StatusOr<std::string> out = Shard(kLayer, 4);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, kTp4);
}

TEST(Shard, TextRoundTripsWithShards) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(kTp4);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tp(), 4);
  EXPECT_EQ(ir::PrintGraph(*g), kTp4);
}

TEST(Shard, DegreeOneChangesNothing) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(kLayer);
  ASSERT_TRUE(g.ok()) << g.status();
  ShardPass pass(1);
  absl::StatusOr<bool> changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(ir::PrintGraph(*g), kLayer);
}

TEST(Shard, RefusesToShardTwice) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(kTp2);
  ASSERT_TRUE(g.ok()) << g.status();
  ShardPass pass(2);
  absl::StatusOr<bool> changed = pass.Run(*g);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("already split for tp=2"), std::string::npos) << changed.status();
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST(Shard, DegreesTheModelCannotHonourNameTheSize) {
  const struct {
    std::string graph;
    int32_t tp;
    const char* message;
  } cases[] = {
      {kLayer, 3, "--tp 3 does not divide the 4 attention heads"},
      {kLayer, 8, "--tp 8 does not divide the 4 attention heads"},
      {kLayer, 0, "--tp must be in [1, 64], got 0"},
      // 3 KV heads cannot be split over 2 ranks nor replicated over them.
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::string> out = Shard(c.graph, c.tp);
    ASSERT_FALSE(out.ok()) << c.message;
    EXPECT_NE(out.status().message().find(c.message), std::string::npos) << out.status();
  }
}

TEST(Shard, VocabularyAndFfnMustDivide) {
  // Vocabulary 42 at tp 4 (the heads allow it).
  std::string vocab = Replace(Replace(kLayer, "f32[40,32]", "f32[42,32]"), "f32[R,40]", "f32[R,42]");
  absl::StatusOr<std::string> out = Shard(vocab, 4);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("--tp 4 does not divide the vocabulary size 42"), std::string::npos)
      << out.status();
  // FFN 18 (gate_up 36 rows) at tp 4.
  std::string ffn = Replace(kLayer, "mlp.gate_up_proj.weight : f32[32,32]", "mlp.gate_up_proj.weight : f32[36,32]");
  ffn = Replace(ffn, "mlp.down_proj.weight : f32[32,16]", "mlp.down_proj.weight : f32[32,18]");
  ffn = Replace(ffn, "%l0.gate_up = linear(%l0.h1, @model.layers.0.mlp.gate_up_proj.weight) : f32[T,32]",
                "%l0.gate_up = linear(%l0.h1, @model.layers.0.mlp.gate_up_proj.weight) : f32[T,36]");
  ffn = Replace(ffn, "{axis=1, size=16, start=0} : f32[T,16]", "{axis=1, size=18, start=0} : f32[T,18]");
  ffn = Replace(ffn, "{axis=1, size=16, start=16} : f32[T,16]", "{axis=1, size=18, start=18} : f32[T,18]");
  ffn = Replace(ffn, "%l0.act = silu(%l0.gate) : f32[T,16]", "%l0.act = silu(%l0.gate) : f32[T,18]");
  ffn = Replace(ffn, "%l0.m = mul(%l0.act, %l0.up) : f32[T,16]", "%l0.m = mul(%l0.act, %l0.up) : f32[T,18]");
  ASSERT_TRUE(ir::ParseGraph(ffn).ok()) << ir::ParseGraph(ffn).status();
  ASSERT_TRUE(Shard(ffn, 2).ok()) << Shard(ffn, 2).status();
  out = Shard(ffn, 4);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("--tp 4 does not divide intermediate_size 18"), std::string::npos)
      << out.status();
}

// After shard, fuse puts each all_reduce together with the residual add that follows.
TEST(Shard, FuseJoinsEachAllReduceWithItsResidualAdd) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(kTp2);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(FusePass({"all-reduce-residual", "all-reduce-norm-residual"}).Run(*g).ok());
  const std::string text = ir::PrintGraph(*g);
  EXPECT_NE(text.find("%l0.x1 = all_reduce_residual(%l0.o.partial, %x)"), std::string::npos) << text;
  EXPECT_NE(text.find("%l0.x2 = all_reduce_residual(%l0.down.partial, %l0.x1)"), std::string::npos) << text;
  EXPECT_EQ(text.find("all_reduce("), std::string::npos) << text;
  ASSERT_TRUE(ir::Verify(*g).ok());
}

// GLM-4's sandwich norm between the all_reduce and the add joins too.
TEST(Shard, FuseJoinsTheSandwichNorm) {
  std::string glm4 = Replace(kTp2, "  %l0.x1 = add(%x, %l0.o) : f32[T,32] loc(0)\n",
                             "  %l0.o_norm = rms_norm(%l0.o, @model.layers.0.input_layernorm.weight) {eps=1e-05} : "
                             "f32[T,32] loc(0)\n  %l0.x1 = add(%x, %l0.o_norm) : f32[T,32] loc(0)\n");
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(glm4);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(FusePass().Run(*g).ok());
  const std::string text = ir::PrintGraph(*g);
  EXPECT_NE(text.find("%l0.x1 = all_reduce_norm_residual(%l0.o.partial, @model.layers.0.input_layernorm.weight, %x)"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace ag::passes
