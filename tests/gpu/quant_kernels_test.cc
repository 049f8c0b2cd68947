// The quantized linear kernels (issue 18) against kernels/ref: the decode kernels on the codes,
// the prefill path's dequantized weight, act-order inputs, and the in-load wgmma GEMM. Split from
// kernels_test.cc (the bf16 kernels); the same tolerances: atol 1e-2, rtol 1e-2 unless a case
// is exact by construction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/quant_linear.cuh"
#include "kernels/cuda/quant_pack.h"
#include "kernels/ref/half.h"
#include "kernels/ref/quant.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_testing.h"

namespace ag {
namespace {

using testing::Bf16;
using testing::Bf16Array;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::RandomBf16;

constexpr float kAtol = 1e-2f, kRtol = 1e-2f;

// The quantized linear, exact by construction: codes, zero points and power-of-two scales make
// every dequantized weight a small multiple of 2^-7 (fp8: codes of small powers of two), and x
// and the residual hold small integers, so every product and partial sum is exact in fp32 whatever
// the order; the result rounded to bf16 must then equal the reference's (ref::DequantizeRows and a
// double-precision product) bit for bit, for each format and group, over two segments of one
// weight (the second an fp8 one, as a 4-bit body's K/V rows), at batches that take one block of
// rows and several, through the decode kernel and through the prefill path's dequantized weight.
struct QuantCase {
  cuda::QuantCode code;
  int64_t group;
  bool symmetric;
};

struct HostSegment {
  ref::QuantSpec spec;
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  std::vector<uint32_t> words;
};

HostSegment MakeSegment(const QuantCase& c, int64_t n, int64_t k, std::mt19937& rng) {
  HostSegment h;
  h.spec.fp8 = c.code == cuda::QuantCode::kFp8;
  h.spec.bits = cuda::QuantCodeBits(c.code);
  h.spec.group = c.group;
  h.spec.symmetric = c.symmetric;
  const int64_t groups = c.group == 0 ? 1 : cuda::SegmentGroups(k, c.group, 0);  // a partial last group counts
  h.codes.resize(n * k);
  h.zeros.resize(n * groups);
  h.scales.resize(n * groups);
  const float fp8_values[] = {0.0f, 0.25f, -0.5f, 1.0f, -2.0f, 4.0f, -8.0f, 0.125f};
  for (uint8_t& q : h.codes) {
    q = h.spec.fp8 ? ref::FloatToE4M3(fp8_values[rng() % 8]) : static_cast<uint8_t>(rng() % (1u << h.spec.bits));
  }
  for (uint8_t& z : h.zeros) z = static_cast<uint8_t>(rng() % (1u << h.spec.bits));
  for (float& sc : h.scales) sc = std::ldexp(1.0f, -static_cast<int>(rng() % 5));
  h.words.resize(n * cuda::PackedRowWords(k, h.spec.bits));
  cuda::PackQuantCodes(h.codes.data(), n, k, h.spec.bits, h.words.data());
  return h;
}

// A HostSegment of n rows on the device as the backend stores this engine's quantized weights:
// fp32 scales a row, bf16 a group, zero points when asymmetric.
struct DeviceSegment {
  DeviceSegment(const HostSegment& h, const QuantCase& c, int64_t n)
      : codes(h.words), scales(h.scales), group_scales(h.scales), zeros(h.zeros) {
    const void* device_scales = c.group == 0 ? static_cast<const void*>(scales.get()) : group_scales.get();
    segment = cuda::QuantSegment{.codes = codes.get(), .scales = device_scales,
                                 .zeros = c.symmetric ? nullptr : zeros.get(), .code = c.code, .group = c.group,
                                 .group_offset = 0, .n_begin = 0, .n = n};
  }
  DeviceArray<uint32_t> codes;
  DeviceArray<float> scales;
  Bf16Array group_scales;
  DeviceArray<uint8_t> zeros;
  cuda::QuantSegment segment;
};

// x [m, k] times w [n, k] transposed (plus residual [m, n]), summed in double and rounded once.
std::vector<float> HostProduct(const std::vector<float>& x, const std::vector<float>& w, int64_t m, int64_t n,
                               int64_t k, const std::vector<float>* residual = nullptr) {
  std::vector<float> y(m * n);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t col = 0; col < n; ++col) {
      double sum = residual != nullptr ? (*residual)[r * n + col] : 0.0;
      for (int64_t j = 0; j < k; ++j) sum += double{x[r * k + j]} * w[col * k + j];
      y[r * n + col] = static_cast<float>(sum);
    }
  }
  return y;
}

