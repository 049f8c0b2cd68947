// The W8A8 prefill GEMM (w8a8_gemm_layout.h has the arithmetic): the bf16
// wgmma GEMM's pipeline (gemm_wgmma.cuh) over 8-bit codes -- x's, as
// LaunchQuantizeInputCodes left them, and the weight segment's, both TMA'd in
// 128 x 128-byte boxes with the 128-byte swizzle -- multiplied by
// wgmma.m64n128k32 (e4m3 x e4m3 into fp32, or s8 x u8 into int32). The scales
// (and the zero points' correction) are applied to each accumulator as it goes
// to the fp32 tile; the epilogue is the other GEMMs', over the segment's
// columns of y. Included by w8a8_gemm_<code>.cu. Not a public header.
//
// Block: 3 warpgroups -- the TMA producer (one thread) and two consumers of 64
// rows each. e4m3 products are exact in fp32 but Hopper's tensor cores keep
// fewer bits than fp32 while they sum a wgmma's k: each k-tile's four wgmma
// sum into registers of their own, added to the fp32 accumulators per k-tile
// (DeepSeek-V3's promotion interval of 128). int32 sums are exact.
#ifndef AUTOGLM_KERNELS_CUDA_W8A8_GEMM_CUH_
#define AUTOGLM_KERNELS_CUDA_W8A8_GEMM_CUH_

#include "kernels/cuda/input_quant.cuh"
#include "kernels/cuda/quant_gemm.cuh"  // EncodeCodeTileMap
#include "kernels/cuda/w8a8_gemm_layout.h"

