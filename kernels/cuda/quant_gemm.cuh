// The Hopper GEMM over a quantized weight segment (prefill past
// kQuantLinearMaxRows rows): gemm_wgmma.cuh's pipeline with the weight's tile
// dequantized on its way in, so the weight crosses the memory bus as codes
// (4 or 8 bits) instead of being expanded to bf16 in a scratch first (4.5 bytes
// a weight of traffic). Included by the quant_linear_<code>.cu files. Not a
// public header.
//
// Block: 4 warpgroups (quant_gemm_layout.h has the shared-memory layout).
//   0  the producer: one thread issues each k-tile's TMA loads, x's tile and the
//      weight's codes tile (a bf16 segment: its bf16 tile), into a ring of
//      stages guarded by `loaded` (bytes landed) and `empty` (both consumers done);
//   3  the dequantizing warpgroup: thread r turns row r's codes into bf16 --
//      s * (q - z) in fp32, rounded once, exactly as LaunchDequantize writes the
//      scratch -- stores them in the 128-byte-swizzled K-major layout TMA would
//      have written, fences them for the async proxy and arrives on `ready`;
//   1, 2  consumers, as in the bf16 kernel: wgmma.m64n128k16 on 64 rows each.
// The scales and zero points of the next tile are read before waiting for this
// one's codes, so their latency hides behind the wait. The epilogue is the bf16
// GEMM's, over the segment's columns of y.
#ifndef AUTOGLM_KERNELS_CUDA_QUANT_GEMM_CUH_
#define AUTOGLM_KERNELS_CUDA_QUANT_GEMM_CUH_

#include "kernels/cuda/quant_gemm_layout.h"
#include "kernels/cuda/quant_linear_impl.cuh"

namespace ag::cuda {

static_assert(kQuantGemmBM == kWgBM && kQuantGemmBN == kWgBN && kQuantGemmBK == kWgBK, "the bf16 GEMM's tiles");

// Thread r of the dequantizing warpgroup: row r of each k-tile's weight tile, from its codes.
template <QuantCode kCode>
__device__ __forceinline__ void DequantizeTiles(const QuantSegment& s, int64_t k, int64_t tile_n, int64_t k_begin,
                                                int tiles, const unsigned char* code_stages, unsigned char* b_stages,
                                                uint64_t* loaded, uint64_t* ready) {
  constexpr int kStages = QuantGemmStages(kCode), kRowBytes = QuantGemmCodeRowBytes(kCode);
  constexpr int kLoads = kRowBytes / 16, kCodes = 128 / QuantCodeBits(kCode);  // 16-byte loads a row; codes a load
  const int r = static_cast<int>(threadIdx.x % 128);
  const int64_t row = tile_n + r;  // of the segment
  const bool live = row < s.n;     // rows past the segment's last (TMA gave zero codes) become zeros
  const int64_t groups = SegmentGroups(k, s.group, s.group_offset);
  // The scale and zero point of each load of row `row` in tile t; loads past k are zeros.
  auto params = [&](int t, float (&scale)[kLoads], float (&zero)[kLoads]) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int64_t first = k_begin + static_cast<int64_t>(t) * kQuantGemmBK + j * kCodes;
      scale[j] = 0.0f;
      zero[j] = 0.0f;
      if (live && first < k) GroupParams<kCode>(s, row, groups, GroupOf(first, s.group, s.group_offset), &scale[j], &zero[j]);
    }
  };
  float scale[kLoads], zero[kLoads];
  params(0, scale, zero);
  for (int t = 0; t < tiles; ++t) {
    float next_scale[kLoads], next_zero[kLoads];
    params(t + 1 < tiles ? t + 1 : t, next_scale, next_zero);  // in flight during the wait
    const int stage = t % kStages;
    BarrierWait(&loaded[stage], (t / kStages) & 1);
    const unsigned char* codes = code_stages + stage * kQuantGemmBN * kRowBytes;
    unsigned char* tile = b_stages + stage * kQuantGemmBN * kQuantGemmBK * sizeof(bf16);
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      float v[kCodes] = {};
      if (live && k_begin + static_cast<int64_t>(t) * kQuantGemmBK + j * kCodes < k) {
        const uint4 packed = *reinterpret_cast<const uint4*>(codes + CodeLoadOffset(r, j, kRowBytes));
        DequantizeLoad<kCode>(packed, zero[j], v);
#pragma unroll
        for (int e = 0; e < kCodes; ++e) v[e] *= scale[j];  // s * (q - z): one rounding, as LaunchDequantize's
      }
#pragma unroll
      for (int u = 0; u < kCodes / 8; ++u) {  // 16 bytes of bf16: chunk j * kCodes / 8 + u of the 128-byte row
        Store8(reinterpret_cast<bf16*>(tile + TileChunkOffset(r, j * kCodes / 8 + u)), FromFloat8(v + 8 * u));
      }
    }
    FenceSharedForAsyncProxy();
    BarrierArrive(&ready[stage]);
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      scale[j] = next_scale[j];
      zero[j] = next_zero[j];
    }
  }
}