TEST(GpuKernels, QuantLinearIsExactByConstruction) {
  SKIP_WITHOUT_GPU();
  const int64_t n0 = 258, n1 = 37, n = n0 + n1, k = 512;  // the last segment odd: a partial last pair
  const QuantCase cases[] = {{cuda::QuantCode::kInt4, 128, false}, {cuda::QuantCode::kInt4, 32, true},
                             {cuda::QuantCode::kInt4, 0, true},    {cuda::QuantCode::kInt8, 64, false},
                             {cuda::QuantCode::kInt8, 0, true},    {cuda::QuantCode::kFp8, 0, true}};
  const QuantCase fp8 = {cuda::QuantCode::kFp8, 0, true};
  std::mt19937 rng(17);
  for (const QuantCase& c : cases) {
    const HostSegment h0 = MakeSegment(c, n0, k, rng), h1 = MakeSegment(fp8, n1, k, rng);
    std::vector<float> w(n * k);
    ref::DequantizeRows(h0.codes.data(), h0.scales.data(), c.symmetric ? nullptr : h0.zeros.data(), n0, k, h0.spec,
                        w.data());
    ref::DequantizeRows(h1.codes.data(), h1.scales.data(), nullptr, n1, k, h1.spec, w.data() + n0 * k);
    DeviceArray<uint32_t> codes0(h0.words), codes1(h1.words);
    // Per-row scales are fp32 on the device, group scales bf16 (powers of two here: exact).
    DeviceArray<float> scales0(h0.scales), scales1(h1.scales);
    Bf16Array group_scales0(h0.scales);
    DeviceArray<uint8_t> zeros0(h0.zeros);
    const void* device_scales0 = c.group == 0 ? static_cast<const void*>(scales0.get()) : group_scales0.get();
    cuda::QuantSegment s0{.codes = codes0.get(), .scales = device_scales0, .zeros = c.symmetric ? nullptr : zeros0.get(),
                          .code = c.code, .group = c.group, .group_offset = 0, .n_begin = 0, .n = n0};
    cuda::QuantSegment s1{.codes = codes1.get(), .scales = scales1.get(), .zeros = nullptr,
                          .code = cuda::QuantCode::kFp8, .group = 0, .group_offset = 0, .n_begin = n0, .n = n1};
    const std::string name = "quant linear code " + std::to_string(static_cast<int>(c.code)) + " g" +
                             std::to_string(c.group) + (c.symmetric ? " sym" : " asym");
    // The prefill path's weight: exact in bf16 (at most 8 significant bits).
    Bf16Array dw(n * k);
    ASSERT_CUDA(cuda::LaunchDequantize(s0, k, dw.get(), nullptr));
    ASSERT_CUDA(cuda::LaunchDequantize(s1, k, dw.get(), nullptr));
    ExpectClose(dw.Download(), Bf16(w), 0, 0, name + " dequantized");
    for (const int64_t m : {1, 3, 8, 13, 20, 40, 64, 75}) {  // codes kernel to 16 rows, skinny to 64, codes
      std::vector<float> x(m * k), residual(m * n);
      for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      for (float& v : residual) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      Bf16Array dx(x), dy(m * n);
      const std::vector<float> want = HostProduct(x, w, m, n, k, &residual);  // exact: multiples of 2^-7 below 2^20
      cuda::LinearParams p;
      p.x = dx.get();
      p.m = m;
      p.k = k;
      p.n = n;
      p.y = dy.get();
      p.epilogue = cuda::Epilogue::kResidual;
      dy.Upload(residual);
      p.residual = dy.get();  // in place, as the decoder's residual stream
      ASSERT_CUDA(cuda::LaunchQuantLinear(p, s0, nullptr));
      ASSERT_CUDA(cuda::LaunchQuantLinear(p, s1, nullptr));
      ExpectClose(dy.Download(), Bf16(want), 0, 0, name + " m" + std::to_string(m));
    }
  }
  // Shapes the kernel cannot take.
  cuda::LinearParams p;
  p.m = 1;
  p.k = 48;  // not whole 16-byte loads of int4 codes
  p.n = 4;
  uint32_t dummy_codes = 0;
  float dummy_scale = 1;
  cuda::QuantSegment bad{.codes = &dummy_codes, .scales = &dummy_scale, .zeros = nullptr, .code = cuda::QuantCode::kInt4,
                         .group = 0, .group_offset = 0, .n_begin = 0, .n = 4};
  EXPECT_EQ(cuda::LaunchQuantLinear(p, bad, nullptr), cudaErrorInvalidValue);
  p.k = 64;
  bad.group = 48;  // does not divide k
  EXPECT_EQ(cuda::LaunchQuantLinear(p, bad, nullptr), cudaErrorInvalidValue);
  bad.group = 32;
  bad.n = 3;  // odd and not the last segment
  EXPECT_EQ(cuda::LaunchQuantLinear(p, bad, nullptr), cudaErrorInvalidValue);
  bad.n = 5;  // past the weight's rows
  EXPECT_EQ(cuda::LaunchQuantLinear(p, bad, nullptr), cudaErrorInvalidValue);
}

