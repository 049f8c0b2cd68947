// Quantized plans end to end on the CPU.
//
// Exact by construction: each fixture's linear weights are replaced by
// weights their format holds exactly (s * (q - z) with power-of-two scales,
// every group reaching its extremes), so the quantized plan must give the
// full-precision plan's logits bit for bit — which checks the pass, the plan
// file, the loader's quantizer and its row/column slicing together — and at
// tp 2 the one-rank logits within 1e-5. Then the real fixtures with the
// default policies: how far each format moves the logits, bounded.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <set>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "compiler/plan_file.h"
#include "kernels/ref/quant.h"
#include "runtime/memory_check.h"
#include "runtime/quant_storage.h"
#include "runtime/tp_backend.h"
#include "runtime/weights.h"
#include "tests/testing/engine_runner.h"
#include "tests/testing/safetensors_writer.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using testing::GoldenCase;

ir::QuantFormat Format(absl::string_view text) { return *ir::ParseQuantFormat(text); }

compiler::CompileOptions Options(const passes::QuantPolicy& policy, int tp = 1) {
  compiler::CompileOptions options;
  options.build.max_batch_tokens = 64;
  options.quant = policy;
  options.tp = tp;
  return options;
}

// Row r of a weight that `format` stores exactly.
void ExactRow(const ir::QuantFormat& format, int64_t r, int64_t k, std::mt19937& rng, float* row) {
  const int64_t groups = format.Groups(k), len = k / groups;
  for (int64_t g = 0; g < groups; ++g) {
    const float s = std::ldexp(1.0f, -7 - static_cast<int>((r + g) % 3));
    float* x = row + g * len;
    if (format.kind == ir::QuantKind::kFp8E4M3) {
      for (int64_t i = 0; i < len; ++i) {
        const uint8_t code = static_cast<uint8_t>(rng() % 0x50);  // |value| <= 2^3: weights of a sane size
        x[i] = (rng() % 2 ? s : -s) / 32.0f * ref::E4M3ToFloat(code);
      }
      x[rng() % len] = 448.0f * s / 32.0f;  // the row's largest: scale = amax / 448
      continue;
    }
    const int levels = (1 << format.bits()) - 1, half = 1 << (format.bits() - 1);
    const int z = format.symmetric ? half : 1 + static_cast<int>(rng() % (levels - 1));
    const int lo = format.symmetric ? 1 : 0;
    const float step = format.bits() == 8 ? s / 8.0f : s;
    for (int64_t i = 0; i < len; ++i) x[i] = step * static_cast<float>(lo + static_cast<int>(rng() % (levels - lo)) - z);
    x[0] = step * static_cast<float>(lo - z);
    x[len - 1] = step * static_cast<float>(format.symmetric ? half - 1 : levels - z);
  }
}

// A copy of `fixture` in `dir` (F32) whose quantized rows under `plan` are exactly representable.
void WriteExactModel(const std::string& fixture, const compiler::Plan& plan, const fs::path& dir) {
  const std::string src = testing::TestDataDir() + "/" + fixture;
  fs::create_directories(dir);
  for (const char* file : {"config.json", "generation_config.json"}) {
    if (fs::exists(src + "/" + file)) fs::copy_file(src + "/" + file, dir / file, fs::copy_options::overwrite_existing);
  }
  absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(src);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::map<std::string, testing::FakeTensor> tensors;
  for (const std::string& name : ckpt->Names()) {
    const glm::TensorView* view = *ckpt->Find(name);
    testing::FakeTensor t{name, "F32", view->shape, {}};
    int64_t n = 1;
    for (int64_t d : view->shape) n *= d;
    t.values.resize(static_cast<size_t>(n));
    glm::ConvertToFloat(view->dtype, view->data, n, t.values.data());
    tensors[name] = std::move(t);
  }
  std::mt19937 rng(99);
  for (const compiler::WeightEntry& w : plan.weights) {
    for (const compiler::WeightPiece& p : w.pieces) {
      if (!p.quant.quantized()) continue;
      testing::FakeTensor& t = tensors.at(p.tensor);
      const int64_t k = t.shape[1];
      for (int64_t r = p.row_begin; r < p.row_end; ++r) ExactRow(p.quant, r, k, rng, t.values.data() + r * k);
    }
  }
  std::vector<testing::FakeTensor> all;
  for (auto& [name, t] : tensors) all.push_back(std::move(t));
  testing::WriteSafetensors((dir / "model.safetensors").string(), all);
}

std::vector<GoldenCase> Cases(const std::string& fixture) {
  std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + fixture);
  for (GoldenCase& c : cases) c.new_tokens.resize(std::min<size_t>(c.new_tokens.size(), 6));
  return cases;
}

