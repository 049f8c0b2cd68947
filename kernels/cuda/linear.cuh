// The linear layer, y = x W^T, bf16 storage and fp32 accumulation, with an
// optional RMSNorm prologue over x and one fused epilogue:
//
//   kNone       y = x W^T
//   kBias       y = x W^T + b
//   kResidual   y = residual + x W^T                          (y may alias residual)
//   kSiluMul    y[:, j] = silu(g_j) * u_j, W's rows interleaved (g_0, u_0, g_1, u_1, ...)
//   kQkvRope    [q | k | v] = x W^T (+ b); rotary on q and k; q -> y, k and v -> the paged KV cache
//
// Three paths, chosen by M, all with the same prologue and epilogues:
//   M = 1       a GEMV streaming every weight byte once with 16-byte loads,
//               x (normalised once per block) staged in shared memory as fp32;
//   M = 2..64   a weight-streaming tensor-core kernel (swap-AB: the weights
//               are the mma's A operand, the batch its N), every weight byte
//               still read once whatever M is;
//   M > 64      on Hopper a wgmma GEMM fed by TMA through a warp-specialised
//               4-stage pipeline (gemm_wgmma.cuh); else, or with
//               AUTOGLM_WGMMA=0, a tensor-core GEMM on mma.sync m16n8k16 with a
//               4-stage cp.async pipeline.
// The tensor-core paths take x normalised once into `scratch` (bf16, as the
// mma takes it) when there is a norm prologue. Inside a fused op everything
// else stays fp32 and only the outputs are rounded to bf16, as the CPU
// reference kernels do.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/linear_split.h"  // kGemvMaxRows, kSkinnyMaxRows
#include "kernels/cuda/paged_kv.cuh"