// A pre-quantized checkpoint's segment: fp16 or fp32 group scales (values bf16 cannot hold), and
// act order, its codes stored with each group's inputs together. The codes kernel, given x in
// that order (LaunchOrderInputs), and the dequantized weight, written back in input order, must
// both give the weight's own products.
TEST(GpuKernels, QuantLinearReadsCheckpointScalesAndActOrder) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 64, k = 256;
  std::mt19937 rng(29);
  for (const cuda::ScaleType type : {cuda::ScaleType::kF16, cuda::ScaleType::kF32}) {
    HostSegment h = MakeSegment({cuda::QuantCode::kInt4, 32, false}, n, k, rng);
    for (float& sc : h.scales) {  // 10 (fp16) or 20 (fp32) significant bits
      const int bits = type == cuda::ScaleType::kF16 ? 10 : 20;
      sc = std::ldexp(1.0f + std::ldexp(static_cast<float>(1 + rng() % ((1u << bits) - 1)), -bits),
                      -static_cast<int>(rng() % 4));
    }
    std::vector<int32_t> order(k);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> stored(n * k), w(n * k);  // w: each weight at its own input
    ref::DequantizeRows(h.codes.data(), h.scales.data(), h.zeros.data(), n, k, h.spec, stored.data());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < k; ++j) w[r * k + order[j]] = stored[r * k + j];
    }
    std::vector<uint16_t> half_scales;
    for (const float sc : h.scales) half_scales.push_back(FloatToHalf(sc));
    DeviceArray<uint32_t> codes(h.words);
    DeviceArray<uint16_t> scales16(half_scales);
    DeviceArray<float> scales32(h.scales);
    DeviceArray<uint8_t> zeros(h.zeros);
    DeviceArray<int32_t> device_order(order);
    cuda::QuantSegment seg{.codes = codes.get(), .scales = nullptr, .zeros = zeros.get(), .code = cuda::QuantCode::kInt4,
                           .group = 32, .group_offset = 0, .n_begin = 0, .n = n};
    seg.scales = type == cuda::ScaleType::kF16 ? static_cast<const void*>(scales16.get()) : scales32.get();
    seg.scale_type = type;
    seg.input_order = device_order.get();
    const std::string name = type == cuda::ScaleType::kF16 ? "fp16 scales" : "fp32 scales";
    Bf16Array dw(n * k);
    ASSERT_CUDA(cuda::LaunchDequantize(seg, k, dw.get(), nullptr));
    ExpectClose(dw.Download(), Bf16(w), 0, 0, name + " dequantized in input order");
    for (const int64_t m : {1, 5, 16, 40, 100}) {  // 100: two row chunks of the skinny kernel
      const std::vector<float> x = RandomBf16(m * k, 37);
      // Past the codes kernel's rows the skinny kernel multiplies on the tensor cores the weights
      // rounded to bf16 (as LaunchDequantize writes them); these scales' 10 or 20 bits do not fit.
      const std::vector<float> want = HostProduct(x, m > cuda::kQuantCodesMaxRows ? Bf16(w) : w, m, n, k);
      Bf16Array dx(x), ordered(m * k), dy(m * n);
      ASSERT_CUDA(cuda::LaunchOrderInputs(dx.get(), m, k, device_order.get(), ordered.get(), k, nullptr));
      cuda::LinearParams p;
      p.x = ordered.get();
      p.m = m;
      p.k = k;
      p.n = n;
      p.y = dy.get();
      ASSERT_CUDA(cuda::LaunchQuantLinear(p, seg, nullptr));
      ExpectClose(dy.Download(), Bf16(want), 2e-2f, 1e-2f, name + " m" + std::to_string(m));
    }
  }
}

