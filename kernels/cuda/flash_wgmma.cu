// The vision program's attention on Hopper: flash attention within segments
// of rows (non-causal, K and V beside Q), head_dim 128, on wgmma.
//
// Block: one warpgroup, 64 query rows of one segment and one head (the mma.sync
// kernel's tiles: FlashTileOf), two blocks a multiprocessor. TMA brings Q once
// and the segment's keys in 64-key tiles of K and V, each [64][128] bf16 tile as
// two 64-wide boxes with the 128-byte swizzle, K and V in rings of two stages
// with barriers of their own (K is wanted an iteration before V). Per tile:
//   S = Q K^T   wgmma.m64n64k16 x 8, Q from registers (read once from its
//   tile: wgmma then reads only K from shared memory, 2 KB a k16 step instead
//   of 4 -- with both operands there, S's products alone asked for all of
//   shared memory's 128 bytes a clock), K K-major in shared memory;
//   the online softmax on S's accumulators (a thread holds rows g and g + 8 of
//   its warp's 16, as mma.sync's C fragment);
//   O += P V    wgmma.m64n128k16 x 4 with P from registers (S's accumulators
//   of keys 16c..16c+15 are the A fragment of chunk c, as in the mma.sync
//   kernel) and V as an MN-major operand (imm-trans-b; mma_layout.h).
// FA3's overlap within the warpgroup: the next tile's S = Q K^T is issued
// before this tile's P V, and the next tile's softmax (masking, max, exps,
// sums) runs while P V does; only O's rescaling waits for it. The other block
// on the multiprocessor fills the rest (no warp-specialised producer: thread 0
// issues the loads once a stage is free).
//
// LaunchFlashSegmentAttention takes it where it can (WgmmaFlashUsable);
// AUTOGLM_WGMMA_FLASH=0 keeps the mma.sync kernel.
#include <cuda.h>

#include <cmath>

#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/flash_softmax.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/mma_layout.h"

