#include "kernels/cuda/quant_gemv.cuh"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_pack.h"

namespace ag::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarps = 4;

// Lane L of the warp for column `col` takes the 16-byte loads L, L + 32, ... of the row: each
// holds kCodes codes of one group (groups are multiples of kCodes inputs), dequantized as
// s * (q - z) in fp32 and multiplied into every x row's accumulator.
template <int kBits, int kRows>
__global__ void __launch_bounds__(kWarps * 32) QuantGemvKernel(const bf16* __restrict__ x, QuantWeight w,
                                                               bf16* __restrict__ y) {
  constexpr int kCodes = 128 / kBits, kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  const int lane = threadIdx.x % 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  AllowNextKernel();
  if (col < w.n) PrefetchL2(w.codes + col * PackedRowWords(w.k, kBits));  // weights only, before the wait
  WaitForPreviousKernel();
  if (col >= w.n) return;
  const uint4* row = reinterpret_cast<const uint4*>(w.codes + col * PackedRowWords(w.k, kBits));
  const int64_t loads = w.k / kCodes, groups = w.group == 0 ? 1 : w.k / w.group;
  const int64_t codes_per_group = w.group == 0 ? w.k : w.group;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  for (int64_t i = lane; i < loads; i += 32) {
    const uint4 packed = __ldg(row + i);
    const int64_t first = i * kCodes, g = first / codes_per_group;
    const float s = w.scales[col * groups + g];
    const float z = w.zeros != nullptr ? static_cast<float>(w.zeros[col * groups + g]) : float(1 << (kBits - 1));
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    float weight[kCodes];
#pragma unroll
    for (int j = 0; j < kCodes; ++j) {
      weight[j] = s * (static_cast<float>((words[j / kPerWord] >> (kBits * (j % kPerWord))) & kMask) - z);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4* xr = reinterpret_cast<const uint4*>(x + r * w.k + first);
      float sum = 0.0f;
#pragma unroll
      for (int v = 0; v < kCodes / 8; ++v) {  // 8 bf16 per 16-byte load of x
        const uint4 xv = xr[v];
        const bf16* xe = reinterpret_cast<const bf16*>(&xv);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum = fmaf(__bfloat162float(xe[e]), weight[v * 8 + e], sum);
      }
      acc[r] += sum;
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v = acc[r];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) y[r * w.n + col] = __float2bfloat16_rn(v);
  }
}

template <int kBits, int kRows>
cudaError_t Launch(const bf16* x, const QuantWeight& w, bf16* y, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(w.n, kWarps)));
  return LaunchKernel(QuantGemvKernel<kBits, kRows>, grid, dim3(kWarps * 32), 0, stream, x, w, y);
}

template <int kBits>
cudaError_t LaunchBits(const bf16* x, int64_t m, const QuantWeight& w, bf16* y, cudaStream_t stream) {
  switch (m) {  // the x rows are unrolled: one instantiation per decode batch up to 8
    case 1: return Launch<kBits, 1>(x, w, y, stream);
    case 2: return Launch<kBits, 2>(x, w, y, stream);
    case 3: return Launch<kBits, 3>(x, w, y, stream);
    case 4: return Launch<kBits, 4>(x, w, y, stream);
    case 5: return Launch<kBits, 5>(x, w, y, stream);
    case 6: return Launch<kBits, 6>(x, w, y, stream);
    case 7: return Launch<kBits, 7>(x, w, y, stream);
    default: return Launch<kBits, 8>(x, w, y, stream);
  }
}

}  // namespace

cudaError_t LaunchQuantGemv(const bf16* x, int64_t m, const QuantWeight& w, bf16* y, cudaStream_t stream) {
  if (m < 1 || m > kQuantGemvMaxRows || (w.bits != 4 && w.bits != 8) || w.n <= 0 || w.k <= 0 ||
      w.k % CodesPerLoad(w.bits) != 0 || w.group < 0 || (w.group > 0 && (w.k % w.group != 0 ||
      w.group % CodesPerLoad(w.bits) != 0)) || w.n > int64_t{INT32_MAX} * 4) {
    return cudaErrorInvalidValue;
  }
  return w.bits == 4 ? LaunchBits<4>(x, m, w, y, stream) : LaunchBits<8>(x, m, w, y, stream);
}

}  // namespace ag::cuda