// A rank's slice of an act-order weight's inputs (tensor parallelism over inputs): each group's
// part padded to whole groups by codes worth zero (z) whose input_order is -1; x (the rank's 96
// inputs) is widened to the 128 stored ones. Both paths must give the rank's own products.
TEST(GpuKernels, QuantLinearReadsAPaddedActOrderSlice) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 64, k = 96, stored_k = 128;
  std::mt19937 rng(31);
  HostSegment h = MakeSegment({cuda::QuantCode::kInt4, 32, false}, n, stored_k, rng);
  std::vector<int32_t> inputs(k);
  std::iota(inputs.begin(), inputs.end(), 0);
  std::shuffle(inputs.begin(), inputs.end(), rng);
  std::vector<int32_t> order(stored_k, -1);  // 24 real inputs then 8 pads in each stored group
  for (int64_t g = 0; g < 4; ++g) {
    for (int64_t j = 0; j < 24; ++j) order[g * 32 + j] = inputs[g * 24 + j];
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < stored_k; ++j) {
      if (order[j] < 0) h.codes[r * stored_k + j] = h.zeros[r * 4 + j / 32];
    }
  }
  cuda::PackQuantCodes(h.codes.data(), n, stored_k, 4, h.words.data());
  std::vector<float> stored(n * stored_k), w(n * k, 0.0f);
  ref::DequantizeRows(h.codes.data(), h.scales.data(), h.zeros.data(), n, stored_k, h.spec, stored.data());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < stored_k; ++j) {
      if (order[j] >= 0) {
        w[r * k + order[j]] = stored[r * stored_k + j];
      } else {
        EXPECT_EQ(stored[r * stored_k + j], 0.0f);
      }
    }
  }
  DeviceArray<uint32_t> codes(h.words);
  DeviceArray<float> scales(h.scales);
  DeviceArray<uint8_t> zeros(h.zeros);
  DeviceArray<int32_t> device_order(order);
  cuda::QuantSegment seg{.codes = codes.get(), .scales = scales.get(), .zeros = zeros.get(),
                         .code = cuda::QuantCode::kInt4, .group = 32, .group_offset = 0, .n_begin = 0, .n = n};
  seg.scale_type = cuda::ScaleType::kF32;
  seg.input_order = device_order.get();
  seg.stored_k = stored_k;
  Bf16Array dw(n * k);
  ASSERT_CUDA(cuda::LaunchDequantize(seg, k, dw.get(), nullptr));
  ExpectClose(dw.Download(), Bf16(w), 0, 0, "padded slice dequantized in input order");
  for (const int64_t m : {1, 7, 40, 70}) {
    const std::vector<float> x = RandomBf16(m * k, 41);
    const std::vector<float> want = HostProduct(x, w, m, n, k);
    Bf16Array dx(x), widened(m * stored_k), dy(m * n);
    ASSERT_CUDA(cuda::LaunchOrderInputs(dx.get(), m, k, device_order.get(), widened.get(), stored_k, nullptr));
    cuda::LinearParams p;
    p.x = widened.get();
    p.m = m;
    p.k = stored_k;
    p.n = n;
    p.y = dy.get();
    ASSERT_CUDA(cuda::LaunchQuantLinear(p, seg, nullptr));
    ExpectClose(dy.Download(), Bf16(want), 2e-2f, 1e-2f, "padded slice m" + std::to_string(m));
    p.k = k;  // x not widened: refused
    EXPECT_EQ(cuda::LaunchQuantLinear(p, seg, nullptr), cudaErrorInvalidValue);
  }
}

