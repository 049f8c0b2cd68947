// Every pass: IR text in, IR text out, and a case where it has nothing to do.
#include <gtest/gtest.h>

#include <algorithm>

#include "ir/text.h"
#include "passes/canonicalize.h"
#include "passes/fuse.h"
#include "passes/lower_kv_cache.h"
#include "passes/plan_memory.h"

namespace ag::passes {
namespace {

// Runs `pass` on `in`; expects `out` and the given change flag, then runs it
// again on its own output and expects no change (each pass is idempotent).
void ExpectRewrite(Pass&& pass, const char* in, const char* out) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(in);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<bool> changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(ir::PrintGraph(*g), out);
  absl::StatusOr<ir::Graph> again = ir::ParseGraph(ir::PrintGraph(*g));
  ASSERT_TRUE(again.ok()) << again.status();
  changed = pass.Run(*again);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << "second run changed:\n" << ir::PrintGraph(*again);
  EXPECT_EQ(ir::PrintGraph(*again), out);
}

constexpr char kCanonicalizeIn0[] = R"(graph t (T<=4) {
  param @w : f32[8,8]
  input %x : f32[T,8]
  %y = linear(%x, @w) : f32[T,8]
  %s = add(%y, %x) : f32[T,8]
  %f = slice(%s) {axis=1, size=8, start=0} : f32[T,8]
  %g = slice(%f) {axis=1, size=4, start=4} : f32[T,4]
  output %f, %g
}
)";
constexpr char kCanonicalizeOut0[] = R"(graph t (T<=4) {
  param @w : f32[8,8]
  input %x : f32[T,8]
  %y = linear(%x, @w) : f32[T,8]
  %s = add(%x, %y) : f32[T,8]
  %g = slice(%s) {axis=1, size=4, start=4} : f32[T,4]
  output %s, %g
}
)";

TEST(Canonicalize, OrdersCommutativeOperandsAndDropsFullSlices) { ExpectRewrite(CanonicalizePass(), kCanonicalizeIn0, kCanonicalizeOut0); }

constexpr char kDceIn1[] = R"(graph t (T<=4) {
  param @w : f32[8,8]
  param @unused : f32[8,8]
  input %x : f32[T,8]
  input %positions : i32[T]
  state $kv.0 : f32[2,NB,4,1,8]
  %dead = linear(%x, @unused) : f32[T,8]
  %deader = silu(%dead) : f32[T,8]
  %a = attention(%x, %x, %x, $kv.0) {head_dim=8, heads=1, kv_heads=1} : f32[T,8]
  %y = linear(%x, @w) : f32[T,8]
  output %y
}
)";
constexpr char kDceOut1[] = R"(graph t (T<=4) {
  param @w : f32[8,8]
  input %x : f32[T,8]
  input %positions : i32[T]
  state $kv.0 : f32[2,NB,4,1,8]
  %a = attention(%x, %x, %x, $kv.0) {head_dim=8, heads=1, kv_heads=1} : f32[T,8]
  %y = linear(%x, @w) : f32[T,8]
  output %y
}
)";

TEST(Dce, RemovesUnusedNodesAndParametersButKeepsStateWrites) { ExpectRewrite(DcePass(), kDceIn1, kDceOut1); }

constexpr char kLowerKvCacheIn2[] = R"(graph t (R<=4, S<=2, T<=4) {
  input %tokens : i32[T]
  state $kv.0 : f32[2,NB,16,1,8]
  param @e : f32[10,16]
  param @e2 : f32[10,8]
  %q = embedding(%tokens, @e) : f32[T,16]
  %k = embedding(%tokens, @e2) : f32[T,8]
  %a = attention(%q, %k, %k, $kv.0) {head_dim=8, heads=2, kv_heads=1} : f32[T,16] loc(0)
  output %a
}
)";
constexpr char kLowerKvCacheOut2[] = R"(graph t (R<=4, S<=2, T<=4) {
  param @e : f32[10,16]
  param @e2 : f32[10,8]
  input %tokens : i32[T]
  input %slot_mapping : i32[T]
  input %seq_offsets : i32[S+1]
  input %block_tables : i32[S,MB]
  input %context_lens : i32[S]
  state $kv.0 : f32[2,NB,4,1,8]
  %q = embedding(%tokens, @e) : f32[T,16]
  %k = embedding(%tokens, @e2) : f32[T,8]
  kv_cache_write(%k, %k, %slot_mapping, $kv.0) {head_dim=8, heads=2, kv_heads=1} loc(0)
  %a = paged_attention(%q, $kv.0, %seq_offsets, %block_tables, %context_lens) {head_dim=8, heads=2, kv_heads=1} : f32[T,16] loc(0)
  output %a
}
)";

