#include "runtime/cuda_launches.h"

#include <gtest/gtest.h>

#include <utility>

#include "absl/algorithm/container.h"
#include "ir/quant.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/linear_split.h"
#include "passes/quantize.h"
#include "tests/testing/tiny_glm.h"

namespace ag::runtime {
namespace {

// Per layer of tiny-glm's fused plan (head_dim 16: a flash build): decode is one launch a step but
// for attention's combine step where the context is sliced; the linears apply their norm prologues
// themselves to kLinearNormMaxRows rows (the GEMV, the staged skinny kernel), past them a launch
// normalises x first; a prefill's attention is one flash launch.
TEST(CudaLaunches, FollowTheDispatchRules) {
  const testing::TinyGlm tiny;
  const compiler::Plan& plan = tiny.plan;
  int64_t steps = 0, norm_prologues = 0, attention = 0;
  for (const compiler::PlanStep& step : plan.decoder().steps) {
    if (step.layer != 0) continue;
    ++steps;
    norm_prologues += step.kernel == ir::OpId::k_norm_linear || step.kernel == ir::OpId::k_norm_gate_up_silu ||
                      step.kernel == ir::OpId::k_norm_qkv_rope_kv_write;
    attention += step.kernel == ir::OpId::k_paged_attention;
  }
  ASSERT_GT(norm_prologues, 0) << "the fused plan normalises inside its linears";
  ASSERT_EQ(attention, 1);

  // Batch 1 at 4096 tokens: 2 KV heads, a group of 2: sliced, so a combine launch follows.
  const cuda::AttentionGeometry sliced = cuda::PlanAttention(1, 2, 2, 4096, 132);
  ASSERT_GT(sliced.slices, 1);
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 1, 4096}), steps + 1);
  // Batches 8, 9, 32, 33, 64 and 65: the staged skinny kernel normalises x itself to 64 rows.
  for (int64_t batch : {8, 9, 32, 33, 64, 65}) {
    SCOPED_TRACE(batch);
    const cuda::AttentionGeometry geometry = cuda::PlanAttention(batch, 2, 2, 4096, 132);
    EXPECT_EQ(CudaLaunchesPerLayer(plan, {batch, 1, 4096}),
              steps + (geometry.slices > 1 ? 1 : 0) + (batch > cuda::kLinearNormMaxRows ? norm_prologues : 0));
  }
  // A 512-token prompt: a launch normalises x before each normed GEMM, flash attention is one launch.
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 512, 512}), steps + norm_prologues);
}

// GLM-4-9B's geometry (head_dim 128, groups of 16, a bf16 cache) takes the grouped-query decode
// kernel, whose cluster merges its slices at context 512 (no combine launch at batches 1-64); batch
// 1 at 4096 keys keeps the combine step. An 8-bit cache takes the slice kernel and its combine (and
// its QKV step quantizes K and V in a launch of its own).
TEST(CudaLaunches, GroupedQueryDecodeMergesSlicesInACluster) {
  const char* text = R"({"model_type":"glm","hidden_size":4096,"intermediate_size":13696,"num_hidden_layers":2,
    "num_attention_heads":32,"num_key_value_heads":2,"head_dim":128,"vocab_size":1024,"attention_bias":true,
    "max_position_embeddings":131072,"partial_rotary_factor":0.5,"tie_word_embeddings":false,"dtype":"bfloat16"})";
  const glm::ModelConfig config = *glm::ParseModelConfig(text, "config.json");
  compiler::CompileOptions options;
  options.build.dtype = ir::DType::kBF16;
  const compiler::Plan plan = compiler::Compile(config, options)->plan;
  int64_t steps = 0;
  for (const compiler::PlanStep& step : plan.decoder().steps) steps += step.layer == 0;
  for (int64_t batch : {1, 8, 32, 64}) {
    SCOPED_TRACE(batch);
    EXPECT_EQ(CudaLaunchesPerLayer(plan, {batch, 1, 512}), steps);
  }
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 1, 1000}), steps);  // a bucket of 1,024: 8 slices of two tiles
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 1, 4096}), steps + 1);
  options.build.kv_dtype = ir::DType::kF8E4M3;
  const compiler::Plan fp8 = compiler::Compile(config, options)->plan;
  EXPECT_EQ(CudaLaunchesPerLayer(fp8, {1, 1, 512}) - CudaLaunchesPerLayer(plan, {1, 1, 512}), 2);
}