namespace ag::cuda {

static_assert(kW8BM == kWgBM && kW8BN == kWgBN && kW8StageBytes == kWgStageBytes, "the bf16 GEMM's tiles, byte for byte");

// 64 accumulator registers as asm operands, constraint c.
#define AG_ACC8(c, d, i) c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]), c(d[i + 6]), c(d[i + 7])
#define AG_ACC64(c, d) \
  AG_ACC8(c, d, 0), AG_ACC8(c, d, 8), AG_ACC8(c, d, 16), AG_ACC8(c, d, 24), AG_ACC8(c, d, 32), AG_ACC8(c, d, 40), \
      AG_ACC8(c, d, 48), AG_ACC8(c, d, 56)
#define AG_ACC64_TEXT                                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "   \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x 128) (+)= A (64 x 32 e4m3) B (32 x 128 e4m3), both K-major in shared memory; `accumulate`
// false starts d afresh.
__device__ __forceinline__ void WgmmaE4m3(float* d, uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile("{\n .reg .pred acc;\n setp.ne.b32 acc, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " AG_ACC64_TEXT ", %64, %65, acc, 1, 1;\n}\n"
               : AG_ACC64("+f", d)
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}
// d (64 x 128 int32) += A (64 x 32 s8) B (32 x 128 u8).
__device__ __forceinline__ void WgmmaS8U8(int32_t* d, uint64_t desc_a, uint64_t desc_b) {
  asm volatile("{\n .reg .pred acc;\n setp.ne.b32 acc, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.u8 " AG_ACC64_TEXT ", %64, %65, acc;\n}\n"
               : AG_ACC64("+r", d)
               : "l"(desc_a), "l"(desc_b), "r"(1));
}
// The accumulators as the compiler must see them after wgmma.wait_group: written.
__device__ __forceinline__ void FenceAccumulators64(float* d) { FenceAccumulators(d); }
__device__ __forceinline__ void FenceAccumulators64(int32_t* d) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

#undef AG_ACC8
#undef AG_ACC64
#undef AG_ACC64_TEXT

// The accumulators' type: fp32 for e4m3, int32 for int8.
template <bool kFp8>
using W8Acc = std::conditional_t<kFp8, float, int32_t>;

// A consumer warpgroup's k-tiles (rows 64 half .. 64 half + 63 of each stage's x tile times the
// stage's weight tile) into d; each stage freed on `empty` once its wgmma are done.
template <bool kFp8>
__device__ __forceinline__ void ConsumeCodeTiles(W8Acc<kFp8>* d, const unsigned char* a_stages,
                                                 const unsigned char* b_stages, int tiles, int half, uint64_t* full,
                                                 uint64_t* empty) {
  float part[64] = {};  // fp8: one k-tile's sums before they join d
  for (int t = 0; t < tiles; ++t) {
    const int s = t % kW8Stages;
    BarrierWait(&full[s], (t / kW8Stages) & 1);
    const uint64_t desc_a = SmemDescriptor(a_stages + s * kW8BM * kW8BK + half * 64 * kW8BK);
    const uint64_t desc_b = SmemDescriptor(b_stages + s * kW8BN * kW8BK);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kW8BK / 32; ++kk) {  // 32 bytes a step: the descriptor's k16 step of bf16
      if constexpr (kFp8) {
        WgmmaE4m3(part, mma::DescriptorAtK(desc_a, kk), mma::DescriptorAtK(desc_b, kk), kk > 0);
      } else {
        WgmmaS8U8(d, mma::DescriptorAtK(desc_a, kk), mma::DescriptorAtK(desc_b, kk));
      }
    }
    WgmmaCommit();
    WgmmaWaitAll();
    if constexpr (kFp8) {
      FenceAccumulators64(part);
    } else {
      FenceAccumulators64(d);
    }
    BarrierArrive(&empty[s]);
    if constexpr (kFp8) {
#pragma unroll
      for (int i = 0; i < 64; ++i) d[i] += part[i];
    }
  }
}

// x's per-row scales and (int8) code sums, from the scratch (InputCodes).
struct W8A8Rows {
  const float* scales = nullptr;
  const int32_t* sums = nullptr;
};

// A consumer's accumulators (rows 64 half .. 64 half + 63 of the tile; wgmma's layout, as
// StoreWgmmaAccumulators) into the fp32 tile as products: times x's row scale and the weight's
// column scale, after (int8) the zero point's correction z_n * sum_k c_x, exact in int32. Under a
// cluster split of K, each rank's sum covers its K range but sum_k c_x covers the row: only rank 0
// (`corrects`) subtracts it, once for the cluster's summed tile.
template <bool kFp8>
__device__ __forceinline__ void StoreScaledAccumulators(const W8Acc<kFp8>* d, int half, int warp_in_wg, int lane,
                                                        float (*tile)[kWgTileLd], const W8A8Rows& x,
                                                        const QuantSegment& s, int64_t m, int64_t block_m,
                                                        int64_t tile_n, bool corrects) {
  const int row0 = 64 * half + 16 * warp_in_wg + lane / 4, col0 = 2 * (lane % 4);
  float row_scale[2];
  int32_t row_sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = block_m + row0 + 8 * h;
    row_scale[h] = r < m ? x.scales[r] : 0.0f;
    row_sum[h] = !kFp8 && corrects && r < m ? x.sums[r] : 0;
  }
  const float* col_scales = static_cast<const float*>(s.scales);  // one fp32 scale a row (W8A8GemmTakesShape)
#pragma unroll
  for (int j = 0; j < kW8BN / 8; ++j) {
    float col_scale[2];
    int32_t zero[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t c = tile_n + 8 * j + col0 + e;
      col_scale[e] = c < s.n ? col_scales[c] : 0.0f;
      zero[e] = kFp8 ? 0 : s.zeros != nullptr && c < s.n ? s.zeros[c] : 128;  // symmetric: stored biased by 128
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const W8Acc<kFp8> acc = d[4 * j + 2 * h + e];
        float sum;
        if constexpr (kFp8) {
          sum = acc;
        } else {
          sum = static_cast<float>(acc - zero[e] * row_sum[h]);
        }
        v[e] = sum * (row_scale[h] * col_scale[e]);
      }
      *reinterpret_cast<float2*>(&tile[row0 + 8 * h][8 * j + col0]) = make_float2(v[0], v[1]);
    }
  }
}