namespace ag::cuda {

enum class Epilogue : int { kNone, kBias, kResidual, kSiluMul, kQkvRope };

struct QkvRope {
  RopePositions positions;             // [m], or [3, m] for M-RoPE
  const int32_t* slots = nullptr;      // [m], < 0: do not write the cache
  PagedKv cache;
  int heads = 0, kv_heads = 0, head_dim = 0;
  RopeFrequencies rope;  // RopeFrequencies::Of(rot, theta)
  // An 8-bit cache: k and v go here in fp32 ([m, 2 kv_heads head_dim], k then v), and the caller
  // quantizes them into the cache (LaunchKvQuantize), since a head's scale needs its whole row.
  float* kv_staging = nullptr;
};

// The sandwich norm folded in front of a linear (residual_norm_gate_up_silu): the row
// h = residual + rms_norm(y) * w, rounded to bf16 as rms_norm_residual stores it and written to
// `out` (the new residual stream), is the x that the norm prologue then normalises. Only the GEMV
// takes it (GemvFoldsPreNorm); elsewhere the caller runs rms_norm_residual into `out` first.
struct PreNorm {
  const __nv_bfloat16* y = nullptr;  // [m, k]; null: no pre-norm
  const __nv_bfloat16* w = nullptr;  // [k]
  const __nv_bfloat16* residual = nullptr;  // [m, k]
  float eps = 0.0f;
  __nv_bfloat16* out = nullptr;  // [m, k]
};

struct LinearParams {
  const __nv_bfloat16* x = nullptr;       // [m, k]
  const __nv_bfloat16* norm_w = nullptr;  // [k]: RMSNorm prologue when set
  float eps = 0.0f;
  const __nv_bfloat16* w = nullptr;  // [n, k]
  __nv_bfloat16* y = nullptr;        // [m, n]; kSiluMul [m, n/2]; kQkvRope [m, heads * head_dim]
  int64_t m = 0, n = 0, k = 0;
  Epilogue epilogue = Epilogue::kNone;
  const __nv_bfloat16* bias = nullptr;      // [n]: kBias, optional for kQkvRope
  const __nv_bfloat16* residual = nullptr;  // [m, n]: kResidual
  QkvRope qkv;
  __nv_bfloat16* scratch = nullptr;  // [m, k]: the normalised x on the tensor-core paths (m > 1)
  PreNorm pre;  // x is computed from it (and x is not read) when pre.y is set: the GEMV only
};

// The kQkvRope shape every linear path requires: whole even heads, an even rot within them, and
// columns that fit the epilogue's 32-bit channel math.
inline bool QkvRopeValid(const LinearParams& p) {
  const QkvRope& r = p.qkv;
  return r.head_dim > 0 && r.head_dim % 2 == 0 && r.rope.rot >= 0 && r.rope.rot % 2 == 0 && r.rope.rot <= r.head_dim &&
         p.n < (int64_t{1} << 31) && p.n == static_cast<int64_t>(r.heads + 2 * r.kv_heads) * r.head_dim;
}

// Rows [m0, m0 + m) of p as a linear of their own: every row-indexed pointer (x, y, residual, the
// rotary positions, cache slots and 8-bit staging rows) moved by m0 rows. M-RoPE's three position
// streams keep their stride (positions.tokens).
inline LinearParams RowsOf(const LinearParams& p, int64_t m0, int64_t m) {
  LinearParams r = p;
  r.m = m;
  r.x = p.x + m0 * p.k;
  const int64_t y_width = p.epilogue == Epilogue::kSiluMul   ? p.n / 2
                          : p.epilogue == Epilogue::kQkvRope ? static_cast<int64_t>(p.qkv.heads) * p.qkv.head_dim
                                                             : p.n;
  r.y = p.y + m0 * y_width;
  if (p.residual != nullptr) r.residual = p.residual + m0 * p.n;
  if (p.qkv.positions.data != nullptr) r.qkv.positions.data = p.qkv.positions.data + m0;
  if (p.qkv.slots != nullptr) r.qkv.slots = p.qkv.slots + m0;
  if (p.qkv.kv_staging != nullptr) r.qkv.kv_staging = p.qkv.kv_staging + m0 * 2 * p.qkv.kv_heads * p.qkv.head_dim;
  if (p.scratch != nullptr) r.scratch = p.scratch + m0 * p.k;
  if (p.pre.y != nullptr) {
    r.pre.y = p.pre.y + m0 * p.k;
    r.pre.residual = p.pre.residual + m0 * p.k;
    r.pre.out = p.pre.out + m0 * p.k;
  }
  return r;
}

// k % 8 == 0; n even for kSiluMul and kQkvRope. A pre-norm (p.pre) only where GemvFoldsPreNorm.
cudaError_t LaunchLinear(const LinearParams& p, cudaStream_t stream);

// Whether the GEMV computes p.pre itself: one row with a norm prologue, x within its shared memory
// (every GLM width), and AUTOGLM_SANDWICH_FOLD not 0. Else the caller runs LaunchRmsNormResidual into
// p.pre.out first and gives it as x.
bool GemvFoldsPreNorm(const LinearParams& p);

// The paths, for tests and benchmarks that want one of them: the GEMV and the
// GEMMs take any M (the GEMV loops over the rows), the skinny path M <= 64 (the staged kernel to
// 32 rows, the register-fed one past them; LaunchSkinnyRegisters the latter at any M <= 64).
// LaunchGemm is the wgmma GEMM where it runs, LaunchGemmMmaSync the mma.sync one;
// LaunchGemmTileColumns the wgmma GEMM with tiles `tile_n` (128, 192 or 256) columns wide, whatever
// linear_split.h's WgmmaTileColumns would choose (cudaErrorNotSupported where it cannot run).
cudaError_t LaunchGemv(const LinearParams& p, cudaStream_t stream);
cudaError_t LaunchSkinny(const LinearParams& p, cudaStream_t stream);
cudaError_t LaunchSkinnyRegisters(const LinearParams& p, cudaStream_t stream);
cudaError_t LaunchGemm(const LinearParams& p, cudaStream_t stream);
cudaError_t LaunchGemmMmaSync(const LinearParams& p, cudaStream_t stream);
cudaError_t LaunchGemmTileColumns(const LinearParams& p, int tile_n, cudaStream_t stream);

// Rows of a gate/up weight [2I, k] reordered for kSiluMul: row 2j = gate j, row 2j+1 = up j.
inline int64_t InterleavedGateUpRow(int64_t row, int64_t inter) {
  return row < inter ? 2 * row : 2 * (row - inter) + 1;
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_CUH_
