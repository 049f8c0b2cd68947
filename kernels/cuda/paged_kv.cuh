// The paged KV cache as kernels see it, and rotary frequencies. The layout
// and the sequence metadata are those of kernels/ref/ref.h (KvCache,
// SeqBatch), with bf16 storage or 8-bit codes: an 8-bit cache keeps one fp32
// scale per token, KV head and K or V (value = scale * code), as
// ref::RoundTripKvRows rounds the CPU's cache.
#ifndef AUTOGLM_KERNELS_CUDA_PAGED_KV_CUH_
#define AUTOGLM_KERNELS_CUDA_PAGED_KV_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#include <cuda_fp8.h>
#endif

namespace ag::cuda {

// How the cache stores a value: bf16, or an 8-bit code (E4M3, or int8 in [-127, 127]) and a scale.
enum class KvCode : int { kBF16, kFp8, kInt8 };

inline constexpr int KvCodeBytes(KvCode code) { return code == KvCode::kBF16 ? 2 : 1; }

struct PagedKv {
  void* k = nullptr;  // [slots, kv_heads, head_dim] of bf16 or codes
  void* v = nullptr;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  KvCode code = KvCode::kBF16;
  float* k_scale = nullptr;  // [slots, kv_heads] for 8-bit codes
  float* v_scale = nullptr;
  // A checkpoint's static scales, [2]: K's and V's for every token written (still stored per token,
  // so that attention reads one format); null: each row's own, amax / 448 or amax / 127.
  const float* static_scales = nullptr;
  // Rows of k and v (blocks x block_size): the bound of the wgmma prefill kernel's TMA maps; 0: not
  // given (that kernel does not run).
  int64_t slots = 0;
};

// Writes `tokens` rows of K and V (row t: kv_heads * head_dim values at k + t * ld, v + t * ld;
// float or bf16) into the 8-bit cache at slots[t] (skipped when negative): each head's row as
// codes of its own scale, amax / 448 (fp8) or amax / 127 (int8), 1 for a zero row; or of
// cache.static_scales, the codes saturating.
cudaError_t LaunchKvQuantize(const float* k, const float* v, int64_t ld, const int32_t* slots, int64_t tokens,
                             const PagedKv& cache, cudaStream_t stream);
cudaError_t LaunchKvQuantize(const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t ld, const int32_t* slots,
                             int64_t tokens, const PagedKv& cache, cudaStream_t stream);

// The step's sequences, device pointers (see ref::SeqBatch).
struct SeqBatch {
  const int32_t* seq_offsets = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;
  const int32_t* row_seqs = nullptr;      // [tokens]: each query row's sequence; null: searched in seq_offsets
};

// The positions of a rotary step: one stream [tokens], or M-RoPE's three
// [3, tokens] where rotary pair p takes stream 0 below section0, stream 1
// below section1, stream 2 from there (see kernels/ref RotaryPositions).
struct RopePositions {
  const int32_t* data = nullptr;
  int64_t tokens = 0;  // the stride between the streams
  bool mrope = false;
  int section0 = 0, section1 = 0;
};

// The rotary frequencies a kernel applies, inv_freq[i] = 1 / theta^(2i / rot) in fp32, computed on
// the host exactly as kernels/ref computes them (`Of`) and carried in the kernel's parameters: a
// rotated pair then costs an indexed constant load where powf and an IEEE divide took ~150 of the
// fused QKV epilogue's ~220 instructions a pair (the 512-token prefill's QKV GEMM ran 2.4x o_proj's
// time at the same size). Pairs past the table (rot > 128: no GLM checkpoint) are computed on the
// device as before.
struct RopeFrequencies {
  static constexpr int kTablePairs = 64;
  int rot = 0;
  float theta = 10000.0f;
  float inv_freq[kTablePairs] = {};

  static RopeFrequencies Of(int rot, float theta) {
    RopeFrequencies f;
    f.rot = rot;
    f.theta = theta;
    for (int i = 0; i < rot / 2 && i < kTablePairs; ++i) {
      f.inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rot));
    }
    return f;
  }
};

#ifdef __CUDACC__  // device helpers; host code only needs the types above

// Two codes of an 8-bit cache (the low byte first), unscaled.
template <KvCode kCode>
__device__ __forceinline__ float2 KvCodePair(uint16_t two) {
  static_assert(kCode != KvCode::kBF16, "bf16 rows hold values, not codes");
  if constexpr (kCode == KvCode::kFp8) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
    return __half22float2(__half2(h));  // every E4M3 value is an fp16 value: exact
  } else {
    return make_float2(static_cast<float>(static_cast<int8_t>(two & 0xFF)), static_cast<float>(static_cast<int8_t>(two >> 8)));
  }
}

// Eight codes of an 8-bit cache row (8 bytes, 8-byte aligned), unscaled.
template <KvCode kCode>
__device__ __forceinline__ void KvCodes8(const unsigned char* codes, float* f) {
  const uint2 raw = *reinterpret_cast<const uint2*>(codes);
  const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = KvCodePair<kCode>(static_cast<uint16_t>(words[i / 2] >> (16 * (i % 2))));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// The position stream rotary pair `pair` takes (0 but under M-RoPE).
__device__ __forceinline__ int RopeStream(const RopePositions& p, int pair) {
  return !p.mrope ? 0 : pair < p.section0 ? 0 : pair < p.section1 ? 1 : 2;
}
__device__ __forceinline__ int RopePosition(const RopePositions& p, int64_t token, int pair) {
  return p.data[RopeStream(p, pair) * p.tokens + token];
}

// inv_freq[i] = 1 / theta^(2i / rot) in fp32, as kernels/ref computes it, for pairs past the table.
// Out of line: the epilogues inline a rotation at every accumulator pair, and this path would
// otherwise put a powf into each of them that GLM's shapes never run.
inline __device__ __noinline__ float InvFreqPastTable(int i, int rot, float theta) {
  return 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(rot));
}

__device__ __forceinline__ float InvFreqOf(const RopeFrequencies& f, int i) {
  return i < RopeFrequencies::kTablePairs ? f.inv_freq[i] : InvFreqPastTable(i, f.rot, f.theta);
}

// Rotates the pair (x0, x1) = channels (2i, 2i+1) of a head at `position` by position * inv_freq[i].
__device__ __forceinline__ void RotatePair(float& x0, float& x1, float inv_freq, int position) {
  const float angle = static_cast<float>(position) * inv_freq;
  float s, c;
  sincosf(angle, &s, &c);
  const float a = x0 * c - x1 * s;
  const float b = x1 * c + x0 * s;
  x0 = a;
  x1 = b;
}

#endif  // __CUDACC__

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_PAGED_KV_CUH_
