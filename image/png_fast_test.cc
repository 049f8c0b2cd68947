// The common PNG's fast path (png_fast.h) held to libpng: the same pixels for every file it takes
// (each filter, both colour types, one IDAT or many, odd sizes), nullopt for every file it must
// leave to libpng (and then Decode's answer is libpng's), and its row filters held to the
// specification's byte-by-byte loop.
#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "image/image.h"
#include "image/png_fast.h"

namespace ag::image {
namespace {

struct PngSpec {
  int width = 1, height = 1;
  int color = PNG_COLOR_TYPE_RGBA;
  int bit_depth = 8;
  int filters = PNG_ALL_FILTERS;  // which filters libpng's encoder may pick a row
  size_t idat_bytes = 8192;       // the compression buffer: one IDAT chunk each
  bool interlaced = false;
  bool transparency = false;  // a tRNS chunk (RGB: one colour transparent)
  uint32_t seed = 1;
};

void WriteToString(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void Flush(png_structp) {}

// Pixels with runs, gradients and noise (so every filter wins somewhere), alpha of every kind.
std::string EncodePng(const PngSpec& s) {
  const int channels = s.color == PNG_COLOR_TYPE_RGBA ? 4 : s.color == PNG_COLOR_TYPE_RGB ? 3 : 1;
  const int sample_bytes = s.bit_depth == 16 ? 2 : 1;
  std::mt19937 rng(s.seed);
  std::vector<uint8_t> pixels(static_cast<size_t>(s.width) * s.height * channels * sample_bytes);
  for (int y = 0; y < s.height; ++y) {
    for (int x = 0; x < s.width * channels * sample_bytes; ++x) {
      const int style = (y / 3) % 4;
      const int noise = static_cast<int>(rng() % 256);
      const int v = style == 0 ? 200 : style == 1 ? x * 3 + y : style == 2 ? noise : (x / 5 + y) * 7 + noise % 3;
      pixels[static_cast<size_t>(y) * s.width * channels * sample_bytes + x] = static_cast<uint8_t>(v);
    }
  }
  if (s.color == PNG_COLOR_TYPE_GRAY && s.bit_depth < 8) {
    for (uint8_t& p : pixels) p &= static_cast<uint8_t>((1 << s.bit_depth) - 1);
  }
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    ADD_FAILURE() << "libpng could not write the test image";
    return "";
  }
  png_set_write_fn(png, &out, WriteToString, Flush);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, s.filters);
  png_set_compression_buffer_size(png, s.idat_bytes);
  if (s.transparency) {
    png_color_16 colour{};
    colour.red = colour.green = colour.blue = 200;
    png_set_tRNS(png, info, nullptr, 0, &colour);
  }
  png_write_info(png, info);
  std::vector<png_bytep> rows(static_cast<size_t>(s.height));
  for (int y = 0; y < s.height; ++y) {
    rows[static_cast<size_t>(y)] = pixels.data() + static_cast<size_t>(y) * s.width * channels * sample_bytes;
  }
  if (s.bit_depth < 8) {  // packed rows: libpng packs them from one sample a byte
    png_set_packing(png);
  }
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

TEST(PngFast, UnfilteredRowsAreTheSpecifications) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int bpp = 1 + trial % 8, filter = trial / 8 % 5;
    const int64_t row_bytes = bpp * static_cast<int64_t>(1 + rng() % 70);
    // Few distinct values half the time: Paeth's ties, where the order a, b, c decides.
    const uint32_t range = trial % 2 == 0 ? 3 : 256;
    std::vector<uint8_t> prev(static_cast<size_t>(row_bytes) + 4), row(prev.size());
    for (uint8_t& v : prev) v = static_cast<uint8_t>(rng() % range);
    for (uint8_t& v : row) v = static_cast<uint8_t>(rng() % range);
    std::vector<uint8_t> want = row;
    UnfilterRowBytewise(filter, want.data(), prev.data(), row_bytes, bpp);
    UnfilterRow(filter, row.data(), prev.data(), row_bytes, bpp);
    ASSERT_EQ(row, want) << "filter " << filter << ", " << bpp << " bytes a pixel, " << row_bytes << " bytes";
  }
}

