// The image room against the fixture's goldens (tests/data/tiny-glm4v, made by
// tests/data/make_glm4v_fixture.py with transformers, torchvision and PIL):
// decoding, compositing, the resize and the whole processor bit for bit, and
// every bad image a one-line error.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "image/image.h"
#include "image/preprocess.h"
#include "image/resize.h"
#include "tests/testing/golden_tensors.h"

namespace ag::image {
namespace {

namespace fs = std::filesystem;

std::string Dir() {
  const char* d = std::getenv("AUTOGLM_TEST_DATA");
  return std::string(d != nullptr ? d : "tests/data") + "/tiny-glm4v";
}
std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
const std::map<std::string, testing::GoldenTensor>& Golden() {
  static const auto* golden = new std::map<std::string, testing::GoldenTensor>(
      testing::LoadGoldenTensors(Dir() + "/golden.safetensors"));
  return *golden;
}

TEST(Decode, EveryFormatGivesWhatPilGives) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(Dir() + "/images")) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const testing::GoldenTensor& want = Golden().at("decode." + name);
    absl::StatusOr<RgbImage> got = Decode(ReadFile(entry.path().string()), name);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->height, want.shape[0]);
    ASSERT_EQ(got->width, want.shape[1]);
    EXPECT_EQ(got->rgb, want.u8());
    ++files;
  }
  EXPECT_EQ(files, 12);
}

TEST(Decode, CompositeOnWhiteIsPils) {
  const testing::GoldenTensor& rgba = Golden().at("composite.rgba");
  const std::vector<uint8_t> src = rgba.u8();
  std::vector<uint8_t> out(src.size() / 4 * 3);
  CompositeOnWhite(src.data(), static_cast<int64_t>(src.size() / 4), out.data());
  EXPECT_EQ(out, Golden().at("composite.rgb").u8());
}

TEST(Resize, BitExactWithTorchvision) {
  for (int i = 0;; ++i) {
    auto it = Golden().find("resize" + std::to_string(i) + ".in");
    if (it == Golden().end()) {
      EXPECT_EQ(i, 10);
      break;
    }
    const testing::GoldenTensor& in = it->second;
    const testing::GoldenTensor& out = Golden().at("resize" + std::to_string(i) + ".out");
    const int h = static_cast<int>(in.shape[1]), w = static_cast<int>(in.shape[2]);
    const int oh = static_cast<int>(out.shape[1]), ow = static_cast<int>(out.shape[2]);
    RgbImage src{h, w, std::vector<uint8_t>(static_cast<size_t>(h) * w * 3)};
    const std::vector<uint8_t> chw = in.u8();
    for (int c = 0; c < 3; ++c) {
      for (int64_t k = 0; k < int64_t{h} * w; ++k) src.rgb[k * 3 + c] = chw[c * h * w + k];
    }
    const RgbImage got = ResizeBicubicAntialias(src, oh, ow);
    const std::vector<uint8_t> want = out.u8();
    int64_t differ = 0;
    for (int c = 0; c < 3; ++c) {
      for (int64_t k = 0; k < int64_t{oh} * ow; ++k) differ += got.rgb[k * 3 + c] != want[c * oh * ow + k];
    }
    EXPECT_EQ(differ, 0) << h << "x" << w << " -> " << oh << "x" << ow;
  }
}