// The fused epilogues on the quantized path give what the bf16 path gives on the dequantized
// weight (tolerance: the two paths sum in different orders), here gate/up SiLU (StorePair is
// the one epilogue code both paths call).
TEST(GpuKernels, QuantLinearEpiloguesMatchTheBf16Path) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 256;
  std::mt19937 rng(23);
  for (const QuantCase& c : {QuantCase{cuda::QuantCode::kInt4, 64, false}, QuantCase{cuda::QuantCode::kInt8, 0, true}}) {
    // Gate/up, rows interleaved as the backend stores them: 2 x 96 rows.
    const int64_t n = 192;
    const HostSegment h = MakeSegment(c, n, k, rng);
    const DeviceSegment device(h, c, n);
    const cuda::QuantSegment& seg = device.segment;
    Bf16Array dw(n * k);
    ASSERT_CUDA(cuda::LaunchDequantize(seg, k, dw.get(), nullptr));
    for (const int64_t m : {1, 5, 40, 130}) {  // 130: three row chunks, the last of 2 rows
      const std::vector<float> x = RandomBf16(m * k, 31);
      Bf16Array dx(x), got(m * n / 2), want(m * n / 2);
      cuda::LinearParams p;
      p.x = dx.get();
      p.m = m;
      p.k = k;
      p.n = n;
      p.epilogue = cuda::Epilogue::kSiluMul;
      p.y = got.get();
      ASSERT_CUDA(cuda::LaunchQuantLinear(p, seg, nullptr));
      p.w = dw.get();
      p.y = want.get();
      ASSERT_CUDA(cuda::LaunchGemv(p, nullptr));
      ExpectClose(got.Download(), want.Download(), kAtol, kRtol, "quant gate_up silu m" + std::to_string(m));
    }
  }
}

// At one row the codes kernel applies the RMSNorm prologue itself (x times the norm's weights,
// the sums times the row's inverse RMS), as the bf16 GEMV does over the dequantized weight, except
// for int4 (QuantKernelNormalises); more rows (the codes kernel's 8-row blocks, the skinny kernel)
// and an act-order segment refuse a norm: the backend normalises x first.
TEST(GpuKernels, QuantLinearAppliesTheNormAtOneRow) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 512, n = 96;
  std::mt19937 rng(29);
  for (const QuantCase& c : {QuantCase{cuda::QuantCode::kInt4, 64, false}, QuantCase{cuda::QuantCode::kInt8, 0, true},
                             QuantCase{cuda::QuantCode::kFp8, 0, true}}) {
    SCOPED_TRACE(static_cast<int>(c.code));
    const HostSegment h = MakeSegment(c, n, k, rng);
    const DeviceSegment device(h, c, n);
    cuda::QuantSegment seg = device.segment;
    Bf16Array dw(n * k);
    ASSERT_CUDA(cuda::LaunchDequantize(seg, k, dw.get(), nullptr));
    const std::vector<float> x = RandomBf16(100 * k, 37, 4.0f), nw = RandomBf16(k, 38);
    Bf16Array dx(x), dnw(nw), got(n), want(n), bias(RandomBf16(n, 39));
    cuda::LinearParams p;
    p.x = dx.get();
    p.m = 1;
    p.k = k;
    p.n = n;
    p.norm_w = dnw.get();
    p.eps = 1e-5f;
    p.bias = bias.get();
    p.epilogue = cuda::Epilogue::kBias;
    p.y = got.get();
    if (!cuda::QuantKernelNormalises(c.code, false)) {  // int4: the backend normalises first
      EXPECT_EQ(cuda::LaunchQuantLinear(p, seg, nullptr), cudaErrorInvalidValue) << "int4: normalise first";
      continue;
    }
    ASSERT_CUDA(cuda::LaunchQuantLinear(p, seg, nullptr));
    p.w = dw.get();
    p.y = want.get();
    ASSERT_CUDA(cuda::LaunchGemv(p, nullptr));
    ExpectClose(got.Download(), want.Download(), kAtol, kRtol, "quant norm linear");
    p.w = nullptr;
    p.y = got.get();
    for (const int64_t m : {2, 40, 100}) {  // the codes kernel's 8-row blocks, the skinny kernel: normalise first
      p.m = m;
      EXPECT_EQ(cuda::LaunchQuantLinear(p, seg, nullptr), cudaErrorInvalidValue) << m << " rows: normalise first";
    }
    p.m = 1;
    const std::vector<int32_t> order = [&] {
      std::vector<int32_t> o(k);
      std::iota(o.begin(), o.end(), 0);
      return o;
    }();
    DeviceArray<int32_t> dorder(order);
    seg.input_order = dorder.get();
    EXPECT_EQ(cuda::LaunchQuantLinear(p, seg, nullptr), cudaErrorInvalidValue) << "x reordered: normalise first";
  }
}