TEST(LowerKvCache, SplitsAttentionIntoPagedWriteAndRead) { ExpectRewrite(LowerKvCachePass(4), kLowerKvCacheIn2, kLowerKvCacheOut2); }

constexpr char kFuseIn3[] = R"(graph t (S<=2, T<=4) {
  param @ln : f32[8]
  param @l.q_proj.weight : f32[8,8]
  param @l.q_proj.bias : f32[8]
  param @l.k_proj.weight : f32[4,8]
  param @l.k_proj.bias : f32[4]
  param @l.v_proj.weight : f32[4,8]
  param @l.v_proj.bias : f32[4]
  input %x : f32[T,8]
  input %positions : i32[T]
  input %slot_mapping : i32[T]
  input %seq_offsets : i32[S+1]
  input %block_tables : i32[S,MB]
  input %context_lens : i32[S]
  state $kv.0 : f32[2,NB,4,1,4]
  %h = rms_norm(%x, @ln) {eps=1e-05} : f32[T,8] loc(0)
  %q = linear(%h, @l.q_proj.weight, @l.q_proj.bias) : f32[T,8] loc(0)
  %k = linear(%h, @l.k_proj.weight, @l.k_proj.bias) : f32[T,4] loc(0)
  %v = linear(%h, @l.v_proj.weight, @l.v_proj.bias) : f32[T,4] loc(0)
  %q_rot = rotary(%q, %positions) {head_dim=4, heads=2, rot=2, theta=10000.0} : f32[T,8] loc(0)
  %k_rot = rotary(%k, %positions) {head_dim=4, heads=1, rot=2, theta=10000.0} : f32[T,4] loc(0)
  kv_cache_write(%k_rot, %v, %slot_mapping, $kv.0) {head_dim=4, heads=2, kv_heads=1} loc(0)
  %a = paged_attention(%q_rot, $kv.0, %seq_offsets, %block_tables, %context_lens) {head_dim=4, heads=2, kv_heads=1} : f32[T,8] loc(0)
  output %a
}
)";
constexpr char kFuseOut3[] = R"(graph t (S<=2, T<=4) {
  param @ln : f32[8]
  param @l.qkv_proj.weight : f32[16,8] = concat(@l.q_proj.weight, @l.k_proj.weight, @l.v_proj.weight)
  param @l.qkv_proj.bias : f32[16] = concat(@l.q_proj.bias, @l.k_proj.bias, @l.v_proj.bias)
  input %x : f32[T,8]
  input %positions : i32[T]
  input %slot_mapping : i32[T]
  input %seq_offsets : i32[S+1]
  input %block_tables : i32[S,MB]
  input %context_lens : i32[S]
  state $kv.0 : f32[2,NB,4,1,4]
  %q_rot = norm_qkv_rope_kv_write(%x, @ln, @l.qkv_proj.weight, %positions, %slot_mapping, $kv.0, @l.qkv_proj.bias) {eps=1e-05, head_dim=4, heads=2, kv_heads=1, rot=2, theta=10000.0} : f32[T,8] loc(0)
  %a = paged_attention(%q_rot, $kv.0, %seq_offsets, %block_tables, %context_lens) {head_dim=4, heads=2, kv_heads=1} : f32[T,8] loc(0)
  output %a
}
)";

