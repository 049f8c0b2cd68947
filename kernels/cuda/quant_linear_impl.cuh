// The quantized linear's decode kernel, included by one .cu per code format
// (int4, int8, fp8, bf16) so that nvcc compiles them in parallel. Not a public header.
#ifndef AUTOGLM_KERNELS_CUDA_QUANT_LINEAR_IMPL_CUH_
#define AUTOGLM_KERNELS_CUDA_QUANT_LINEAR_IMPL_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear_epilogue.cuh"
#include "kernels/cuda/linear_impl.cuh"  // the skinny tensor-core kernel (linear_skinny.cuh)
#include "kernels/cuda/quant_linear.cuh"
#include "kernels/cuda/quant_pack.h"

namespace ag::cuda {

constexpr int kQuantWarps = 4;
// 16-byte loads in flight per lane and column: 4 at one row of x; 2 at 8 rows, whose accumulators
// leave no room for more (4 spilled), still ~24 KB in flight per SM at 3 blocks.
template <int kRows>
constexpr int kQuantUnroll = kRows == 1 ? 4 : 2;

// The weights of kWords packed words before their scale, exactly in fp32: q - z for integer
// codes, e4m3(q) for fp8, the value for bf16. An integer code becomes a float without a convert
// instruction: OR-ed into the mantissa of 2^23 it is the float 2^23 + q, and one subtraction of
// 2^23 + z leaves q - z (a shift and a LOP3 to place the code, one FADD; exact: every value is an
// integer below 2^23).
template <QuantCode kCode, int kWords>
__device__ __forceinline__ void DequantizeWords(const uint32_t (&words)[kWords], float z, float* w) {
  constexpr int kBits = QuantCodeBits(kCode), kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1, kTwo23 = 0x4B000000u;
  const float bias = 8388608.0f + z;
#pragma unroll
  for (int j = 0; j < kWords * kPerWord; ++j) {
    const uint32_t q = (words[j / kPerWord] >> (kBits * (j % kPerWord))) & kMask;
    if constexpr (kCode == QuantCode::kBf16) {
      w[j] = __uint_as_float(q << 16);  // a bf16 value is the top half of its fp32 value
    } else if constexpr (kCode == QuantCode::kFp8) {
      const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(q), __NV_E4M3);
      w[j] = __half2float(__half(h));  // every E4M3 value is an fp16 value: exact
    } else {
      w[j] = __uint_as_float(q | kTwo23) - bias;
    }
  }
}

// The 128 / bits weights of one 16-byte load, as DequantizeWords.
template <QuantCode kCode>
__device__ __forceinline__ void DequantizeLoad(const uint4& packed, float z, float* w) {
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
  DequantizeWords<kCode>(words, z, w);
}

// The scale and zero point of group g of segment row `row`.
template <QuantCode kCode>
__device__ __forceinline__ void GroupParams(const QuantSegment& s, int64_t row, int64_t groups, int64_t g,
                                            float* scale, float* zero) {
  if constexpr (kCode == QuantCode::kBf16) {  // values, not codes: nothing to read
    *scale = 1.0f;
    *zero = 0.0f;
    return;
  }
  if constexpr (kCode == QuantCode::kFp8) {  // one fp32 scale a row (SegmentFits), no zero point
    *scale = static_cast<const float*>(s.scales)[row];
    *zero = 0.0f;
    return;
  }
  const int64_t i = row * groups + g;
  if (s.group == 0) {
    *scale = static_cast<const float*>(s.scales)[row];
  } else if (s.scale_type == ScaleType::kBF16) {  // uniform over the grid: no divergence
    *scale = __bfloat162float(static_cast<const bf16*>(s.scales)[i]);
  } else if (s.scale_type == ScaleType::kF16) {
    *scale = __half2float(static_cast<const __half*>(s.scales)[i]);
  } else {
    *scale = static_cast<const float*>(s.scales)[i];
  }
  *zero = s.zeros != nullptr ? static_cast<float>(s.zeros[i]) : static_cast<float>(1 << (QuantCodeBits(kCode) - 1));
}