// y's columns [s.n_begin, s.n_begin + s.n) for p's rows: blockIdx.x the segment's 128-row tile,
// blockIdx.y x's, blockIdx.z the rank of a cluster splitting K (k_per_rank each).
template <QuantCode kCode, Epilogue kE>
__global__ void __launch_bounds__(kQuantGemmThreads, 1)
    QuantGemmKernel(LinearParams p, QuantSegment s, const __grid_constant__ CUtensorMap a_map,
                    const __grid_constant__ CUtensorMap code_map, int64_t k_per_rank, int64_t m_group) {
  constexpr bool kDequantize = kCode != QuantCode::kBf16;
  constexpr int kStages = QuantGemmStages(kCode), kRowBytes = QuantGemmCodeRowBytes(kCode);
  constexpr int kTileBytes = kWgBM * kWgBK * sizeof(bf16);
  extern __shared__ __align__(16) unsigned char qg_smem_raw[];
  unsigned char* smem = qg_smem_raw + ((1024 - SmemAddress(qg_smem_raw) % 1024) % 1024);
  unsigned char* a_stages = smem;                                   // [kStages][128][64] bf16
  unsigned char* b_stages = a_stages + kStages * kTileBytes;        // [kStages][128][64] bf16
  unsigned char* code_stages = b_stages + kStages * kTileBytes;     // [kStages][128][kRowBytes]
  uint64_t* loaded = reinterpret_cast<uint64_t*>(code_stages + kStages * kWgBN * kRowBytes);
  uint64_t* ready = loaded + kStages;
  uint64_t* empty = ready + kStages;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int wg = threadIdx.x / 128, lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x % 128) / 32;
  const GemmTileAt at = GroupedTileOfBlock(m_group);
  const int64_t block_m = at.m * kWgBM, tile_n = at.n * kWgBN;
  const int64_t k_begin = rank * k_per_rank, k_end = min(p.k, k_begin + k_per_rank);
  const int tiles = k_end > k_begin ? static_cast<int>((k_end - k_begin + kWgBK - 1) / kWgBK) : 0;
  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      BarrierInit(&loaded[st], 1);     // the producer's expect-bytes arrival
      BarrierInit(&ready[st], 128);    // every dequantizing thread
      BarrierInit(&empty[st], 2 * 128);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  AllowNextKernel();
  WaitForPreviousKernel();  // x is the previous kernel's output

  auto tile = reinterpret_cast<float (*)[kWgTileLd]>(smem);  // the output tile, over the stages at the end
  if (wg == 0) {
    if (threadIdx.x == 0) {
      constexpr unsigned kBytes = kTileBytes + (kDequantize ? kWgBN * kRowBytes : kTileBytes);
      for (int t = 0; t < tiles; ++t) {
        const int st = t % kStages;
        if (t >= kStages) BarrierWait(&empty[st], ((t / kStages) - 1) & 1);
        BarrierExpectBytes(&loaded[st], kBytes);  // whole boxes: out of bounds is zeros
        const int k0 = static_cast<int>(k_begin + static_cast<int64_t>(t) * kWgBK);
        TmaLoad2d(a_stages + st * kTileBytes, &a_map, k0, static_cast<int>(block_m), &loaded[st]);
        if constexpr (kDequantize) {  // the codes box: kRowBytes bytes of each of 128 rows
          TmaLoad2d(code_stages + st * kWgBN * kRowBytes, &code_map, k0 * QuantCodeBits(kCode) / 8,
                    static_cast<int>(tile_n), &loaded[st]);
        } else {
          TmaLoad2d(b_stages + st * kTileBytes, &code_map, k0, static_cast<int>(tile_n), &loaded[st]);
        }
      }
    }
  } else if (wg == 3) {
    if constexpr (kDequantize) {
      DequantizeTiles<kCode>(s, p.k, tile_n, k_begin, tiles, code_stages, b_stages, loaded, ready);
    }
  } else {
    float d[64] = {};  // only here: live across the dequantizing loop it would spill it
    ConsumeTiles<kStages>(d, reinterpret_cast<const bf16*>(a_stages), reinterpret_cast<const bf16*>(b_stages), tiles,
                          wg - 1, loaded, kDequantize ? ready : nullptr, empty);
    // Both consumers past their last wgmma: every stage has been read (the producers wrote them
    // before), so the stages become the output tile.
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    StoreWgmmaAccumulators(d, wg - 1, warp_in_wg, lane, tile);
  }
  __syncthreads();
  StoreClusterTile<kE, kWgBM, kWgBN, kQuantGemmThreads>(p, cluster, &tile[0][0], kWgTileLd, block_m,
                                                        s.n_begin + tile_n, s.n_begin + s.n);
}

