// Regression tests for what fuzzing found (issue 11): hostile sizes, input
// that used to be accepted and silently changed the answer, and error lines
// that echoed terminal control characters. Every case goes through the real
// command-line tools.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/bad_input.h"
#include "tests/testing/command.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CommandResult;
using testing::ExpectOneLineError;
using testing::RunCommand;
using testing::RunTool;
using testing::Tool;

std::string CompileTool() { return Tool("AUTOGLM_COMPILE", "build/tools/autoglm-compile"); }

class Hostile : public testing::BadInput {
 protected:
  json Config() {
    std::ifstream in(Path("config.json"));
    return json::parse(in);
  }
  void WriteConfig(const json& config, const std::string& name = "config.json") {
    std::ofstream(Path(name)) << config.dump();
  }
  // autoglm-run on --config FILE with random weights.
  CommandResult RunRandom(const std::string& config_file, const std::string& args = "--prompt-ids 1") {
    return RunCommand(RunTool() + " --config " + config_file + " --random-weights 1 " + args);
  }
};

TEST_F(Hostile, WeightFormatsAndPoliciesAreOneLineErrors) {
  ExpectError("--prompt-ids 1 --quantize int3", "--quantize: unknown weight format 'int3'");
  ExpectError("--prompt-ids 1 --quantize int4:g48", "option 'g48' is not a group size");
  ExpectError("--prompt-ids 1 --quantize none", "--quantize: name a format");
  std::ofstream(Path("bad.policy")) << "# comment\nlayers.99.*: int8\n";
  ExpectError("--prompt-ids 1 --quantize-policy " + Path("bad.policy"), "bad.policy:2: 'layers.99.*' names no linear weight");
  std::ofstream(Path("syntax.policy")) << "*.down_proj int8\n";
  ExpectError("--prompt-ids 1 --quantize-policy " + Path("syntax.policy"), "syntax.policy:1: expected 'PATTERN: FORMAT'");
  std::ofstream(Path("format.policy")) << "*.down_proj: fp8:g32\n";
  ExpectError("--prompt-ids 1 --quantize-policy " + Path("format.policy"), "format.policy:1: unknown weight format 'fp8:g32'");
  ExpectError("--prompt-ids 1 --quantize-policy " + Path("missing.policy"), "missing.policy");
  // tiny-glm is 64 wide: group 128 does not divide a row of o_proj.
  ExpectError("--prompt-ids 1 --quantize int4", "o_proj.weight: int4:g128:asym: group size 128 does not divide the 64 inputs");
  const CommandResult compiled = RunCommand(CompileTool() + " --model " + Path("") + " --quantize int4:g32 -o " +
                                            Path("q.agplan"));
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  ExpectError("--plan " + Path("q.agplan") + " --quantize int8 --prompt-ids 1", "--plan is compiled already");
  ExpectError("--plan " + Path("q.agplan") + " --kv-cache-dtype fp8 --prompt-ids 1", "--plan is compiled already");
  ExpectError("--prompt-ids 1 --kv-cache-dtype int4", "--kv-cache-dtype: 'int4' is not auto, fp8 or int8");
}