TEST(Fuse, QkvProjectionBiasRotaryAndCacheWrite) { ExpectRewrite(FusePass(std::vector<std::string>{"norm-qkv-rope-kv-write"}), kFuseIn3, kFuseOut3); }

constexpr char kFuseIn4[] = R"(graph t (T<=4) {
  param @ln2 : f32[8]
  param @gate_up : f32[12,8]
  param @down : f32[8,6]
  param @post : f32[8]
  input %x : f32[T,8]
  %h = rms_norm(%x, @ln2) {eps=1e-05} : f32[T,8] loc(0)
  %gu = linear(%h, @gate_up) : f32[T,12] loc(0)
  %gate = slice(%gu) {axis=1, size=6, start=0} : f32[T,6] loc(0)
  %up = slice(%gu) {axis=1, size=6, start=6} : f32[T,6] loc(0)
  %act = silu(%gate) : f32[T,6] loc(0)
  %m = mul(%up, %act) : f32[T,6] loc(0)
  %d = linear(%m, @down) : f32[T,8] loc(0)
  %x2 = add(%x, %d) : f32[T,8] loc(0)
  %dn = rms_norm(%d, @post) {eps=1e-05} : f32[T,8] loc(0)
  %x3 = add(%x2, %dn) : f32[T,8] loc(0)
  output %x3
}
)";
constexpr char kFuseOut4[] = R"(graph t (T<=4) {
  param @ln2 : f32[8]
  param @gate_up : f32[12,8]
  param @down : f32[8,6]
  param @post : f32[8]
  input %x : f32[T,8]
  %m = norm_gate_up_silu(%x, @ln2, @gate_up) {eps=1e-05} : f32[T,6] loc(0)
  %d = linear(%m, @down) : f32[T,8] loc(0)
  %x2 = add(%x, %d) : f32[T,8] loc(0)
  %dn = rms_norm(%d, @post) {eps=1e-05} : f32[T,8] loc(0)
  %x3 = add(%x2, %dn) : f32[T,8] loc(0)
  output %x3
}
)";

TEST(Fuse, GateUpSiluMul) { ExpectRewrite(FusePass(std::vector<std::string>{"norm-gate-up-silu"}), kFuseIn4, kFuseOut4); }

constexpr char kFuseIn5[] = R"(graph t (T<=4) {
  param @ln2 : f32[8]
  param @gate_up : f32[12,8]
  param @down : f32[8,6]
  param @post : f32[8]
  input %x : f32[T,8]
  %h = rms_norm(%x, @ln2) {eps=1e-05} : f32[T,8] loc(0)
  %gu = linear(%h, @gate_up) : f32[T,12] loc(0)
  %gate = slice(%gu) {axis=1, size=6, start=0} : f32[T,6] loc(0)
  %up = slice(%gu) {axis=1, size=6, start=6} : f32[T,6] loc(0)
  %act = silu(%gate) : f32[T,6] loc(0)
  %m = mul(%up, %act) : f32[T,6] loc(0)
  %d = linear(%m, @down) : f32[T,8] loc(0)
  %x2 = add(%x, %d) : f32[T,8] loc(0)
  %dn = rms_norm(%d, @post) {eps=1e-05} : f32[T,8] loc(0)
  %x3 = add(%x2, %dn) : f32[T,8] loc(0)
  output %x3
}
)";
constexpr char kFuseOut5[] = R"(graph t (T<=4) {
  param @ln2 : f32[8]
  param @gate_up : f32[12,8]
  param @down : f32[8,6]
  param @post : f32[8]
  input %x : f32[T,8]
  %m = norm_gate_up_silu(%x, @ln2, @gate_up) {eps=1e-05} : f32[T,6] loc(0)
  %d = linear(%m, @down) : f32[T,8] loc(0)
  %x2 = add(%x, %d) : f32[T,8] loc(0)
  %x3 = rms_norm_residual(%d, @post, %x2) {eps=1e-05} : f32[T,8] loc(0)
  output %x3
}
)";

TEST(Fuse, WholeMlpWithSublayerNorm) { ExpectRewrite(FusePass(), kFuseIn5, kFuseOut5); }

