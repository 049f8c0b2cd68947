// quantize: the layered policy (default rules, a policy file's rules first,
// patterns over part and weight names), what it refuses (a rule naming no
// weight, a group that does not divide a row, a bad file line), and the IR
// text and verifier rules for quantized parameters.
#include "passes/quantize.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "ir/status_macros.h"
#include "ir/text.h"
#include "ir/verifier.h"
#include "passes/fuse.h"
#include "passes/shard.h"
#include "passes/test_layer.h"

namespace ag::passes {
namespace {

using testing::kLayer;

ir::QuantFormat Format(absl::string_view text) { return *ir::ParseQuantFormat(text); }

// The layer after `passes` (shard at `tp` first when tp > 1), then quantize with `policy`.
absl::StatusOr<ir::Graph> Quantized(const QuantPolicy& policy, int tp = 1) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(kLayer);
  if (!g.ok()) return g.status();
  if (tp > 1) RETURN_IF_ERROR(ShardPass(tp).Run(*g).status());
  RETURN_IF_ERROR(FusePass().Run(*g).status());
  RETURN_IF_ERROR(QuantizePass(policy).Run(*g).status());
  RETURN_IF_ERROR(ir::Verify(*g));
  return g;
}

// Each part's format by name, "" for parameters stored plainly.
std::map<std::string, std::string> Formats(const ir::Graph& g) {
  std::map<std::string, std::string> out;
  for (ir::ValueId v : g.ValuesOfKind(ir::ValueKind::kParam)) {
    const ir::Value& value = g.value(v);
    if (value.concat_of.empty()) out[value.name] = "";
    for (const ir::ParamPart& p : value.concat_of) out[p.name] = p.quant.quantized() ? p.quant.ToString() : "";
  }
  return out;
}

TEST(QuantizePolicy, PatternsMatchWholeNamesWithOrWithoutModelAndWeight) {
  const std::string down = "model.layers.3.mlp.down_proj.weight";
  EXPECT_TRUE(PatternMatchesWeight("*.down_proj", down));
  EXPECT_TRUE(PatternMatchesWeight("layers.3.*", down));
  EXPECT_TRUE(PatternMatchesWeight("model.layers.?.mlp.*", down));
  EXPECT_TRUE(PatternMatchesWeight(down, down));
  EXPECT_FALSE(PatternMatchesWeight("layers.3", down));
  EXPECT_FALSE(PatternMatchesWeight("*.down", down));
  EXPECT_FALSE(PatternMatchesWeight("layers.30.*", down));
  EXPECT_TRUE(PatternMatchesWeight("lm_head", "lm_head.weight"));
}

TEST(QuantizePolicy, FileLinesAndTheirErrors) {
  absl::StatusOr<std::vector<QuantRule>> rules =
      ParseQuantPolicy("# keep the first layer\nlayers.0.*: bf16\n\n*.down_proj: int8  # 8-bit\n", "p.txt");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 2u);
  EXPECT_EQ((*rules)[0].pattern, "layers.0.*");
  EXPECT_FALSE((*rules)[0].format.quantized());
  EXPECT_EQ((*rules)[1].format, Format("int8:channel:sym"));
  EXPECT_EQ((*rules)[1].origin, "p.txt:4");
  EXPECT_EQ(ParseQuantPolicy("a: int4\nlayers.0.* int8\n", "p.txt").status().message(),
            "p.txt:2: expected 'PATTERN: FORMAT', got 'layers.0.* int8'");
  const absl::Status bad = ParseQuantPolicy("*.o_proj: int3\n", "p.txt").status();
  EXPECT_TRUE(absl::StartsWith(bad.message(), "p.txt:1: unknown weight format 'int3'")) << bad;
}

TEST(QuantizeFormat, ParsesDefaultsAndRefusesNonsense) {
  EXPECT_EQ(Format("int4").ToString(), "int4:g128:asym");
  EXPECT_EQ(Format("int4:g32:sym").ToString(), "int4:g32:sym");
  EXPECT_EQ(Format("int8").ToString(), "int8:channel:sym");
  EXPECT_EQ(Format("int8:asym:g64").ToString(), "int8:g64:asym");
  EXPECT_EQ(Format("fp8").ToString(), "fp8e4m3");
  EXPECT_FALSE(Format("bf16").quantized());
  for (const char* bad : {"int4:g48", "fp8:g128", "int8:sym:sym", "int4:g32:g64", "int2", "", "none:g32"}) {
    EXPECT_FALSE(ir::ParseQuantFormat(bad).ok()) << bad;
  }
  EXPECT_EQ(Format("int4:g128:asym").DeviceBytes(4096, 4096), 4096 * 2048 + 4096 * 32 * 3);
  EXPECT_EQ(Format("fp8").DeviceBytes(10, 64), 640 + 40);
}

