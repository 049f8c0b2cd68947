#include "image/preprocess.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "image/resize.h"

namespace ag::image {
namespace {

using nlohmann::json;

absl::Status FieldError(absl::string_view source, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, " ", what));
}

// Python's round(): to the nearest integer, halves to even (the default rounding mode).
double PyRound(double x) { return std::nearbyint(x); }

uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

// The key of this process's image hashes: random, so that no client can aim for a collision.
const std::array<uint64_t, 2>& ProcessKey() {
  static const std::array<uint64_t, 2> key = [] {
    std::random_device rd;
    std::array<uint64_t, 2> k;
    for (uint64_t& v : k) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    return k;
  }();
  return key;
}

// Block rows (merge x merge patches high) are patchified on their own, a few a thread at least.
constexpr int64_t kMinBlockRowsPerThread = 2;

// TreeHash128's chunk: big enough that a chunk's hash dwarfs its thread's share of the start-up.
constexpr size_t kHashChunk = size_t{1} << 20;

}  // namespace

absl::StatusOr<ProcessorConfig> ParseProcessorConfig(absl::string_view json_text, absl::string_view source) {
  const json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a valid JSON object"));
  }
  ProcessorConfig c;
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      return FieldError(source, key, absl::StrCat("must be an integer in [", lo, ", ", hi, "]"));
    }
    *out = v.get<int64_t>();
    return absl::OkStatus();
  };
  int64_t patch = c.patch_size, merge = c.merge_size, temporal = c.temporal_patch_size;
  for (absl::Status s : {integer("patch_size", 1, 64, &patch), integer("merge_size", 1, 8, &merge),
                         integer("temporal_patch_size", 1, 8, &temporal)}) {
    if (!s.ok()) return s;
  }
  c.patch_size = static_cast<int>(patch);
  c.merge_size = static_cast<int>(merge);
  c.temporal_patch_size = static_cast<int>(temporal);
  if (j.contains("size")) {
    const json& size = j["size"];
    if (!size.is_object() || !size.contains("shortest_edge") || !size.contains("longest_edge") ||
        !size["shortest_edge"].is_number_integer() || !size["longest_edge"].is_number_integer()) {
      return FieldError(source, "size", "must be {\"shortest_edge\": pixels, \"longest_edge\": pixels}");
    }
    c.min_pixels = size["shortest_edge"].get<int64_t>();
    c.max_pixels = size["longest_edge"].get<int64_t>();
    const int64_t least = int64_t{2} * c.factor() * c.factor();
    if (c.min_pixels < 1 || c.max_pixels < least || c.min_pixels > c.max_pixels || c.max_pixels > (int64_t{1} << 32)) {
      return FieldError(source, "size", absl::StrCat("needs 1 <= shortest_edge <= longest_edge, longest_edge in [",
                                                     least, ", 2^32]"));
    }
  }
  for (const char* key : {"image_mean", "image_std"}) {
    if (!j.contains(key)) continue;
    const json& v = j[key];
    if (!v.is_array() || v.size() != 3 || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number(); })) {
      return FieldError(source, key, "must be a list of 3 numbers");
    }
    std::array<float, 3>& out = std::string(key) == "image_mean" ? c.mean : c.std;
    for (int i = 0; i < 3; ++i) out[i] = static_cast<float>(v[i].get<double>());
  }
  for (float s : c.std) {
    if (!(s > 0) || !std::isfinite(s)) return FieldError(source, "image_std", "must be positive");
  }
  for (float m : c.mean) {
    if (!std::isfinite(m)) return FieldError(source, "image_mean", "must be finite");
  }
  if (j.contains("rescale_factor")) {
    if (!j["rescale_factor"].is_number() || !(j["rescale_factor"].get<double>() > 0)) {
      return FieldError(source, "rescale_factor", "must be a positive number");
    }
    c.rescale_factor = j["rescale_factor"].get<double>();
  }
  // The one pipeline implemented: convert to RGB, resize (bicubic), rescale, normalise.
  for (const char* key : {"do_resize", "do_rescale", "do_normalize", "do_convert_rgb"}) {
    if (j.contains(key) && j[key] != true) return FieldError(source, key, "must be true (the only pipeline implemented)");
  }
  if (j.contains("resample") && j["resample"] != 3) return FieldError(source, "resample", "must be 3 (bicubic)");
  return c;
}

