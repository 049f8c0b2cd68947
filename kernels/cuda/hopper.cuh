// Hopper's asynchronous machinery as small device functions (PTX ISA 8.0,
// sm_90a): mbarriers, TMA tile loads and the wgmma fences, for the wgmma GEMMs
// (gemm_wgmma.cuh, quant_gemm.cuh, w8a8_gemm.cuh) and the wgmma flash kernel
// (flash_wgmma.cu). Not a public header.
#ifndef AUTOGLM_KERNELS_CUDA_HOPPER_CUH_
#define AUTOGLM_KERNELS_CUDA_HOPPER_CUH_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mma_layout.h"

namespace ag::cuda {

__device__ __forceinline__ unsigned SmemAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void BarrierInit(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void BarrierExpectBytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BarrierArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddress(bar)) : "memory");
}
// Returns once the barrier's phase with this parity has completed.
__device__ __forceinline__ void BarrierWait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(SmemAddress(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}
// A box of the tensor map at (inner, outer) into shared memory; completion counted on `bar`.
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, int inner, int outer, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(SmemAddress(bar))
      : "memory");
}

// A K-major operand tile in shared memory with the 128-byte swizzle (mma_layout.h).
__device__ __forceinline__ uint64_t SmemDescriptor(const void* tile) {
  return mma::Sw128KMajorDescriptor(SmemAddress(tile));
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most kPending committed wgmma groups are still running.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Generic-proxy writes to shared memory made visible to the async proxy (wgmma reads its operands there).
__device__ __forceinline__ void FenceSharedForAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Host side (gemm_wgmma.cu): the tensor map of a row-major bf16 matrix [rows, cols] (cols % 8 == 0)
// whose rows are row_stride elements apart (0: cols; a multiple of 8, at least cols), in boxes of
// 64 columns x box_rows rows with the 128-byte swizzle: K-major tiles for wgmma.
cudaError_t EncodeBoxMap(const __nv_bfloat16* matrix, int64_t rows, int64_t cols, int box_rows, CUtensorMap* map,
                         int64_t row_stride = 0);

// Registers a wgmma wrote, as the compiler must see them after wgmma.wait_group: written.
template <int kCount>
__device__ __forceinline__ void FenceRegisters(float* d) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_HOPPER_CUH_