TEST(Preprocess, PixelValuesAndGridsAreTheProcessors) {
  absl::StatusOr<ProcessorConfig> config =
      ParseProcessorConfig(ReadFile(Dir() + "/preprocessor_config.json"), "preprocessor_config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  std::ifstream in(Dir() + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  int images = 0;
  for (size_t c = 0; c < golden["cases"].size(); ++c) {
    const nlohmann::json& gc = golden["cases"][c];
    if (gc["images"].empty()) continue;
    std::vector<float> pixels;
    for (size_t i = 0; i < gc["images"].size(); ++i) {
      const std::string name = gc["images"][i];
      absl::StatusOr<RgbImage> rgb = Decode(ReadFile(Dir() + "/" + name), name);
      ASSERT_TRUE(rgb.ok()) << rgb.status();
      absl::StatusOr<Patches> p = Preprocess(*rgb, *config, name);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ((std::vector<int64_t>{p->grid_t, p->grid_h, p->grid_w}), gc["image_grid_thw"][i].get<std::vector<int64_t>>());
      pixels.insert(pixels.end(), p->pixels.begin(), p->pixels.end());
      ++images;
    }
    const std::vector<float> want = Golden().at("case" + std::to_string(c) + ".pixel_values").f32();
    ASSERT_EQ(pixels.size(), want.size());
    int64_t differ = 0;
    for (size_t k = 0; k < want.size(); ++k) differ += std::memcmp(&pixels[k], &want[k], 4) != 0;
    EXPECT_EQ(differ, 0) << "case " << c << ": pixel values must equal the processor's bit for bit";
  }
  EXPECT_EQ(images, 4);
}

TEST(Preprocess, SmartResizeOfPhoneScreens) {
  // GLM4V_SPEC.md section 4's table: (width, height) -> tokens, at three pixel budgets.
  struct Row {
    int w, h;
    int64_t tokens_9633792, tokens_5000000;
  };
  for (const Row& r : {Row{720, 1280, 1196, 1196}, Row{1080, 1920, 2691, 2691}, Row{1080, 2340, 3276, 3154},
                       Row{1080, 2400, 3354, 3108}, Row{1170, 2532, 3780, 3154}, Row{1440, 3200, 5814, 3108}}) {
    for (const auto& [budget, want] : {std::pair{int64_t{9633792}, r.tokens_9633792}, std::pair{int64_t{5000000}, r.tokens_5000000}}) {
      ProcessorConfig c;
      c.min_pixels = 12544;
      c.max_pixels = budget;
      absl::StatusOr<std::pair<int, int>> s = SmartResize(r.h, r.w, c);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(int64_t{s->first / 28} * (s->second / 28), want) << r.w << "x" << r.h << " at " << budget;
    }
  }
  ProcessorConfig c;
  c.min_pixels = 1;
  EXPECT_EQ(SmartResize(70, 98, c)->first, 56) << "70/28 = 2.5 rounds half to even: 2, not 3";
  EXPECT_EQ(SmartResize(70, 98, c)->second, 112) << "98/28 = 3.5 rounds half to even: 4";
  EXPECT_FALSE(SmartResize(10, 2500, c).ok()) << "aspect ratio over 200";
}

TEST(Preprocess, HashesSeparateImagesAndRepeatForTheSame) {
  RgbImage a{56, 56, std::vector<uint8_t>(56 * 56 * 3, 90)};
  RgbImage b = a;
  b.rgb[1234] = 91;
  ProcessorConfig c;
  const auto ha = Preprocess(a, c, "a")->hash, ha2 = Preprocess(a, c, "a")->hash, hb = Preprocess(b, c, "b")->hash;
  EXPECT_EQ(ha, ha2);
  EXPECT_NE(ha, hb);
}

TEST(Preprocess, SipHash128ReferenceVectors) {
  // vectors_sip128 of the SipHash reference (key 00..0f, message 00..i-1).
  const uint8_t want[3][16] = {
      {0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93},
      {0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45},
      {0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a, 0xff, 0xe4}};
  const std::array<uint64_t, 2> key = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  const uint8_t message[3] = {0, 1, 2};
  for (int n = 0; n < 3; ++n) {
    const std::array<uint64_t, 2> h = SipHash128(message, static_cast<size_t>(n), key);
    uint8_t bytes[16];
    for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(h[i / 8] >> (8 * (i % 8)));
    EXPECT_EQ(std::memcmp(bytes, want[n], 16), 0) << "vector " << n;
  }
}

TEST(Preprocess, TreeHashIsItsDefinitionAndSeesEveryByte) {
  const std::array<uint64_t, 2> key = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  const size_t chunk = size_t{1} << 20, size = 2 * chunk + 5;  // two whole chunks and a partial one
  std::vector<uint8_t> data(size);
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  // The definition, serially: chunk c under key[0] ^ (c + 1), then the digests, the size and the tail.
  std::vector<uint8_t> message;
  auto put = [&](uint64_t w) {
    for (int b = 0; b < 8; ++b) message.push_back(static_cast<uint8_t>(w >> (8 * b)));
  };
  for (size_t c = 0; c < 3; ++c) {
    const size_t n = std::min(chunk, size - c * chunk);
    for (const uint64_t w : SipHash128(data.data() + c * chunk, n, {key[0] ^ (c + 1), key[1]})) put(w);
  }
  put(size);
  for (const uint64_t w : {1, 172, 78}) put(w);
  const std::array<uint64_t, 2> h = TreeHash128(data.data(), size, {1, 172, 78}, key);
  EXPECT_EQ(h, SipHash128(message.data(), message.size(), key));
  for (const size_t at : {size_t{0}, chunk + 7, size - 1}) {
    std::vector<uint8_t> other = data;
    other[at] ^= 1;
    EXPECT_NE(TreeHash128(other.data(), size, {1, 172, 78}, key), h) << "byte " << at;
  }
  EXPECT_NE(TreeHash128(data.data(), size, {1, 78, 172}, key), h) << "the grid is hashed";
  EXPECT_NE(TreeHash128(data.data(), size - 1, {1, 172, 78}, key), h) << "the size is hashed";
}

// A PNG that is all header: signature and an IHDR chunk.
std::string PngHeader(uint32_t width, uint32_t height) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  std::string chunk = "IHDR" + be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(chunk.data()), chunk.size()));
  return std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + chunk + be32(crc);
}