// Pre-quantized checkpoints whose tensors or config do not agree (issue 18).
TEST_F(Hostile, PreQuantizedCheckpointsThatDisagreeWithTheirConfig) {
  UseFixture("tiny-glm-gptq");
  json header;
  std::string data;
  ReadWeights(&header, &data);
  const std::string scales = "model.layers.0.self_attn.q_proj.scales";
  json h = header;
  h[scales]["shape"] = {64, 2};
  WriteWeights(h, data);
  ExpectError("--prompt-ids 1,2", "'" + scales + "' has shape [64,2], expected [2,64] for gptq int4:g32:sym");
  // A NaN scale (fp16 0x7E00) and an act-order index past the groups: found when the weights are read.
  std::string bad = data;
  const int64_t at = header[scales]["data_offsets"][0].get<int64_t>();
  bad[at] = 0x00;
  bad[at + 1] = 0x7E;
  WriteWeights(header, bad);
  ExpectError("--prompt-ids 1,2", "'" + scales + "' holds a scale that is not finite");
  bad = data;
  const int64_t g = header["model.layers.1.mlp.down_proj.g_idx"]["data_offsets"][0].get<int64_t>();
  bad[g] = 99;
  WriteWeights(header, bad);
  ExpectError("--prompt-ids 1,2", "'model.layers.1.mlp.down_proj.g_idx' sends input 0 to group 99 of 5");
  h = header;
  h["model.layers.0.mlp.up_and_away.qzeros"] = h["model.layers.0.mlp.gate_up_proj.qzeros"];
  h.erase("model.layers.0.mlp.gate_up_proj.qzeros");
  WriteWeights(h, data);
  ExpectError("--prompt-ids 1,2", "tensor 'model.layers.0.mlp.gate_up_proj.qzeros' is missing (the config says "
                                  "model.layers.0.mlp.gate_up_proj is stored gptq int4:g32:sym)");
  WriteWeights(header, data);
  json config = Config();
  config["quantization_config"]["bits"] = 3;
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'bits' is 3; 4 and 8 are supported");
  config["quantization_config"]["bits"] = 4;
  config["quantization_config"]["dynamic"] = {{"+:.*down_proj.*", {{"bits", 8}}}};
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'dynamic' (per-module bits) is not supported");
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "'bitsandbytes' is not supported (gptq, awq, compressed-tensors)");
  // Without its quantization_config an FP8 checkpoint's weights are no float type this engine computes with.
  UseFixture("tiny-glm-ct-fp8");
  config = Config();
  config["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2 --kv-cache-dtype fp8", "tensor 'model.layers.0.self_attn.k_scale'");
  config["quantization_config"]["kv_cache_scheme"]["strategy"] = "channel";
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'strategy' 'channel' is not tensor (one scale per layer)");
  config["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"dynamic", true}};
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'dynamic' must be false (the checkpoint's static k_scale/v_scale)");
  config["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 4}, {"type", "int"}};
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "kv_cache_scheme: field 'num_bits' is 4; 8 is supported");
  config["quantization_config"].erase("kv_cache_scheme");
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = "random";
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'actorder' must be group, dynamic, weight or static");
  config["quantization_config"]["config_groups"]["group_0"]["weights"].erase("actorder");
  config.erase("quantization_config");
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "is f8e4m3, not a float type (a quantized checkpoint needs its quantization_config)");
}

// W8A8 checkpoints: what the engine cannot compute as the config says is a one-line error naming
// the field (static input scales, asymmetric inputs, 4-bit inputs, output quantization), and an
// int-quantized weight stored in another dtype names the tensor.
TEST_F(Hostile, W8a8ConfigsItCannotComputeAreRefused) {
  UseFixture("tiny-glm-ct-w8a8-int8");
  const CommandResult good = RunCommand(RunTool() + " --model " + Path("") + " --prompt-ids 1,2");
  ASSERT_EQ(good.exit_code, 0) << good.err;
  const json original = Config();
  json config = original;
  json& inputs = config["quantization_config"]["config_groups"]["group_0"]["input_activations"];
  inputs["strategy"] = "tensor";
  inputs["dynamic"] = false;
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'strategy' 'tensor' is not token (static input scales are not supported)");
  inputs["strategy"] = "token";
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "input_activations: field 'dynamic' must be true");
  inputs["dynamic"] = true;
  inputs["symmetric"] = false;
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "input_activations: field 'symmetric' must be true");
  inputs["symmetric"] = true;
  inputs["num_bits"] = 4;
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "input_activations: field 'num_bits' is 4; 8-bit inputs are supported");
  inputs["num_bits"] = 8;
  config["quantization_config"]["config_groups"]["group_0"]["output_activations"] = inputs;
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "field 'output_activations' is not supported (null)");
  config = original;
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  WriteConfig(config);
  ExpectError("--prompt-ids 1,2", "weights: field 'symmetric' must be true for int-quantized weights");
  WriteConfig(original);
  json header;
  std::string data;
  ReadWeights(&header, &data);
  const std::string codes = "model.layers.1.mlp.down_proj.weight";
  ASSERT_EQ(header[codes]["dtype"], "I8");
  json h = header;
  h[codes]["dtype"] = "F8_E4M3";
  WriteWeights(h, data);
  ExpectError("--prompt-ids 1,2", "'" + codes + "' is f8e4m3, which compressed-tensors int-quantized does not store it as");
}