struct ExactCase {
  const char* fixture;
  const char* format;
};

class QuantizedExactly : public ::testing::TestWithParam<ExactCase> {};

TEST_P(QuantizedExactly, GivesTheFullPrecisionLogitsBitForBitAndTheSameAtTp2) {
  const ExactCase& c = GetParam();
  passes::QuantPolicy policy;
  policy.body = Format(c.format);
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/" + c.fixture);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<compiler::CompileResult> quantized = compiler::Compile(*config, Options(policy));
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  int quantized_pieces = 0;
  for (const compiler::WeightEntry& w : quantized->plan.weights) {
    for (const compiler::WeightPiece& p : w.pieces) quantized_pieces += p.quant == policy.body;
  }
  EXPECT_GE(quantized_pieces, 4 * config->num_layers) << "every layer's linears";

  const fs::path dir = fs::temp_directory_path() / absl::StrCat("autoglm_quant_", c.fixture, "_", getpid());
  fs::remove_all(dir);
  WriteExactModel(c.fixture, quantized->plan, dir);
  // Through the plan file, as a user's plan goes.
  ASSERT_TRUE(compiler::WritePlanFile(quantized->plan, (dir / "q.agplan").string()).ok());
  absl::StatusOr<compiler::Plan> loaded = compiler::ReadPlanFile((dir / "q.agplan").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  const std::vector<GoldenCase> cases = Cases(c.fixture);
  const std::vector<testing::Generation> plain = testing::FixtureRunner(dir.string(), Options({})).Run(cases);
  const std::vector<testing::Generation> quant = testing::FixtureRunner(dir.string(), *loaded).Run(cases);
  ASSERT_EQ(quant.size(), plain.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(quant[i].tokens, plain[i].tokens) << c.format << " case " << i;
    EXPECT_EQ(testing::MaxAbsDiff(quant[i].logits, plain[i].logits), 0.0) << c.format << " case " << i;
  }
  absl::StatusOr<compiler::CompileResult> sharded = compiler::Compile(*config, Options(policy, 2));
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  const std::vector<testing::Generation> tp2 =
      testing::FixtureRunner(dir.string(), sharded->plan, runtime::CreateCpuTensorParallel(2)).Run(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(tp2[i].tokens, quant[i].tokens) << c.format << " tp 2, case " << i;
    EXPECT_LE(testing::MaxAbsDiff(tp2[i].logits, quant[i].logits), 1e-5) << c.format << " tp 2, case " << i;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedExactly,
    ::testing::Values(ExactCase{"tiny-glm", "fp8e4m3"}, ExactCase{"tiny-glm", "int8"}, ExactCase{"tiny-glm", "int8:g32:asym"},
                      ExactCase{"tiny-glm", "int4:g32:sym"}, ExactCase{"tiny-glm", "int4:g32:asym"},
                      ExactCase{"tiny-chatglm", "int4:g32:asym"}, ExactCase{"tiny-chatglm", "fp8e4m3"},
                      ExactCase{"tiny-glm-mqa", "int4:g64:sym"}, ExactCase{"tiny-glm-mqa", "int8:channel:asym"}),
    [](const auto& info) {
      std::string name = absl::StrCat(info.param.fixture, "_", info.param.format);
      for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

// The real fixtures under --quantize's default policies: prompt rows are
// teacher-forced, so their logits compare position for position.
struct LossyCase {
  const char* fixture;
  const char* body;
  double max_logit_diff;    // bound on the worst prompt-row difference
  double min_top1_agreement;  // of the prompt rows' argmax
};

class QuantizedLossy : public ::testing::TestWithParam<LossyCase> {};

TEST_P(QuantizedLossy, StaysNearTheFullPrecisionModel) {
  const LossyCase& c = GetParam();
  passes::QuantPolicy policy = passes::DefaultQuantPolicy(Format(c.body));
  policy.rules.push_back({"*.down_proj", Format("int8"), ""});  // tiny-glm4's FFN of 200 is no multiple of 32
  const std::vector<GoldenCase> cases = Cases(c.fixture);
  const std::vector<testing::Generation> plain = testing::FixtureRunner(c.fixture, Options({})).Run(cases);
  const std::vector<testing::Generation> quant = testing::FixtureRunner(c.fixture, Options(policy)).Run(cases);
  double worst = 0;
  int rows = 0, agree = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const size_t prompt = cases[i].input_ids.size();
    const auto a = testing::FirstRows(quant[i].logits, prompt), b = testing::FirstRows(plain[i].logits, prompt);
    worst = std::max(worst, testing::MaxAbsDiff(a, b));
    for (size_t r = 0; r < a.size(); ++r) {
      ++rows;
      agree += std::max_element(a[r].begin(), a[r].end()) - a[r].begin() ==
               std::max_element(b[r].begin(), b[r].end()) - b[r].begin();
    }
  }
  const double agreement = static_cast<double>(agree) / rows;
  std::printf("%s %s: worst prompt-logit difference %.4f, top-1 agreement %d/%d\n", c.fixture, c.body, worst, agree,
              rows);
  EXPECT_GT(worst, 0.0) << "quantization must change something";
  EXPECT_LE(worst, c.max_logit_diff);
  EXPECT_GE(agreement, c.min_top1_agreement);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedLossy,
                         // Bounds: 1.5x what was measured when written (bench/RESULTS.md, "Quantization accuracy").
                         ::testing::Values(LossyCase{"tiny-glm4", "fp8e4m3", 1.75, 0.7}, LossyCase{"tiny-glm4", "int8", 0.38, 0.85},
                                           LossyCase{"tiny-glm4", "int4:g32", 3.3, 0.45},
                                           LossyCase{"tiny-glm", "int8", 0.37, 0.85}, LossyCase{"tiny-glm", "int4:g32", 4.0, 0.45}),
                         [](const auto& info) {
                           std::string name = absl::StrCat(info.param.fixture, "_", info.param.body);
                           for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

// The 8-bit KV cache: halves the cache's bytes per token (bf16 -> codes and a scale per
// token and KV head), stays near the full-precision cache, and every tensor-parallel degree
// caches the same numbers (each rank quantizes its own KV heads' rows, whole).
struct KvCase {
  const char* fixture;
  ir::DType kv;
  double max_logit_diff;  // 1.5x what was measured when written
};

class KvCache8Bit : public ::testing::TestWithParam<KvCase> {};

TEST_P(KvCache8Bit, HalvesTheCacheAndStaysNearTheFullPrecisionOne) {
  const KvCase& c = GetParam();
  compiler::CompileOptions plain = Options({}), eight = Options({});
  plain.build.dtype = eight.build.dtype = ir::DType::kBF16;
  eight.build.kv_dtype = c.kv;
  const std::vector<GoldenCase> cases = Cases(c.fixture);
  testing::FixtureRunner full(c.fixture, plain), quantized(c.fixture, eight);
  EXPECT_EQ(quantized.plan().kv.dtype, c.kv);
  const compiler::KvGeometry& kv = quantized.plan().kv;
  EXPECT_EQ(kv.BytesPerToken(), kv.num_layers * 2 * kv.kv_heads * (kv.head_dim + 4));
  EXPECT_LT(2 * kv.BytesPerToken(), full.plan().kv.BytesPerToken() * 1.3);
  const std::vector<testing::Generation> a = full.Run(cases), b = quantized.Run(cases);
  double worst = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const size_t prompt = cases[i].input_ids.size();
    worst = std::max(worst, testing::MaxAbsDiff(testing::FirstRows(b[i].logits, prompt), testing::FirstRows(a[i].logits, prompt)));
  }
  std::printf("%s %s KV cache: worst prompt-logit difference %.4f\n", c.fixture, std::string(ir::DTypeName(c.kv)).c_str(), worst);
  EXPECT_GT(worst, 0.0);
  EXPECT_LE(worst, c.max_logit_diff);
  // tp 2 caches what tp 1 does (f32 plans: only the order of the all-reduce's sums differs).
  compiler::CompileOptions one = Options({}), sharded = Options({}, 2);
  one.build.kv_dtype = sharded.build.kv_dtype = c.kv;
  const std::vector<testing::Generation> tp1 = testing::FixtureRunner(c.fixture, one).Run(cases);
  const std::vector<testing::Generation> tp2 =
      testing::FixtureRunner(c.fixture, sharded, runtime::CreateCpuTensorParallel(2)).Run(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(tp2[i].tokens, tp1[i].tokens) << "tp 2, case " << i;
    EXPECT_LE(testing::MaxAbsDiff(tp2[i].logits, tp1[i].logits), 1e-3) << "tp 2, case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvCache8Bit,
                         ::testing::Values(KvCase{"tiny-glm4", ir::DType::kF8E4M3, 0.99}, KvCase{"tiny-glm4", ir::DType::kI8, 0.24},
                                           KvCase{"tiny-glm", ir::DType::kF8E4M3, 0.99}, KvCase{"tiny-glm", ir::DType::kI8, 0.24}),
                         [](const auto& info) {
                           return absl::StrCat(absl::StrReplaceAll(info.param.fixture, {{"-", "_"}}), "_",
                                               ir::DTypeName(info.param.kv));
                         });

// A device keeps an 8-bit cache as codes and fp32 scales: the memory check counts those
// (KvGeometry::BytesPerToken), not two bytes a value.
TEST(KvCache8BitMemory, TheCheckCountsStoredBytes) {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm4");
  ASSERT_TRUE(config.ok()) << config.status();
  compiler::CompileOptions options = Options({});
  options.build.dtype = ir::DType::kBF16;
  options.build.kv_dtype = ir::DType::kF8E4M3;
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(*config, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const compiler::Plan& plan = compiled->plan;
  const compiler::KvGeometry& kv = plan.kv;
  EXPECT_EQ(kv.BytesPerToken(), kv.num_layers * 2 * kv.kv_heads * (kv.head_dim + 4));
  int64_t weights = 0;
  for (const compiler::WeightEntry& w : plan.weights) weights += 2 * w.NumElements();
  const int64_t blocks = 64, available = weights + plan.ArenaBytes() + blocks * kv.block_size * kv.BytesPerToken();
  const runtime::StorageLayout stored{2, 2, 1, 1, true, /*kv_as_stored=*/true}, bf16{2, 2, 1, 1, true, false};
  EXPECT_TRUE(runtime::CheckPlanFits(plan, blocks, stored, 0, available, "GPU memory").ok());
  EXPECT_EQ(runtime::CheckPlanFits(plan, blocks, bf16, 0, available, "GPU memory").code(),
            absl::StatusCode::kResourceExhausted);
}

// Pre-quantized checkpoints, read as they are (tests/data/make_quant_fixtures.py): the engine
// must give transformers' tokens and logits, alone and at tp 2 (o_proj and down_proj split by
// their inputs: the decoded rows are sliced after decoding).
struct PackedCase {
  const char* fixture;
  const char* packing;  // what the plan records
  const char* format;   // of the layers' linears
};

class PreQuantized : public ::testing::TestWithParam<PackedCase> {};

TEST_P(PreQuantized, MatchesTransformersAtTp1AndTp2) {
  const PackedCase& c = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + c.fixture);
  ASSERT_FALSE(cases.empty());
  for (int tp : {1, 2}) {
    testing::FixtureRunner runner(c.fixture, Options({}, tp),
                                  tp == 1 ? std::make_unique<runtime::CpuBackend>() : runtime::CreateCpuTensorParallel(2));
    int packed = 0;
    for (const compiler::WeightEntry& w : runner.plan().weights) {
      for (const compiler::WeightPiece& p : w.pieces) {
        if (p.packing == ir::QuantPacking::kNone) continue;
        ++packed;
        EXPECT_EQ(ir::QuantPackingName(p.packing), c.packing) << p.tensor;
        if (p.tensor != "lm_head.weight") {
          EXPECT_EQ(p.quant.ToString(), c.format) << p.tensor;
        }
      }
    }
    EXPECT_GE(packed, 2 * 6) << "every linear of both layers";
    const std::vector<testing::Generation> got = runner.Run(cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(got[i].tokens, cases[i].new_tokens) << c.fixture << " tp " << tp << " case " << i;
      const testing::WorstDiff worst = testing::MaxAbsDiffRow(got[i].logits, testing::FirstRows(cases[i].logits, got[i].logits.size()));
      EXPECT_LE(worst.err, 1e-4) << c.fixture << " tp " << tp << " case " << i << " row " << worst.row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, PreQuantized,
    ::testing::Values(PackedCase{"tiny-glm-gptq", "gptq", "int4:g32:sym"},
                      PackedCase{"tiny-glm-gptq8", "gptq_v2", "int8:g32:asym"},
                      PackedCase{"tiny-glm-awq", "awq", "int4:g32:asym"},
                      PackedCase{"tiny-glm-ct-w4a16", "compressed-tensors pack-quantized", "int4:g32:sym"},
                      PackedCase{"tiny-glm-ct-w8a16", "compressed-tensors pack-quantized", "int8:channel:asym"},
                      PackedCase{"tiny-glm-ct-fp8", "compressed-tensors float-quantized", "fp8e4m3"},
                      PackedCase{"tiny-glm-gptq-channel", "gptq", "int4:channel:sym"},
                      PackedCase{"tiny-glm-ct-w4a16-actorder", "compressed-tensors pack-quantized", "int4:g32:asym"},
                      PackedCase{"tiny-glm-ct-w4a16-gidx", "compressed-tensors pack-quantized", "int4:g32:sym"}),
    [](const auto& info) {
      std::string name = info.param.fixture;
      for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

// A compressed-tensors kv_cache_scheme (tests/data/make_quant_fixtures.py): K and V cached as 8-bit
// codes of each layer's static k_scale/v_scale give transformers' answers with its attention storing
// K and V the way vLLM's cache does, at tp 1 and 2; the same plan computing each token's own scales
// does not (the test can fail).
struct StaticKvCase {
  const char* fixture;
  ir::DType kv;
};

class StaticKvScales : public ::testing::TestWithParam<StaticKvCase> {};

TEST_P(StaticKvScales, MatchTransformersWithVllmsCache) {
  const StaticKvCase& c = GetParam();
  const std::vector<GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/" + c.fixture);
  ASSERT_FALSE(cases.empty());
  for (int tp : {1, 2}) {
    compiler::CompileOptions options = Options({}, tp);
    options.build.kv_dtype = c.kv;
    testing::FixtureRunner runner(c.fixture, options,
                                  tp == 1 ? std::make_unique<runtime::CpuBackend>() : runtime::CreateCpuTensorParallel(2));
    const compiler::Plan& plan = runner.plan();
    ASSERT_EQ(plan.kv.scale_weights.size(), 2u * plan.kv.num_layers);
    EXPECT_EQ(plan.weights[plan.kv.scale_weights[1]].pieces[0].tensor, "model.layers.0.self_attn.v_scale");
    const std::vector<testing::Generation> got = runner.Run(cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(got[i].tokens, cases[i].new_tokens) << c.fixture << " tp " << tp << " case " << i;
      const testing::WorstDiff worst = testing::MaxAbsDiffRow(got[i].logits, testing::FirstRows(cases[i].logits, got[i].logits.size()));
      EXPECT_LE(worst.err, 1e-4) << c.fixture << " tp " << tp << " case " << i << " row " << worst.row;
      std::printf("%s tp %d case %zu: worst logit difference from transformers %.2e\n", c.fixture, tp, i, worst.err);
    }
  }
  compiler::CompileOptions options = Options({});
  options.build.kv_dtype = c.kv;
  compiler::Plan dynamic = testing::FixtureRunner(c.fixture, options).plan();
  dynamic.kv.scale_weights.clear();  // the scale weights stay, unused
  const std::vector<testing::Generation> per_token = testing::FixtureRunner(c.fixture, dynamic).Run(cases);
  const double worst = testing::WorstPromptDiff(per_token, cases);
  std::printf("%s: the same plan with per-token scales moves the prompt logits by %.4f\n", c.fixture, worst);
  EXPECT_GT(worst, 1e-2) << "per-token scales should not give the static scales' answers";
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, StaticKvScales,
                         ::testing::Values(StaticKvCase{"tiny-glm-ct-fp8-kv", ir::DType::kF8E4M3},
                                           StaticKvCase{"tiny-glm-ct-kv-int8", ir::DType::kI8}),
                         [](const auto& info) { return absl::StrReplaceAll(info.param.fixture, {{"-", "_"}}); });

// The scheme is used only with the cache it describes: the model's dtype leaves it unused (as
// vLLM's "auto"), the other 8-bit code is an error naming it.
TEST(StaticKvScales, UsedOnlyWithTheirOwnCodes) {
  absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(testing::TestDataDir() + "/tiny-glm-ct-fp8-kv");
  ASSERT_TRUE(config.ok()) << config.status();
  compiler::CompileOptions options = Options({});
  absl::StatusOr<compiler::CompileResult> plain = compiler::Compile(*config, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->plan.kv.static_scales());
  options.build.kv_dtype = ir::DType::kI8;
  const absl::Status wrong = compiler::Compile(*config, options).status();
  EXPECT_TRUE(absl::StrContains(wrong.message(), "kv_cache_scheme holds scales for f8e4m3 codes")) << wrong;
  // The plan file keeps them.
  options.build.kv_dtype = ir::DType::kF8E4M3;
  absl::StatusOr<compiler::CompileResult> eight = compiler::Compile(*config, options);
  ASSERT_TRUE(eight.ok()) << eight.status();
  absl::StatusOr<compiler::Plan> read = compiler::DeserializePlan(compiler::SerializePlan(eight->plan), "plan");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->kv.scale_weights, eight->plan.kv.scale_weights);
}

// A fixture's config and checkpoint (the tiny GLM unless a test opens another), for the
// device-storage tests.
class DeviceStorage : public ::testing::Test {
 protected:
  void SetUp() override { Open("tiny-glm"); }
  void Open(const std::string& fixture) {
    const std::string dir = testing::TestDataDir() + "/" + fixture;
    absl::StatusOr<glm::ModelConfig> config = glm::LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    source_.reset();
    absl::StatusOr<glm::Checkpoint> ckpt = glm::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_.emplace(std::move(*ckpt));
    source_.emplace(*ckpt_);
  }

  // What the segments of a plan's weights showed.
  struct Seen {
    std::set<std::string> formats;  // "code/group"
    std::set<int> scale_types;      // of group scales
    int offsets = 0, ordered = 0;   // segments starting inside a group; in act order
    int padded = 0;                 // segments storing more inputs than the rank's (whole loads, act-order groups)
  };

  // What the CUDA backend uploads for each quantized weight of `plan` (packed codes, group scales,
  // the gate/up halves interleaved, each rank's block) dequantizes to exactly the values the CPU
  // backend computes with, on every rank.
  void ExpectStoredAsLoaded(const compiler::Plan& plan, int tp, const std::string& label, Seen* seen) {
    std::set<int64_t> gate_up;
    for (const compiler::PlanStep& step : plan.decoder().steps) {
      if (ir::IsGateUpOp(step.kernel)) gate_up.insert(step.operands[2].index);
    }
    for (size_t i = 0; i < plan.weights.size(); ++i) {
      const compiler::WeightEntry& w = plan.weights[i];
      if (!w.quantized()) continue;
      for (int32_t rank = 0; rank < tp; ++rank) {
        const runtime::RankInfo info{rank, tp};
        std::vector<float> want(static_cast<size_t>(w.NumElements()));
        ASSERT_TRUE(runtime::FillStored(w, *source_, info, plan.dtype, want.data()).ok());
        const bool interleave = gate_up.contains(static_cast<int64_t>(i));
        absl::StatusOr<std::vector<runtime::HostQuantSegment>> segments =
            runtime::PrepareQuantSegments(w, *source_, info, interleave);
        ASSERT_TRUE(segments.ok()) << label << ": " << segments.status();
        std::vector<float> got;
        for (const runtime::HostQuantSegment& s : *segments) {
          EXPECT_EQ(s.n_begin, static_cast<int64_t>(got.size()) / w.shape[1]) << w.name;
          const std::vector<float> values = runtime::DequantizeSegment(s);
          got.insert(got.end(), values.begin(), values.end());
          seen->formats.insert(absl::StrCat(static_cast<int>(s.code), "/", s.group));
          if (s.group != 0) seen->scale_types.insert(static_cast<int>(s.scale_type));
          seen->offsets += s.group_offset != 0;
          int32_t last = -1;
          bool permuted = false;  // act order (padding alone keeps the inputs increasing)
          for (const int32_t input : s.input_order) {
            if (input < 0) continue;
            permuted = permuted || input < last;
            last = input;
          }
          seen->ordered += permuted;
          seen->padded += s.cols != s.inputs;
        }
        ASSERT_EQ(got.size(), want.size()) << w.name;
        const int64_t k = w.shape[1], half = w.shape[0] / 2;
        for (int64_t r = 0; r < w.shape[0]; ++r) {  // stored row r holds checkpoint row `from`
          const int64_t from = interleave ? (r % 2 == 0 ? r / 2 : half + r / 2) : r;
          for (int64_t j = 0; j < k; ++j) {
            ASSERT_EQ(got[r * k + j], want[from * k + j])
                << label << " tp " << tp << " rank " << rank << " " << w.name << " row " << r << " input " << j;
          }
        }
      }
    }
  }

  glm::ModelConfig config_;
  std::optional<glm::Checkpoint> ckpt_;
  std::optional<runtime::CheckpointWeights> source_;
};

// A 4-bit body with its 8-bit K/V rows and LM head, and 8-bit bodies at tp 2, where down_proj's
// 80 inputs a rank start 16 into a group of 32 on rank 1.
TEST_F(DeviceStorage, DequantizesToTheLoaderValues) {
  const std::pair<const char*, int> cases[] = {{"int4:g32:asym", 1}, {"int4:channel:sym", 1}, {"int8:g32:sym", 1},
                                                {"int8:g32:asym", 2}, {"int8", 2}, {"fp8e4m3", 2}};
  for (const auto& [body, tp] : cases) {
    absl::StatusOr<compiler::CompileResult> compiled =
        compiler::Compile(config_, Options(passes::DefaultQuantPolicy(Format(body)), tp));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    Seen seen;
    ExpectStoredAsLoaded(compiled->plan, tp, body, &seen);
    EXPECT_EQ(seen.formats.size(), absl::StartsWith(body, "int4") ? 2u : 1u) << body << ": the body (and fp8 K/V rows)";
    if (!seen.scale_types.empty()) {
      EXPECT_EQ(seen.scale_types, std::set<int>{static_cast<int>(cuda::ScaleType::kBF16)}) << body;
    }
    EXPECT_EQ(seen.ordered, 0) << body;
    if (std::string(body) == "int8:g32:asym") {
      EXPECT_GT(seen.offsets, 0) << "a rank's block inside a group";
    }
  }
}

// A pre-quantized checkpoint's codes go to the device as they are: its fp16 scales stay fp16 and
// compressed-tensors' fp32 ones fp32, GPTQ v1's stored z - 1 comes back as z, AWQ's nibble order is
// undone, and the act-order GPTQ's inputs are sorted by group (q, k and v each in their own order).
// At tp 2 the 8-bit checkpoints split like the others; an act-order weight split by its inputs and
// 4-bit rows of 80 inputs a rank are refused, naming the weight.
TEST_F(DeviceStorage, PreQuantizedCheckpointsKeepTheirCodes) {
  struct Case {
    const char* fixture;
    int scale_type;   // of the group scales; -1: per-row scales only
    bool act_order;
    const char* tp2;  // the refusal at tp 2, or null when it stores
  };
  const int f16 = static_cast<int>(cuda::ScaleType::kF16), f32 = static_cast<int>(cuda::ScaleType::kF32);
  const Case cases[] = {{"tiny-glm-gptq", f16, true, nullptr},
                        {"tiny-glm-gptq8", f16, false, nullptr},
                        {"tiny-glm-awq", f16, false, nullptr},
                        {"tiny-glm-ct-w4a16", f32, false, nullptr},
                        {"tiny-glm-ct-w8a16", -1, false, nullptr},
                        {"tiny-glm-ct-fp8", -1, false, nullptr},
                        {"tiny-glm-gptq-channel", -1, false, nullptr},
                        {"tiny-glm-ct-w4a16-actorder", f32, false, nullptr},
                        {"tiny-glm-ct-w4a16-gidx", f32, true, nullptr}};
  for (const Case& c : cases) {
    Open(c.fixture);
    for (const int tp : {1, 2}) {
      absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(config_, Options({}, tp));
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      int packed = 0;
      for (const compiler::WeightEntry& w : compiled->plan.weights) {
        for (const compiler::WeightPiece& p : w.pieces) packed += p.packing != ir::QuantPacking::kNone;
      }
      ASSERT_GE(packed, 2 * 6) << c.fixture;
      if (tp == 2 && c.tp2 != nullptr) {
        bool refused = false;
        for (const compiler::WeightEntry& w : compiled->plan.weights) {
          if (!w.quantized()) continue;
          const absl::Status s = runtime::PrepareQuantSegments(w, *source_, {1, 2}, false).status();
          if (s.ok()) continue;
          refused = true;
          EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
          EXPECT_NE(s.message().find(w.name), std::string::npos) << s;
          EXPECT_NE(s.message().find(c.tp2), std::string::npos) << s;
        }
        EXPECT_TRUE(refused) << c.fixture;
        continue;
      }
      Seen seen;
      ExpectStoredAsLoaded(compiled->plan, tp, c.fixture, &seen);
      if (c.scale_type >= 0) {
        EXPECT_EQ(seen.scale_types, std::set<int>{c.scale_type}) << c.fixture;
      } else {
        EXPECT_TRUE(seen.scale_types.empty()) << c.fixture;
      }
      EXPECT_EQ(seen.ordered > 0, c.act_order) << c.fixture;
      if (c.act_order) {
        EXPECT_GE(seen.ordered, 4) << "q, k, v and the rest each in their own order";
      }
    }
  }
}

// A piece a policy keeps unquantized beside quantized ones (the fused QKV: q bf16, k and v int8)
// becomes a bf16 segment of the same weight, at tp 1 and 2.
TEST_F(DeviceStorage, KeepsBf16PiecesBesideQuantizedOnes) {
  passes::QuantPolicy policy;
  policy.body = Format("int8");
  absl::StatusOr<std::vector<passes::QuantRule>> rules = passes::ParseQuantPolicy("*.q_proj: bf16\n", "p.policy");
  ASSERT_TRUE(rules.ok()) << rules.status();
  policy.rules = *rules;
  for (const int tp : {1, 2}) {
    compiler::CompileOptions options = Options(policy, tp);
    options.build.dtype = ir::DType::kBF16;
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(config_, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    Seen seen;
    ExpectStoredAsLoaded(compiled->plan, tp, "q_proj bf16 beside int8", &seen);
    EXPECT_TRUE(seen.formats.contains(absl::StrCat(static_cast<int>(cuda::QuantCode::kBf16), "/0"))) << tp;
    EXPECT_TRUE(seen.formats.contains(absl::StrCat(static_cast<int>(cuda::QuantCode::kInt8), "/0"))) << tp;
  }
}

// int4 codes are read 32 at a time: a rank's 80 down_proj inputs (tp 2) are not whole loads. The
// rank stores the loads around them, gathering its x into place (zeros under the neighbours'
// codes), and must still dequantize to the CPU's values.
TEST_F(DeviceStorage, StoresARanksInputsAroundWholeLoads) {
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(config_, Options(passes::DefaultQuantPolicy(Format("int4:g32")), 2));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const compiler::WeightEntry* down = nullptr;
  for (const compiler::WeightEntry& w : compiled->plan.weights) {
    if (absl::StrContains(w.name, "layers.0.mlp.down_proj")) down = &w;
  }
  ASSERT_NE(down, nullptr);
  absl::StatusOr<std::vector<runtime::HostQuantSegment>> rank1 = runtime::PrepareQuantSegments(*down, *source_, {1, 2}, false);
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_EQ(rank1->size(), 1u);
  const runtime::HostQuantSegment& s = (*rank1)[0];
  EXPECT_EQ(s.inputs, 80);  // inputs [80, 160)
  EXPECT_EQ(s.cols, 96);    // stored [64, 160)
  EXPECT_EQ(s.group_offset, 0);
  ASSERT_EQ(s.input_order.size(), 96u);
  EXPECT_EQ(s.input_order[15], -1);
  EXPECT_EQ(s.input_order[16], 0);
  EXPECT_EQ(s.input_order[95], 79);
  Seen seen;
  ExpectStoredAsLoaded(compiled->plan, 2, "int4:g32 at tp 2", &seen);
  EXPECT_GE(seen.padded, 2 * 2) << "down_proj on both ranks of both layers";
  EXPECT_EQ(seen.ordered, 0);
}

// The memory check (CudaBackend::Load) approves DeviceBytes + QuantStorageSlack a weight: what the
// backend then uploads must fit, on every rank -- compressed-tensors' fp32 group scales (wider than
// the bf16 DeviceBytes counts), act order, a rank's inputs padded to whole loads or groups. Some of
// these store more than DeviceBytes (the case the slack exists for).
TEST_F(DeviceStorage, TheMemoryCheckCoversWhatIsStored) {
  struct Case {
    const char* fixture;
    const char* body;  // compile-time format, or null: the checkpoint's own
    int tp;
  };
  const Case cases[] = {{"tiny-glm-ct-w4a16", nullptr, 1},        {"tiny-glm-ct-w4a16", nullptr, 2},
                        {"tiny-glm-ct-w4a16-gidx", nullptr, 1},   {"tiny-glm-gptq", nullptr, 1},
                        {"tiny-glm-gptq8", nullptr, 2},           {"tiny-glm-awq", nullptr, 2},
                        {"tiny-glm", "int4:g32", 2},              {"tiny-glm", "int8:g32:asym", 2}};
  int beyond = 0;
  for (const Case& c : cases) {
    Open(c.fixture);
    const passes::QuantPolicy policy =
        c.body != nullptr ? passes::DefaultQuantPolicy(Format(c.body)) : passes::QuantPolicy{};
    absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(config_, Options(policy, c.tp));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    for (const compiler::WeightEntry& w : compiled->plan.weights) {
      if (!w.quantized()) continue;
      for (int32_t rank = 0; rank < c.tp; ++rank) {
        absl::StatusOr<std::vector<runtime::HostQuantSegment>> segments =
            runtime::PrepareQuantSegments(w, *source_, {rank, c.tp}, false);
        ASSERT_TRUE(segments.ok()) << segments.status();
        int64_t stored = 0;
        for (const runtime::HostQuantSegment& s : *segments) stored += runtime::StoredBytes(s);
        EXPECT_LE(stored, w.DeviceBytes() + runtime::QuantStorageSlack(w, c.tp))
            << c.fixture << " tp " << c.tp << " rank " << rank << " " << w.name;
        beyond += stored > w.DeviceBytes();
      }
    }
  }
  EXPECT_GT(beyond, 0) << "no case stores more than DeviceBytes: the test shows nothing";

  // DeviceBytes is a rank's: a row-sharded weight's halves at tp 2 (it once divided them twice).
  Open("tiny-glm");
  const passes::QuantPolicy int8 = passes::DefaultQuantPolicy(Format("int8"));
  absl::StatusOr<compiler::CompileResult> one = compiler::Compile(config_, Options(int8, 1));
  absl::StatusOr<compiler::CompileResult> two = compiler::Compile(config_, Options(int8, 2));
  ASSERT_TRUE(one.ok() && two.ok());
  int rows_sharded = 0;
  for (size_t i = 0; i < one->plan.weights.size(); ++i) {
    const compiler::WeightEntry& w = two->plan.weights[i];
    if (!w.quantized() || w.pieces.front().shard.axis != 0) continue;
    ++rows_sharded;
    EXPECT_EQ(2 * w.DeviceBytes(), one->plan.weights[i].DeviceBytes()) << w.name;
  }
  EXPECT_GE(rows_sharded, 2 * 2) << "qkv and gate_up of both layers";
}

}  // namespace
}  // namespace ag