TEST(Decode, BadImagesAreOneLineErrors) {
  const std::string png = ReadFile(Dir() + "/screen-84x56.png");
  const std::string jpeg = ReadFile(Dir() + "/photo-100x70.jpg");
  const std::string webp = ReadFile(Dir() + "/images/lossy.webp");
  struct Case {
    std::string bytes, want;
  };
  std::string flipped = png;
  flipped[png.size() / 2] = static_cast<char>(flipped[png.size() / 2] ^ 0x55);
  for (const Case& c : {Case{png.substr(0, png.size() / 2), "corrupt PNG"}, Case{flipped, "corrupt PNG"},
                        Case{PngHeader(100000, 100000), "100000 x 100000 pixels"},
                        Case{PngHeader(30000, 1), "30000 x 1 pixels"}, Case{PngHeader(0, 5), "the image is empty"},
                        Case{jpeg.substr(0, jpeg.size() / 2), "corrupt JPEG"}, Case{jpeg.substr(0, 20), "corrupt JPEG"},
                        Case{webp.substr(0, webp.size() - 40), "WebP"}, Case{"GIF89a....", "not a PNG, JPEG or WebP"},
                        Case{"", "empty"}}) {
    absl::StatusOr<RgbImage> r = Decode(c.bytes, "messages[0].content[1]");
    ASSERT_FALSE(r.ok()) << c.want;
    const std::string m(r.status().message());
    EXPECT_NE(m.find("messages[0].content[1]: "), std::string::npos) << m;
    EXPECT_NE(m.find(c.want), std::string::npos) << c.want << " in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(Preprocess, BadProcessorConfigsNameTheField) {
  for (const auto& [text, field] :
       {std::pair{R"({"size": {"shortest_edge": 5}})", "size"}, std::pair{R"({"image_std": [1, 0, 1]})", "image_std"},
        std::pair{R"({"patch_size": 0})", "patch_size"}, std::pair{R"({"do_resize": false})", "do_resize"},
        std::pair{R"({"resample": 2})", "resample"}, std::pair{R"({"image_mean": [1, 2]})", "image_mean"},
        std::pair{"[]", "JSON object"}}) {
    absl::StatusOr<ProcessorConfig> c = ParseProcessorConfig(text, "preprocessor_config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status();
  }
}

}  // namespace
}  // namespace ag::image