// GLM-4-0414's layout (tiny-glm4): the sandwich norm after attention folded into gate/up is no
// launch of its own at one row (the GEMV computes it), one at more rows and for a quantized weight.
TEST(CudaLaunches, SandwichNormFoldIsFreeAtOneRow) {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm4");
  ASSERT_TRUE(config.ok()) << config.status();
  for (const bool quantized : {false, true}) {
    compiler::CompileOptions options;
    if (quantized) options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int8"));
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    int folds = 0;
    for (const compiler::PlanStep& step : compiled->plan.decoder().steps) {
      if (step.kernel != ir::OpId::k_residual_norm_gate_up_silu) continue;
      ++folds;
      // One row: the GEMV alone, or rms_norm_residual's kernel and the int8 codes kernel (normalising x itself).
      EXPECT_EQ(CudaStepLaunches(compiled->plan, step, {1, 1, 512}), quantized ? 2 : 1) << "quantized " << quantized;
      // Eight: rms_norm_residual's kernel, then the staged skinny kernel (or x normalised, then the codes kernel).
      EXPECT_EQ(CudaStepLaunches(compiled->plan, step, {8, 1, 512}), quantized ? 3 : 2) << "quantized " << quantized;
    }
    EXPECT_EQ(folds, config->num_layers);
  }
}

// Layer 0's quantized linears and the segments they launch the codes kernels over (a piece each; a
// fused gate/up is one).
std::pair<int64_t, int64_t> QuantizedLinears(const compiler::Plan& plan) {
  int64_t linears = 0, segments = 0;
  for (const compiler::PlanStep& step : plan.decoder().steps) {
    if (step.layer != 0) continue;
    const int matrix = ir::GetOpInfo(step.kernel).matrix_operand;
    if (matrix < 0 || step.operands[matrix].kind != compiler::TensorKind::kWeight) continue;
    const compiler::WeightEntry& w = plan.weights[step.operands[matrix].index];
    if (!w.quantized()) continue;
    ++linears;
    segments += step.kernel == ir::OpId::k_norm_gate_up_silu ? 1 : static_cast<int64_t>(w.pieces.size());
  }
  return {linears, segments};
}

// A quantized plan (int8 body): up to kQuantLinearMaxRows rows every segment is one launch of the
// codes or skinny kernels, past 64 rows one per 64-row chunk, after a launch normalising x where the
// linear has a norm (but at one row); more rows one launch of the in-load GEMM a segment, as the
// bf16 plan launches one GEMM a linear, each after its normalising launch.
TEST(CudaLaunches, QuantizedLinearsLaunchPerRowChunk) {
  compiler::CompileOptions options;
  options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int8"));
  options.build.max_seqs = 128;
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const compiler::Plan& plan = compiled->plan;
  const auto [linears, segments] = QuantizedLinears(plan);
  ASSERT_GT(linears, 0);
  int64_t norm_linears = 0;  // the quantized ones with a norm prologue
  for (const compiler::PlanStep& step : plan.decoder().steps) {
    const int matrix = ir::GetOpInfo(step.kernel).matrix_operand;
    const bool norm = step.kernel == ir::OpId::k_norm_linear || step.kernel == ir::OpId::k_norm_gate_up_silu ||
                      step.kernel == ir::OpId::k_norm_qkv_rope_kv_write;
    if (step.layer == 0 && norm && matrix >= 0 && plan.weights[step.operands[matrix].index].quantized()) ++norm_linears;
  }
  ASSERT_GT(norm_linears, 0);
  const int64_t at64 = CudaLaunchesPerLayer(plan, {64, 1, 512});
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {100, 1, 512}), at64 + segments) << "a second chunk a segment";
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {128, 1, 512}), at64 + segments);
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {8, 1, 512}), CudaLaunchesPerLayer(plan, {32, 1, 512}))
      << "the codes kernel's 8-row blocks and the skinny kernel both take x normalised by a launch";
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {17, 1, 512}), CudaLaunchesPerLayer(plan, {32, 1, 512}));
  absl::StatusOr<compiler::CompileResult> bf16 = compiler::Compile(*config, compiler::CompileOptions{});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 512, 512}) - CudaLaunchesPerLayer(bf16->plan, {1, 512, 512}),
            segments - linears)
      << "a 512-token prompt: a GEMM a segment, not a dequantization a segment and a GEMM; x normalised "
         "by a launch first in both";
  EXPECT_EQ(CudaLaunchesPerLayer(plan, {1, 1, 512}) - CudaLaunchesPerLayer(bf16->plan, {1, 1, 512}), segments - linears)
      << "batch 1: the 8-bit codes kernel normalises x itself, as the GEMV does";
}

