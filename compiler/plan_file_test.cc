#include "compiler/plan_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "compiler/driver.h"
#include "compiler/summary.h"
#include "models/glm/config.h"
#include "tests/testing/golden.h"

namespace ag::compiler {
namespace {

Plan TinyPlan(const char* fixture = "tiny-glm") {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/" + fixture);
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<CompileResult> compiled = Compile(*config, {});
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled->plan;
}

// Rewrites the checksum so that a deliberately edited payload passes the integrity check.
std::string Reseal(const std::string& file) { return SealPlanPayload(absl::string_view(file).substr(32)); }

std::string ErrorOf(const std::string& bytes) {
  absl::StatusOr<Plan> p = DeserializePlan(bytes, "x.agplan");
  EXPECT_FALSE(p.ok());
  return p.ok() ? "" : std::string(p.status().message());
}

TEST(PlanFile, RoundTrips) {
  for (const char* fixture : {"tiny-glm", "tiny-glm4", "tiny-chatglm"}) {
    const Plan plan = TinyPlan(fixture);
    const std::string bytes = SerializePlan(plan);
    absl::StatusOr<Plan> back = DeserializePlan(bytes, "x.agplan");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(SerializePlan(*back), bytes);
    EXPECT_EQ(DescribeSteps(*back, back->decoder()), DescribeSteps(plan, plan.decoder()));
    EXPECT_EQ(back->weights.size(), plan.weights.size());
  }
}

TEST(PlanFile, TruncatedCorruptAndWrongVersion) {
  const std::string bytes = SerializePlan(TinyPlan());
  EXPECT_NE(ErrorOf(bytes.substr(0, 20)).find("bad magic or too short"), std::string::npos);
  EXPECT_NE(ErrorOf(bytes.substr(0, bytes.size() - 1)).find("truncated"), std::string::npos);
  EXPECT_NE(ErrorOf(bytes + "x").find("truncated or padded"), std::string::npos);
  std::string corrupt = bytes;
  corrupt[bytes.size() / 2] ^= 0x40;
  EXPECT_NE(ErrorOf(corrupt).find("checksum mismatch"), std::string::npos);
  std::string version = bytes;
  version[8] = 6;  // the previous format (before static KV scales)
  EXPECT_NE(ErrorOf(version).find("version 6 is not supported"), std::string::npos);
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_NE(ErrorOf(magic).find("not an .agplan file"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("too short"), std::string::npos);
}

TEST(PlanFile, ResealedGarbageIsRejectedWithoutCrashing) {
  const std::string bytes = SerializePlan(TinyPlan());
  // Flip every byte position of the payload once (a sample of them), reseal, and decode:
  // each must decode into a valid plan or fail cleanly.
  for (size_t i = 32; i < bytes.size(); i += 7) {
    std::string edited = bytes;
    edited[i] = static_cast<char>(edited[i] ^ 0xFF);
    absl::StatusOr<Plan> p = DeserializePlan(Reseal(edited), "x.agplan");
    if (p.ok()) {
      EXPECT_TRUE(ValidatePlan(*p).ok());
    }
  }
}

Plan QuantizedPlan() {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  EXPECT_TRUE(config.ok()) << config.status();
  CompileOptions options;
  options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int4:g32"));
  absl::StatusOr<CompileResult> compiled = Compile(*config, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled->plan;
}

const WeightEntry& Named(const Plan& plan, absl::string_view name) {
  for (const WeightEntry& w : plan.weights) {
    if (w.name == name) return w;
  }
  ADD_FAILURE() << "no weight " << name;
  return plan.weights.front();
}

TEST(PlanFile, WeightFormatsRoundTripAndCountTheirBytes) {
  const Plan plan = QuantizedPlan();
  const std::string bytes = SerializePlan(plan);
  absl::StatusOr<Plan> back = DeserializePlan(bytes, "x.agplan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializePlan(*back), bytes);
  const WeightEntry& qkv = Named(*back, "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(qkv.FormatName(), "int4:g32:asym+fp8e4m3");
  EXPECT_EQ(Named(*back, "lm_head.weight").FormatName(), "fp8e4m3");
  EXPECT_EQ(Named(*back, "model.embed_tokens.weight").FormatName(), "f32");
  // tiny-glm: q [64, 64] in int4 g32 (codes, bf16 scales, zeros), k and v [32, 64] each in fp8 (codes, f32 scales).
  EXPECT_EQ(qkv.DeviceBytes(), 64 * 32 + 64 * 2 * 3 + 2 * (32 * 64 + 32 * 4));
  const PlanSummary s = Summarize(*back);
  int64_t total = 0;
  for (const auto& [format, b] : s.bytes_by_format) total += b;
  EXPECT_EQ(total, s.weight_bytes);
  EXPECT_EQ(s.bytes_by_format.size(), 3u);  // f32, fp8e4m3, int4:g32:asym
  EXPECT_LT(s.weight_bytes, Summarize(TinyPlan()).weight_bytes / 3);
}

TEST(PlanValidation, WeightFormatsMustFitTheirWeightAndUse) {
  const Plan good = QuantizedPlan();
  ASSERT_TRUE(ValidatePlan(good).ok());
  auto error = [](const Plan& p) { return std::string(ValidatePlan(p).message()); };
  Plan p = good;
  for (WeightEntry& w : p.weights) {
    if (w.name == "model.embed_tokens.weight") w.pieces[0].quant = *ir::ParseQuantFormat("int8");
  }
  EXPECT_NE(error(p).find("(@model.embed_tokens.weight) is stored quantized; only a linear weight may be"),
            std::string::npos) << error(p);
  p = good;
  for (WeightEntry& w : p.weights) {
    if (w.name == "lm_head.weight") w.pieces[0].quant.group = 48;
  }
  EXPECT_NE(error(p).find("weight lm_head.weight: bad format"), std::string::npos) << error(p);
  p = good;
  for (WeightEntry& w : p.weights) {
    if (w.name == "model.norm.weight") w.pieces[0].quant = *ir::ParseQuantFormat("int8");
  }
  EXPECT_NE(error(p).find("only a matrix [N, K] can be stored as int8:channel:sym"), std::string::npos) << error(p);
  p = good;
  p.kv.dtype = ir::DType::kI64;  // a KV cache is the model's dtype or 8-bit
  EXPECT_NE(error(p).find("KV-cache geometry does not match the model"), std::string::npos) << error(p);
  p = good;
  p.kv.dtype = ir::DType::kI8;  // the states must say so too
  EXPECT_NE(error(p).find("must be i8[2,NB,16,2,16]"), std::string::npos) << error(p);
  // Static KV scales: two one-value fp32 weights a layer, beside an 8-bit cache only.
  p = good;
  p.kv.scale_weights = {0, 1};
  EXPECT_NE(error(p).find("static KV scales need an 8-bit cache and two scales a layer"), std::string::npos) << error(p);
  p.kv.dtype = ir::DType::kF8E4M3;
  p.kv.scale_weights.assign(2 * p.kv.num_layers, 0);
  EXPECT_NE(error(p).find("static KV scale 0 is not a distinct one-value fp32 weight"), std::string::npos) << error(p);
  // A format code past the known ones, resealed: the reader refuses it.
  p = good;
  for (WeightEntry& w : p.weights) {
    if (w.name == "lm_head.weight") w.pieces[0].quant.kind = static_cast<ir::QuantKind>(9);
  }
  EXPECT_NE(ErrorOf(SerializePlan(p)).find("unknown weight format code"), std::string::npos);
}

TEST(PlanValidation, CatchesInconsistentPlans) {
  const Plan good = TinyPlan();
  ASSERT_TRUE(ValidatePlan(good).ok());
  Plan p = good;
  p.decoder().steps[1].results[0].index = p.decoder().arena_bytes;  // outside the arena
  EXPECT_NE(ValidatePlan(p).message().find("outside the arena"), std::string::npos);
  p = good;
  p.decoder().steps[1].operands[0].index += 256;  // reads memory nothing wrote
  EXPECT_NE(ValidatePlan(p).message().find("before anything writes it"), std::string::npos) << ValidatePlan(p);
  p = good;
  p.decoder().steps[1].operands[1].type.shape[0] = ir::Dim(65);  // weight type mismatch
  EXPECT_FALSE(ValidatePlan(p).ok());
  p = good;
  p.decoder().steps[2].attrs["heads"] = int64_t{3};  // shape rule fails
  EXPECT_FALSE(ValidatePlan(p).ok());
  p = good;
  p.weights[0].pieces[0].row_end += 1;
  EXPECT_NE(ValidatePlan(p).message().find("bad slice"), std::string::npos) << ValidatePlan(p);
  p = good;
  p.decoder().inputs[0].name = "bogus";
  EXPECT_NE(ValidatePlan(p).message().find("unknown runtime input"), std::string::npos);
}

TEST(PlanValidation, ShardsMustFitTheDegreeAndTheWeight) {
  CompileOptions options;
  options.tp = 2;
  const Plan good = Compile(*glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm"), options)->plan;
  ASSERT_TRUE(ValidatePlan(good).ok());
  int sharded = -1;  // a column-split weight (o_proj or down_proj)
  for (size_t i = 0; i < good.weights.size() && sharded < 0; ++i) {
    if (good.weights[i].pieces[0].shard.axis == 1) sharded = static_cast<int>(i);
  }
  ASSERT_GE(sharded, 0);
  const struct {
    ir::ShardSpec shard;
    const char* error;
  } cases[] = {{{1, 3}, "bad shard (axis 1, parts 3)"},   // 3 does not divide tp 2
               {{2, 2}, "bad shard (axis 2, parts 2)"},   // no such axis
               {{-1, 2}, "bad shard (axis -1, parts 2)"}, // whole, but in parts
               {{1, 1}, "has other columns"},            // one part of all the columns: the weight is half as wide
               {{0, 2}, "has other columns"}};           // rows split instead: the columns are all there
  for (const auto& c : cases) {
    Plan p = good;
    p.weights[sharded].pieces[0].shard = c.shard;
    EXPECT_NE(ValidatePlan(p).message().find(c.error), std::string::npos) << c.error << ": " << ValidatePlan(p);
  }
  Plan p = good;
  p.tp = 4;  // the gather's parts and the plan's degree disagree
  EXPECT_FALSE(ValidatePlan(p).ok());
}

// Regressions (fuzzing): numbers that wrapped int64 arithmetic let plans
// through that then read or wrote out of bounds. Each must be rejected by
// validation, and by the file reader behind a correct checksum.
TEST(PlanValidation, RejectsSizesThatWouldOverflow) {
  const Plan good = TinyPlan();
  auto expect_rejected = [](const Plan& p, const char* what) {
    EXPECT_FALSE(ValidatePlan(p).ok()) << what;
    EXPECT_FALSE(DeserializePlan(SerializePlan(p), "x.agplan").ok()) << what;
  };
  Plan p = good;
  p.decoder().steps[1].results[0].index = INT64_MAX - 255;  // 2^63 - 256: index + bytes wrapped
  expect_rejected(p, "arena offset 2^63-256");
  p = good;
  for (PlanStep& step : p.decoder().steps) {
    if (step.attrs.contains("heads")) step.attrs["heads"] = int64_t{4} + (int64_t{1} << 62);  // heads*head_dim wrapped
  }
  expect_rejected(p, "heads 4 + 2^62");
  p = good;
  p.decoder().arena_bytes = int64_t{1} << 62;
  expect_rejected(p, "arena of 2^62 bytes");
  p = good;
  p.weights[0].shape = {int64_t{1} << 32, int64_t{1} << 32};
  expect_rejected(p, "weight of 2^64 elements");
  p = good;
  p.kv.block_size = int64_t{1} << 40;
  expect_rejected(p, "KV block of 2^40 tokens");
  p = good;
  p.model.max_position_embeddings = int64_t{1} << 40;
  expect_rejected(p, "2^40 positions");
}

// Found by fuzzing: %tokens wired in as the slot mapping (both i32[T]) passed
// validation, and the KV write then indexed the cache with token ids.
TEST(PlanValidation, IndexOperandsMustBeTheirRuntimeInputs) {
  const Plan good = TinyPlan();
  int tokens = good.decoder().FindInput("tokens"), positions = good.decoder().FindInput("positions");
  ASSERT_GE(tokens, 0);
  ASSERT_GE(positions, 0);
  int checked = 0;
  for (size_t i = 0; i < good.decoder().steps.size(); ++i) {
    for (size_t j = 0; j < good.decoder().steps[i].operands.size(); ++j) {
      const PlanTensor& t = good.decoder().steps[i].operands[j];
      if (t.kind != TensorKind::kInput || !(t.type == good.decoder().inputs[tokens].type)) continue;
      Plan p = good;
      // Another input of the same type: tokens for anything else, positions for tokens.
      p.decoder().steps[i].operands[j].index = good.decoder().inputs[t.index].name == "tokens" ? positions : tokens;
      const absl::Status s = ValidatePlan(p);
      EXPECT_NE(s.message().find("must be the runtime input %"), std::string::npos) << s;
      ++checked;
    }
  }
  EXPECT_GE(checked, 5);  // embedding, and positions and slot mapping of each layer
}

TEST(PlanValidation, ConfigFingerprintMustMatchTheModel) {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  ASSERT_TRUE(config.ok());
  const Plan plan = TinyPlan();
  EXPECT_TRUE(CheckPlanAgainstModel(plan, *config, nullptr).ok());
  glm::ModelConfig other = *config;
  other.rope_theta = 500000;
  const absl::Status s = CheckPlanAgainstModel(plan, other, nullptr);
  EXPECT_NE(s.message().find("plan has 'rope_theta=10000', the model has 'rope_theta=500000'"), std::string::npos)
      << s;
}

// A plan edited behind a fingerprint that still matches (fuzzing found these
// ran): every model fact it carries must be the config's, and numeric
// attributes must be what a compiler could produce.
TEST(PlanValidation, ModelFactsAndAttributesMustBeTheConfigs) {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  ASSERT_TRUE(config.ok());
  auto expect = [&](const Plan& p, const std::string& want) {
    absl::Status s = ValidatePlan(p);
    if (s.ok()) s = CheckPlanAgainstModel(p, *config, nullptr);
    EXPECT_NE(s.message().find(want), std::string::npos) << want << " in: " << s;
  };
  Plan p = TinyPlan();
  p.model.eos_token_ids.push_back(7);
  expect(p, "end-of-sequence ids (1,7) are not the model's (1)");
  p = TinyPlan();
  p.model.max_position_embeddings = 4096;
  expect(p, "4096 positions; its config says 256");
  int fused = -1;
  for (size_t i = 0; i < p.decoder().steps.size() && fused < 0; ++i) {
    if (p.decoder().steps[i].kernel == ir::OpId::k_norm_qkv_rope_kv_write) fused = static_cast<int>(i);
  }
  ASSERT_GE(fused, 0);
  for (auto [attr, value, want] : {std::tuple{"eps", ir::AttrValue{INFINITY}, "eps must be in [0, 1]"},
                                   std::tuple{"theta", ir::AttrValue{5e-324}, "theta must be in [1, 1e+12]"},
                                   std::tuple{"eps", ir::AttrValue{1e-3}, "eps is 0.001 but the model's config gives"},
                                   std::tuple{"theta", ir::AttrValue{20000.0}, "theta is 20000.0 but"},
                                   std::tuple{"rot", ir::AttrValue{int64_t{4}}, "rot is 4 but"}}) {
    p = TinyPlan();
    p.decoder().steps[fused].attrs[attr] = value;
    expect(p, want);
  }
  // The folded sandwich norm's own eps (tiny-glm4's layout) is checked as the others are.
  config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm4");
  ASSERT_TRUE(config.ok());
  const Plan glm4 = TinyPlan("tiny-glm4");
  int folded = -1;
  for (size_t i = 0; i < glm4.decoder().steps.size() && folded < 0; ++i) {
    if (glm4.decoder().steps[i].kernel == ir::OpId::k_residual_norm_gate_up_silu) folded = static_cast<int>(i);
  }
  ASSERT_GE(folded, 0);
  for (auto [value, want] : {std::pair{ir::AttrValue{INFINITY}, "residual_eps must be in [0, 1]"},
                             std::pair{ir::AttrValue{1e-3}, "residual_eps is 0.001 but the model's config gives"}}) {
    p = glm4;
    p.decoder().steps[folded].attrs["residual_eps"] = value;
    expect(p, want);
  }
}

TEST(Summary, LaunchesPerLayerAfterFusion) {
  EXPECT_EQ(Summarize(TinyPlan("tiny-glm")).steps_per_layer, 5);
  EXPECT_EQ(Summarize(TinyPlan("tiny-glm4")).steps_per_layer, 6) << "the sandwich norm after attention folded";
  EXPECT_EQ(Summarize(TinyPlan("tiny-chatglm")).steps_per_layer, 5);
  const char* text = R"({"model_type":"glm","hidden_size":4096,"intermediate_size":13696,"num_hidden_layers":40,
    "num_attention_heads":32,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,"eos_token_id":[151329]})";
  absl::StatusOr<glm::ModelConfig> c = glm::ParseModelConfig(text, "config.json");
  ASSERT_TRUE(c.ok());
  CompileOptions options;
  options.build.dtype = ir::DType::kBF16;
  absl::StatusOr<CompileResult> compiled = Compile(*c, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const PlanSummary s = Summarize(compiled->plan);
  EXPECT_EQ(s.steps_per_layer, 5);
  EXPECT_EQ(s.total_steps, 40 * 5 + 4);
  EXPECT_EQ(s.kernels.at("norm_qkv_rope_kv_write"), 40);
}

}  // namespace
}  // namespace ag::compiler
