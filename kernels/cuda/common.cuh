// Shared pieces of the CUDA kernels: bf16 vector loads, warp reductions,
// launch checking. No IR or runtime headers here (kernels/ take raw pointers).
#ifndef AUTOGLM_KERNELS_CUDA_COMMON_CUH_
#define AUTOGLM_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/per_device.h"
#include "kernels/cuda/switches.h"

#include <cstdint>
#include <utility>

namespace ag::cuda {

using bf16 = __nv_bfloat16;

// Eight bf16 values: one 16-byte load.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

// Through int4, so that the compiler emits one ld.global.v4 (a struct copy of
// Bf16x8 became four ld.global.v2.u16). `p` must be 16-byte aligned.
__device__ __forceinline__ Bf16x8 Load8(const bf16* p) {
  Bf16x8 v;
  *reinterpret_cast<int4*>(&v) = *reinterpret_cast<const int4*>(p);
  return v;
}
// A streaming load that does not allocate in L1 (weights are read once per step).
__device__ __forceinline__ Bf16x8 LoadStream8(const bf16* p) {
  Bf16x8 v;
  const int4 raw = __ldcs(reinterpret_cast<const int4*>(p));
  *reinterpret_cast<int4*>(&v) = raw;
  return v;
}
__device__ __forceinline__ void Store8(bf16* p, const Bf16x8& v) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&v);
}

__device__ __forceinline__ void ToFloat8(const Bf16x8& v, float* f) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(v.h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ Bf16x8 FromFloat8(const float* f) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// 2^x and 1/x on the special function unit (ex2.approx.ftz, rcp.approx.ftz: ~1-2 ulp, results
// below 2^-126 flush to 0; 2^-inf is 0, 1/inf is 0). exp2f and an IEEE divide wrap the same
// instructions in range checks, predicated multiplies and a called slow path: 5 and ~11
// instructions where these are one, in loops where they are most of the work (the flash
// softmax, the gate/up GEMM's epilogue).
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float FastRcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// silu(g) = g / (1 + e^-g): for g below about -88, e^-g is inf and the result -0, the IEEE form's
// limit.
__device__ __forceinline__ float FastSilu(float g) {
  return g * FastRcp(1.0f + FastExp2(g * -1.4426950408889634f));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of `kWarps` warps; every thread gets the result. `scratch` holds kWarps floats.
template <int kWarps>
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  return total;
}

// ---- cp.async: global -> shared copies that do not pass through registers ----

// Into a shared-memory address (a kernel may compute its destinations once), or a generic pointer.
__device__ __forceinline__ void CpAsync16(unsigned smem, const void* global, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: fill with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(global), "r"(bytes) : "memory");
}
__device__ __forceinline__ void CpAsync16(void* smem, const void* global, bool valid) {
  CpAsync16(static_cast<unsigned>(__cvta_generic_to_shared(smem)), global, valid);
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// ---- programmatic dependent launch (Hopper) ----
//
// Kernels are launched with cudaLaunchAttributeProgrammaticStreamSerialization,
// so the next kernel of a step may start while this one finishes. Every kernel
// opens with AllowNextKernel() (the next kernel's blocks may launch once all
// of this kernel's blocks have started) and then, before touching any
// activation, WaitForPreviousKernel() (which returns once the previous
// kernel has completed and its writes are visible). Between the two a kernel
// may only read weights: the GEMV prefetches its first weight bytes into L2
// there, overlapping the previous kernel's tail. Inside CUDA graphs too.

__device__ __forceinline__ void AllowNextKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WaitForPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// True only when AUTOGLM_PDL=1 (measured slower on the H200: common.cu); otherwise kernels launch
// plainly, one after the other (their griddepcontrol instructions are then no-ops).
bool ProgrammaticLaunch();

// Launches `kernel` with programmatic stream serialization (when enabled), in
// thread-block clusters of `cluster` blocks when that is not 1 x 1 x 1.
template <typename... Params, typename... Args>
cudaError_t LaunchKernelInCluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                  dim3 cluster, Args&&... args) {
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  // Not on the legacy default stream (tests and benchmarks pass nullptr): it synchronises with
  // every other blocking stream, and programmatic serialization is not defined there.
  if (ProgrammaticLaunch() && stream != nullptr && stream != cudaStreamLegacy) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster.x * cluster.y * cluster.z != 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster.x;
    attributes[count].val.clusterDim.y = cluster.y;
    attributes[count].val.clusterDim.z = cluster.z;
    ++count;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  // Peek, not get: the error stays visible to later checks (a benchmark's, a step's).
  return e != cudaSuccess ? e : cudaPeekAtLastError();
}

template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         Args&&... args) {
  return LaunchKernelInCluster(kernel, grid, block, smem, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

// Multiprocessors of the current device (0 when it cannot be asked): sizes persistent grids.
int MultiprocessorCount();

// Lets kernel `kKernel` take more than 48 KB of dynamic shared memory. The
// attribute belongs to the current device, so it is set once per kernel and
// device (tensor-parallel ranks run on their own devices), and launches
// captured into CUDA graphs make no attribute calls after the first.
template <auto kKernel, size_t kBytes = 200 * 1024>
cudaError_t AllowLargeSharedMemory() {
  static PerDeviceOnce<cudaError_t, cudaSuccess> once;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  return once.Get(device, [] {
    return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBytes));
  });
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_COMMON_CUH_