// At one row a norm linear with an int4 piece takes x normalised by a launch of its own (the int4
// codes kernel is as bound by instructions as by the bus: cuda::QuantKernelNormalises).
TEST(CudaLaunches, Int4NormLinearsNormaliseFirstAtOneRow) {
  compiler::CompileOptions options;
  options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int4:g32"));
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<compiler::CompileResult> int4 = compiler::Compile(*config, options);
  ASSERT_TRUE(int4.ok()) << int4.status();
  options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int8"));
  absl::StatusOr<compiler::CompileResult> int8 = compiler::Compile(*config, options);
  ASSERT_TRUE(int8.ok()) << int8.status();
  int64_t int4_norm_linears = 0;
  for (const compiler::PlanStep& step : int4->plan.decoder().steps) {
    if (step.layer != 0) continue;
    const bool norm = step.kernel == ir::OpId::k_norm_linear || step.kernel == ir::OpId::k_norm_gate_up_silu ||
                      step.kernel == ir::OpId::k_norm_qkv_rope_kv_write;
    const int matrix = ir::GetOpInfo(step.kernel).matrix_operand;
    if (!norm || matrix < 0) continue;
    const compiler::WeightEntry& w = int4->plan.weights[step.operands[matrix].index];
    int4_norm_linears += absl::c_any_of(w.pieces, [](const compiler::WeightPiece& p) {
      return p.quant.kind == ir::QuantKind::kInt4;
    });
  }
  ASSERT_GT(int4_norm_linears, 0);
  EXPECT_EQ(CudaLaunchesPerLayer(int4->plan, {1, 1, 512}) - CudaLaunchesPerLayer(int8->plan, {1, 1, 512}),
            int4_norm_linears + QuantizedLinears(int4->plan).second - QuantizedLinears(int8->plan).second);
}

// A W8A8 plan (`int8:act-int8`) rounds each linear's x by one launch of its own, which also
// normalises it where the linear has a norm prologue: one more launch a linear at one row (where
// the 8-bit codes kernel would have normalised x itself), one more a linear without a norm at
// more rows (a norm linear's separate RMSNorm launch becomes the rounding one).
TEST(CudaLaunches, W8a8LinearsRoundTheirInputsFirst) {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm");
  ASSERT_TRUE(config.ok()) << config.status();
  compiler::CompileOptions options;
  options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int8"));
  absl::StatusOr<compiler::CompileResult> int8 = compiler::Compile(*config, options);
  ASSERT_TRUE(int8.ok()) << int8.status();
  options.quant = passes::DefaultQuantPolicy(*ir::ParseQuantFormat("int8:act-int8"));
  absl::StatusOr<compiler::CompileResult> w8a8 = compiler::Compile(*config, options);
  ASSERT_TRUE(w8a8.ok()) << w8a8.status();
  const int64_t linears = QuantizedLinears(w8a8->plan).first;
  int64_t without_norm = 0;
  for (const compiler::PlanStep& step : w8a8->plan.decoder().steps) {
    if (step.layer != 0 || compiler::StepInputQuant(w8a8->plan, step) != ir::ActQuant::kInt8) continue;
    without_norm += step.kernel != ir::OpId::k_norm_linear && step.kernel != ir::OpId::k_norm_gate_up_silu &&
                    step.kernel != ir::OpId::k_norm_qkv_rope_kv_write;
  }
  ASSERT_EQ(linears, 4) << "qkv, o, gate_up, down";
  ASSERT_EQ(without_norm, 2) << "o and down";
  auto extra = [&](LaunchShape shape) {
    return CudaLaunchesPerLayer(w8a8->plan, shape) - CudaLaunchesPerLayer(int8->plan, shape);
  };
  EXPECT_EQ(extra({1, 1, 512}), linears);
  EXPECT_EQ(extra({8, 1, 512}), without_norm);
  EXPECT_EQ(extra({1, 512, 512}), without_norm);
}

}  // namespace
}  // namespace ag::runtime