// GLM-4.1V's and GLM-4-0414's layer after attention: o_proj, the post-attention sandwich norm
// added to the residual, then the MLP with its own sandwich norm. The first sandwich norm folds
// into the gate/up projection, which also gives the new residual stream; the second stays.
constexpr char kFuseInSandwich[] = R"(graph t (T<=4) {
  param @o : f32[8,8]
  param @post_attn : f32[8]
  param @ln2 : f32[8]
  param @gate_up : f32[12,8]
  param @down : f32[8,6]
  param @post_mlp : f32[8]
  input %x : f32[T,8]
  input %a : f32[T,8]
  %y = linear(%a, @o) : f32[T,8] loc(0)
  %yn = rms_norm(%y, @post_attn) {eps=1e-06} : f32[T,8] loc(0)
  %h = add(%x, %yn) : f32[T,8] loc(0)
  %n = rms_norm(%h, @ln2) {eps=1e-05} : f32[T,8] loc(0)
  %gu = linear(%n, @gate_up) : f32[T,12] loc(0)
  %gate = slice(%gu) {axis=1, size=6, start=0} : f32[T,6] loc(0)
  %up = slice(%gu) {axis=1, size=6, start=6} : f32[T,6] loc(0)
  %act = silu(%gate) : f32[T,6] loc(0)
  %m = mul(%up, %act) : f32[T,6] loc(0)
  %d = linear(%m, @down) : f32[T,8] loc(0)
  %dn = rms_norm(%d, @post_mlp) {eps=1e-05} : f32[T,8] loc(0)
  %x3 = add(%h, %dn) : f32[T,8] loc(0)
  output %x3
}
)";
constexpr char kFuseOutSandwich[] = R"(graph t (T<=4) {
  param @o : f32[8,8]
  param @post_attn : f32[8]
  param @ln2 : f32[8]
  param @gate_up : f32[12,8]
  param @down : f32[8,6]
  param @post_mlp : f32[8]
  input %x : f32[T,8]
  input %a : f32[T,8]
  %y = linear(%a, @o) : f32[T,8] loc(0)
  %m, %h = residual_norm_gate_up_silu(%x, @ln2, @gate_up, %y, @post_attn) {eps=1e-05, residual_eps=1e-06} : f32[T,6], f32[T,8] loc(0)
  %d = linear(%m, @down) : f32[T,8] loc(0)
  %x3 = rms_norm_residual(%d, @post_mlp, %h) {eps=1e-05} : f32[T,8] loc(0)
  output %x3
}
)";

TEST(Fuse, SandwichNormFoldsIntoGateUp) { ExpectRewrite(FusePass(), kFuseInSandwich, kFuseOutSandwich); }

// Without its rule (every other rule run) the sandwich norm stays a step of its own.
TEST(Fuse, SandwichNormFoldIsARuleOfItsOwn) {
  std::vector<std::string> rules = FusePass::RuleNames();
  rules.erase(std::find(rules.begin(), rules.end(), "sandwich-norm-fold"));
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(kFuseInSandwich);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(FusePass(rules).Run(*g).ok());
  const std::string printed = ir::PrintGraph(*g);
  EXPECT_NE(printed.find("%h = rms_norm_residual(%y, @post_attn, %x)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("norm_gate_up_silu(%h, @ln2, @gate_up)"), std::string::npos) << printed;
}

constexpr char kFuseIn6[] = R"(graph t (R<=4, T<=4) {
  param @norm : f32[8]
  param @head : f32[10,8]
  input %x : f32[T,8]
  input %rows : i32[R]
  %last = gather_rows(%x, %rows) : f32[R,8]
  %n = rms_norm(%last, @norm) {eps=1e-05} : f32[R,8]
  %logits = linear(%n, @head) : f32[R,10]
  %next = argmax(%logits) : i32[R]
  output %logits, %next
}
)";
constexpr char kFuseOut6[] = R"(graph t (R<=4, T<=4) {
  param @norm : f32[8]
  param @head : f32[10,8]
  input %x : f32[T,8]
  input %rows : i32[R]
  %last = gather_rows(%x, %rows) : f32[R,8]
  %logits = norm_linear(%last, @norm, @head) {eps=1e-05} : f32[R,10]
  %next = argmax(%logits) : i32[R]
  output %logits, %next
}
)";