// y's columns [s.n_begin, s.n_begin + s.n) for p's rows from x's codes (a_map) and the segment's
// (w_map): blockIdx.x the segment's 128-column tile, blockIdx.y x's 128-row tile, blockIdx.z the
// rank of a cluster splitting K (k_per_rank each, a multiple of kW8BK).
template <bool kFp8, Epilogue kE>
__global__ void __launch_bounds__(kW8Threads, 1)
    W8A8GemmKernel(LinearParams p, QuantSegment s, W8A8Rows x, const __grid_constant__ CUtensorMap a_map,
                   const __grid_constant__ CUtensorMap w_map, int64_t k_per_rank, int64_t m_group) {
  extern __shared__ __align__(16) unsigned char w8_smem_raw[];
  unsigned char* smem = w8_smem_raw + ((1024 - SmemAddress(w8_smem_raw) % 1024) % 1024);
  unsigned char* a_stages = smem;                                // [kW8Stages][128][128] codes
  unsigned char* b_stages = a_stages + kW8Stages * kW8BM * kW8BK;  // [kW8Stages][128][128] codes
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kW8Stages * kW8StageBytes);
  uint64_t* empty = full + kW8Stages;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x % 128) / 32;
  const GemmTileAt at = GroupedTileOfBlock(m_group);
  const int64_t block_m = at.m * kW8BM, tile_n = at.n * kW8BN;
  const int64_t k_begin = rank * k_per_rank, k_end = min(p.k, k_begin + k_per_rank);
  const int tiles = k_end > k_begin ? static_cast<int>((k_end - k_begin + kW8BK - 1) / kW8BK) : 0;
  if (threadIdx.x == 0) {
    for (int st = 0; st < kW8Stages; ++st) {
      BarrierInit(&full[st], 1);         // the producer's expect-bytes arrival
      BarrierInit(&empty[st], 2 * 128);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  AllowNextKernel();
  WaitForPreviousKernel();  // x's codes are the previous kernel's output

  auto tile = reinterpret_cast<float (*)[kWgTileLd]>(smem);  // the output tile, over the stages at the end
  if (wg == 0) {
    if (threadIdx.x == 0) {
      ProduceTiles<kW8Stages>(a_stages, b_stages, kW8StageBytes / 2, &a_map, &w_map, k_begin, kW8BK, tiles, block_m,
                              tile_n, full, empty);
    }
  } else {
    W8Acc<kFp8> d[64] = {};  // only in the consumers, as in the quantized GEMM
    ConsumeCodeTiles<kFp8>(d, a_stages, b_stages, tiles, wg - 1, full, empty);
    // Both consumers past their last wgmma: every stage has been read, so the stages become the tile.
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    StoreScaledAccumulators<kFp8>(d, wg - 1, warp_in_wg, lane, tile, x, s, p.m, block_m, tile_n, rank == 0);
  }
  __syncthreads();
  StoreClusterTile<kE, kW8BM, kW8BN, kW8Threads>(p, cluster, &tile[0][0], kWgTileLd, block_m, s.n_begin + tile_n,
                                                 s.n_begin + s.n);
}

template <bool kFp8, Epilogue kE>
cudaError_t LaunchW8A8GemmTiles(const LinearParams& p, const QuantSegment& s, const void* x_scratch,
                                cudaStream_t stream) {
  const InputCodes codes = InputCodesIn(const_cast<void*>(x_scratch), p.m, p.k);
  CUtensorMap a_map, w_map;
  cudaError_t e = EncodeCodeTileMap(codes.codes, p.m, p.k, kW8BK, &a_map);
  if (e == cudaSuccess) e = EncodeCodeTileMap(s.codes, s.n, p.k, kW8BK, &w_map);
  if (e == cudaSuccess) e = AllowLargeSharedMemory<W8A8GemmKernel<kFp8, kE>, kW8SmemBytes>();
  if (e != cudaSuccess) return e;
  const int sms = MultiprocessorCount();
  const KSplit split = SplitW8A8K(p.m, s.n, p.k, sms > 0 ? sms : 132);
  const dim3 grid(static_cast<unsigned>((s.n + kW8BN - 1) / kW8BN), static_cast<unsigned>((p.m + kW8BM - 1) / kW8BM),
                  static_cast<unsigned>(split.ranks));
  return LaunchKernelInCluster(W8A8GemmKernel<kFp8, kE>, grid, dim3(kW8Threads), kW8SmemBytes, stream,
                               dim3(1, 1, static_cast<unsigned>(split.ranks)), p, s,
                               W8A8Rows{codes.scales, codes.sums}, a_map, w_map, split.k_per_rank, GemmTileGroup());
}

// Every epilogue of one input code; instantiated in w8a8_gemm_<code>.cu.
template <bool kFp8>
cudaError_t LaunchW8A8GemmFor(const LinearParams& p, const QuantSegment& s, const void* x_scratch,
                              cudaStream_t stream) {
  switch (p.epilogue) {
    case Epilogue::kNone:
      return LaunchW8A8GemmTiles<kFp8, Epilogue::kNone>(p, s, x_scratch, stream);
    case Epilogue::kBias:
      return LaunchW8A8GemmTiles<kFp8, Epilogue::kBias>(p, s, x_scratch, stream);
    case Epilogue::kResidual:
      return LaunchW8A8GemmTiles<kFp8, Epilogue::kResidual>(p, s, x_scratch, stream);
    case Epilogue::kSiluMul:
      return LaunchW8A8GemmTiles<kFp8, Epilogue::kSiluMul>(p, s, x_scratch, stream);
    case Epilogue::kQkvRope:
      return LaunchW8A8GemmTiles<kFp8, Epilogue::kQkvRope>(p, s, x_scratch, stream);
  }
  return cudaErrorInvalidValue;
}

extern template cudaError_t LaunchW8A8GemmFor<true>(const LinearParams&, const QuantSegment&, const void*,
                                                   cudaStream_t);
extern template cudaError_t LaunchW8A8GemmFor<false>(const LinearParams&, const QuantSegment&, const void*,
                                                    cudaStream_t);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_W8A8_GEMM_CUH_
