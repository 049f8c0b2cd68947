// The linear kernels' templates, included by one .cu per epilogue so that
// nvcc compiles the epilogues in parallel. Not a public header.
#ifndef AUTOGLM_KERNELS_CUDA_LINEAR_IMPL_CUH_
#define AUTOGLM_KERNELS_CUDA_LINEAR_IMPL_CUH_

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
    const float silu = a0 / (1.0f + __expf(-a0));
    p.y[m * (p.n / 2) + n0 / 2] = __float2bfloat16(silu * a1);
  } else {  // kQkvRope
    const QkvRope& r = p.qkv;
    if (p.bias != nullptr) {
      a0 += __bfloat162float(p.bias[n0]);
      a1 += __bfloat162float(p.bias[n0 + 1]);
    }
    const int64_t q_width = static_cast<int64_t>(r.heads) * r.head_dim;
    const int64_t kv_width = static_cast<int64_t>(r.kv_heads) * r.head_dim;
    if (n0 < q_width + kv_width) {  // q or k: rotate the pair
      const int64_t channel = (n0 < q_width ? n0 : n0 - q_width) % r.head_dim;
      if (channel < r.rot) {
        RotatePair(a0, a1, static_cast<int>(channel / 2), r.rot, r.positions[m], r.theta, r.freq);
      }
    }
    const __nv_bfloat162 pair = __floats2bfloat162_rn(a0, a1);
    if (n0 < q_width) {
      *reinterpret_cast<__nv_bfloat162*>(p.y + m * q_width + n0) = pair;
      return;
    }
    const int32_t slot = r.slots[m];
    if (slot < 0) return;
    const bool is_k = n0 < q_width + kv_width;
    __nv_bfloat16* cache = is_k ? r.cache.k : r.cache.v;
    const int64_t c = n0 - q_width - (is_k ? 0 : kv_width);
    *reinterpret_cast<__nv_bfloat162*>(cache + static_cast<int64_t>(slot) * kv_width + c) = pair;
  }
}

// Sum of squares of x rows -> 1 / rms, for the norm prologue.
__device__ __forceinline__ float RowInvRms(const bf16* x, int64_t k, float eps, float* scratch) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x * 8; i < k; i += blockDim.x * 8) {
    float v[8];
    ToFloat8(Load8(x + i), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += v[j] * v[j];
  }
  sum = WarpSum(sum);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += scratch[w];
  return rsqrtf(total / static_cast<float>(k) + eps);
}

// ---- GEMV: M <= kGemvMaxRows, tiles of kMT rows of x ----
//
// Block: 4 warps; warp w computes output rows n0 = 2 * (4 * blockIdx.x + w) and
// n0 + 1 for the kMT rows of the current tile. x (normalised by the prologue)
// is staged in shared memory as fp32, kc columns at a time. Each lane streams
// 16-byte pieces of both weight rows, kUnroll pieces in flight per row.

constexpr int kGemvWarps = 4;
constexpr int kGemvThreads = 32 * kGemvWarps;
constexpr int kUnroll = 4;
constexpr int kGemvSmemFloats = 16384;  // 64 KB of staged x per block

