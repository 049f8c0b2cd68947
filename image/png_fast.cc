#include "image/png_fast.h"

#include <libdeflate.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/ref/parallel.h"

namespace ag::image {
namespace {

uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

bool IsLetter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// A chunk's CRC covers its type and data (PNG §5.3); libdeflate's CRC-32 is zlib's.
bool CrcMatches(const uint8_t* type, uint32_t length) {
  return libdeflate_crc32(0, type, size_t{length} + 4) == Be32(type + 4 + length);
}

uint8_t PaethPredictor(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<uint8_t>(a);
  return static_cast<uint8_t>(pb <= pc ? b : c);
}

#if defined(__SSE2__)
// A pixel of 3 or 4 bytes in the low four 16-bit lanes (a 3-byte pixel's fourth lane is the next
// byte: carried along, never stored).
__m128i LoadPixel(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), _mm_setzero_si128());
}

void StorePixel(uint8_t* p, __m128i v, int bpp) {
  const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(v, v));
  std::memcpy(p, &bytes, static_cast<size_t>(bpp));
}

__m128i Abs16(__m128i v) { return _mm_max_epi16(v, _mm_sub_epi16(_mm_setzero_si128(), v)); }

__m128i Select(__m128i mask, __m128i yes, __m128i no) {
  return _mm_or_si128(_mm_and_si128(mask, yes), _mm_andnot_si128(mask, no));
}

// Sub (1), Average (3) and Paeth (4) a pixel at a time: a row's pixels each need the one before,
// so only a pixel's channels run side by side. Paeth's distances as |b - c|, |a - c| and
// |(b - c) + (a - c)| (the specification's |p - a|, |p - b|, |p - c|), its ties as it breaks them.
template <int kFilter>
void UnfilterPixels(uint8_t* row, const uint8_t* prev, int64_t pixels, int bpp) {
  __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128();
  for (int64_t i = 0; i < pixels; ++i) {
    uint8_t* at = row + i * bpp;
    const __m128i x = LoadPixel(at);
    __m128i predicted = a;
    if constexpr (kFilter != 1) {
      const __m128i b = LoadPixel(prev + i * bpp);
      if constexpr (kFilter == 3) {
        predicted = _mm_srli_epi16(_mm_add_epi16(a, b), 1);
      } else {
        const __m128i p = _mm_sub_epi16(b, c), q = _mm_sub_epi16(a, c);
        const __m128i pa = Abs16(p), pb = Abs16(q), pc = Abs16(_mm_add_epi16(p, q));
        const __m128i smallest = _mm_min_epi16(pc, _mm_min_epi16(pa, pb));
        predicted = Select(_mm_cmpeq_epi16(pa, smallest), a, Select(_mm_cmpeq_epi16(pb, smallest), b, c));
      }
      c = b;
    }
    a = _mm_add_epi8(x, predicted);  // bytewise: the low byte wraps mod 256, the high one stays 0
    StorePixel(at, a, bpp);
  }
}
#endif

// Rows a thread unfilters at least: ~4 us a 1080-pixel row against tens to start a thread.
constexpr int64_t kMinRowsPerThread = 64;

struct Decompressor {
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  ~Decompressor() {
    if (d != nullptr) libdeflate_free_decompressor(d);
  }
};

}  // namespace