absl::StatusOr<std::pair<int, int>> SmartResize(int height, int width, const ProcessorConfig& config) {
  if (height <= 0 || width <= 0) return absl::InvalidArgumentError("the image is empty");
  const double factor = config.factor();
  const double frames = config.temporal_patch_size;  // an image is its own frame twice
  double h = height, w = width;
  if (h < factor || w < factor) {
    const double scale = std::max(factor / h, factor / w);
    h = std::trunc(h * scale);
    w = std::trunc(w * scale);
  }
  if (std::max(h, w) / std::min(h, w) > 200) {
    return absl::InvalidArgumentError(absl::StrCat("the image's aspect ratio (", width, " x ", height,
                                                   ") is over 200: not taken"));
  }
  double h_bar = PyRound(h / factor) * factor, w_bar = PyRound(w / factor) * factor;
  const double t_bar = PyRound(frames / config.temporal_patch_size) * config.temporal_patch_size;
  if (t_bar * h_bar * w_bar > static_cast<double>(config.max_pixels)) {
    const double beta = std::sqrt((frames * h * w) / static_cast<double>(config.max_pixels));
    h_bar = std::max(factor, std::floor(h / beta / factor) * factor);
    w_bar = std::max(factor, std::floor(w / beta / factor) * factor);
  } else if (t_bar * h_bar * w_bar < static_cast<double>(config.min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(config.min_pixels) / (frames * h * w));
    h_bar = std::ceil(h * beta / factor) * factor;
    w_bar = std::ceil(w * beta / factor) * factor;
  }
  if (h_bar > (1 << 20) || w_bar > (1 << 20)) return absl::InvalidArgumentError("the resized image is too large");
  return std::pair<int, int>{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

absl::StatusOr<Patches> Preprocess(const RgbImage& image, const ProcessorConfig& config, absl::string_view source) {
  absl::StatusOr<std::pair<int, int>> size = SmartResize(image.height, image.width, config);
  if (!size.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", size.status().message()));
  const auto [height, width] = *size;
  RgbImage scaled;
  if (height != image.height || width != image.width) scaled = ResizeBicubicAntialias(image, height, width);
  const RgbImage& resized = height != image.height || width != image.width ? scaled : image;
  const int p = config.patch_size, m = config.merge_size, t = config.temporal_patch_size;
  Patches out;
  out.grid_h = height / p;
  out.grid_w = width / p;
  // Rescale and normalise fused as the torchvision backend does: (x - mean * 255) / (std * 255), in fp32.
  // (torch multiplies the fp32 mean by the Python float 1 / rescale_factor cast to fp32.) A byte has
  // 256 values: each channel's results are computed once, with the same expression.
  const float inverse = static_cast<float>(1.0 / config.rescale_factor);
  std::array<std::array<float, 256>, 3> normalised;
  for (int c = 0; c < 3; ++c) {
    const float mean = config.mean[c] * inverse, std = config.std[c] * inverse;
    for (int v = 0; v < 256; ++v) normalised[c][v] = (static_cast<float>(v) - mean) / std;
  }
  // Row n is patch (h, w) = (2 bh + i, 2 bw + j) in block-major order; its values
  // run over (channel, time copy, y in patch, x in patch).
  const int64_t values = config.patch_values();
  out.pixels.resize(static_cast<size_t>(out.rows() * values));  // not written: the loop below touches it first
  const size_t stride = static_cast<size_t>(resized.width) * 3;
  const int64_t blocks_w = out.grid_w / m;
  ParallelFor(out.grid_h / m, kMinBlockRowsPerThread, [&](int64_t bh_begin, int64_t bh_end) {
    int64_t row = bh_begin * blocks_w * m * m;
    for (int64_t bh = bh_begin; bh < bh_end; ++bh) {
      for (int64_t bw = 0; bw < blocks_w; ++bw) {
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < m; ++j, ++row) {
            const int64_t y0 = (bh * m + i) * p, x0 = (bw * m + j) * p;
            float* dst = out.pixels.data() + row * values;
            for (int c = 0; c < 3; ++c) {
              float* first = dst;  // the first time copy; the others repeat it
              for (int y = 0; y < p; ++y) {
                const uint8_t* src = resized.rgb.data() + static_cast<size_t>(y0 + y) * stride + x0 * 3 + c;
                for (int x = 0; x < p; ++x) *dst++ = normalised[c][src[x * 3]];
              }
              for (int copy = 1; copy < t; ++copy, dst += p * p) std::copy(first, first + p * p, dst);
            }
          }
        }
      }
    }
  });
  out.hash = TreeHash128(resized.rgb.data(), resized.rgb.size(), {out.grid_t, out.grid_h, out.grid_w}, ProcessKey());
  return out;
}

std::array<uint64_t, 2> SipHash128(const uint8_t* data, size_t size, const std::array<uint64_t, 2>& key) {
  uint64_t v0 = 0x736f6d6570736575ull ^ key[0], v1 = 0x646f72616e646f6dull ^ key[1] ^ 0xee;
  uint64_t v2 = 0x6c7967656e657261ull ^ key[0], v3 = 0x7465646279746573ull ^ key[1];
  auto round = [&] {
    v0 += v1; v1 = Rotl(v1, 13); v1 ^= v0; v0 = Rotl(v0, 32);
    v2 += v3; v3 = Rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = Rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = Rotl(v1, 17); v1 ^= v2; v2 = Rotl(v2, 32);
  };
  auto word = [](const uint8_t* b) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; --i) w = (w << 8) | b[i];
    return w;
  };
  const size_t whole = size - size % 8;
  for (size_t i = 0; i < whole; i += 8) {
    const uint64_t m = word(data + i);
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(size) << 56;
  for (size_t i = whole; i < size; ++i) last |= static_cast<uint64_t>(data[i]) << (8 * (i - whole));
  v3 ^= last;
  round();
  round();
  v0 ^= last;
  v2 ^= 0xee;
  for (int i = 0; i < 4; ++i) round();
  std::array<uint64_t, 2> out;
  out[0] = v0 ^ v1 ^ v2 ^ v3;
  v1 ^= 0xdd;
  for (int i = 0; i < 4; ++i) round();
  out[1] = v0 ^ v1 ^ v2 ^ v3;
  return out;
}

