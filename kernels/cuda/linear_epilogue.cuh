// The linear kernels' fused epilogues (kernels/cuda/linear.cuh), one pair of
// adjacent outputs at a time: shared by the bf16 paths and the quantized ones
// (quant_linear), so every path applies the same fp32 math before rounding.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_EPILOGUE_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_EPILOGUE_CUH_

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linear.cuh"

namespace ag::cuda {

// ---- kQkvRope: a row's values loaded once, then a pair ----

// What the kQkvRope epilogue reads of row m: its positions (M-RoPE's three streams; one stream's
// repeated otherwise) and its cache slot. A kernel holding many pairs of a row loads them once:
// the compiler cannot keep a load across the epilogue's stores (they might alias), so loaded a pair
// they were loaded again at every one.
struct QkvRowValues {
  int32_t position[3] = {0, 0, 0};
  int32_t slot = -1;
  // Selected, not indexed: an indexed register array would live in local memory.
  __device__ __forceinline__ int32_t PositionOf(int stream) const {
    return stream == 0 ? position[0] : stream == 1 ? position[1] : position[2];
  }
};
__device__ __forceinline__ QkvRowValues QkvRowOf(const QkvRope& r, int64_t m) {
  QkvRowValues v;
  const RopePositions& pos = r.positions;
  if (pos.data != nullptr) {
    v.position[0] = pos.data[m];
    v.position[1] = pos.mrope ? pos.data[pos.tokens + m] : v.position[0];
    v.position[2] = pos.mrope ? pos.data[2 * pos.tokens + m] : v.position[0];
  }
  if (r.slots != nullptr) v.slot = r.slots[m];
  return v;
}

// The pair (n0, n0 + 1) of row m, whose channel in its head is `channel` (n0 % head_dim) and whose
// biases (with p.bias) are b0 and b1: q and k rotated, then q to y and k and v to the cache (or the
// 8-bit staging). 32-bit columns: QkvRopeValid holds n below 2^31.
__device__ __forceinline__ void StoreQkvPair(const LinearParams& p, int64_t m, const QkvRowValues& row, int n0,
                                             int channel, float a0, float a1, float b0, float b1) {
  const QkvRope& r = p.qkv;
  if (p.bias != nullptr) {  // (adding a zero would turn a -0 into +0)
    a0 += b0;
    a1 += b1;
  }
  const int q_width = r.heads * r.head_dim, kv_width = r.kv_heads * r.head_dim;
  if (n0 < q_width + kv_width && channel < r.rope.rot) {  // q or k: rotate the pair
    const int pair = channel / 2;
    RotatePair(a0, a1, InvFreqOf(r.rope, pair), row.PositionOf(RopeStream(r.positions, pair)));
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
  if (row.slot < 0) return;
  const bool is_k = n0 < q_width + kv_width;
  auto* cache = static_cast<__nv_bfloat16*>(is_k ? r.cache.k : r.cache.v);
  const int c = n0 - q_width - (is_k ? 0 : kv_width);
  *reinterpret_cast<__nv_bfloat162*>(cache + static_cast<int64_t>(row.slot) * kv_width + c) = pair;
}

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
    // q_width is whole heads, so n0 % head_dim is the channel in q and in k; 32-bit, since the
    // launchers hold n below 2^31 (a 64-bit remainder is a called routine).
    const int channel = static_cast<int>(static_cast<uint32_t>(n0) % static_cast<uint32_t>(p.qkv.head_dim));
    const float b0 = p.bias != nullptr ? __bfloat162float(p.bias[n0]) : 0.0f;
    const float b1 = p.bias != nullptr ? __bfloat162float(p.bias[n0 + 1]) : 0.0f;
    StoreQkvPair(p, m, QkvRowOf(p.qkv, m), static_cast<int>(n0), channel, a0, a1, b0, b1);
  }
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_EPILOGUE_CUH_
