// Host side of the wgmma GEMM (gemm_wgmma.cuh): when it may run, and its TMA tensor maps. The
// tensor-map encoder is the driver's, reached through the runtime (no link against libcuda).
#include <cuda.h>
#include <cudaTypedefs.h>

#include "kernels/cuda/linear_impl.cuh"
#include "kernels/cuda/per_device.h"
#include "kernels/cuda/quant_gemm_layout.h"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/quant_linear.cuh"
#include "kernels/cuda/w8a8_gemm_layout.h"

namespace ag::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

bool Enabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_WGMMA");
  return enabled;
}

// wgmma and TMA are sm_90 instructions: the current device must be a Hopper one (remembered per
// device once seen; another device is asked again, cheaply).
bool HopperDevice() {
  static PerDeviceOnce<bool, true> once;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return once.Get(device, [device] {
    int major = 0;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major == 9;
  });
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// AUTOGLM_WGMMA_WIDE=0 keeps every wgmma GEMM on 128-wide tiles (WgmmaTileColumns chooses otherwise).
bool WgmmaWideEnabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_WGMMA_WIDE");
  return enabled;
}

bool WgmmaPersistentEnabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_GEMM_PERSISTENT");
  return enabled;
}

int64_t GemmTileGroup() {
  static const int64_t group = SwitchedOn("AUTOGLM_GEMM_GROUPED") ? kGemmTileGroup : 1;
  return group;
}

bool WgmmaGemmUsable(const LinearParams& p, const bf16* a) {
  return Enabled() && p.k % 8 == 0 && Aligned16(a) && Aligned16(p.w) && Encoder() != nullptr && HopperDevice();
}

// AUTOGLM_QUANT_GEMM=0 keeps quantized prefill on the dequantized scratch (for comparison).
static bool QuantGemmEnabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_QUANT_GEMM");
  return enabled;
}

bool QuantGemmTakes(const QuantSegment& s, int64_t k) {
  return Enabled() && QuantGemmEnabled() && Aligned16(s.codes) && QuantGemmTakesShape(s.code, k, s.input_order != nullptr, s.stored_k) &&
         Encoder() != nullptr && HopperDevice();
}

bool QuantGemmUsable(const LinearParams& p, const QuantSegment& s) {
  return p.norm_w == nullptr && Aligned16(p.x) && QuantGemmTakes(s, p.k);
}

// AUTOGLM_W8A8_GEMM=0 keeps W8A8 prefill on x's rounded bf16 values and the dequantizing GEMM.
static bool W8A8GemmEnabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_W8A8_GEMM");
  return enabled;
}

bool W8A8GemmTakes(const QuantSegment& s, InputQuantCode act, int64_t k) {
  return Enabled() && W8A8GemmEnabled() && Aligned16(s.codes) && s.scales != nullptr &&
         W8A8GemmTakesShape(s.code, act == InputQuantCode::kFp8, k, s.group, s.input_order != nullptr, s.stored_k) &&
         Encoder() != nullptr && HopperDevice();
}

cudaError_t EncodeCodeTileMap(const void* codes, int64_t rows, int64_t row_bytes, int box_bytes, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (encode == nullptr || rows <= 0 || row_bytes <= 0 || row_bytes % 16 != 0 ||
      (box_bytes != 32 && box_bytes != 64 && box_bytes != 128)) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes), kQuantGemmBN};
  const cuuint32_t element_strides[2] = {1, 1};
  // The swizzle as wide as a box row: eight consecutive rows' same 16 bytes land in different banks.
  const CUtensorMapSwizzle swizzle = box_bytes == 32   ? CU_TENSOR_MAP_SWIZZLE_32B
                                     : box_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_128B;
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(codes), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// AUTOGLM_WGMMA_FLASH=0 keeps the vision program's attention on the mma.sync flash kernel.
static bool WgmmaFlashEnabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_WGMMA_FLASH");
  return enabled;
}

bool WgmmaFlashUsable(const bf16* q, const bf16* k, const bf16* v, int64_t rows, int64_t heads, int64_t head_dim) {
  return Enabled() && WgmmaFlashEnabled() && head_dim == 128 && heads > 0 && rows >= 0 && Aligned16(q) &&
         Aligned16(k) && Aligned16(v) && Encoder() != nullptr && HopperDevice();
}

bool WgmmaFlashPagedUsable(const bf16* q, int64_t heads, const PagedKv& cache) {
  return Enabled() && WgmmaFlashEnabled() && cache.head_dim == 128 && cache.code == KvCode::kBF16 &&
         cache.kv_heads > 0 && heads > 0 && heads % cache.kv_heads == 0 && PagedBoxesFit(cache.block_size) &&
         cache.slots > 0 && cache.slots <= 0x7fffffff - kFlashKeys && Aligned16(q) && Aligned16(cache.k) &&
         Aligned16(cache.v) && Encoder() != nullptr && HopperDevice();
}

cudaError_t EncodeBoxMap(const bf16* matrix, int64_t rows, int64_t cols, int box_rows, CUtensorMap* map,
                         int64_t row_stride) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = Encoder();
  if (row_stride == 0) row_stride = cols;
  if (encode == nullptr || rows <= 0 || cols <= 0 || cols % 8 != 0 || box_rows <= 0 || box_rows > 256 ||
      row_stride < cols || row_stride % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * sizeof(bf16)};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(matrix), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The GEMMs' k-tiles are EncodeBoxMap's 64-column boxes (k % 8 != 0 fails either way: TMA wants rows
// a multiple of 16 bytes apart).
cudaError_t EncodeTileMap(const bf16* matrix, int64_t rows, int64_t k, CUtensorMap* map, int box_rows) {
  static_assert(kWgBK == 64, "a k-tile is one of EncodeBoxMap's boxes wide");
  return EncodeBoxMap(matrix, rows, k, box_rows, map);
}

}  // namespace ag::cuda