// Host side (gemm_wgmma.cu): the tensor map of a segment's codes, [rows] rows of `row_bytes`
// bytes in boxes of `box_bytes` x 128 rows with the swizzle of `box_bytes` (32, 64 or 128).
cudaError_t EncodeCodeTileMap(const void* codes, int64_t rows, int64_t row_bytes, int box_bytes, CUtensorMap* map);

template <QuantCode kCode, Epilogue kE>
cudaError_t LaunchQuantGemmTiles(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) {
  CUtensorMap a_map, code_map;
  cudaError_t e = EncodeTileMap(p.x, p.m, p.k, &a_map);
  if (e == cudaSuccess) {
    e = kCode == QuantCode::kBf16
            ? EncodeTileMap(reinterpret_cast<const bf16*>(s.codes), s.n, p.k, &code_map)
            : EncodeCodeTileMap(s.codes, s.n, p.k * QuantCodeBits(kCode) / 8, QuantGemmCodeRowBytes(kCode), &code_map);
  }
  constexpr size_t kSmem = QuantGemmSmemBytes(kCode);
  if (e == cudaSuccess) e = AllowLargeSharedMemory<QuantGemmKernel<kCode, kE>, kSmem>();
  if (e != cudaSuccess) return e;
  const int sms = MultiprocessorCount();
  const KSplit split = SplitWgmmaK(p.m, s.n, p.k, sms > 0 ? sms : 132);
  const dim3 grid(static_cast<unsigned>((s.n + kWgBN - 1) / kWgBN), static_cast<unsigned>((p.m + kWgBM - 1) / kWgBM),
                  static_cast<unsigned>(split.ranks));
  return LaunchKernelInCluster(QuantGemmKernel<kCode, kE>, grid, dim3(kQuantGemmThreads), kSmem, stream,
                               dim3(1, 1, static_cast<unsigned>(split.ranks)), p, s, a_map, code_map,
                               split.k_per_rank, GemmTileGroup());
}

// Every epilogue of one code format; defined in quant_linear_<code>.cu.
template <QuantCode kCode>
cudaError_t LaunchQuantGemmFor(const LinearParams& p, const QuantSegment& s, cudaStream_t stream);

#define AG_INSTANTIATE_QUANT_GEMM(C)                                                                     \
  template <>                                                                                            \
  cudaError_t LaunchQuantGemmFor<C>(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) { \
    switch (p.epilogue) {                                                                                \
      case Epilogue::kNone:                                                                              \
        return LaunchQuantGemmTiles<C, Epilogue::kNone>(p, s, stream);                                   \
      case Epilogue::kBias:                                                                              \
        return LaunchQuantGemmTiles<C, Epilogue::kBias>(p, s, stream);                                   \
      case Epilogue::kResidual:                                                                          \
        return LaunchQuantGemmTiles<C, Epilogue::kResidual>(p, s, stream);                               \
      case Epilogue::kSiluMul:                                                                           \
        return LaunchQuantGemmTiles<C, Epilogue::kSiluMul>(p, s, stream);                                \
      case Epilogue::kQkvRope:                                                                           \
        return LaunchQuantGemmTiles<C, Epilogue::kQkvRope>(p, s, stream);                                \
    }                                                                                                    \
    return cudaErrorInvalidValue;                                                                        \
  }

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_QUANT_GEMM_CUH_
