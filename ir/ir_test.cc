#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/op_table.h"
#include "ir/text.h"
#include "ir/verifier.h"

namespace ag::ir {
namespace {

constexpr char kSmallGraph[] = R"(graph tiny (R<=8, S<=4, T<=8) {
  param @embed : f32[10,8]
  param @norm : f32[8]
  param @w : f32[12,8]
  param @b : f32[12]
  input %tokens : i32[T]
  input %positions : i32[T]
  input %rows : i32[R]
  state $kv.0 : f32[2,NB,4,1,4]
  %x = embedding(%tokens, @embed) : f32[T,8]
  %h = rms_norm(%x, @norm) {eps=1e-05} : f32[T,8] loc(0)
  %qkv = linear(%h, @w, @b) : f32[T,12] loc(0)
  %q = slice(%qkv) {axis=1, size=4, start=0} : f32[T,4] loc(0)
  %k = slice(%qkv) {axis=1, size=4, start=4} : f32[T,4] loc(0)
  %v = slice(%qkv) {axis=1, size=4, start=8} : f32[T,4] loc(0)
  %qr = rotary(%q, %positions) {head_dim=4, heads=1, rot=2, theta=10000.0} : f32[T,4] loc(0)
  %a = attention(%qr, %k, %v, $kv.0) {head_dim=4, heads=1, kv_heads=1} : f32[T,4] loc(0)
  %s, %n = add_rms_norm(%a, %q, @norm4) {eps=0.5} : f32[T,4], f32[T,4]
  %last = gather_rows(%n, %rows) : f32[R,4]
  %next = argmax(%last) : i32[R]
  output %last, %next
}
)";

std::string WithNorm4(std::string text) {
  const std::string decl = "  param @b : f32[12]\n";
  text.insert(text.find(decl) + decl.size(), "  param @norm4 : f32[4]\n");
  return text;
}

TEST(Types, DimsAndSizes) {
  TensorType t{DType::kBF16, {Dim::Sym("T"), Dim(64)}};
  EXPECT_EQ(t.ToString(), "bf16[T,64]");
  EXPECT_EQ(*t.ByteSize({{"T", 3}}), 3 * 64 * 2);
  EXPECT_FALSE(t.ByteSize({}).ok());
  EXPECT_EQ(Dim::Sym("S", 1).ToString(), "S+1");
  EXPECT_EQ(*Dim::Sym("S", 1).Resolve({{"S", 4}}), 5);
  EXPECT_EQ(ParseDType("i8"), DType::kI8);
  EXPECT_EQ(ParseDType("f64"), std::nullopt);
  EXPECT_EQ(DTypeSize(DType::kI32), 4);
}

TEST(Types, SizesThatWouldOverflowAreErrors) {
  const TensorType huge{DType::kF32, {Dim(int64_t{1} << 40), Dim(int64_t{1} << 30)}};
  EXPECT_FALSE(huge.NumElements({}).ok());
  const TensorType wraps{DType::kF32, {Dim(int64_t{1} << 62), Dim(4)}};  // 2^64 wrapped to 0 before
  EXPECT_FALSE(wraps.NumElements({}).ok());
  EXPECT_FALSE(wraps.ByteSize({}).ok());
  const TensorType bytes{DType::kF32, {Dim(int64_t{1} << 47)}};  // elements fit, bytes do not
  EXPECT_TRUE(bytes.NumElements({}).ok());
  EXPECT_FALSE(bytes.ByteSize({}).ok());
  const TensorType symbolic{DType::kF32, {Dim::Sym("T", INT64_MAX)}};
  EXPECT_FALSE(symbolic.NumElements({{"T", 5}}).ok());
}

TEST(Attrs, PrintFloatsSoTheyParseBackAsFloats) {
  EXPECT_EQ(AttrValueToString(AttrValue(10000.0)), "10000.0");
  EXPECT_EQ(AttrValueToString(AttrValue(1e-05)), "1e-05");
  EXPECT_EQ(AttrValueToString(AttrValue(1.5625e-07)), "1.5625e-07");
  EXPECT_EQ(AttrValueToString(AttrValue(int64_t{7})), "7");
  EXPECT_EQ(AttrValueToString(AttrValue(std::vector<int64_t>{1, 2})), "[1,2]");
}

TEST(OpTable, EveryOpHasAUniqueNameThatParses) {
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& info = GetOpInfo(static_cast<OpId>(i));
    EXPECT_EQ(ParseOpName(info.name), info.id) << info.name;
    EXPECT_LE(info.min_operands, info.max_operands);
  }
  EXPECT_EQ(ParseOpName("conv2d"), std::nullopt);
}