// Block: kQuantWarps warps; warp w of column group c takes the segment's columns
// 2 (kQuantWarps c + w) and the next, for rows [kRows r, kRows r + kRows) of x,
// where blockIdx.x = c * chunks + r. Lane L takes the 16-byte loads L, L + 32, ...
// of both rows of W, kQuantUnroll<kRows> of them in flight, each kCodes codes of one group.
// At one row the kernel applies an RMSNorm prologue itself (p.norm_w set; a segment reading x in
// its own input order gets x normalised first): x times the norm's weights in fp32, and the sums
// times rsqrt(mean + eps) of the row's squares, which the warp's lanes gather from their loads of
// x (together they read all of it).
template <QuantCode kCode, int kRows, Epilogue kE>
__global__ void __launch_bounds__(kQuantWarps * 32, kRows == 1 ? 5 : 4) QuantLinearKernel(LinearParams p, QuantSegment s) {
  constexpr int kBits = QuantCodeBits(kCode), kCodes = 128 / kBits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunks = (p.m + kRows - 1) / kRows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x % chunks) * kRows;
  const int64_t local = 2 * ((static_cast<int64_t>(blockIdx.x) / chunks) * kQuantWarps + warp);
  const int64_t words = PackedRowWords(p.k, kBits);
  const bool active = local < s.n, has1 = local + 1 < s.n;
  const uint4* row0 = reinterpret_cast<const uint4*>(s.codes + (active ? local : 0) * words);
  // A segment's odd last column reads its neighbour's codes again; its sum is never stored.
  const uint4* row1 = reinterpret_cast<const uint4*>(s.codes + (has1 ? local + 1 : local) * words);
  AllowNextKernel();
  if (active) PrefetchL2(row0 + lane);  // weights only, before the wait
  WaitForPreviousKernel();
  if (!active) return;  // the whole warp
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), p.m - m0));
  const int64_t loads = p.k / kCodes, groups = SegmentGroups(p.k, s.group, s.group_offset);
  float acc[2][kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[0][r] = acc[1][r] = 0.0f;
  const bool norm = kRows == 1 && p.norm_w != nullptr;
  float squares = 0.0f;  // of this lane's x values, with the norm prologue
  // The weights of load i (both columns) into acc.
  auto accumulate = [&](const uint4 (&packed)[2], int64_t i) {
    const int64_t first = i * kCodes, g = GroupOf(first, s.group, s.group_offset);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float scale, zero, w[kCodes];
      GroupParams<kCode>(s, has1 ? local + c : local, groups, g, &scale, &zero);
      DequantizeLoad<kCode>(packed[c], zero, w);  // the scale multiplies each row's sum of the load
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) continue;
        const bf16* xr = p.x + (m0 + r) * p.k + first;
        float sum = 0.0f;
#pragma unroll
        for (int v = 0; v < kCodes / 8; ++v) {  // 8 bf16 of x per 16-byte load
          float xf[8];
          ToFloat8(Load8(xr + 8 * v), xf);
          if constexpr (kRows == 1) {
            if (norm) {
              float nw[8];
              ToFloat8(Load8(p.norm_w + first + 8 * v), nw);
#pragma unroll
              for (int e = 0; e < 8; ++e) {
                if (c == 0) squares = fmaf(xf[e], xf[e], squares);
                xf[e] *= nw[e];
              }
            }
          }
#pragma unroll
          for (int e = 0; e < 8; ++e) sum = fmaf(xf[e], w[8 * v + e], sum);
        }
        acc[c][r] = fmaf(scale, sum, acc[c][r]);
      }
    }
  };
  // kQuantUnroll<kRows> loads per column in flight while whole rounds remain, then one at a time.
  int64_t i = lane;
  for (; i + 32 * (kQuantUnroll<kRows> - 1) < loads; i += 32 * kQuantUnroll<kRows>) {
    uint4 packed[kQuantUnroll<kRows>][2];
#pragma unroll
    for (int u = 0; u < kQuantUnroll<kRows>; ++u) {
      packed[u][0] = __ldcs(row0 + i + 32 * u);
      packed[u][1] = __ldcs(row1 + i + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kQuantUnroll<kRows>; ++u) accumulate(packed[u], i + 32 * u);
  }
  for (; i < loads; i += 32) {
    const uint4 packed[2] = {__ldcs(row0 + i), __ldcs(row1 + i)};
    accumulate(packed, i);
  }
  const float inv_rms = norm ? rsqrtf(WarpSum(squares) / static_cast<float>(p.k) + p.eps) : 1.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) continue;
    const float a0 = WarpSum(acc[0][r]), a1 = WarpSum(acc[1][r]);
    if (lane == 0) StorePair<kE>(p, m0 + r, s.n_begin + local, inv_rms * a0, inv_rms * a1);
  }
}

template <QuantCode kCode, int kRows, Epilogue kE>
cudaError_t LaunchQuantTile(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) {
  const int64_t chunks = (p.m + kRows - 1) / kRows;
  const int64_t column_groups = (s.n + 2 * kQuantWarps - 1) / (2 * kQuantWarps);
  if (chunks * column_groups > INT32_MAX) return cudaErrorInvalidValue;
  return LaunchKernel(QuantLinearKernel<kCode, kRows, kE>, dim3(static_cast<unsigned>(chunks * column_groups)),
                      dim3(kQuantWarps * 32), 0, stream, p, s);
}

// The skinny tensor-core kernel's rows of a quantized segment (linear_skinny.cuh): eight weights
// of a row dequantized to bf16, s * (q - z) rounded once as LaunchDequantize rounds it. The eight
// codes of a load lie in one group (groups and offsets are whole 16-byte loads of codes).
template <QuantCode kCode>
struct QuantRows {
  QuantSegment s;
  int64_t words_per_row, groups, n_begin, n;

