// The reference quantizers: FP8 E4M3 encoding (every code, rounding ties,
// saturation, subnormals) and the integer formats (weights a format can hold
// exactly come back bit for bit; others within half a step).
#include "kernels/ref/quant.h"
#include "kernels/ref/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ag::ref {
using ::ag::RoundToBF16;
namespace {

TEST(E4M3, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(E4M3ToFloat(static_cast<uint8_t>(code))));
      continue;
    }
    const float v = E4M3ToFloat(static_cast<uint8_t>(code));
    EXPECT_EQ(FloatToE4M3(v), code) << code << " = " << v;
  }
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // the smallest normal
}

TEST(E4M3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(1.0625f)), 1.0f);    // halfway between 1 and 1.125: the even mantissa
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(1.1875f)), 1.25f);   // halfway between 1.125 and 1.25
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(1.07f)), 1.125f);
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(15.5f)), 16.0f);     // 15 and 16 are neighbours; the mantissa carries
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(std::ldexp(1.0f, -10))), 0.0f);                     // tie: to 0
  EXPECT_EQ(E4M3ToFloat(FloatToE4M3(std::ldexp(3.0f, -10))), std::ldexp(2.0f, -9));     // tie: to 2
  EXPECT_EQ(FloatToE4M3(460.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3(1e30f), 0x7E);
  EXPECT_EQ(FloatToE4M3(-1e30f), 0xFE);
  EXPECT_EQ(FloatToE4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToE4M3(NAN) & 0x7F, 0x7F);
}

struct Case {
  QuantSpec spec;
  const char* name;
};

class Formats : public ::testing::TestWithParam<Case> {};

// Weights s * (q - z) with power-of-two scales and each group reaching its
// format's extremes: the quantizer must find s and z and give back every bit.
TEST_P(Formats, WeightsTheFormatHoldsComeBackExactly) {
  const QuantSpec spec = GetParam().spec;
  const int64_t n = 5, k = 128, groups = spec.Groups(k), len = k / groups;
  std::mt19937 rng(7);
  std::vector<float> w(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float s = std::ldexp(1.0f, -6 - static_cast<int>((r + g) % 4));
      float* x = w.data() + r * k + g * len;
      if (spec.fp8) {
        for (int64_t i = 0; i < len; ++i) {
          uint8_t code = static_cast<uint8_t>(rng() % 256);
          if ((code & 0x7F) == 0x7F) code = 0;
          x[i] = s * E4M3ToFloat(code);
        }
        x[rng() % len] = -448.0f * s;
        continue;
      }
      const int levels = (1 << spec.bits) - 1, half = 1 << (spec.bits - 1);
      const int z = spec.symmetric ? half : 1 + static_cast<int>(rng() % (levels - 1));
      const int lo = spec.symmetric ? 1 : 0;  // symmetric: q - z in [-(half - 1), half - 1]
      for (int64_t i = 0; i < len; ++i) x[i] = s * static_cast<float>(lo + static_cast<int>(rng() % (levels - lo)) - z);
      x[0] = s * static_cast<float>(lo - z);
      x[len - 1] = s * static_cast<float>(spec.symmetric ? half - 1 : levels - z);
    }
  }
  std::vector<uint8_t> codes(n * k), zeros(n * groups);
  std::vector<float> scales(n * groups), back(n * k);
  ASSERT_TRUE(QuantizeRows(w.data(), n, k, spec, codes.data(), scales.data(), zeros.data()));
  DequantizeRows(codes.data(), scales.data(), zeros.data(), n, k, spec, back.data());
  for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(back[i], w[i]) << GetParam().name << " element " << i;
}