std::array<uint64_t, 2> TreeHash128(const uint8_t* data, size_t size, const std::vector<int64_t>& tail,
                                    const std::array<uint64_t, 2>& key) {
  const size_t chunks = (size + kHashChunk - 1) / kHashChunk;
  // The root's message: each chunk's digest, then the size and the tail, as little-endian words.
  std::vector<uint64_t> words(2 * chunks);
  ParallelFor(static_cast<int64_t>(chunks), 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t offset = static_cast<size_t>(c) * kHashChunk;
      const std::array<uint64_t, 2> chunk_key = {key[0] ^ static_cast<uint64_t>(c + 1), key[1]};  // never the root's
      const std::array<uint64_t, 2> h = SipHash128(data + offset, std::min(kHashChunk, size - offset), chunk_key);
      words[2 * c] = h[0];
      words[2 * c + 1] = h[1];
    }
  });
  words.push_back(static_cast<uint64_t>(size));
  for (const int64_t v : tail) words.push_back(static_cast<uint64_t>(v));
  std::vector<uint8_t> message(words.size() * 8);
  for (size_t i = 0; i < words.size(); ++i) {
    for (int b = 0; b < 8; ++b) message[i * 8 + b] = static_cast<uint8_t>(words[i] >> (8 * b));
  }
  return SipHash128(message.data(), message.size(), key);
}

}  // namespace ag::image