TEST(OpTable, TypeRulesRejectBadOperands) {
  const TensorType x{DType::kF32, {Dim::Sym("T"), Dim(8)}};
  const TensorType w{DType::kF32, {Dim(12), Dim(9)}};
  absl::StatusOr<std::vector<TensorType>> r = InferResultTypes(OpId::k_linear, std::vector{x, w}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("weight columns"), absl::string_view::npos) << r.status();
  r = InferResultTypes(OpId::k_rms_norm, std::vector{x, TensorType{DType::kF32, {Dim(8)}}}, {});
  EXPECT_FALSE(r.ok()) << "missing eps";
  r = InferResultTypes(OpId::k_silu, std::vector{x}, {{"bogus", int64_t{1}}});
  EXPECT_FALSE(r.ok()) << "unknown attribute";
  r = InferResultTypes(OpId::k_slice, std::vector{x}, {{"axis", int64_t{1}}, {"start", int64_t{6}}, {"size", int64_t{4}}});
  EXPECT_FALSE(r.ok()) << "slice out of range";
}

TEST(Text, RoundTrips) {
  absl::StatusOr<Graph> g = ParseGraph(WithNorm4(kSmallGraph));
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string printed = PrintGraph(*g);
  EXPECT_EQ(printed, WithNorm4(kSmallGraph));
  absl::StatusOr<Graph> again = ParseGraph(printed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PrintGraph(*again), printed);
  EXPECT_EQ(g->nodes().size(), 11u);
  EXPECT_EQ(g->nodes()[1].layer, 0);
}

TEST(Text, ErrorsNameTheLine) {
  std::string text = WithNorm4(kSmallGraph);
  text.replace(text.find("rms_norm(%x"), 8, "rms_nrom");
  absl::StatusOr<Graph> g = ParseGraph(text);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("line 12"), absl::string_view::npos) << g.status();
  EXPECT_NE(g.status().message().find("rms_nrom"), absl::string_view::npos);
}

TEST(Text, RejectsWrongTypeAnnotation) {
  std::string text = WithNorm4(kSmallGraph);
  text.replace(text.find(": f32[T,12]"), 11, ": f32[T,13]");
  EXPECT_FALSE(ParseGraph(text).ok());
}

TEST(Text, RejectsUseBeforeDefinition) {
  EXPECT_FALSE(ParseGraph("graph g {\n  param @w : f32[4]\n  %y = silu(%x) : f32[4]\n}\n").ok());
}

TEST(Verifier, StateOnlyWhereAnOpTakesState) {
  absl::StatusOr<Graph> g = ParseGraph(WithNorm4(kSmallGraph));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Verify(*g).ok());
  // Swap attention's k operand with the state: both slots become wrong.
  Node& attn = g->mutable_nodes()[7];
  ASSERT_EQ(attn.op, OpId::k_attention);
  std::swap(attn.operands[1], attn.operands[3]);
  EXPECT_FALSE(Verify(*g).ok());
}

TEST(Verifier, ShardsMustFitTheGraphsDegree) {
  const char* text = R"(graph g tp=2 {
  param @w : f32[4,8] = concat(@w PARTS)
  input %x : f32[2,8]
  %y = linear(%x, @w) : f32[2,4]
  output %y
}
)";
  auto with = [&](const std::string& parts) {
    std::string t = text;
    t.replace(t.find("PARTS"), 5, parts);
    return ParseGraph(t);
  };
  EXPECT_TRUE(with("rows/2").ok()) << with("rows/2").status();
  EXPECT_TRUE(with("rows/1").ok());
  absl::StatusOr<Graph> bad = with("rows/4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not fit the degree tp=2"), std::string::npos) << bad.status();
}

TEST(Verifier, ArenaBounds) {
  absl::StatusOr<Graph> g = ParseGraph(WithNorm4(kSmallGraph));
  ASSERT_TRUE(g.ok());
  g->set_arena_bytes(64);
  EXPECT_FALSE(Verify(*g).ok()) << "results without offsets";
}

TEST(Graph, CompactDropsDeadNodesAndUnusedParams) {
  absl::StatusOr<Graph> g = ParseGraph(WithNorm4(kSmallGraph));
  ASSERT_TRUE(g.ok());
  const ValueId last = g->FindValue("last");
  g->mutable_outputs() = {last};
  g->mutable_nodes()[10].dead = true;  // argmax
  g->Compact();
  ASSERT_TRUE(Verify(*g).ok()) << Verify(*g);
  EXPECT_EQ(g->FindValue("next"), kNoValue);
  EXPECT_EQ(g->nodes().size(), 10u);
  EXPECT_NE(g->FindValue("rows"), kNoValue) << "inputs are kept";
}

}  // namespace
}  // namespace ag::ir