// ---- the quantized prefill GEMM (Hopper): codes TMA'd and dequantized in shared memory ----

// w [n, k] of an integer segment whose first input lies `offset` inputs into its first group
// (a tensor-parallel rank's block of a row), scales and zeros [n, SegmentGroups(k, group, offset)].
std::vector<float> DequantizeWithOffset(const HostSegment& h, int64_t n, int64_t k, int64_t offset) {
  const int64_t groups = cuda::SegmentGroups(k, h.spec.group, offset);
  std::vector<float> w(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t g = r * groups + cuda::GroupOf(j, h.spec.group, offset);
      const float z = h.spec.symmetric ? static_cast<float>(1 << (h.spec.bits - 1)) : h.zeros[g];
      w[r * k + j] = h.scales[g] * (static_cast<float>(h.codes[r * k + j]) - z);
    }
  }
  return w;
}

// Exact by construction, as QuantLinearIsExactByConstruction: small integer x, power-of-two
// scales; three segments of one weight (the format under test over two row tiles and a piece, 64
// bf16 rows, 37 fp8 rows: an odd last segment), K ending inside a k-tile where the groups allow,
// a group offset, rows of x over several 128-row tiles and one past.
TEST(GpuKernels, QuantGemmIsExactByConstruction) {
  SKIP_WITHOUT_GPU();
  const int64_t n0 = 258, nb = 64, n1 = 37, n = n0 + nb + n1;
  struct Case {
    QuantCase c;
    int64_t k, offset;
  };
  const Case cases[] = {{{cuda::QuantCode::kInt4, 128, false}, 512, 0}, {{cuda::QuantCode::kInt4, 32, true}, 544, 0},
                        {{cuda::QuantCode::kInt4, 64, false}, 512, 32}, {{cuda::QuantCode::kInt4, 0, true}, 544, 0},
                        {{cuda::QuantCode::kInt8, 64, false}, 512, 16}, {{cuda::QuantCode::kInt8, 0, true}, 528, 0},
                        {{cuda::QuantCode::kFp8, 0, true}, 544, 0}};
  const QuantCase fp8 = {cuda::QuantCode::kFp8, 0, true};
  std::mt19937 rng(43);
  for (const Case& tc : cases) {
    const QuantCase& c = tc.c;
    const int64_t k = tc.k;
    HostSegment h0 = MakeSegment(c, n0, k, rng);
    const HostSegment h1 = MakeSegment(fp8, n1, k, rng);
    if (c.group > 0) {  // scales and zeros for the offset's groups
      const int64_t groups = cuda::SegmentGroups(k, c.group, tc.offset);
      h0.scales.resize(n0 * groups);
      h0.zeros.resize(n0 * groups);
      for (float& sc : h0.scales) sc = std::ldexp(1.0f, -static_cast<int>(rng() % 5));
      for (uint8_t& z : h0.zeros) z = static_cast<uint8_t>(rng() % (1u << h0.spec.bits));
    }
    std::vector<float> w(n * k);
    if (c.code == cuda::QuantCode::kFp8) {
      ref::DequantizeRows(h0.codes.data(), h0.scales.data(), nullptr, n0, k, h0.spec, w.data());
    } else {
      const std::vector<float> w0 = DequantizeWithOffset(h0, n0, k, tc.offset);
      std::copy(w0.begin(), w0.end(), w.begin());
    }
    std::vector<float> bf16_rows(nb * k);  // the bf16 segment's values: small integers, exact
    for (float& v : bf16_rows) v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
    std::copy(bf16_rows.begin(), bf16_rows.end(), w.begin() + n0 * k);
    ref::DequantizeRows(h1.codes.data(), h1.scales.data(), nullptr, n1, k, h1.spec, w.data() + (n0 + nb) * k);
    DeviceArray<uint32_t> codes0(h0.words), codes1(h1.words);
    DeviceArray<float> scales0(h0.scales), scales1(h1.scales);
    Bf16Array group_scales0(h0.scales), values(bf16_rows);
    DeviceArray<uint8_t> zeros0(h0.zeros);
    const void* device_scales0 = c.group == 0 ? static_cast<const void*>(scales0.get()) : group_scales0.get();
    cuda::QuantSegment s0{.codes = codes0.get(), .scales = device_scales0, .zeros = c.symmetric ? nullptr : zeros0.get(),
                          .code = c.code, .group = c.group, .group_offset = tc.offset, .n_begin = 0, .n = n0};
    cuda::QuantSegment sb{.codes = reinterpret_cast<const uint32_t*>(values.get()), .scales = nullptr, .zeros = nullptr,
                          .code = cuda::QuantCode::kBf16, .group = 0, .group_offset = 0, .n_begin = n0, .n = nb};
    cuda::QuantSegment s1{.codes = codes1.get(), .scales = scales1.get(), .zeros = nullptr,
                          .code = cuda::QuantCode::kFp8, .group = 0, .group_offset = 0, .n_begin = n0 + nb, .n = n1};
    const std::string name = "quant gemm code " + std::to_string(static_cast<int>(c.code)) + " g" +
                             std::to_string(c.group) + "+" + std::to_string(tc.offset) + (c.symmetric ? " sym" : " asym") +
                             " k" + std::to_string(k);
    for (const int64_t m : {129, 300}) {
      std::vector<float> x(m * k), residual(m * n);
      for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      for (float& v : residual) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      Bf16Array dx(x), dy(m * n);
      const std::vector<float> want = HostProduct(x, w, m, n, k, &residual);
      cuda::LinearParams p;
      p.x = dx.get();
      p.m = m;
      p.k = k;
      p.n = n;
      p.y = dy.get();
      p.epilogue = cuda::Epilogue::kResidual;
      dy.Upload(residual);
      p.residual = dy.get();
      for (const cuda::QuantSegment* seg : {&s0, &sb, &s1}) {
        ASSERT_TRUE(cuda::QuantGemmUsable(p, *seg)) << name;
        ASSERT_CUDA(cuda::LaunchQuantGemm(p, *seg, nullptr));
      }
      ExpectClose(dy.Download(), Bf16(want), 0, 0, name + " m" + std::to_string(m));
    }
  }
  // What it does not take: an act-order segment (the scratch path's), and a norm prologue.
  uint32_t codes = 0;
  float scale = 1;
  int32_t order = 0;
  cuda::QuantSegment ordered{.codes = &codes, .scales = &scale, .zeros = nullptr, .code = cuda::QuantCode::kInt4,
                             .group = 0, .group_offset = 0, .n_begin = 0, .n = 4};
  ordered.input_order = &order;
  cuda::LinearParams p;
  p.m = 200;
  p.k = 64;
  p.n = 4;
  Bf16Array x(p.m * p.k);
  p.x = x.get();
  EXPECT_FALSE(cuda::QuantGemmUsable(p, ordered));
  EXPECT_EQ(cuda::LaunchQuantGemm(p, ordered, nullptr), cudaErrorNotSupported);
  p.norm_w = x.get();
  ordered.input_order = nullptr;
  EXPECT_EQ(cuda::LaunchQuantGemm(p, ordered, nullptr), cudaErrorInvalidValue);
}