// A static KV-cache scale that is not finite and positive would fill the cache with NaN or
// infinities: a one-line error naming the tensor, on either code.
TEST_F(Hostile, StaticKvScalesMustBeFiniteAndPositive) {
  UseFixture("tiny-glm-ct-kv-int8");
  const CommandResult good = RunCommand(RunTool() + " --model " + Path("") + " --kv-cache-dtype int8 --prompt-ids 1,2");
  ASSERT_EQ(good.exit_code, 0) << good.err;
  ExpectError("--prompt-ids 1,2 --kv-cache-dtype fp8", "kv_cache_scheme holds scales for i8 codes");
  json header;
  std::string data;
  ReadWeights(&header, &data);
  const std::string tensor = "model.layers.1.self_attn.v_scale";
  ASSERT_EQ(header[tensor]["dtype"], "F32");
  const size_t at = header[tensor]["data_offsets"][0].get<size_t>();
  const std::pair<float, const char*> bad_scales[] = {
      {0.0f, "0"}, {-0.5f, "-0.5"}, {std::numeric_limits<float>::quiet_NaN(), "nan"}, {std::numeric_limits<float>::infinity(), "inf"}};
  for (const auto& [bad, text] : bad_scales) {
    std::memcpy(data.data() + at, &bad, 4);
    WriteWeights(header, data);
    ExpectError("--prompt-ids 1,2 --kv-cache-dtype int8", std::string("checkpoint tensor 'model.layers.1.self_attn.v_scale' is ") +
                                                              text + "; a KV-cache scale must be finite and positive");
  }
}

TEST_F(Hostile, HugeMaxNewTokensRunsToTheEndOfTheContext) {
  const CommandResult r =
      RunCommand(RunTool() + " --model " + dir_.string() + " --prompt-ids 1,2,3 --max-new-tokens 9223372036854775807");
  EXPECT_FALSE(r.signaled) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("finish: context"), std::string::npos) << r.out;
}

// Round 3 (issue 20): what UBSan found in the release CLIs; the sanitizer job runs these too.
TEST_F(Hostile, RooflineShapesThatOverflowAreOneLineErrors) {
  const std::string plan = Path("p.agplan");
  ASSERT_EQ(RunCommand(CompileTool() + " --model " + dir_.string() + " -o " + plan).exit_code, 0);
  ExpectOneLineError(RunCommand(Tool("AUTOGLM_INSPECT", "build/tools/autoglm-inspect") + " " + plan +
                                " --roofline --batch 4611686018427387904 --tokens-per-seq 4"),
                     "exceed the plan's");
}

