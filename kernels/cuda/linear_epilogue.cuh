// The linear kernels' fused epilogues (kernels/cuda/linear.cuh), one pair of
// adjacent outputs at a time: shared by the bf16 paths and the quantized ones
// (quant_linear), so every path applies the same fp32 math before rounding.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_EPILOGUE_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_EPILOGUE_CUH_

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.cuh"

namespace ag::cuda {

// ---- epilogue: one pair of adjacent outputs (n0, n0 + 1) of row m ----

template <Epilogue kE>
__device__ __forceinline__ void StorePair(const LinearParams& p, int64_t m, int64_t n0, float a0, float a1) {
  const bool has1 = n0 + 1 < p.n;
  if constexpr (kE == Epilogue::kNone || kE == Epilogue::kBias || kE == Epilogue::kResidual) {
    if (kE == Epilogue::kBias) {
      a0 += __bfloat162float(p.bias[n0]);
      if (has1) a1 += __bfloat162float(p.bias[n0 + 1]);
    }
    if (kE == Epilogue::kResidual) {
      a0 += __bfloat162float(p.residual[m * p.n + n0]);
      if (has1) a1 += __bfloat162float(p.residual[m * p.n + n0 + 1]);
    }
    p.y[m * p.n + n0] = __float2bfloat16(a0);
    if (has1) p.y[m * p.n + n0 + 1] = __float2bfloat16(a1);
  } else if constexpr (kE == Epilogue::kSiluMul) {
    // a0 is gate j, a1 is up j (rows interleaved).
    p.y[m * (p.n / 2) + n0 / 2] = __float2bfloat16(FastSilu(a0) * a1);
  } else {  // kQkvRope
    const QkvRope& r = p.qkv;
    if (p.bias != nullptr) {
      a0 += __bfloat162float(p.bias[n0]);
      a1 += __bfloat162float(p.bias[n0 + 1]);
    }
    const int64_t q_width = static_cast<int64_t>(r.heads) * r.head_dim;
    const int64_t kv_width = static_cast<int64_t>(r.kv_heads) * r.head_dim;
    if (n0 < q_width + kv_width) {  // q or k: rotate the pair
      // q_width is whole heads, so n0 % head_dim is the channel in q and in k; 32-bit, since the
      // launchers hold n below 2^31 (a 64-bit remainder is a called routine).
      const int channel = static_cast<int>(static_cast<uint32_t>(n0) % static_cast<uint32_t>(r.head_dim));
      if (channel < r.rope.rot) {
        const int pair = channel / 2;
        RotatePair(a0, a1, InvFreqOf(r.rope, pair), RopePosition(r.positions, m, pair));
      }
    }
    const __nv_bfloat162 pair = __floats2bfloat162_rn(a0, a1);
    if (n0 < q_width) {
      *reinterpret_cast<__nv_bfloat162*>(p.y + m * q_width + n0) = pair;
      return;
    }
    if (r.kv_staging != nullptr) {  // an 8-bit cache: the fp32 values, quantized by the caller
      *reinterpret_cast<float2*>(r.kv_staging + m * 2 * kv_width + (n0 - q_width)) = make_float2(a0, a1);
      return;
    }
    const int32_t slot = r.slots[m];
    if (slot < 0) return;
    const bool is_k = n0 < q_width + kv_width;
    auto* cache = static_cast<__nv_bfloat16*>(is_k ? r.cache.k : r.cache.v);
    const int64_t c = n0 - q_width - (is_k ? 0 : kv_width);
    *reinterpret_cast<__nv_bfloat162*>(cache + static_cast<int64_t>(slot) * kv_width + c) = pair;
  }
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_EPILOGUE_CUH_