  __device__ __forceinline__ int4 Load8(int64_t row, int64_t k) const {
    const uint32_t* words = s.codes + row * words_per_row;
    if constexpr (kCode == QuantCode::kBf16) return __ldcs(reinterpret_cast<const int4*>(words + k / 2));
    float scale, zero, v[8];
    GroupParams<kCode>(s, row, groups, GroupOf(k, s.group, s.group_offset), &scale, &zero);
    if constexpr (kCode == QuantCode::kInt4) {
      const uint32_t w[1] = {__ldcs(words + k / 8)};
      DequantizeWords<kCode>(w, zero, v);
    } else {
      const uint2 pair = __ldcs(reinterpret_cast<const uint2*>(words + k / 4));
      const uint32_t w[2] = {pair.x, pair.y};
      DequantizeWords<kCode>(w, zero, v);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] *= scale;
    int4 out;
    const __nv_bfloat162 b[4] = {__floats2bfloat162_rn(v[0], v[1]), __floats2bfloat162_rn(v[2], v[3]),
                                 __floats2bfloat162_rn(v[4], v[5]), __floats2bfloat162_rn(v[6], v[7])};
    std::memcpy(&out, b, sizeof(out));
    return out;
  }
  __device__ __forceinline__ void Prefetch(int64_t row, int64_t k) const {
    PrefetchL2(s.codes + row * words_per_row + k * QuantCodeBits(kCode) / 32);
  }
};

template <QuantCode kCode, Epilogue kE>
cudaError_t LaunchQuantRows(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) {
  // Batch 1 on its own: a kernel with one accumulator row per column, the latency case.
  if (p.m == 1) return LaunchQuantTile<kCode, 1, kE>(p, s, stream);
  // Up to 16 rows: the codes kernel, 8 rows a block; past kQuantLinearMaxRows only a head's many
  // logit rows come here (token rows take the dequantized GEMM): the same, any number of blocks,
  // whose row blocks of one column group share its codes through L2.
  if (p.m <= kQuantCodesMaxRows || p.m > kQuantLinearMaxRows) {
    return LaunchQuantTile<kCode, 8, kE>(p, s, stream);
  }
  // Beyond, every 8-row block would dequantize the codes again and multiply on CUDA cores: the
  // weights go through the tensor cores, as the bf16 skinny kernel streams them (64-row chunks past 64).
  const QuantRows<kCode> rows{s, PackedRowWords(p.k, QuantCodeBits(kCode)), SegmentGroups(p.k, s.group, s.group_offset),
                              s.n_begin, s.n};
  if (p.m <= 32) return LaunchSkinnyTile<4, kE>(p, rows, p.x, stream);
  // Past 64 rows, one launch per 64-row chunk (RowsOf): the kernel has no register left to index a
  // chunk itself; each launch reads the codes again, mostly from L2 where the weight fits there.
  // x comes normalised (QuantLinearNormalises).
  for (int64_t m0 = 0; m0 < p.m; m0 += kSkinnyMaxRows) {
    const LinearParams chunk = RowsOf(p, m0, std::min(kSkinnyMaxRows, p.m - m0));
    const cudaError_t e = chunk.m <= 32 ? LaunchSkinnyTile<4, kE>(chunk, rows, chunk.x, stream)
                                        : LaunchSkinnyTile<8, kE>(chunk, rows, chunk.x, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// Every epilogue of one code format; defined in quant_linear_<code>.cu.
template <QuantCode kCode>
cudaError_t LaunchQuantFor(const LinearParams& p, const QuantSegment& s, cudaStream_t stream);

#define AG_INSTANTIATE_QUANT_LINEAR(C)                                                               \
  template <>                                                                                        \
  cudaError_t LaunchQuantFor<C>(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) { \
    switch (p.epilogue) {                                                                            \
      case Epilogue::kNone:                                                                          \
        return LaunchQuantRows<C, Epilogue::kNone>(p, s, stream);                                    \
      case Epilogue::kBias:                                                                          \
        return LaunchQuantRows<C, Epilogue::kBias>(p, s, stream);                                    \
      case Epilogue::kResidual:                                                                      \
        return LaunchQuantRows<C, Epilogue::kResidual>(p, s, stream);                                \
      case Epilogue::kSiluMul:                                                                       \
        return LaunchQuantRows<C, Epilogue::kSiluMul>(p, s, stream);                                 \
      case Epilogue::kQkvRope:                                                                       \
        return LaunchQuantRows<C, Epilogue::kQkvRope>(p, s, stream);                                 \
    }                                                                                                \
    return cudaErrorInvalidValue;                                                                    \
  }

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_QUANT_LINEAR_IMPL_CUH_