TEST_F(Hostile, TensorParallelStepsOfOneTokenGatherNothingEmpty) {
  // --max-batch-tokens 1 at tp 2: steps whose all-gather has rows for no rank still run.
  const CommandResult r = RunCommand(RunTool() + " --model " + dir_.string() +
                                     " --prompt-ids 1,2,3 --max-new-tokens 3 --tp 2 --max-batch-tokens 1");
  EXPECT_FALSE(r.signaled) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(Hostile, AbsurdSizesFromFlagsAreOneLineErrors) {
  ExpectError("--prompt-ids 1 --kv-cache-tokens 2147483648", "slots can address");
  ExpectError("--prompt-ids 1 --kv-cache-tokens 2000000000", "tokens would fit");
  ExpectError("--prompt-ids 1 --max-batch-tokens 16777216", "--max-batch-tokens must be in [1, 1048576]");
  ExpectError("--prompt-ids 1 --kv-block-size 2147483648", "--kv-block-size must be in [1, 4096]");
  ExpectError("--prompt-ids 1 --max-seqs -3", "--max-seqs must be in");
  ExpectError("--prompt-ids 1 --max-context -5", "must not be negative");
}

TEST_F(Hostile, ConfigSizesAreBounded) {
  const struct {
    const char* field;
    int64_t value;
  } cases[] = {{"num_hidden_layers", int64_t{1} << 31}, {"hidden_size", 1000000000}, {"head_dim", int64_t{1} << 40},
               {"vocab_size", int64_t{1} << 40},        {"intermediate_size", int64_t{1} << 50},
               {"num_attention_heads", int64_t{1} << 33}, {"max_position_embeddings", 1000000000}};
  const json good = Config();
  for (const auto& c : cases) {
    json config = good;
    config[c.field] = c.value;
    WriteConfig(config);
    ExpectModelError(std::string("field '") + c.field + "' is " + std::to_string(c.value) + ", more than");
    ExpectOneLineError(RunRandom(Path("config.json")), c.field);
    ExpectOneLineError(RunCommand(CompileTool() + " --config " + Path("config.json") + " -o " + Path("x.agplan")),
                       c.field);
    EXPECT_FALSE(fs::exists(Path("x.agplan")));
  }
}

TEST_F(Hostile, ChatGlmSeqLengthIsBounded) {
  std::ifstream in(testing::TestDataDir() + "/tiny-chatglm/config.json");
  json config = json::parse(in);
  config["seq_length"] = 1000000000;
  WriteConfig(config, "chatglm.json");
  ExpectOneLineError(RunRandom(Path("chatglm.json")), "field 'seq_length' is 1000000000, more than");
}

TEST_F(Hostile, DefaultKvCacheThatCannotFitSaysWhatWould) {
  // Within the config limits, but the default KV cache (one full-length
  // sequence: 2^24 tokens of 64 KiB) would not fit in memory.
  json config = Config();
  config["max_position_embeddings"] = 1 << 24;
  config["num_key_value_heads"] = 4;
  config["num_attention_heads"] = 4;
  config["head_dim"] = 1024;
  WriteConfig(config);
  ExpectOneLineError(RunRandom(Path("config.json")), "tokens would fit");
}

TEST_F(Hostile, CheckpointTensorsTheConfigDoesNotUseAreAnError) {
  json config = Config();
  config["num_hidden_layers"] = 1;
  WriteConfig(config);
  ExpectModelError("tensor 'model.layers.1.");
  ExpectModelError("not used by a glm model of 1 layers");
}

TEST_F(Hostile, APlanFromADifferentConfigDoesNotRun) {
  const fs::path other = dir_.string() + "_other";
  const struct {
    const char* field;
    json value;
    const char* expected;
  } cases[] = {{"rms_norm_eps", 1e-6, "rms_norm_eps"},
               {"max_position_embeddings", 1024, "max_position_embeddings=1024"},
               {"eos_token_id", json::array({1, 2}), "eos_token_ids=1,2"}};
  for (const auto& c : cases) {
    fs::remove_all(other);
    fs::copy(dir_, other);
    json config = Config();
    config[c.field] = c.value;
    std::ofstream(other / "config.json") << config.dump();
    const CommandResult compiled =
        RunCommand(CompileTool() + " --model " + other.string() + " -o " + Path("other.agplan"));
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
    ExpectError("--plan " + Path("other.agplan") + " --prompt-ids 1,2", c.expected);
  }
  // rope_theta lives in rope_parameters.
  fs::remove_all(other);
  fs::copy(dir_, other);
  json config = Config();
  config["rope_parameters"]["rope_theta"] = 500000.0;
  std::ofstream(other / "config.json") << config.dump();
  ASSERT_EQ(RunCommand(CompileTool() + " --model " + other.string() + " -o " + Path("other.agplan")).exit_code, 0);
  ExpectError("--plan " + Path("other.agplan") + " --prompt-ids 1,2", "rope_theta=500000");
  fs::remove_all(other);
}

TEST_F(Hostile, HeaderLengthOneShortIsNotReadShifted) {
  // A padded header whose length prefix is one byte short still parses as
  // JSON, but the data section then starts one byte early.
  json header;
  std::string data;
  ReadWeights(&header, &data);
  const std::string text = header.dump();
  testing::WriteRaw(Path("model.safetensors"), text + "  ", data, static_cast<int64_t>(text.size()) + 1);
  ExpectModelError("data bytes");
}

TEST_F(Hostile, TensorsMustCoverTheDataSection) {
  json header;
  std::string data;
  ReadWeights(&header, &data);
  WriteWeights(header, data + std::string(16, '\0'));  // 16 bytes no tensor owns
  ExpectModelError("cover");
}

TEST_F(Hostile, ShardNamesWithControlCharactersAreRejected) {
  json header;
  std::string data;
  ReadWeights(&header, &data);
  json index;
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") index["weight_map"][name] = "model.safetensors";
  }
  index["weight_map"]["model.norm.weight"] = std::string("model.safe\0tensors", 18);
  std::ofstream(Path("model.safetensors.index.json")) << index.dump();
  ExpectModelError("must be a plain file name");
  ExpectModelError("model.safe\\x00tensors");
}

