// The flash kernels' per-tile arithmetic, shared by the mma.sync kernel
// (flash_attention_impl.cuh) and the wgmma one (flash_wgmma.cu): both hold a
// lane's S and O in mma's C-fragment order -- element 4 j + 2 half + e of a
// 16-row warp tile is (row g + 8 half, column 8 j + 2 t4 + e), g = lane / 4,
// t4 = lane % 4 -- since wgmma's accumulators are laid out per warp as
// mma.sync's are. Not a public header.
#ifndef AUTOGLM_KERNELS_CUDA_FLASH_SOFTMAX_CUH_
#define AUTOGLM_KERNELS_CUDA_FLASH_SOFTMAX_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda {

// log2(e) / sqrt(head_dim): the kernels take the softmax in base 2.
inline float ScaleLog2(int64_t head_dim) { return 1.4426950408889634f / std::sqrt(static_cast<float>(head_dim)); }

// One tile of kScoreTiles * 8 keys from key0: the scores of the lane's two rows masked (a key past
// last_key[half] or past `keys` is -inf; kMasked false: the caller knows every key of the tile is
// visible to both rows) and scaled, the running max (in base-2 units) and sum updated, and S turned
// into the tile's unnormalised probabilities, exp2(score * scale_log2 - max) as one FFMA and one
// ex2; `correction` is what O, accumulated against the old max, must be multiplied by
// (RescaleOutput) -- apart, so that the wgmma kernel computes it while its previous P V product
// still runs.
template <int kScoreTiles, bool kMasked = true>
__device__ __forceinline__ void SoftmaxScores(float* s, float (&row_max)[2], float (&row_sum)[2],
                                              float (&correction)[2], int64_t key0, const int64_t (&last_key)[2],
                                              int64_t keys, float scale_log2, int t4) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float best = -INFINITY;  // the tile's largest raw score in the row
    const int last = kMasked ? LastVisibleColumn(key0, last_key[half], keys, 8 * kScoreTiles) - 2 * t4 : 0;
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * n + 2 * half + e];
        if (kMasked && 8 * n + e > last) x = -INFINITY;  // the key key0 + 8 n + 2 t4 + e
        best = fmaxf(best, x);
      }
    }
    best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, 1));  // the four lanes of a group hold a row
    best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, 2));
    // scale_log2 > 0: the scaled maximum is the maximum of the scaled scores (-inf stays -inf).
    const float new_max = fmaxf(row_max[half], best * scale_log2);
    const float base = new_max == -INFINITY ? 0.0f : new_max;  // a row that has seen no key yet
    correction[half] = FastExp2(row_max[half] - base);          // 0 on a row's first keys
    row_max[half] = new_max;
    row_sum[half] *= correction[half];
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * n + 2 * half + e];
        x = FastExp2(fmaf(x, scale_log2, -base));
        row_sum[half] += x;
      }
    }
  }
}

// O's two rows of the lane times their correction.
template <int kOutTiles>
__device__ __forceinline__ void RescaleOutput(float* o, const float (&correction)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int d = 0; d < kOutTiles; ++d) {
      o[4 * d + 2 * half] *= correction[half];
      o[4 * d + 2 * half + 1] *= correction[half];
    }
  }
}

// Both at once: the mma.sync kernel's step.
template <int kScoreTiles, int kOutTiles>
__device__ __forceinline__ void OnlineSoftmaxTile(float* s, float* o, float (&row_max)[2], float (&row_sum)[2],
                                                  int64_t key0, const int64_t (&last_key)[2], int64_t keys,
                                                  float scale_log2, int t4) {
  float correction[2];
  SoftmaxScores<kScoreTiles>(s, row_max, row_sum, correction, key0, last_key, keys, scale_log2, t4);
  RescaleOutput<kOutTiles>(o, correction);
}

// P's A fragment of keys 16c..16c+15 (the next product, O += P V): S's accumulators of score
// tiles 2c and 2c + 1, as bf16 pairs.
__device__ __forceinline__ void ProbabilityFragment(const float* s, int c, unsigned (&a)[4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float* pair = &s[4 * (2 * c + mma::AFromCTile(r)) + mma::AFromCElement(r)];
    a[r] = PackBf16(pair[0], pair[1]);
  }
}

// The lane's two rows of O, divided by their sums, as bf16 into `rows` (the warp tile's first row
// at the head's first column; `stride` elements between rows), rows below `valid` only.
template <int kOutTiles>
__device__ __forceinline__ void StoreFlashRows(const float* o, const float (&row_sum)[2], int warp_row, int valid,
                                               int g, int t4, bf16* rows, int64_t stride) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = warp_row + g + 8 * half;
    if (row >= valid) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    bf16* dst = rows + row * stride + 2 * t4;
#pragma unroll
    for (int d = 0; d < kOutTiles; ++d) {
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * d) =
          __floats2bfloat162_rn(o[4 * d + 2 * half] * inv, o[4 * d + 2 * half + 1] * inv);
    }
  }
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_FLASH_SOFTMAX_CUH_
