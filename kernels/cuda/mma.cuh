// The tensor-core instructions the GEMM, the skinny kernel and flash attention
// share: ldmatrix (shared memory -> mma fragments) and mma.sync.m16n8k16 with
// bf16 operands and fp32 accumulators. Where each operand element lives is
// written down, and emulated on the CPU, in mma_layout.h.
#ifndef AUTOGLM_KERNELS_CUDA_MMA_CUH_
#define AUTOGLM_KERNELS_CUDA_MMA_CUH_

#include <cuda_bf16.h>

namespace ag::cuda {

// Four 8 x 8 b16 matrices; lane 8j + i gives the address of row i of matrix j (16 bytes, aligned).
__device__ __forceinline__ void LdMatrixX4(unsigned* r, const __nv_bfloat16* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Two 8 x 8 b16 matrices: lanes 0..15 give the addresses as for .x4 (lane 8j + i: row i of matrix
// j); the other lanes' addresses are not read.
__device__ __forceinline__ void LdMatrixX2(unsigned* r, const __nv_bfloat16* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
// ldmatrix.x4 with each matrix transposed on the way (a [k][n] tile becomes B fragments).
__device__ __forceinline__ void LdMatrixX4Trans(unsigned* r, const __nv_bfloat16* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a b: a 16 x 16 (4 registers), b 16 x 8 (2), c 16 x 8 fp32 (4).
__device__ __forceinline__ void Mma16816(float* c, const unsigned* a, const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats as one register of bf16 (the first in the low half: the lower k or column).
__device__ __forceinline__ unsigned PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_MMA_CUH_