TEST_P(Formats, OtherWeightsAreWithinHalfAStep) {
  const QuantSpec spec = GetParam().spec;
  const int64_t n = 4, k = 256, groups = spec.Groups(k), len = k / groups;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(n * k);
  for (float& x : w) x = d(rng);
  w[3] = 0.0f;
  std::vector<uint8_t> codes(n * k), zeros(n * groups);
  std::vector<float> scales(n * groups), back(n * k);
  ASSERT_TRUE(QuantizeRows(w.data(), n, k, spec, codes.data(), scales.data(), zeros.data()));
  DequantizeRows(codes.data(), scales.data(), zeros.data(), n, k, spec, back.data());
  EXPECT_EQ(back[3], 0.0f) << "zero must stay zero";
  for (int64_t i = 0; i < n * k; ++i) {
    const float s = scales[i / len];
    EXPECT_GT(s, 0.0f) << "a group of nonzero weights has a positive scale";
    if (spec.group != 0) {
      EXPECT_EQ(RoundToBF16(s), s) << "group scales are bf16 values";
    }
    // fp8: half a unit in the last place of the code, 2^-4 relative (plus the subnormal step).
    const float bound = spec.fp8 ? std::fabs(w[i]) / 16.0f + s * std::ldexp(1.0f, -10) : s / 2.0f * 1.0001f;
    EXPECT_LE(std::fabs(back[i] - w[i]), bound) << GetParam().name << " element " << i;
    if (!spec.fp8) {
      EXPECT_LT(codes[i], 1 << spec.bits);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ref, Formats,
                         ::testing::Values(Case{{true, 8, 0, true}, "fp8e4m3"}, Case{{false, 8, 0, true}, "int8:channel:sym"},
                                           Case{{false, 8, 32, false}, "int8:g32:asym"},
                                           Case{{false, 4, 32, true}, "int4:g32:sym"},
                                           Case{{false, 4, 64, false}, "int4:g64:asym"},
                                           Case{{false, 4, 0, false}, "int4:channel:asym"}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(Quantize, RefusesNonFiniteWeights) {
  std::vector<float> w = {0.1f, NAN, 0.2f, 0.3f};
  std::vector<uint8_t> codes(4), zeros(1);
  std::vector<float> scales(1);
  EXPECT_FALSE(QuantizeRows(w.data(), 1, 4, {false, 8, 0, true}, codes.data(), scales.data(), zeros.data()));
  w[1] = INFINITY;
  EXPECT_FALSE(QuantizeRows(w.data(), 1, 4, {true, 8, 0, true}, codes.data(), scales.data(), zeros.data()));
}

TEST(Quantize, AnAllZeroGroupHasScaleOne) {
  std::vector<float> w(64, 0.0f), back(64, 1.0f), scales(2);
  std::vector<uint8_t> codes(64), zeros(2);
  ASSERT_TRUE(QuantizeRows(w.data(), 1, 64, {false, 4, 32, false}, codes.data(), scales.data(), zeros.data()));
  EXPECT_EQ(scales[0], 1.0f);
  DequantizeRows(codes.data(), scales.data(), zeros.data(), 1, 64, {false, 4, 32, false}, back.data());
  for (float x : back) EXPECT_EQ(x, 0.0f);
}

TEST(KvCache, RowsTheCacheHoldsComeBackExactlyAndOthersWithinHalfAStep) {
  // Row 0: int8 multiples of 2^-7 reaching 127 steps; row 1: E4M3 values times 2^-10 reaching 448; row 2: zeros.
  std::vector<float> x(3 * 16, 0.0f);
  for (int i = 0; i < 16; ++i) x[i] = std::ldexp(static_cast<float>((i * 37) % 255 - 127), -7);
  x[5] = std::ldexp(127.0f, -7);
  for (int i = 0; i < 16; ++i) x[16 + i] = std::ldexp(E4M3ToFloat(static_cast<uint8_t>((i * 29) % 0x7E)), -10);
  x[16 + 3] = std::ldexp(448.0f, -10);
  std::vector<float> int8 = x, fp8 = x;
  RoundTripKvRows(int8.data(), 1, 16, /*fp8=*/false);
  RoundTripKvRows(fp8.data() + 16, 2, 16, /*fp8=*/true);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(int8[i], x[i]) << i;
    EXPECT_EQ(fp8[16 + i], x[16 + i]) << i;
    EXPECT_EQ(fp8[32 + i], 0.0f);
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> y(8 * 128);
  for (float& v : y) v = d(rng);
  std::vector<float> a = y, b = y;
  RoundTripKvRows(a.data(), 8, 128, false);
  RoundTripKvRows(b.data(), 8, 128, true);
  for (int r = 0; r < 8; ++r) {
    float amax = 0;
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(y[r * 128 + i]));
    for (int i = 0; i < 128; ++i) {
      const float v = y[r * 128 + i];
      EXPECT_LE(std::fabs(a[r * 128 + i] - v), amax / 127.0f / 2.0f * 1.0001f);
      EXPECT_LE(std::fabs(b[r * 128 + i] - v), std::fabs(v) / 16.0f + amax / 448.0f * std::ldexp(1.0f, -10));
    }
  }
}

}  // namespace
}  // namespace ag::ref
