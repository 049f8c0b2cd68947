// The W8A8 prefill GEMM (kernels/cuda/w8a8_gemm.cuh): x rounded to codes on the device
// (LaunchQuantizeInputCodes), then multiplied as codes by a weight segment's on the 8-bit tensor
// cores, scaled after the sum. Exact by construction: each x row is s times small integers with
// one element at the code range's end (448 s for e4m3, 127.5 s for int8, which rounds to 127), s
// and the weight's scales powers of two, the weight's codes small (e4m3: integers up to 2; int8:
// within 8 of the zero point). Every k-tile's sum is then an integer below 2^11 -- exact even in
// the tensor cores' narrower e4m3 accumulation -- and the whole sum exact in fp32, so the GPU's
// bf16 output must equal the host's exact product rounded to bf16 bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cuda/input_quant.cuh"
#include "kernels/cuda/quant_linear.cuh"
#include "kernels/cuda/w8a8_gemm_layout.h"
#include "kernels/ref/half.h"
#include "kernels/ref/quant.h"
#include "tests/gpu/gpu_testing.h"

namespace ag {
namespace {

using testing::Bf16Array;
using testing::DeviceArray;

struct W8Case {
  cuda::InputQuantCode act;
  bool zeros;  // int8: a zero point a row (else symmetric: 128)
  int64_t k;
};

TEST(GpuW8A8Gemm, IsExactByConstruction) {
  SKIP_WITHOUT_GPU();
  // The segment: columns [8, 208) of a 216-column y (a partial column tile; the columns around it
  // must keep their poison). K = 4112 ends inside a k-tile and, at 130 rows, splits over a cluster.
  const int64_t n_begin = 8, n = 200, total_n = 216;
  const W8Case cases[] = {{cuda::InputQuantCode::kFp8, false, 4112},
                          {cuda::InputQuantCode::kInt8, false, 4112},
                          {cuda::InputQuantCode::kInt8, true, 528},
                          {cuda::InputQuantCode::kFp8, false, 528}};
  std::mt19937 rng(59);
  for (const W8Case& c : cases) {
    const bool fp8 = c.act == cuda::InputQuantCode::kFp8;
    const int64_t k = c.k;
    std::vector<uint8_t> codes(n * k), zeros(n, 128);
    std::vector<float> scales(n), w(n * k);
    for (int64_t col = 0; col < n; ++col) {
      scales[col] = std::ldexp(1.0f, -static_cast<int>(rng() % 5));
      if (c.zeros) zeros[col] = static_cast<uint8_t>(120 + rng() % 17);
      for (int64_t j = 0; j < k; ++j) {
        const int v = static_cast<int>(rng() % 5) - 2;  // the weight's value in code units
        codes[col * k + j] = fp8 ? ref::FloatToE4M3(static_cast<float>(v)) : static_cast<uint8_t>(zeros[col] + v);
        w[col * k + j] = scales[col] * static_cast<float>(v);
      }
    }
    std::vector<uint32_t> words(n * cuda::PackedRowWords(k, 8));
    cuda::PackQuantCodes(codes.data(), n, k, 8, words.data());
    DeviceArray<uint32_t> device_codes(words);
    DeviceArray<float> device_scales(scales);
    DeviceArray<uint8_t> device_zeros(zeros);
    const cuda::QuantSegment seg{.codes = device_codes.get(), .scales = device_scales.get(),
                                 .zeros = c.zeros ? device_zeros.get() : nullptr,
                                 .code = fp8 ? cuda::QuantCode::kFp8 : cuda::QuantCode::kInt8, .group = 0,
                                 .group_offset = 0, .n_begin = n_begin, .n = n};
    const std::string name = std::string(fp8 ? "fp8" : "int8") + (c.zeros ? " zeros" : "") + " k" + std::to_string(k);
    ASSERT_TRUE(cuda::W8A8GemmTakes(seg, c.act, k)) << name;
    for (const int64_t m : {130, 300}) {
      // x's rows: s_r times integers in [-4, 4], one element at the end of the code range.
      std::vector<float> x(m * k), rounded(m * k), residual(m * total_n);
      for (int64_t r = 0; r < m; ++r) {
        const float s = std::ldexp(1.0f, -static_cast<int>(r % 7));
        for (int64_t j = 0; j < k; ++j) {
          const float code = static_cast<float>(static_cast<int>(rng() % 9) - 4);
          x[r * k + j] = s * code;
          rounded[r * k + j] = s * code;
        }
        const int64_t at = static_cast<int64_t>(rng() % k);
        x[r * k + at] = s * (fp8 ? 448.0f : -127.5f);
        rounded[r * k + at] = s * (fp8 ? 448.0f : -128.0f);  // -127.5 ties to the even -128
      }
      for (float& v : residual) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
      std::vector<float> want(m * total_n, std::nanf(""));
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t col = 0; col < n; ++col) {
          double sum = residual[r * total_n + n_begin + col];
          for (int64_t j = 0; j < k; ++j) sum += double{rounded[r * k + j]} * w[col * k + j];
          want[r * total_n + n_begin + col] = RoundToBF16(static_cast<float>(sum));
        }
      }
      Bf16Array dx(x), dy(m * total_n);
      for (int64_t r = 0; r < m; ++r) {  // the columns outside the segment: poison the kernel must not touch
        for (int64_t col = 0; col < total_n; ++col) {
          if (col < n_begin || col >= n_begin + n) residual[r * total_n + col] = std::nanf("");
        }
      }
      dy.Upload(residual);
      DeviceArray<uint8_t> scratch(cuda::W8A8ScratchLayout(m, k).bytes);
      ASSERT_CUDA(cuda::LaunchQuantizeInputCodes(dx.get(), nullptr, m, k, 0.0f, c.act, scratch.get(), nullptr));
      cuda::LinearParams p;
      p.m = m;
      p.k = k;
      p.n = total_n;
      p.y = dy.get();
      p.epilogue = cuda::Epilogue::kResidual;
      p.residual = dy.get();
      ASSERT_CUDA(cuda::LaunchW8A8Gemm(p, seg, c.act, scratch.get(), nullptr));
      const std::vector<float> got = dy.Download();
      int wrong = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
        if (!same && wrong++ < 5) ADD_FAILURE() << name << " m" << m << ": element " << i << " is " << got[i] << ", want " << want[i];
      }
      EXPECT_EQ(wrong, 0) << name << " m" << m;
    }
  }
  // What it does not take: fp8 inputs on int8 weights, group scales, a norm prologue.
  uint32_t codes = 0;
  float scale = 1;
  const cuda::QuantSegment int8_rows{.codes = &codes, .scales = &scale, .zeros = nullptr, .code = cuda::QuantCode::kInt8,
                                     .group = 0, .group_offset = 0, .n_begin = 0, .n = 4};
  EXPECT_FALSE(cuda::W8A8GemmTakes(int8_rows, cuda::InputQuantCode::kFp8, 4096));
  const cuda::QuantSegment grouped{.codes = &codes, .scales = &scale, .zeros = nullptr, .code = cuda::QuantCode::kInt8,
                                   .group = 128, .group_offset = 0, .n_begin = 0, .n = 4};
  EXPECT_FALSE(cuda::W8A8GemmTakes(grouped, cuda::InputQuantCode::kInt8, 4096));
  cuda::LinearParams normed;
  normed.m = 100;
  normed.k = 4096;
  normed.n = 4;
  normed.norm_w = reinterpret_cast<const __nv_bfloat16*>(&codes);
  EXPECT_EQ(cuda::LaunchW8A8Gemm(normed, int8_rows, cuda::InputQuantCode::kInt8, &codes, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ag