TEST(Fuse, FinalNormAndLmHead) { ExpectRewrite(FusePass(std::vector<std::string>{"norm-linear"}), kFuseIn6, kFuseOut6); }

constexpr char kFuseIn7[] = R"(graph t (T<=4) {
  param @w : f32[8]
  input %a : f32[T,8]
  input %b : f32[T,8]
  %s = add(%a, %b) : f32[T,8]
  %n = rms_norm(%s, @w) {eps=1e-05} : f32[T,8]
  %out = mul(%s, %n) : f32[T,8]
  output %out
}
)";
constexpr char kFuseOut7[] = R"(graph t (T<=4) {
  param @w : f32[8]
  input %a : f32[T,8]
  input %b : f32[T,8]
  %s, %n = add_rms_norm(%a, %b, @w) {eps=1e-05} : f32[T,8], f32[T,8]
  %out = mul(%s, %n) : f32[T,8]
  output %out
}
)";

TEST(Fuse, ResidualAddAndRmsNorm) { ExpectRewrite(FusePass(std::vector<std::string>{"add-rms-norm"}), kFuseIn7, kFuseOut7); }

constexpr char kPlanMemoryIn8[] = R"(graph t (T<=4) {
  param @w : f32[16,16]
  param @n : f32[16]
  input %x : f32[T,16]
  %a = linear(%x, @w) : f32[T,16]
  %b = silu(%a) : f32[T,16]
  %c = linear(%b, @w) : f32[T,16]
  %d = rms_norm_residual(%c, @n, %b) {eps=1e-05} : f32[T,16]
  %e = linear(%d, @w) : f32[T,16]
  output %e
}
)";
constexpr char kPlanMemoryOut8[] = R"(graph t (T<=4) arena=768 {
  param @w : f32[16,16]
  param @n : f32[16]
  input %x : f32[T,16]
  %a = linear(%x, @w) : f32[T,16] at 0
  %b = silu(%a) : f32[T,16] at 0
  %c = linear(%b, @w) : f32[T,16] at 256
  %d = rms_norm_residual(%c, @n, %b) {eps=1e-05} : f32[T,16] at 0
  %e = linear(%d, @w) : f32[T,16] at 512
  output %e
}
)";

TEST(PlanMemory, ReusesDeadBuffersAndWorksInPlace) { ExpectRewrite(PlanMemoryPass(), kPlanMemoryIn8, kPlanMemoryOut8); }


// ---- nothing to do ----

// A graph every pass leaves alone: already canonical, no dead code, no
// attention to lower, no pattern to fuse.
constexpr char kNothingToDo[] = R"(graph t (T<=4) {
  param @w : f32[8,8]
  param @b : f32[8]
  input %x : f32[T,8]
  %y = linear(%x, @w, @b) : f32[T,8]
  %s = add(%x, %y) : f32[T,8]
  %z = silu(%s) : f32[T,8]
  output %z
}
)";

void ExpectNoChange(Pass&& pass, const char* in) {
  absl::StatusOr<ir::Graph> g = ir::ParseGraph(in);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<bool> changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << pass.name();
  EXPECT_EQ(ir::PrintGraph(*g), in) << pass.name();
}

TEST(Canonicalize, NothingToDo) { ExpectNoChange(CanonicalizePass(), kNothingToDo); }
TEST(Dce, NothingToDo) { ExpectNoChange(DcePass(), kNothingToDo); }
TEST(LowerKvCache, NothingToDo) { ExpectNoChange(LowerKvCachePass(16), kNothingToDo); }
TEST(Fuse, NothingToDoWithABiasedResidualLinear) { ExpectNoChange(FusePass(), kNothingToDo); }
TEST(PlanMemory, NothingToDoOnceMemoryIsPlanned) { ExpectNoChange(PlanMemoryPass(), kPlanMemoryOut8); }

