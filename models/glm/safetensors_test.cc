#include "models/glm/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kernels/ref/half.h"
#include "tests/testing/safetensors_writer.h"

namespace ag::glm {
namespace {

namespace fs = std::filesystem;
using ag::testing::FakeTensor;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("autoglm_st_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Opens a file whose header is `header` over `data_bytes` zero bytes; returns the error.
  std::string ErrorFor(const std::string& header, size_t data_bytes, int64_t declared_len = -1) {
    ag::testing::WriteRaw(Path("model.safetensors"), header, std::string(data_bytes, '\0'), declared_len);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(Path("model.safetensors"));
    EXPECT_FALSE(f.ok());
    return f.ok() ? "" : std::string(f.status().message());
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsF32AndBf16) {
  ag::testing::WriteSafetensors(Path("model.safetensors"),
                                {{"a", "F32", {2, 2}, {1, 2, 3, 4}}, {"b", "BF16", {3}, {1.5f, -2.0f, 0.25f}}});
  absl::StatusOr<Checkpoint> ckpt = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  absl::StatusOr<const TensorView*> b = ckpt->Find("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->dtype, ir::DType::kBF16);
  EXPECT_EQ((*b)->shape, std::vector<int64_t>{3});
  float out[3];
  ConvertToFloat((*b)->dtype, (*b)->data, 3, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.25f);
  absl::StatusOr<const TensorView*> missing = ckpt->Find("c");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'c'"), std::string::npos);
}

TEST_F(SafetensorsTest, ReadsShardedIndex) {
  ag::testing::WriteSafetensors(Path("part1.safetensors"), {{"a", "F32", {1}, {7}}});
  ag::testing::WriteSafetensors(Path("part2.safetensors"), {{"b", "F32", {1}, {8}}});
  std::ofstream(Path("model.safetensors.index.json"))
      << R"({"metadata":{},"weight_map":{"a":"part1.safetensors","b":"part2.safetensors"}})";
  absl::StatusOr<Checkpoint> ckpt = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE(ckpt->Contains("a"));
  EXPECT_TRUE(ckpt->Contains("b"));
}

TEST_F(SafetensorsTest, IndexNamingAMissingTensorFails) {
  ag::testing::WriteSafetensors(Path("part1.safetensors"), {{"a", "F32", {1}, {7}}});
  std::ofstream(Path("model.safetensors.index.json"))
      << R"({"weight_map":{"a":"part1.safetensors","zz":"part1.safetensors"}})";
  absl::StatusOr<Checkpoint> ckpt = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("'zz'"), std::string::npos) << ckpt.status();
}

TEST_F(SafetensorsTest, IndexMayNotEscapeTheDirectory) {
  std::ofstream(Path("model.safetensors.index.json")) << R"({"weight_map":{"a":"../etc/passwd"}})";
  EXPECT_FALSE(Checkpoint::Open(dir_.string()).ok());
}

TEST_F(SafetensorsTest, NoWeightsAtAll) {
  absl::StatusOr<Checkpoint> ckpt = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("no model.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, TruncatedFile) {
  std::ofstream(Path("model.safetensors")) << "abc";
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = SafetensorsFile::Open(Path("model.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos);
}

TEST_F(SafetensorsTest, HeaderLengthPastTheEnd) {
  EXPECT_NE(ErrorFor("{}", 0, 1000).find("past the end"), std::string::npos);
  EXPECT_NE(ErrorFor("{}", 0, int64_t{1} << 62).find("past the end"), std::string::npos);
}

TEST_F(SafetensorsTest, CorruptEntries) {
  EXPECT_NE(ErrorFor("not json", 0).find("JSON"), std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8).find("out of range"),
            std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8).find("8 bytes of data"),
            std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", 8).find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 8).find("shape"),
            std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8).find("out of range"),
            std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[1]}})", 8).find("data_offsets"), std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12)
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(ErrorFor(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 8)
                .find("implausibly"),
            std::string::npos);
}

TEST(Half, RoundTripsAndRounds) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_EQ(RoundToBF16(1.0f + 1.0f / 256), 1.0f) << "ties go to even";
  EXPECT_EQ(RoundToBF16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
}

}  // namespace
}  // namespace ag::glm