TEST(PngFast, TakesTheCommonPngAndGivesLibpngsPixels) {
  int files = 0;
  for (int color : {PNG_COLOR_TYPE_RGBA, PNG_COLOR_TYPE_RGB}) {
    for (int filters : {PNG_FILTER_NONE, PNG_FILTER_SUB, PNG_FILTER_UP, PNG_FILTER_AVG, PNG_FILTER_PAETH,
                        PNG_ALL_FILTERS}) {
      for (auto [width, height] : {std::pair{1, 1}, {7, 3}, {33, 17}, {130, 300}}) {
        for (size_t idat : {size_t{64}, size_t{1} << 16}) {
          PngSpec spec;
          spec.width = width;
          spec.height = height;
          spec.color = color;
          spec.filters = filters;
          spec.idat_bytes = idat;
          spec.seed = static_cast<uint32_t>(++files);
          const std::string png = EncodePng(spec);
          SCOPED_TRACE(testing::Message() << "colour " << color << ", filters " << filters << ", " << width << " x "
                                          << height << ", IDAT " << idat);
          std::optional<RgbImage> fast = DecodeCommonPng(png, {});
          absl::StatusOr<RgbImage> want = DecodePngLibpng(png, "test", {});
          ASSERT_TRUE(want.ok()) << want.status();
          ASSERT_TRUE(fast.has_value());
          EXPECT_EQ(fast->width, width);
          EXPECT_EQ(fast->height, height);
          EXPECT_EQ(fast->rgb, want->rgb);
        }
      }
    }
  }
}

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// A chunk with its length and CRC.
std::string Chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  return Be32(static_cast<uint32_t>(data.size())) + body +
         Be32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
}

std::string Zlib(const std::string& raw) {
  uLongf n = compressBound(raw.size());
  std::string out(n, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(raw.data()), raw.size(),
                      6),
            Z_OK);
  out.resize(n);
  return out;
}