template <int kMT, Epilogue kE>
__global__ void __launch_bounds__(kGemvThreads) GemvKernel(LinearParams p) {
  extern __shared__ float xs[];  // [kMT][kc]
  __shared__ float inv_rms[kMT];
  __shared__ float scratch[kGemvWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = 2 * (static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp);
  const bool active = n0 < p.n;
  const bool has1 = n0 + 1 < p.n;
  const int64_t kc_max = (kGemvSmemFloats / kMT) / 256 * 256;
  const bf16* w0 = p.w + (active ? n0 : 0) * p.k;
  const bf16* w1 = p.w + (has1 ? n0 + 1 : 0) * p.k;
  AllowNextKernel();
  // Weights do not depend on the previous kernel: start pulling the first of them into L2 while it finishes.
  if (active) {
    for (int64_t i = lane * 64; i < min(p.k, int64_t{1024}); i += 32 * 64) {
      PrefetchL2(w0 + i);
      if (has1) PrefetchL2(w1 + i);
    }
  }
  WaitForPreviousKernel();

  for (int64_t m0 = 0; m0 < p.m; m0 += kMT) {
    const int rows = static_cast<int>(min(static_cast<int64_t>(kMT), p.m - m0));
    if (p.norm_w != nullptr) {
      for (int r = 0; r < rows; ++r) {
        const float v = RowInvRms(p.x + (m0 + r) * p.k, p.k, p.eps, scratch);
        if (threadIdx.x == 0) inv_rms[r] = v;
      }
    }
    float acc0[kMT] = {}, acc1[kMT] = {};
    for (int64_t kc = 0; kc < p.k; kc += kc_max) {
      const int64_t len = min(kc_max, p.k - kc);
      __syncthreads();  // inv_rms written; the previous chunk is no longer read
      for (int r = 0; r < kMT; ++r) {
        for (int64_t i = threadIdx.x * 8; i < len; i += kGemvThreads * 8) {
          float v[8] = {};
          if (r < rows) {
            ToFloat8(Load8(p.x + (m0 + r) * p.k + kc + i), v);
            if (p.norm_w != nullptr) {
              float nw[8];
              ToFloat8(Load8(p.norm_w + kc + i), nw);
#pragma unroll
              for (int j = 0; j < 8; ++j) v[j] = nw[j] * (v[j] * inv_rms[r]);
            }
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) xs[r * len + i + j] = v[j];
        }
      }
      __syncthreads();
      if (!active) continue;
      for (int64_t base = lane * 8; base < len; base += 256 * kUnroll) {
        Bf16x8 wa[kUnroll], wb[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + u * 256;
          if (i < len) {
            wa[u] = LoadStream8(w0 + kc + i);
            if (has1) wb[u] = LoadStream8(w1 + kc + i);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + u * 256;
          if (i >= len) break;
          float fa[8], fb[8] = {};
          ToFloat8(wa[u], fa);
          if (has1) ToFloat8(wb[u], fb);
#pragma unroll
          for (int r = 0; r < kMT; ++r) {
            const float4 x0 = *reinterpret_cast<const float4*>(xs + r * len + i);
            const float4 x1 = *reinterpret_cast<const float4*>(xs + r * len + i + 4);
            const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              acc0[r] += fa[j] * xv[j];
              acc1[r] += fb[j] * xv[j];
            }
          }
        }
      }
    }
    if (active) {
#pragma unroll
      for (int r = 0; r < kMT; ++r) {
        const float a0 = WarpSum(acc0[r]), a1 = WarpSum(acc1[r]);
        if (lane == r % 32 && r < rows) StorePair<kE>(p, m0 + r, n0, a0, a1);
      }
    }
  }
}

template <int kMT, Epilogue kE>
cudaError_t LaunchGemvTile(const LinearParams& p, cudaStream_t stream) {
  const int64_t kc_max = (kGemvSmemFloats / kMT) / 256 * 256;
  const int64_t kc = std::min<int64_t>(kc_max, (p.k + 255) / 256 * 256);
  const size_t smem = sizeof(float) * static_cast<size_t>(kMT * kc);
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<GemvKernel<kMT, kE>>();
    if (e != cudaSuccess) return e;
  }
  const int64_t pairs = (p.n + 1) / 2;
  const unsigned blocks = static_cast<unsigned>((pairs + kGemvWarps - 1) / kGemvWarps);
  return LaunchKernel(GemvKernel<kMT, kE>, dim3(blocks), dim3(kGemvThreads), smem, stream, p);
}

template <Epilogue kE>
cudaError_t LaunchGemvFor(const LinearParams& p, cudaStream_t stream) {
  if (p.m == 1) return LaunchGemvTile<1, kE>(p, stream);
  if (p.m <= 4) return LaunchGemvTile<4, kE>(p, stream);
  return LaunchGemvTile<16, kE>(p, stream);
}

// ---- GEMM: tensor cores, mma.sync m16n8k16 bf16 -> fp32 ----
//
// Block tile 128 x 128 x 32, 8 warps as 2 (M) x 4 (N), warp tile 64 x 32;
// cp.async double buffering; shared rows padded to 40 bf16 (80 bytes) so
// ldmatrix reads are conflict-free.

constexpr int kBM = 128, kBN = 128, kBK = 32, kPad = 8, kLd = kBK + kPad;
constexpr int kGemmThreads = 256;