TEST(Fuse, ANormSharedWithAnotherUserStaysUnfused) {
  std::string text = kFuseIn3;
  const std::string norm = "%h = rms_norm(%x, @ln) {eps=1e-05} : f32[T,8] loc(0)\n";
  text.insert(text.find(norm) + norm.size(), "  %other = silu(%h) : f32[T,8]\n");
  text.replace(text.find("output %a"), 9, "output %a, %other");
  ExpectNoChange(FusePass(), text.c_str());
}

TEST(Fuse, RuleNamesAreListed) {
  EXPECT_EQ(FusePass::RuleNames(),
            (std::vector<std::string>{"norm-qkv-rope-kv-write", "norm-gate-up-silu", "all-reduce-norm-residual",
                                      "all-reduce-residual", "sublayer-norm-residual", "linear-residual",
                                      "norm-linear", "add-rms-norm", "vision-qkv-attention", "sandwich-norm-fold"}));
}

// The vision tower's attention (models/glm4v/vision_builder.cc): three slices of one qkv, q and k
// rotated, become the rotary over qkv's q and k columns and attention reading the packed matrix.
constexpr char kFuseIn9[] = R"(graph t (I<=2, P<=8) {
  param @w : f32[24,8]
  param @o : f32[8,8]
  input %x : f32[P,8]
  input %patch_pos : i32[P,4]
  input %image_offsets : i32[I+1]
  %qkv = linear(%x, @w) : f32[P,24] loc(0)
  %q = slice(%qkv) {axis=1, size=8, start=0} : f32[P,8] loc(0)
  %k = slice(%qkv) {axis=1, size=8, start=8} : f32[P,8] loc(0)
  %v = slice(%qkv) {axis=1, size=8, start=16} : f32[P,8] loc(0)
  %q_rot = vision_rotary(%q, %patch_pos) {head_dim=4, heads=2, theta=10000.0} : f32[P,8] loc(0)
  %k_rot = vision_rotary(%k, %patch_pos) {head_dim=4, heads=2, theta=10000.0} : f32[P,8] loc(0)
  %attn = segment_attention(%q_rot, %k_rot, %v, %image_offsets) {head_dim=4, heads=2} : f32[P,8] loc(0)
  %out = linear(%attn, @o) : f32[P,8] loc(0)
  output %out
}
)";
constexpr char kFuseOut9[] = R"(graph t (I<=2, P<=8) {
  param @w : f32[24,8]
  param @o : f32[8,8]
  input %x : f32[P,8]
  input %patch_pos : i32[P,4]
  input %image_offsets : i32[I+1]
  %qkv = linear(%x, @w) : f32[P,24] loc(0)
  %qkv_rot = vision_qkv_rotary(%qkv, %patch_pos) {head_dim=4, heads=2, theta=10000.0} : f32[P,24] loc(0)
  %attn = packed_segment_attention(%qkv_rot, %image_offsets) {head_dim=4, heads=2} : f32[P,8] loc(0)
  %out = linear(%attn, @o) : f32[P,8] loc(0)
  output %out
}
)";

TEST(Fuse, VisionQkvAttention) {
  ExpectRewrite(FusePass(std::vector<std::string>{"vision-qkv-attention"}), kFuseIn9, kFuseOut9);
}

// Not when a slice has another user (k kept for something else), nor when the slices are not q, k, v.
TEST(Fuse, VisionQkvAttentionNeedsThePatternWhole) {
  std::string shared = kFuseIn9;
  shared.replace(shared.find("output %out"), 11, "output %out, %k");
  ExpectNoChange(FusePass(std::vector<std::string>{"vision-qkv-attention"}), shared.c_str());
  std::string swapped = kFuseIn9;
  swapped.replace(swapped.find("%q_rot, %k_rot, %v"), 18, "%k_rot, %q_rot, %v");
  ExpectNoChange(FusePass(std::vector<std::string>{"vision-qkv-attention"}), swapped.c_str());
}

}  // namespace
}  // namespace ag::passes