// A 5 x 4 RGBA image by hand: `rows` of filtered data (a filter byte, 20 bytes) deflated into one
// IDAT, with `before` and `after` its chunks.
constexpr int kHandWidth = 5, kHandHeight = 4;
std::string HandRows(int rows, uint8_t filter = 4) {
  std::string raw;
  for (int r = 0; r < rows; ++r) {
    raw += static_cast<char>(r == 1 ? filter : r % 5);
    for (int i = 0; i < kHandWidth * 4; ++i) raw += static_cast<char>(r * 31 + i * 7);
  }
  return raw;
}
std::string HandPng(const std::string& stream, const std::string& before = "", const std::string& after = "") {
  const std::string ihdr = Be32(kHandWidth) + Be32(kHandHeight) + std::string("\x08\x06\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + Chunk("IHDR", ihdr) + before + Chunk("IDAT", stream) + after +
         Chunk("IEND", "");
}

TEST(PngFast, LeavesEveryOtherFileToLibpng) {
  PngSpec base;
  base.width = 40;
  base.height = 20;
  auto with = [&](auto change) {
    PngSpec s = base;
    change(s);
    return EncodePng(s);
  };
  const std::string stream = Zlib(HandRows(kHandHeight));
  const std::string hand = HandPng(stream);
  ASSERT_TRUE(DecodeCommonPng(hand, {}).has_value());
  std::string bad_adler = stream;
  bad_adler.back() = static_cast<char>(bad_adler.back() ^ 1);
  std::string bad_crc = hand;
  bad_crc[bad_crc.size() - 12 - 5] ^= 1;  // the IDAT's CRC, just before IEND
  const std::string text = Chunk("tEXt", std::string("Comment\0x", 9));
  struct Case {
    const char* what;
    std::string png;
    bool fast;  // the fast path takes it
  };
  const Case cases[] = {
      {"an ancillary chunk (taken)", HandPng(stream, Chunk("xyZw", "data")), true},
      {"an ancillary chunk with a bad CRC (taken: libpng drops it)",
       HandPng(stream, text.substr(0, text.size() - 1) + "?"), true},
      {"PLTE in an RGBA image", HandPng(stream, Chunk("PLTE", std::string(6, '\1'))), false},
      {"an unknown critical chunk", HandPng(stream, Chunk("XYZW", "data")), false},
      {"IDATs not in one run", HandPng(stream.substr(0, 10), "", text + Chunk("IDAT", stream.substr(10))), false},
      {"a row short", HandPng(Zlib(HandRows(kHandHeight - 1))), false},
      {"a row over", HandPng(Zlib(HandRows(kHandHeight + 1))), false},
      {"bytes after the zlib stream", HandPng(stream + "xx"), false},
      {"the zlib checksum", HandPng(bad_adler), false},
      {"filter 5", HandPng(Zlib(HandRows(kHandHeight, 5))), false},
      {"the IDAT's CRC", bad_crc, false},
      {"no IEND", hand.substr(0, hand.size() - 12), false},
      {"truncated", hand.substr(0, hand.size() / 2), false},
      {"interlaced", with([](PngSpec& s) { s.interlaced = true; }), false},
      {"16-bit", with([](PngSpec& s) { s.bit_depth = 16; }), false},
      {"gray", with([](PngSpec& s) { s.color = PNG_COLOR_TYPE_GRAY; }), false},
      {"2-bit gray", with([](PngSpec& s) {
         s.color = PNG_COLOR_TYPE_GRAY;
         s.bit_depth = 2;
       }),
       false},
      {"RGB with tRNS", with([](PngSpec& s) {
         s.color = PNG_COLOR_TYPE_RGB;
         s.transparency = true;
       }),
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(DecodeCommonPng(c.png, {}).has_value(), c.fast);
    absl::StatusOr<RgbImage> decoded = Decode(c.png, "test");
    absl::StatusOr<RgbImage> libpng = DecodePngLibpng(c.png, "test", {});
    ASSERT_EQ(decoded.ok(), libpng.ok()) << decoded.status() << " / " << libpng.status();
    if (decoded.ok()) {
      EXPECT_EQ(decoded->rgb, libpng->rgb);
    } else {
      EXPECT_EQ(decoded.status(), libpng.status());
    }
  }
  // Over the limits: left to libpng, whose size check names them.
  DecodeLimits narrow;
  narrow.max_width = kHandWidth - 1;
  EXPECT_FALSE(DecodeCommonPng(hand, narrow).has_value());
  EXPECT_FALSE(Decode(hand, "test", narrow).ok());
}

// The old CompositeOnWhite, Pillow's arithmetic as written (a division a pixel).
uint8_t PillowOverWhite(uint32_t s, uint32_t sa) {
  if (sa == 0) return 255;
  auto div255 = [](uint32_t a) { return ((a >> 8) + a) >> 8; };
  const uint32_t blend = 255 * (255 - sa), outa255 = sa * 255 + blend;
  const uint32_t coef1 = sa * 255 * 255 * 128 / outa255, coef2 = 255 * 128 - coef1;
  return static_cast<uint8_t>(div255(s * coef1 + 255 * coef2 + (0x80u << 7)) >> 7);
}

TEST(PngFast, CompositeOnWhiteIsPillowsArithmeticForEveryValue) {
  for (uint32_t sa = 0; sa < 256; ++sa) {
    for (uint32_t s = 0; s < 256; ++s) {
      const uint8_t rgba[4] = {static_cast<uint8_t>(s), static_cast<uint8_t>(255 - s), static_cast<uint8_t>(s / 2),
                               static_cast<uint8_t>(sa)};
      uint8_t rgb[3];
      CompositeOnWhite(rgba, 1, rgb);
      ASSERT_EQ(rgb[0], PillowOverWhite(s, sa)) << s << " " << sa;
      ASSERT_EQ(rgb[1], PillowOverWhite(255 - s, sa));
      ASSERT_EQ(rgb[2], PillowOverWhite(s / 2, sa));
    }
  }
}

}  // namespace
}  // namespace ag::image
