// The W8A8 input rounding (kernels/cuda/input_quant.cuh) against ref::QuantizeInputRows.
// Without a norm the kernel sees the reference's numbers and does its arithmetic in the same IEEE
// steps (the amax, s = amax / 448 or / 127.5, x / s, the code, s * code), so its bf16 output must
// equal the reference rounded to bf16 bit for bit; with the norm prologue the sum of squares is
// reduced in another order, so a value sitting on a rounding boundary may move by one code step.
// The codes the W8A8 GEMM reads must be those values exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/input_quant.cuh"
#include "kernels/ref/half.h"
#include "kernels/ref/quant.h"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_testing.h"

namespace ag {
namespace {

using testing::Bf16Array;
using testing::DeviceArray;
using testing::RandomBf16;

struct InputCase {
  cuda::InputQuantCode code;
  int64_t rows, k;
};

class GpuInputQuant : public ::testing::TestWithParam<InputCase> {};

TEST_P(GpuInputQuant, EqualsTheReference) {
  SKIP_WITHOUT_GPU();
  const InputCase c = GetParam();
  const bool fp8 = c.code == cuda::InputQuantCode::kFp8;
  const ref::InputQuant q = fp8 ? ref::InputQuant::kFp8 : ref::InputQuant::kInt8;
  std::vector<float> x = RandomBf16(c.rows * c.k, 7, 2.0f);
  std::fill(x.begin() + c.k, x.begin() + 2 * c.k, 0.0f);  // a zero row stays zero
  x[2 * c.k + 3] = 300.0f;                                // one outlier: the row's other values lose codes
  const std::vector<float> w = RandomBf16(c.k, 8, 1.0f);
  Bf16Array dx(x), dw(w), out(x.size());

  ASSERT_CUDA(cuda::LaunchQuantizeInputRows(dx.get(), nullptr, c.rows, c.k, 0.0f, c.code, out.get(), nullptr));
  std::vector<float> want = x;
  ref::QuantizeInputRows(want.data(), c.rows, c.k, q);
  for (float& v : want) v = RoundToBF16(v);
  EXPECT_EQ(out.Download(), want) << "no norm";

  ASSERT_CUDA(cuda::LaunchQuantizeInputRows(dx.get(), dw.get(), c.rows, c.k, 1e-5f, c.code, out.get(), nullptr));
  std::vector<float> normed(x.size());
  ref::RmsNorm(x.data(), w.data(), c.rows, c.k, 1e-5f, normed.data());
  for (float& v : normed) v = RoundToBF16(v);
  ref::QuantizeInputRows(normed.data(), c.rows, c.k, q);
  const std::vector<float> got = out.Download();
  for (int64_t r = 0; r < c.rows; ++r) {
    float amax = 0.0f;
    for (int64_t i = 0; i < c.k; ++i) amax = std::max(amax, std::fabs(normed[r * c.k + i]));
    // One code step at the row's largest values (fp8: 2^-3 relative; int8: the scale) and bf16's.
    const float step = fp8 ? amax / 8.0f : amax / 127.5f;
    int far = 0;
    for (int64_t i = 0; i < c.k; ++i) {
      const float d = std::fabs(got[r * c.k + i] - normed[r * c.k + i]);
      far += !(d <= step + std::fabs(normed[r * c.k + i]) / 128.0f);
    }
    EXPECT_EQ(far, 0) << "row " << r << " with the norm";
  }
}

// The codes the W8A8 GEMM reads (LaunchQuantizeInputCodes) are the values LaunchQuantizeInputRows
// writes: bf16(scale * code) equal bit for bit, with and without the norm, and the int8 sums
// are the codes' sums; a zero row has scale 1 and zero codes.
TEST_P(GpuInputQuant, CodesAreTheRoundedValues) {
  SKIP_WITHOUT_GPU();
  const InputCase c = GetParam();
  if (c.k % 16 != 0) GTEST_SKIP() << "the codes need whole 16-byte rows";
  const bool fp8 = c.code == cuda::InputQuantCode::kFp8;
  std::vector<float> x = RandomBf16(c.rows * c.k, 11, 2.0f);
  std::fill(x.begin() + c.k, x.begin() + 2 * c.k, 0.0f);
  const std::vector<float> w = RandomBf16(c.k, 12, 1.0f);
  Bf16Array dx(x), dw(w), out(x.size());
  const cuda::W8A8Scratch layout = cuda::W8A8ScratchLayout(c.rows, c.k);
  DeviceArray<uint8_t> scratch(layout.bytes);
  for (const bool norm : {false, true}) {
    const __nv_bfloat16* norm_w = norm ? dw.get() : nullptr;
    ASSERT_CUDA(cuda::LaunchQuantizeInputRows(dx.get(), norm_w, c.rows, c.k, 1e-5f, c.code, out.get(), nullptr));
    ASSERT_CUDA(cuda::LaunchQuantizeInputCodes(dx.get(), norm_w, c.rows, c.k, 1e-5f, c.code, scratch.get(), nullptr));
    const std::vector<float> values = out.Download();
    const std::vector<uint8_t> bytes = scratch.Download();
    for (int64_t r = 0; r < c.rows; ++r) {
      float scale;
      int32_t sum;
      std::memcpy(&scale, bytes.data() + layout.scales + 4 * r, 4);
      std::memcpy(&sum, bytes.data() + layout.sums + 4 * r, 4);
      if (r == 1) {
        EXPECT_EQ(scale, 1.0f) << "a zero row";
      }
      int64_t code_sum = 0, wrong = 0;
      for (int64_t i = 0; i < c.k; ++i) {
        const uint8_t b = bytes[r * c.k + i];
        const float code = fp8 ? ref::E4M3ToFloat(b) : static_cast<float>(static_cast<int8_t>(b));
        code_sum += static_cast<int64_t>(code);
        wrong += RoundToBF16(scale * code) != values[r * c.k + i];
      }
      EXPECT_EQ(wrong, 0) << "row " << r << (norm ? " with the norm" : "");
      if (!fp8) {
        EXPECT_EQ(sum, code_sum) << "row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuInputQuant,
                         ::testing::Values(InputCase{cuda::InputQuantCode::kFp8, 5, 64},
                                           InputCase{cuda::InputQuantCode::kInt8, 5, 64},
                                           InputCase{cuda::InputQuantCode::kFp8, 70, 4096},
                                           InputCase{cuda::InputQuantCode::kInt8, 3, 13696},
                                           InputCase{cuda::InputQuantCode::kFp8, 3, 40960}));

}  // namespace
}  // namespace ag