// Found after fuzzing, by hand: a directory where a file belongs was read as a
// file of size -1 and aborted with std::bad_alloc.
TEST_F(Hostile, DirectoriesWhereFilesBelong) {
  fs::create_directories(Path("plan.agplan"));
  ExpectError("--plan " + Path("plan.agplan") + " --prompt-ids 1", "plan.agplan: not a regular file");
  ExpectOneLineError(RunCommand(Tool("AUTOGLM_INSPECT", "build/tools/autoglm-inspect") + " " + dir_.string()),
                     "not a regular file");
  fs::create_directories(Path("tok/tokenizer.model"));
  ExpectError("--prompt hi --tokenizer " + Path("tok"), "tokenizer.model: not a regular file");
  fs::remove(Path("config.json"));
  fs::create_directories(Path("config.json"));
  ExpectModelError("config.json: not a regular file");
}

TEST_F(Hostile, StrayArgumentsAndBadFlagsAreOneLine) {
  ExpectError("--prompt-ids 1 extra", "unexpected argument 'extra'");
  ExpectError("--prompt-ids 1 --bogus-one --bogus-two", "unknown flag '--bogus_one'");
  ExpectError("--prompt-ids 1 --max-new-tokens abc --temperature x", "flag '--max_new_tokens': bad value 'abc'");
  ExpectError("--prompt-ids", "flag '--prompt_ids' needs a value");
  ExpectOneLineError(RunCommand(Tool("AUTOGLM_INSPECT", "build/tools/autoglm-inspect") + " a.agplan b.agplan"),
                     "unexpected argument 'b.agplan'");
}

TEST_F(Hostile, ControlCharactersInErrorsAreEscaped) {
  json config = Config();
  config["model_type"] = "\x1b[2J\rglm\x7f";
  WriteConfig(config);
  const CommandResult r = RunCommand(RunTool() + " --model " + dir_.string() + " --prompt-ids 1");
  ExpectOneLineError(r, "'\\x1b[2J\\x0dglm\\x7f' is not a GLM-4 layout");
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  SetUp();  // a fresh copy of the model

  const CommandResult prompt = RunCommand(RunTool() + " --model " + dir_.string() + " --prompt-ids \"$(printf '1,\\033[1m')\"");
  ExpectOneLineError(prompt, "'\\x1b[1m' is not a token id");

  // A hostile tensor name, reported through an overlap.
  json header;
  std::string data;
  ReadWeights(&header, &data);
  header["evil\r\x1b]0;title\x07"] = header["model.norm.weight"];
  WriteWeights(header, data);
  const CommandResult tensor = RunCommand(RunTool() + " --model " + dir_.string() + " --prompt-ids 1");
  ExpectOneLineError(tensor, "evil\\x0d\\x1b]0;title\\x07");
  EXPECT_EQ(tensor.err.find('\x07'), std::string::npos);
}

}  // namespace
}  // namespace ag