void UnfilterRowBytewise(int filter, uint8_t* row, const uint8_t* prev, int64_t row_bytes, int bpp) {
  for (int64_t i = 0; i < row_bytes; ++i) {
    const int a = i >= bpp ? row[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
    int predicted = 0;
    if (filter == 1) predicted = a;
    if (filter == 2) predicted = b;
    if (filter == 3) predicted = (a + b) / 2;
    if (filter == 4) predicted = PaethPredictor(a, b, c);
    row[i] = static_cast<uint8_t>(row[i] + predicted);
  }
}

void UnfilterRow(int filter, uint8_t* row, const uint8_t* prev, int64_t row_bytes, int bpp) {
  if (filter == 0) return;
  if (filter == 2) {  // Up: byte by byte independent, the compiler vectorises it
    for (int64_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
    return;
  }
#if defined(__SSE2__)
  if ((bpp == 3 || bpp == 4) && row_bytes % bpp == 0) {
    const int64_t pixels = row_bytes / bpp;
    if (filter == 1) return UnfilterPixels<1>(row, prev, pixels, bpp);
    if (filter == 3) return UnfilterPixels<3>(row, prev, pixels, bpp);
    if (filter == 4) return UnfilterPixels<4>(row, prev, pixels, bpp);
  }
#endif
  UnfilterRowBytewise(filter, row, prev, row_bytes, bpp);
}

std::optional<RgbImage> DecodeCommonPng(absl::string_view bytes, const DecodeLimits& limits) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  if (size < 8 || std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) != 0) return std::nullopt;

  // The chunks: IHDR first, IDATs in one run, IEND; ancillary chunks skipped (none of them
  // changes a pixel as libpng is set up, but tRNS, which is left to it with any critical chunk
  // other than those three: PLTE included).
  uint32_t width = 0, height = 0;
  int bpp = 0;
  enum class Data { kBefore, kIn, kAfter } data_state = Data::kBefore;
  std::vector<absl::string_view> idats;
  size_t idat_bytes = 0;
  bool ended = false;
  for (size_t pos = 8; !ended;) {
    if (size - pos < 12) return std::nullopt;
    const uint32_t length = Be32(data + pos);
    if (length > 0x7fffffff || length > size - pos - 12) return std::nullopt;
    const uint8_t* type = data + pos + 4;
    const uint8_t* body = type + 4;
    pos += size_t{length} + 12;
    if (!std::all_of(type, type + 4, IsLetter)) return std::nullopt;
    const absl::string_view name(reinterpret_cast<const char*>(type), 4);
    if (width == 0) {  // the header
      if (name != "IHDR" || length != 13 || !CrcMatches(type, length)) return std::nullopt;
      width = Be32(body);
      height = Be32(body + 4);
      const uint8_t depth = body[8], color = body[9], compression = body[10], filter = body[11], interlace = body[12];
      if (width == 0 || height == 0 || depth != 8 || (color != 2 && color != 6) || compression != 0 || filter != 0 ||
          interlace != 0) {
        return std::nullopt;
      }
      if (width > limits.max_width || height > limits.max_height ||
          int64_t{width} * height > limits.max_pixels) {
        return std::nullopt;
      }
      bpp = color == 6 ? 4 : 3;
      continue;
    }
    if (name == "IDAT") {
      if (data_state == Data::kAfter || !CrcMatches(type, length)) return std::nullopt;
      data_state = Data::kIn;
      idats.emplace_back(reinterpret_cast<const char*>(body), length);
      idat_bytes += length;
      continue;
    }
    if (data_state == Data::kIn) data_state = Data::kAfter;
    if (name == "IEND") {
      if (length != 0 || data_state != Data::kAfter || !CrcMatches(type, length)) return std::nullopt;
      ended = true;
    } else if ((type[0] & 0x20) == 0 || name == "tRNS") {  // critical (upper-case first letter), or transparency
      return std::nullopt;
    }
  }

  // The image data, inflated in one call: exactly the rows, the zlib stream ending where the
  // last IDAT does and its checksum right.
  std::string joined;
  absl::string_view stream = idats.front();
  if (idats.size() > 1) {
    joined.reserve(idat_bytes);
    for (absl::string_view piece : idats) joined.append(piece.data(), piece.size());
    stream = joined;
  }
  const int64_t row_bytes = int64_t{width} * bpp, stride = row_bytes + 1;
  const size_t raw_size = static_cast<size_t>(stride) * height;
  // Uninitialised (inflate writes it all) and 4 bytes over: the last row's 3-byte pixels load 4.
  std::unique_ptr<uint8_t[]> raw(new uint8_t[raw_size + 4]);
  std::memset(raw.get() + raw_size, 0, 4);
  Decompressor decompressor;
  if (decompressor.d == nullptr) return std::nullopt;
  size_t used = 0, produced = 0;
  if (libdeflate_zlib_decompress_ex(decompressor.d, stream.data(), stream.size(), raw.get(), raw_size, &used,
                                    &produced) != LIBDEFLATE_SUCCESS ||
      used != stream.size() || produced != raw_size) {
    return std::nullopt;
  }

  // Chains of rows, each starting where a row needs nothing above it (None, Sub, or the first
  // row over zeros), unfiltered in place and converted to RGB row by row, the chains on every core.
  std::vector<int64_t> chains;
  for (int64_t r = 0; r < height; ++r) {
    const uint8_t filter = raw[static_cast<size_t>(r * stride)];
    if (filter > 4) return std::nullopt;
    if (r == 0 || filter <= 1) chains.push_back(r);
  }
  RgbImage out{static_cast<int>(height), static_cast<int>(width),
               std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  const std::vector<uint8_t> zeros(static_cast<size_t>(row_bytes) + 4, 0);
  auto run_chain = [&](size_t j) {
    const int64_t end = j + 1 < chains.size() ? chains[j + 1] : int64_t{height};
    for (int64_t r = chains[j]; r < end; ++r) {
      uint8_t* row = raw.get() + r * stride + 1;
      const uint8_t* prev = r == 0 ? zeros.data() : row - stride;
      UnfilterRow(row[-1], row, prev, row_bytes, bpp);
      uint8_t* rgb = out.rgb.data() + static_cast<size_t>(r) * width * 3;
      if (bpp == 4) {
        CompositeOnWhite(row, width, rgb);
      } else {
        std::memcpy(rgb, row, static_cast<size_t>(row_bytes));
      }
    }
  };
  // Each part takes the chains that start among its rows (a chain may run on past them).
  ParallelParts(height, ThreadsFor(height, kMinRowsPerThread), [&](int64_t begin, int64_t end, int64_t) {
    for (auto it = std::lower_bound(chains.begin(), chains.end(), begin); it != chains.end() && *it < end; ++it) {
      run_chain(static_cast<size_t>(it - chains.begin()));
    }
  });
  return out;
}

}  // namespace ag::image