// Random bf16 x through every epilogue: the in-load GEMM must give exactly what the scratch path
// gives (LaunchDequantize, then the bf16 wgmma GEMM): the same bf16 weights, the same tiles, the
// same K split, so the same sums in the same order.
TEST(GpuKernels, QuantGemmEqualsTheDequantizedScratchPath) {
  SKIP_WITHOUT_GPU();
  const int64_t k = 4160;  // 65 k-tiles: a cluster split on short grids, the last rank's tile partial
  std::mt19937 rng(47);
  const cuda::Epilogue epilogues[] = {cuda::Epilogue::kNone, cuda::Epilogue::kBias, cuda::Epilogue::kResidual,
                                      cuda::Epilogue::kSiluMul, cuda::Epilogue::kQkvRope};
  for (const QuantCase& c : {QuantCase{cuda::QuantCode::kInt4, 128, false}, QuantCase{cuda::QuantCode::kInt8, 32, true},
                             QuantCase{cuda::QuantCode::kFp8, 0, true}}) {
    for (const cuda::Epilogue e : epilogues) {
      const bool pairs = e == cuda::Epilogue::kSiluMul || e == cuda::Epilogue::kQkvRope;
      const int64_t n = pairs ? 160 : 301;
      HostSegment h = MakeSegment(c, n, k, rng);
      for (float& sc : h.scales) sc = std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128.0f, -8);  // bf16-exact
      DeviceArray<uint32_t> codes(h.words);
      DeviceArray<float> scales(h.scales);
      Bf16Array group_scales(h.scales);
      DeviceArray<uint8_t> zeros(h.zeros);
      const void* device_scales = c.group == 0 ? static_cast<const void*>(scales.get()) : group_scales.get();
      const cuda::QuantSegment seg{.codes = codes.get(), .scales = device_scales,
                                   .zeros = c.symmetric ? nullptr : zeros.get(), .code = c.code, .group = c.group,
                                   .group_offset = 0, .n_begin = 0, .n = n};
      Bf16Array dw(n * k);
      ASSERT_CUDA(cuda::LaunchDequantize(seg, k, dw.get(), nullptr));
      for (const int64_t m : {129, 520}) {
        const std::string name = "code " + std::to_string(static_cast<int>(c.code)) + " epilogue " +
                                 std::to_string(static_cast<int>(e)) + " m" + std::to_string(m);
        const std::vector<float> x = RandomBf16(m * k, 53), bias = RandomBf16(n, 54), res = RandomBf16(m * n, 55);
        Bf16Array dx(x), db(bias);
        const int heads = 3, kv_heads = 1, head_dim = static_cast<int>(n / 5);
        const int64_t width = e == cuda::Epilogue::kSiluMul ? n / 2 : e == cuda::Epilogue::kQkvRope ? heads * head_dim : n;
        const int64_t cache = m * kv_heads * head_dim;  // one slot a row: block size 1
        std::vector<int32_t> pos(m), slots(m);
        for (int64_t t = 0; t < m; ++t) pos[t] = static_cast<int32_t>(3 * t + 1);
        std::iota(slots.begin(), slots.end(), 0);
        std::shuffle(slots.begin(), slots.end(), rng);  // every slot once: no write races
        DeviceArray<int32_t> dpos(pos), dslots(slots);
        // Both paths on fresh outputs; y (and the caches) downloaded.
        auto run = [&](bool in_load) {
          Bf16Array y(m * width), kc(cache), vc(cache);
          cudaMemset(kc.get(), 0, kc.size() * 2);
          cudaMemset(vc.get(), 0, vc.size() * 2);
          cuda::LinearParams p;
          p.x = dx.get();
          p.m = m;
          p.k = k;
          p.n = n;
          p.epilogue = e;
          p.y = y.get();
          if (e == cuda::Epilogue::kBias || e == cuda::Epilogue::kQkvRope) p.bias = db.get();
          if (e == cuda::Epilogue::kResidual) {
            y.Upload(res);
            p.residual = y.get();
          }
          if (e == cuda::Epilogue::kQkvRope) {
            p.qkv = {{dpos.get(), m}, dslots.get(), {kc.get(), vc.get(), 1, kv_heads, head_dim}, heads, kv_heads,
                     head_dim, cuda::RopeFrequencies::Of(head_dim / 2, 10000.0f)};
          }
          cudaError_t err;
          if (in_load) {
            err = cuda::LaunchQuantGemm(p, seg, nullptr);
          } else {
            p.w = dw.get();
            err = cuda::LaunchGemm(p, nullptr);
          }
          EXPECT_EQ(err, cudaSuccess) << name;
          std::vector<float> out = y.Download();
          if (e == cuda::Epilogue::kQkvRope) {
            for (const Bf16Array* a : {&kc, &vc}) {
              const std::vector<float> more = a->Download();
              out.insert(out.end(), more.begin(), more.end());
            }
          }
          return out;
        };
        ExpectClose(run(true), run(false), 0, 0, name);
      }
    }
  }
}

}  // namespace
}  // namespace ag