TEST(Quantize, DefaultInt4PolicyKeepsTheHeadAndKvRowsAt8Bits) {
  QuantPolicy policy = DefaultQuantPolicy(Format("int4:g32"));
  policy.rules.insert(policy.rules.begin(), {"*.down_proj", Format("int8"), "p.txt:1"});
  absl::StatusOr<ir::Graph> g = Quantized(policy);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::map<std::string, std::string> f = Formats(*g);
  EXPECT_EQ(f.at("model.layers.0.self_attn.q_proj.weight"), "int4:g32:asym");
  EXPECT_EQ(f.at("model.layers.0.self_attn.k_proj.weight"), "fp8e4m3");
  EXPECT_EQ(f.at("model.layers.0.self_attn.v_proj.weight"), "fp8e4m3");
  EXPECT_EQ(f.at("model.layers.0.self_attn.o_proj.weight"), "int4:g32:asym");
  EXPECT_EQ(f.at("model.layers.0.mlp.gate_up_proj.weight"), "int4:g32:asym");
  EXPECT_EQ(f.at("model.layers.0.mlp.down_proj.weight"), "int8:channel:sym");
  EXPECT_EQ(f.at("lm_head.weight"), "fp8e4m3");
  EXPECT_EQ(f.at("model.embed_tokens.weight"), "");  // looked up, never a linear's W
  EXPECT_EQ(f.at("model.norm.weight"), "");
  // The text form keeps the formats.
  const std::string text = ir::PrintGraph(*g);
  EXPECT_NE(text.find("@model.layers.0.self_attn.k_proj.weight as fp8e4m3"), std::string::npos) << text;
  absl::StatusOr<ir::Graph> again = ir::ParseGraph(text);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ir::PrintGraph(*again), text);
}

TEST(Quantize, RulesMatchTheFusedWeightOrItsPartsUnderTensorParallelism) {
  QuantPolicy policy;
  policy.body = Format("int8");
  policy.rules = {{"*.gate_up_proj", Format("fp8"), "p:1"}, {"layers.0.self_attn.q_proj", Format("none"), "p:2"}};
  absl::StatusOr<ir::Graph> g = Quantized(policy, /*tp=*/2);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::map<std::string, std::string> f = Formats(*g);
  EXPECT_EQ(f.at("model.layers.0.mlp.gate_proj.weight"), "fp8e4m3");  // parts of gate_up at tp 2
  EXPECT_EQ(f.at("model.layers.0.mlp.up_proj.weight"), "fp8e4m3");
  EXPECT_EQ(f.at("model.layers.0.self_attn.q_proj.weight"), "");
  EXPECT_EQ(f.at("model.layers.0.self_attn.k_proj.weight"), "int8:channel:sym");
  // o_proj is row-parallel: each rank holds 16 of the 32 inputs, the format is the whole row's.
  EXPECT_EQ(f.at("model.layers.0.self_attn.o_proj.weight"), "int8:channel:sym");
}

TEST(Quantize, RefusesARuleNamingNoWeightAndAGroupThatDoesNotDivideARow) {
  QuantPolicy policy;
  policy.rules = {{"layers.7.*", Format("int8"), "p.txt:3"}};
  EXPECT_EQ(Quantized(policy).status().message(), "p.txt:3: 'layers.7.*' names no linear weight of the model");
  policy.rules = {{"*.down_proj", Format("int4:g32"), "p.txt:1"}};
  EXPECT_EQ(Quantized(policy).status().message(),
            "@model.layers.0.mlp.down_proj.weight: int4:g32:asym: group size 32 does not divide the 16 inputs of a "
            "row (a --quantize-policy rule can give it another format)");
}

TEST(QuantizeVerifier, OnlyALinearWeightMayBeQuantized) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(R"(graph g (T<=4) {
  param @e : f32[40,32] = concat(@e as int8)
  input %tokens : i32[T]
  %x = embedding(%tokens, @e) : f32[T,32]
  output %x
}
)");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("is stored quantized; only a linear weight may be"), std::string::npos)
      << g.status();
  g = ir::ParseGraph(R"(graph g (T<=4) {
  param @w : f32[8,48] = concat(@w as int4:g32)
  input %x : f32[T,48]
  %y = linear(%x, @w) : f32[T,8]
  output %y
}
)");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("group size 32 does not divide the 48 inputs"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace ag::passes
