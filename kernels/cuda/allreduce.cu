#include "kernels/cuda/allreduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/peer_flags.h"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr uint64_t kTimeoutNs = 10'000'000'000ull;

__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// A peer's staged rows: through L2 only (they were written by another GPU during this kernel).
__device__ __forceinline__ Bf16x8 LoadPeer8(const bf16* p) {
  Bf16x8 v;
  *reinterpret_cast<int4*>(&v) = __ldcg(reinterpret_cast<const int4*>(p));
  return v;
}

// Block b meets block b of every rank: it has staged its rows, and so have they.
__device__ __forceinline__ void MeetPeers(const PeerAllReduce& p, uint32_t epoch) {
  __syncthreads();  // the block's staging stores come before the release below
  if (threadIdx.x < p.size) {
    const int peer = threadIdx.x;
    StoreRelease(p.flags[peer] + p.rank * kOneShotMaxBlocks + blockIdx.x, epoch);
    const uint32_t* flag = p.flags[p.rank] + peer * kOneShotMaxBlocks + blockIdx.x;
    const uint64_t start = GlobalTimer();
    for (;;) {
      const PeerFlag state = ClassifyPeerFlag(LoadAcquire(flag), epoch);  // peer_flags.h says why one ahead is fine
      if (state == PeerFlag::kReady) break;
      if (state == PeerFlag::kCorrupt) __trap();         // a peer out of step: fail the launch
      if (GlobalTimer() - start > kTimeoutNs) __trap();  // a peer never came: fail the launch, do not hang
    }
  }
  __syncthreads();
}

// Eight elements of row r summed over the ranks, in rank order.
__device__ __forceinline__ void SumRanks(const PeerAllReduce& p, int parity, int64_t offset, float* acc) {
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int q = 0; q < kMaxPeerRanks; ++q) {  // static indices: the pointer arrays stay in parameter space
    if (q >= p.size) break;
    float v[8];
    ToFloat8(LoadPeer8(p.staging[q][parity] + offset), v);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] += v[j];
  }
}

// Block b handles rows b, b + grid, ... on every rank. `out` may alias `residual`.
template <bool kNorm>
__global__ void __launch_bounds__(kThreads) OneShotAllReduceKernel(PeerAllReduce p, const bf16* x,
                                                                   const bf16* residual, const bf16* __restrict__ w,
                                                                   float eps, int64_t rows, int64_t n, bf16* out) {
  extern __shared__ float row[];  // kNorm: the summed row, n floats
  __shared__ float scratch[kWarps];
  __shared__ uint32_t epoch_shared;
  AllowNextKernel();
  WaitForPreviousKernel();
  // One epoch per call, the same in every block: the call counter changes only
  // when the call's last block is done, and the next call starts after that.
  if (threadIdx.x == 0) epoch_shared = p.calls[0] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_shared;
  const int parity = static_cast<int>(epoch & 1u);
  bf16* mine = p.staging[p.rank][parity];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) Store8(mine + r * n + i, Load8(x + r * n + i));
  }
  MeetPeers(p, epoch);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
      float acc[8];
      SumRanks(p, parity, r * n + i, acc);
      if (kNorm) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          row[i + j] = acc[j];
          sum_sq += acc[j] * acc[j];
        }
      } else {
        float res[8];
        ToFloat8(Load8(residual + r * n + i), res);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += res[j];
        Store8(out + r * n + i, FromFloat8(acc));
      }
    }
    if (kNorm) {
      const float scale = rsqrtf(BlockSum<kWarps>(sum_sq, scratch) / static_cast<float>(n) + eps);
      for (int64_t i = threadIdx.x * 8; i < n; i += kThreads * 8) {
        float wv[8], res[8], y[8];
        ToFloat8(Load8(w + i), wv);
        ToFloat8(Load8(residual + r * n + i), res);
#pragma unroll
        for (int j = 0; j < 8; ++j) y[j] = res[j] + wv[j] * (row[i + j] * scale);
        Store8(out + r * n + i, FromFloat8(y));
      }
      __syncthreads();  // the next row overwrites `row`
    }
  }
  if (threadIdx.x == 0) __threadfence();  // this block's read of the counter comes first
  if (threadIdx.x == 0 && atomicAdd(p.calls + 1, 1u) == gridDim.x - 1) {
    p.calls[1] = 0;
    p.calls[0] = epoch;
  }
}

template <bool kNorm>
cudaError_t Launch(const PeerAllReduce& p, const bf16* x, const bf16* residual, const bf16* w, float eps,
                   int64_t rows, int64_t n, bf16* out, cudaStream_t stream) {
  const size_t smem = kNorm ? static_cast<size_t>(n) * sizeof(float) : 0;
  if (smem > 48 * 1024) {
    const cudaError_t e = AllowLargeSharedMemory<OneShotAllReduceKernel<kNorm>>();
    if (e != cudaSuccess) return e;
  }
  const unsigned grid = static_cast<unsigned>(rows < kOneShotMaxBlocks ? rows : kOneShotMaxBlocks);
  return LaunchKernel(OneShotAllReduceKernel<kNorm>, dim3(grid), dim3(kThreads), smem, stream, p, x, residual, w, eps,
                      rows, n, out);
}

}  // namespace

cudaError_t LaunchOneShotAllReduce(const PeerAllReduce& peers, const bf16* x, const bf16* residual, const bf16* norm_w,
                                   float eps, int64_t rows, int64_t n, bf16* out, cudaStream_t stream) {
  if (!OneShotFits(rows, n) || peers.size < 1 || peers.size > kMaxPeerRanks || peers.rank < 0 ||
      peers.rank >= peers.size || peers.calls == nullptr) {
    return cudaErrorInvalidValue;
  }
  return norm_w != nullptr ? Launch<true>(peers, x, residual, norm_w, eps, rows, n, out, stream)
                           : Launch<false>(peers, x, residual, nullptr, eps, rows, n, out, stream);
}

}  // namespace ag::cuda
