// Bad input through the command line: each case must end with exit status 1
// and one line on stderr that names the file, tensor or value at fault —
// never a crash, a hang or an out-of-bounds read.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/testing/bad_input.h"
#include "tests/testing/command.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using testing::BadInput;

TEST_F(BadInput, TheUntouchedCopyWorks) {
  const testing::CommandResult r = testing::RunCommand(testing::Tool("AUTOGLM_RUN", "build/tools/autoglm-run") +
                                                       " --model " + dir_.string() + " --prompt-ids 1,2,3 --max-new-tokens 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(BadInput, MissingConfig) {
  fs::remove(Path("config.json"));
  ExpectModelError("config.json");
}

TEST_F(BadInput, MalformedConfig) {
  std::ofstream(Path("config.json")) << "{\"model_type\": \"glm\", ";
  ExpectModelError("config.json: not valid JSON");
}

TEST_F(BadInput, ConfigFieldOfTheWrongType) {
  std::ofstream(Path("config.json")) << R"({"model_type":"glm","hidden_size":"sixty-four"})";
  ExpectModelError("'hidden_size'");
}

TEST_F(BadInput, UnknownModelType) {
  std::ifstream in(Path("config.json"));
  nlohmann::json config = nlohmann::json::parse(in);
  config["model_type"] = "llama";
  std::ofstream(Path("config.json")) << config.dump();
  ExpectModelError("'llama'");
}

TEST_F(BadInput, MissingTensor) {
  nlohmann::json header;
  std::string data;
  ReadWeights(&header, &data);
  // Renamed, so that the data section stays covered and only the name is missing.
  header["model.layers.1.mlp.down_proj.renamed"] = header["model.layers.1.mlp.down_proj.weight"];
  header.erase("model.layers.1.mlp.down_proj.weight");
  WriteWeights(header, data);
  ExpectModelError("'model.layers.1.mlp.down_proj.weight' is missing");
}

TEST_F(BadInput, MisShapedTensor) {
  nlohmann::json header;
  std::string data;
  ReadWeights(&header, &data);
  header["model.layers.0.self_attn.o_proj.weight"]["shape"] = {32, 128};  // same bytes, wrong shape
  WriteWeights(header, data);
  ExpectModelError("'model.layers.0.self_attn.o_proj.weight' has shape [32,128], expected [64,64]");
}

TEST_F(BadInput, TruncatedFile) {
  nlohmann::json header;
  std::string data;
  ReadWeights(&header, &data);
  WriteWeights(header, data.substr(0, data.size() / 2));
  ExpectModelError("out of range");
}

TEST_F(BadInput, FileShorterThanItsLengthPrefix) {
  std::ofstream(Path("model.safetensors"), std::ios::binary) << "abc";
  ExpectModelError("truncated safetensors file");
}

TEST_F(BadInput, HeaderLengthPastTheEnd) {
  nlohmann::json header;
  std::string data;
  ReadWeights(&header, &data);
  WriteWeights(header, data, int64_t{1} << 40);
  ExpectModelError("header length");
}

TEST_F(BadInput, OffsetsOutOfRange) {
  nlohmann::json header;
  std::string data;
  ReadWeights(&header, &data);
  auto& entry = header["model.norm.weight"];
  entry["data_offsets"] = {data.size() + 4, data.size() + 4 + 256};
  WriteWeights(header, data);
  ExpectModelError("tensor 'model.norm.weight': data_offsets");
}

TEST_F(BadInput, OverlappingTensors) {
  nlohmann::json header;
  std::string data;
  ReadWeights(&header, &data);
  const auto offsets = header["model.layers.0.input_layernorm.weight"]["data_offsets"];
  header["model.layers.1.input_layernorm.weight"]["data_offsets"] = offsets;
  WriteWeights(header, data);
  ExpectModelError("overlap");
}

TEST_F(BadInput, EmptyPrompt) { ExpectError("--prompt-ids '' --max-new-tokens 2", "prompt is empty"); }

TEST_F(BadInput, PromptIdOutsideTheVocabulary) {
  ExpectError("--prompt-ids 5,300,7 --max-new-tokens 2", "prompt token 300 at position 1");
  ExpectError("--prompt-ids -1 --max-new-tokens 2", "prompt token -1");
}

TEST_F(BadInput, PromptIdThatIsNotANumber) {
  ExpectError("--prompt-ids 5,x7 --max-new-tokens 2", "'x7'");
  ExpectError("--prompt-ids 99999999999 --max-new-tokens 2", "'99999999999'");
}

TEST_F(BadInput, PromptLongerThanTheContext) {
  std::string ids = "1";
  for (int i = 0; i < 256; ++i) ids += ",1";  // 257 tokens, max_position_embeddings is 256
  ExpectError("--prompt-ids " + ids + " --max-new-tokens 1", "257 tokens, more than the maximum context of 256");
  ExpectError("--prompt-ids 1,2,3,4,5 --max-context 4 --max-new-tokens 1", "maximum context of 4");
}

TEST_F(BadInput, MaxContextBeyondTheModel) {
  ExpectError("--prompt-ids 1 --max-context 1000 --max-new-tokens 1", "max_position_embeddings");
}

TEST_F(BadInput, UnknownDevice) { ExpectError("--prompt-ids 1 --device tpu", "'tpu'"); }

}  // namespace
}  // namespace ag