__device__ __forceinline__ void CpAsync16(void* smem, const void* global, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: fill with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(unsigned* r, const bf16* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void Mma16816(float* c, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <Epilogue kE>
__global__ void __launch_bounds__(kGemmThreads) GemmKernel(LinearParams p, const bf16* a_matrix) {
  __shared__ __align__(16) bf16 as[2][kBM][kLd];
  __shared__ __align__(16) bf16 bs[2][kBN][kLd];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = (warp / 4) * 64, warp_n = (warp % 4) * 32;
  const int64_t block_m = static_cast<int64_t>(blockIdx.y) * kBM, block_n = static_cast<int64_t>(blockIdx.x) * kBN;
  AllowNextKernel();
  WaitForPreviousKernel();

  // Each thread copies two 16-byte pieces of A and two of B per stage.
  auto load_stage = [&](int stage, int64_t k0) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int chunk = tid + c * kGemmThreads;  // 512 chunks: 128 rows x 4 pieces
      const int row = chunk / 4, col = (chunk % 4) * 8;
      const int64_t gm = block_m + row, gn = block_n + row, gk = k0 + col;
      const bool kin = gk < p.k;
      CpAsync16(&as[stage][row][col], a_matrix + (gm < p.m && kin ? gm * p.k + gk : 0), gm < p.m && kin);
      CpAsync16(&bs[stage][row][col], p.w + (gn < p.n && kin ? gn * p.k + gk : 0), gn < p.n && kin);
    }
  };

  float acc[4][4][4] = {};
  const int64_t tiles = (p.k + kBK - 1) / kBK;
  load_stage(0, 0);
  CpAsyncCommit();
  for (int64_t t = 0; t < tiles; ++t) {
    const int stage = static_cast<int>(t % 2);
    if (t + 1 < tiles) {
      load_stage(stage ^ 1, (t + 1) * kBK);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned af[4][4], bfrag[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        LdMatrixX4(af[mi], &as[stage][warp_m + mi * 16 + lane % 16][kk + (lane / 16) * 8]);
      }
#pragma unroll
      for (int nj = 0; nj < 4; nj += 2) {
        unsigned r[4];
        LdMatrixX4(r, &bs[stage][warp_n + nj * 8 + (lane % 8) + (lane / 16) * 8][kk + ((lane / 8) % 2) * 8]);
        bfrag[nj][0] = r[0];
        bfrag[nj][1] = r[1];
        bfrag[nj + 1][0] = r[2];
        bfrag[nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) Mma16816(acc[mi][nj], af[mi], bfrag[nj]);
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }
  // Accumulator layout: c0, c1 at (row lane/4, cols 2*(lane%4) + {0,1}); c2, c3 eight rows below.
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      const int64_t n = block_n + warp_n + nj * 8 + 2 * (lane % 4);
      const int64_t m = block_m + warp_m + mi * 16 + lane / 4;
      if (n >= p.n) continue;
      if (m < p.m) StorePair<kE>(p, m, n, acc[mi][nj][0], acc[mi][nj][1]);
      if (m + 8 < p.m) StorePair<kE>(p, m + 8, n, acc[mi][nj][2], acc[mi][nj][3]);
    }
  }
}

cudaError_t NormRowsInto(const LinearParams& p, cudaStream_t stream);  // linear.cu

template <Epilogue kE>
cudaError_t LaunchGemmFor(const LinearParams& p, cudaStream_t stream) {
  const bf16* a = p.x;
  if (p.norm_w != nullptr) {
    if (p.scratch == nullptr) return cudaErrorInvalidValue;
    const cudaError_t e = NormRowsInto(p, stream);
    if (e != cudaSuccess) return e;
    a = p.scratch;
  }
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN), static_cast<unsigned>((p.m + kBM - 1) / kBM));
  return LaunchKernel(GemmKernel<kE>, grid, dim3(kGemmThreads), 0, stream, p, a);
}

// Both paths for one epilogue; defined in linear_<epilogue>.cu.
template <Epilogue kE>
cudaError_t LaunchLinearFor(const LinearParams& p, cudaStream_t stream, bool gemm);

#define AG_INSTANTIATE_LINEAR(E)                                                             \
  template <>                                                                                \
  cudaError_t LaunchLinearFor<E>(const LinearParams& p, cudaStream_t stream, bool gemm) {     \
    return gemm ? LaunchGemmFor<E>(p, stream) : LaunchGemvFor<E>(p, stream);                 \
  }

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_LINEAR_IMPL_CUH_