namespace ag::cuda {
namespace {

constexpr int kD = 128;
constexpr int kThreads = 128;
constexpr uint32_t kBoxBytes = 64 * 128;        // 64 rows x 64 bf16: one TMA box
constexpr uint32_t kTileBytes = 2 * kBoxBytes;  // a [64][128] tile: d 0..63, then d 64..127
constexpr size_t kSmemBytes = 1024 + 5 * size_t{kTileBytes} + 4 * sizeof(uint64_t);  // Q, two K and two V stages
static_assert(kFlashRows == 64 && kFlashKeys == 64, "the tiles of FlashTileOf and of the mask");

struct WgParams {
  const int32_t* offsets;  // [segments + 1]
  int64_t segments;
  int heads;
  float scale_log2;
  bf16* out;
};

// S (64 x 64 fp32) (+)= Q (64 x 16, bf16 in registers: mma.sync's A fragment) K^T (16 x 64), K
// K-major in shared memory.
__device__ __forceinline__ void WgmmaQK(float* s, const unsigned (&a)[4], uint64_t desc_k, bool accumulate) {
  asm volatile(
      "{\n .reg .pred acc;\n setp.ne.b32 acc, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, acc, 1, 1, 0;\n}\n"
      : "+f"(s[0]), "+f"(s[1]), "+f"(s[2]), "+f"(s[3]), "+f"(s[4]), "+f"(s[5]), "+f"(s[6]), "+f"(s[7]), "+f"(s[8]),
        "+f"(s[9]), "+f"(s[10]), "+f"(s[11]), "+f"(s[12]), "+f"(s[13]), "+f"(s[14]), "+f"(s[15]), "+f"(s[16]),
        "+f"(s[17]), "+f"(s[18]), "+f"(s[19]), "+f"(s[20]), "+f"(s[21]), "+f"(s[22]), "+f"(s[23]), "+f"(s[24]),
        "+f"(s[25]), "+f"(s[26]), "+f"(s[27]), "+f"(s[28]), "+f"(s[29]), "+f"(s[30]), "+f"(s[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_k), "r"(static_cast<int>(accumulate)));
}

// O (64 x 128 fp32) += P (64 x 16, bf16 in registers: mma.sync's A fragment) V (16 x 128, MN-major).
__device__ __forceinline__ void WgmmaPV(float* o, const unsigned (&a)[4], uint64_t desc_v) {
  asm volatile(
      "{\n .reg .pred acc;\n setp.ne.b32 acc, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, acc, 1, 1, 1;\n}\n"
      : "+f"(o[0]), "+f"(o[1]), "+f"(o[2]), "+f"(o[3]), "+f"(o[4]), "+f"(o[5]), "+f"(o[6]), "+f"(o[7]), "+f"(o[8]),
        "+f"(o[9]), "+f"(o[10]), "+f"(o[11]), "+f"(o[12]), "+f"(o[13]), "+f"(o[14]), "+f"(o[15]), "+f"(o[16]),
        "+f"(o[17]), "+f"(o[18]), "+f"(o[19]), "+f"(o[20]), "+f"(o[21]), "+f"(o[22]), "+f"(o[23]), "+f"(o[24]),
        "+f"(o[25]), "+f"(o[26]), "+f"(o[27]), "+f"(o[28]), "+f"(o[29]), "+f"(o[30]), "+f"(o[31]), "+f"(o[32]),
        "+f"(o[33]), "+f"(o[34]), "+f"(o[35]), "+f"(o[36]), "+f"(o[37]), "+f"(o[38]), "+f"(o[39]), "+f"(o[40]),
        "+f"(o[41]), "+f"(o[42]), "+f"(o[43]), "+f"(o[44]), "+f"(o[45]), "+f"(o[46]), "+f"(o[47]), "+f"(o[48]),
        "+f"(o[49]), "+f"(o[50]), "+f"(o[51]), "+f"(o[52]), "+f"(o[53]), "+f"(o[54]), "+f"(o[55]), "+f"(o[56]),
        "+f"(o[57]), "+f"(o[58]), "+f"(o[59]), "+f"(o[60]), "+f"(o[61]), "+f"(o[62]), "+f"(o[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_v), "r"(1));
}

// A [64][128] tile of the matrix behind `map` (rows from `row`, columns from `col`) as two boxes.
__device__ __forceinline__ void LoadTile(unsigned char* dst, const CUtensorMap* map, int col, int64_t row,
                                         uint64_t* bar) {
  TmaLoad2d(dst, map, col, static_cast<int>(row), bar);
  TmaLoad2d(dst + kBoxBytes, map, col + 64, static_cast<int>(row), bar);
}

// Step kk (16 of d) of a K-major [64][128] tile: box kk / 4, 32 bytes a step within its rows.
__device__ __forceinline__ uint64_t KMajorAt(const unsigned char* tile, int kk) {
  return mma::DescriptorAtK(mma::Sw128KMajorDescriptor(SmemAddress(tile + (kk / 4) * kBoxBytes)), kk % 4);
}

// The warp's 16 rows of the Q tile as wgmma's register operand, step kk (d 16 kk .. 16 kk + 15) in
// qa[kk]: mma.sync's A layout (mma_layout.h), read from where TMA put each pair.
__device__ __forceinline__ void LoadQFragments(const unsigned char* qs, int warp, int lane,
                                               unsigned (&qa)[kD / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const mma::At at = mma::AElement(lane, r, 0);
      qa[kk][r] = *reinterpret_cast<const unsigned*>(qs + mma::Sw128BoxedOffset(16 * warp + at.row, 16 * kk + at.col,
                                                                                 kBoxBytes));
    }
  }
}

// P's A fragments of the tile's four 16-key chunks, from S's accumulators.
__device__ __forceinline__ void ProbabilityFragments(const float* s, unsigned (&pa)[kFlashKeys / 16][4]) {
#pragma unroll
  for (int c = 0; c < kFlashKeys / 16; ++c) ProbabilityFragment(s, c, pa[c]);
}

// O += P V over one V stage, a 16-key chunk a wgmma.
__device__ __forceinline__ void IssueOutput(float* o, const unsigned (&pa)[kFlashKeys / 16][4],
                                            const unsigned char* v_tile) {
#pragma unroll
  for (int c = 0; c < kFlashKeys / 16; ++c) {
    WgmmaPV(o, pa[c], mma::Sw128MnMajorDescriptor(SmemAddress(v_tile + c * 16 * 128), kBoxBytes));
  }
}

// S = Q K^T over one K stage.
__device__ __forceinline__ void IssueScores(float* s, const unsigned (&qa)[kD / 16][4], const unsigned char* k_tile) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) WgmmaQK(s, qa[kk], KMajorAt(k_tile, kk), kk > 0);
}

__global__ void __launch_bounds__(kThreads, 2)
    WgmmaFlashSegmentKernel(WgParams p, const __grid_constant__ CUtensorMap q_map,
                            const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
  extern __shared__ __align__(16) unsigned char wf_smem_raw[];
  unsigned char* smem = wf_smem_raw + ((1024 - SmemAddress(wf_smem_raw) % 1024) % 1024);
  unsigned char* qs = smem;                     // [64][128]
  unsigned char* ks = qs + kTileBytes;          // [2][64][128]
  unsigned char* vs = ks + 2 * kTileBytes;      // [2][64][128]
  uint64_t* k_full = reinterpret_cast<uint64_t*>(vs + 2 * kTileBytes);  // [2]: K's stages (the first with Q)
  uint64_t* v_full = k_full + 2;                                        // [2]: V's stages
  __shared__ FlashTile shared_tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t4 = lane % 4;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {  // the expect-bytes arrival of thread 0
      BarrierInit(&k_full[i], 1);
      BarrierInit(&v_full[i], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  AllowNextKernel();
  WaitForPreviousKernel();  // Q, K, V and the offsets are earlier kernels' outputs
  if (threadIdx.x == 0) shared_tile = FlashTileOf(p.offsets, p.segments, blockIdx.x);
  __syncthreads();
  const FlashTile tile = shared_tile;
  if (tile.seq < 0) return;  // past the last tile: the whole block leaves

  const int h = blockIdx.y, col = h * kD;
  const int64_t seg_first = p.offsets[tile.seq], keys = p.offsets[tile.seq + 1] - seg_first;
  const int64_t tiles = (keys + kFlashKeys - 1) / kFlashKeys;  // >= 1: the tile has rows
  // Tile j of the segment's keys: K in K-stage j % 2, V in V-stage j % 2, each barrier's phase (j / 2) % 2.
  // Whole boxes: rows past the matrix arrive as zeros (and are masked).
  auto load_k = [&](int64_t j) {
    BarrierExpectBytes(&k_full[j % 2], kTileBytes);
    LoadTile(ks + (j % 2) * kTileBytes, &k_map, col, seg_first + j * kFlashKeys, &k_full[j % 2]);
  };
  auto load_v = [&](int64_t j) {
    BarrierExpectBytes(&v_full[j % 2], kTileBytes);
    LoadTile(vs + (j % 2) * kTileBytes, &v_map, col, seg_first + j * kFlashKeys, &v_full[j % 2]);
  };
  if (threadIdx.x == 0) {
    BarrierExpectBytes(&k_full[0], 2 * kTileBytes);  // Q joins tile 0's K (one arrival a phase)
    LoadTile(qs, &q_map, col, tile.first, &k_full[0]);
    LoadTile(ks, &k_map, col, seg_first, &k_full[0]);
    load_v(0);
    if (tiles > 1) {
      load_k(1);
      load_v(1);
    }
  }

  // Q's fragments and tile 0's scores, turned into probabilities (O is still zero: no correction).
  unsigned qa[kD / 16][4];
  BarrierWait(&k_full[0], 0);
  LoadQFragments(qs, warp, lane, qa);
  float o[64] = {};  // O: rows g, g + 8 of the warp's 16; d = 8j + 2 t4 + {0, 1} at o[4j + 2 half + {0, 1}]
  float s[32];       // S the same way over the tile's 64 keys
  WgmmaFence();
  IssueScores(s, qa, ks);
  WgmmaCommit();
  WgmmaWaitAll();
  FenceRegisters<32>(s);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, correction[2];
  const int64_t last_key[2] = {keys - 1, keys - 1};
  SoftmaxScores<kFlashKeys / 8>(s, row_max, row_sum, correction, 0, last_key, keys, p.scale_log2, t4);
  __syncthreads();  // every warp has read tile 0's K
  if (threadIdx.x == 0 && tiles > 2) load_k(2);

  // Every tile but the last: P of tile kt taken from s (bf16 A fragments), tile kt + 1's S issued
  // into s first (groups finish in order) and P V after it; tile kt + 1's softmax runs while P V does.
  // The last tile apart, so that no branch within the loop leaves ptxas unsure which group a wait
  // retires (it then serialises every wgmma: C7514).
  unsigned pa[kFlashKeys / 16][4];
  for (int64_t kt = 0; kt + 1 < tiles; ++kt) {
    ProbabilityFragments(s, pa);
    BarrierWait(&k_full[(kt + 1) % 2], static_cast<unsigned>(((kt + 1) / 2) & 1));
    BarrierWait(&v_full[kt % 2], static_cast<unsigned>((kt / 2) & 1));
    WgmmaFence();
    IssueScores(s, qa, ks + ((kt + 1) % 2) * kTileBytes);
    WgmmaCommit();
    IssueOutput(o, pa, vs + (kt % 2) * kTileBytes);
    WgmmaCommit();
    WgmmaWait<1>();  // tile kt + 1's S is done; P V may still run
    FenceRegisters<32>(s);
    __syncthreads();  // every warp has read tile kt + 1's K: its stage takes tile kt + 3
    if (threadIdx.x == 0 && kt + 3 < tiles) load_k(kt + 3);
    SoftmaxScores<kFlashKeys / 8>(s, row_max, row_sum, correction, (kt + 1) * kFlashKeys, last_key, keys,
                                  p.scale_log2, t4);
    WgmmaWaitAll();
    FenceRegisters<64>(o);
    RescaleOutput<kD / 8>(o, correction);
    __syncthreads();  // every warp has read tile kt's V: its stage takes tile kt + 2
    if (threadIdx.x == 0 && kt + 2 < tiles) load_v(kt + 2);
  }
  const int64_t last = tiles - 1;
  ProbabilityFragments(s, pa);
  BarrierWait(&v_full[last % 2], static_cast<unsigned>((last / 2) & 1));
  WgmmaFence();
  IssueOutput(o, pa, vs + (last % 2) * kTileBytes);
  WgmmaCommit();
  WgmmaWaitAll();
  FenceRegisters<64>(o);

  const int64_t q_stride = static_cast<int64_t>(p.heads) * kD;
  StoreFlashRows<kD / 8>(o, row_sum, 16 * warp, tile.rows, lane / 4, t4, p.out + tile.first * q_stride + col, q_stride);
}

}  // namespace

cudaError_t LaunchWgmmaFlashSegment(const bf16* q, const bf16* k, const bf16* v, const int32_t* offsets,
                                    int64_t segments, int64_t rows, int64_t heads, int64_t head_dim, bf16* out,
                                    cudaStream_t stream, int64_t in_stride) {
  if (!WgmmaFlashUsable(q, k, v, rows, heads, head_dim)) return cudaErrorNotSupported;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = FlashGridTiles(rows, segments);
  if (blocks > 0x7fffffff || heads > kMaxGridYZ || rows > 0x7fffffff) return cudaErrorInvalidValue;
  CUtensorMap q_map, k_map, v_map;
  // Within rows in_stride apart (q, k and v as the columns of one packed matrix, or each its own).
  cudaError_t e = EncodeBoxMap(q, rows, heads * kD, 64, &q_map, in_stride);
  if (e == cudaSuccess) e = EncodeBoxMap(k, rows, heads * kD, 64, &k_map, in_stride);
  if (e == cudaSuccess) e = EncodeBoxMap(v, rows, heads * kD, 64, &v_map, in_stride);
  if (e == cudaSuccess) e = AllowLargeSharedMemory<WgmmaFlashSegmentKernel, kSmemBytes>();
  if (e != cudaSuccess) return e;
  const WgParams p{offsets, segments, static_cast<int>(heads), ScaleLog2(kD), out};
  return LaunchKernel(WgmmaFlashSegmentKernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads)),
                      dim3(kThreads), kSmemBytes, stream, p, q_map, k_map, v_map);
}

}  // namespace ag::cuda
