// Flash attention on Hopper's wgmma, head_dim 128, two masks (one kernel, a
// template parameter):
//   segment non-causal within segments of rows, K and V beside Q (the vision
//           program: 13,416 patches of a screenshot);
//   paged   causal over the decoder's paged bf16 cache, chunked prefill
//           included (a row at position p sees keys 0..p of its sequence),
//           query heads in groups over a KV head.
//
// Block: 128 query rows of one segment (sequence) and one head (FlashTileOf's
// 128-row tiles, each sequence's longest first), one block a multiprocessor,
// three warpgroups: two consumers of 64 rows each and a producer (setmaxnreg
// moves its registers to the consumers), whose one thread issues the TMA
// loads: Q once, then the keys in 64-key tiles of K and V, each [64][128]
// bf16 tile as two 64-wide boxes with the 128-byte swizzle (over the paged
// cache, boxes of a page or of 64 rows of one: PagedBoxRow), into
// rings of four stages, a barrier a stage for its bytes (full) and one for both
// warpgroups being done with it (empty). Both warpgroups read every K and V
// tile: a tile crosses from L2 once for 128 rows (with a block of 64 rows the
// kernel asked ~6.6 TB/s of L2 at its measured 412 TFLOP/s, about what L2
// serves). Per tile, each warpgroup:
//   S = Q K^T   wgmma.m64n64k16 x 8, Q from registers (read once from its
//   tile: wgmma then reads only K from shared memory), K K-major;
//   the online softmax on S's accumulators (a thread holds rows g and g + 8 of
//   its warp's 16, as mma.sync's C fragment);
//   O += P V    wgmma.m64n128k16 x 4 with P from registers (S's accumulators
//   of keys 16c..16c+15 are the A fragment of chunk c, as in the mma.sync
//   kernel) and V as an MN-major operand (imm-trans-b; mma_layout.h).
// FA3's overlap within the warpgroup: the next tile's S = Q K^T is issued
// before this tile's P V, and the next tile's softmax (masking, max, exps,
// sums) runs while P V does; only O's rescaling waits for it. The two
// warpgroups run free of each other (the rings let them drift three tiles
// apart), so one's softmax fills the other's tensor-core time as well.
//
// LaunchFlashSegmentAttention and LaunchFlashPagedAttention take it where it
// can (WgmmaFlashUsable, WgmmaFlashPagedUsable); AUTOGLM_WGMMA_FLASH=0 keeps
// the mma.sync kernel for both.
#include <cuda.h>

#include <cmath>
#include <type_traits>

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
constexpr int kTileRows = 128;                  // a block's query rows: 64 a consumer warpgroup
constexpr int kConsumerThreads = 256;           // two warpgroups
constexpr int kThreads = kConsumerThreads + 128;  // and the producer warpgroup
constexpr int kStages = 4;                      // K's and V's rings
constexpr uint32_t kBoxBytes = 64 * 128;        // 64 rows x 64 bf16: one TMA box
constexpr uint32_t kTileBytes = 2 * kBoxBytes;  // a [64][128] tile: d 0..63, then d 64..127
// Q's two tiles, the stages, then the barriers (Q's; full and empty for each stage of K and of V).
constexpr size_t kSmemBytes = 1024 + (2 + 2 * kStages) * size_t{kTileBytes} + (1 + 4 * kStages) * sizeof(uint64_t);
static_assert(kFlashKeys == 64, "the key tiles of the mask");

struct WgParams {
  const int32_t* offsets;  // [segments + 1]: each segment's (sequence's) query rows
  int64_t segments;
  int heads;
  float scale_log2;
  bf16* out;
  // Paged: query heads a KV head; the sequences' contexts and pages; the cache's rows a page, a TMA
  // box's rows (PagedBoxRows) and a row past the cache (PagedBoxRow's `past`).
  int group = 1;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks = 0;
  int64_t block_size = 0;
  int box_rows = 0;
  int64_t past_row = 0;
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

// Tile j's K (or V) over the paged cache: box by box, d 0..63 then d 64..127 of each.
__device__ __forceinline__ void LoadPagedTile(unsigned char* dst, const CUtensorMap* map, int col, const WgParams& p,
                                              const int32_t* table, int64_t key0, int64_t keys, uint64_t* bar) {
  for (int r = 0; r < kFlashKeys; r += p.box_rows) {
    const int row = static_cast<int>(PagedBoxRow(table, p.block_size, key0 + r, keys, p.past_row));
    TmaLoad2d(dst + r * 128, map, col, row, bar);
    TmaLoad2d(dst + kBoxBytes + r * 128, map, col + 64, row, bar);
  }
}

template <bool kPaged>
__global__ void __launch_bounds__(kThreads, 1)
    WgmmaFlashKernel(WgParams p, const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                     const __grid_constant__ CUtensorMap v_map) {
  extern __shared__ __align__(16) unsigned char wf_smem_raw[];
  unsigned char* smem = wf_smem_raw + ((1024 - SmemAddress(wf_smem_raw) % 1024) % 1024);
  unsigned char* qs = smem;                       // [2][64][128]: a tile a warpgroup
  unsigned char* ks = qs + 2 * kTileBytes;        // [kStages][64][128]
  unsigned char* vs = ks + kStages * kTileBytes;  // [kStages][64][128]
  uint64_t* q_full = reinterpret_cast<uint64_t*>(vs + kStages * kTileBytes);
  uint64_t* k_full = q_full + 1;  // [kStages] each
  uint64_t* k_empty = k_full + kStages;
  uint64_t* v_full = k_empty + kStages;
  uint64_t* v_empty = v_full + kStages;
  __shared__ FlashTile shared_tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t4 = lane % 4;
  if (threadIdx.x == 0) {
    BarrierInit(q_full, 1);  // the producer's expect-bytes arrival
    for (int i = 0; i < kStages; ++i) {
      BarrierInit(&k_full[i], 1);
      BarrierInit(&v_full[i], 1);
      BarrierInit(&k_empty[i], kConsumerThreads);  // every consumer thread, once its wgmma have read the stage
      BarrierInit(&v_empty[i], kConsumerThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  AllowNextKernel();
  WaitForPreviousKernel();  // Q, K, V and the offsets are earlier kernels' outputs
  if (threadIdx.x == 0) shared_tile = FlashTileOf(p.offsets, p.segments, blockIdx.x, kTileRows);
  __syncthreads();
  const FlashTile tile = shared_tile;
  if (tile.seq < 0) return;  // past the last tile: the whole block leaves

  const int h = blockIdx.y, col = h * kD, kv_col = (kPaged ? h / p.group : h) * kD;
  const int64_t seg_first = p.offsets[tile.seq], count = p.offsets[tile.seq + 1] - seg_first;
  // The keys the tile's rows see: a segment's all; causal, 0 .. first_pos + row, where first_pos is
  // the tile's first row's position (the sequence's earlier chunks are in the cache).
  int64_t keys = count, first_pos = 0;
  const int32_t* table = nullptr;
  if constexpr (kPaged) {
    first_pos = p.context_lens[tile.seq] - count + (tile.first - seg_first);
    keys = first_pos + tile.rows;
    table = p.block_tables + tile.seq * p.max_blocks;
    if (first_pos < 0) return;  // a context shorter than its new rows (not a step the runtime makes): no keys
  }
  const int64_t tiles = (keys + kFlashKeys - 1) / kFlashKeys;  // >= 1: the tile has rows
  if (threadIdx.x >= kConsumerThreads) {  // the producer warpgroup: one thread's loads
    // Registers to the consumers: ptxas gives a 384-thread block 168 a thread, and a consumer's O,
    // S, P and Q fragments alone are 144 (40 + 2 x 232 of 128 threads fit the 64 K).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x != kConsumerThreads) return;
    // Whole boxes: rows past the matrix arrive as zeros (and are masked, or not stored).
    BarrierExpectBytes(q_full, 2 * kTileBytes);
    LoadTile(qs, &q_map, col, tile.first, q_full);
    LoadTile(qs + kTileBytes, &q_map, col, tile.first + 64, q_full);
    for (int64_t j = 0; j < tiles; ++j) {  // tile j into stage j % kStages once both warpgroups freed it
      const int st = static_cast<int>(j % kStages);
      const unsigned freed = static_cast<unsigned>((j / kStages - 1) & 1);
      if (j >= kStages) BarrierWait(&k_empty[st], freed);
      BarrierExpectBytes(&k_full[st], kTileBytes);
      if constexpr (kPaged) {
        LoadPagedTile(ks + st * kTileBytes, &k_map, kv_col, p, table, j * kFlashKeys, keys, &k_full[st]);
      } else {
        LoadTile(ks + st * kTileBytes, &k_map, kv_col, seg_first + j * kFlashKeys, &k_full[st]);
      }
      if (j >= kStages) BarrierWait(&v_empty[st], freed);
      BarrierExpectBytes(&v_full[st], kTileBytes);
      if constexpr (kPaged) {
        LoadPagedTile(vs + st * kTileBytes, &v_map, kv_col, p, table, j * kFlashKeys, keys, &v_full[st]);
      } else {
        LoadTile(vs + st * kTileBytes, &v_map, kv_col, seg_first + j * kFlashKeys, &v_full[st]);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  // A consumer warpgroup: rows 64 wg .. 64 wg + 63 of the tile. Tile j's stage is j % kStages, its
  // barriers' phase (j / kStages) % 2.
  // The warpgroup index from lane 0, as CUTLASS takes it: the compiler then knows it is the same
  // across the warp, and the loop bounds that depend on it (the causal kernel's unmasked tiles)
  // stay in uniform registers with the descriptors, rather than converted into them every tile.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0), warp_in_wg = warp % 4;
  auto phase = [](int64_t j) { return static_cast<unsigned>((j / kStages) & 1); };
  unsigned qa[kD / 16][4];
  BarrierWait(q_full, 0);
  LoadQFragments(qs + wg * kTileBytes, warp_in_wg, lane, qa);
  float o[64] = {};  // O: rows g, g + 8 of the warp's 16; d = 8j + 2 t4 + {0, 1} at o[4j + 2 half + {0, 1}]
  float s[32];       // S the same way over the tile's 64 keys
  BarrierWait(&k_full[0], 0);
  WgmmaFence();
  IssueScores(s, qa, ks);
  WgmmaCommit();
  WgmmaWaitAll();
  FenceRegisters<32>(s);
  BarrierArrive(&k_empty[0]);
  // Tile 0's probabilities (O is still zero: no correction).
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, correction[2];
  // Each row's last key: causal, its own position (rows g and g + 8 of the warp's 16).
  const int64_t row_pos = first_pos + 64 * wg + 16 * warp_in_wg + lane / 4;
  const int64_t last_key[2] = {kPaged ? row_pos : keys - 1, kPaged ? row_pos + 8 : keys - 1};
  SoftmaxScores<kFlashKeys / 8>(s, row_max, row_sum, correction, 0, last_key, keys, p.scale_log2, t4);

  // Every tile but the last: P of tile kt taken from s (bf16 A fragments), tile kt + 1's S issued
  // into s first (groups finish in order) and P V after it; tile kt + 1's softmax runs while P V does.
  // The last tile apart, so that no branch within the loop leaves ptxas unsure which group a wait
  // retires (it then serialises every wgmma: C7514). Two loops for the same reason: tiles every row
  // of the warpgroup sees whole skip the mask (a compare and a select a score, a quarter of the
  // softmax's instructions), the rest -- a segment's last tile, a causal block's diagonal -- apply it.
  unsigned pa[kFlashKeys / 16][4];
  auto overlapped_tile = [&](int64_t kt, auto masked) {
    const int next_stage = static_cast<int>((kt + 1) % kStages), stage = static_cast<int>(kt % kStages);
    ProbabilityFragments(s, pa);
    BarrierWait(&k_full[next_stage], phase(kt + 1));
    BarrierWait(&v_full[stage], phase(kt));
    WgmmaFence();
    IssueScores(s, qa, ks + next_stage * kTileBytes);
    WgmmaCommit();
    IssueOutput(o, pa, vs + stage * kTileBytes);
    WgmmaCommit();
    WgmmaWait<1>();  // tile kt + 1's S is done; P V may still run
    FenceRegisters<32>(s);
    BarrierArrive(&k_empty[next_stage]);
    SoftmaxScores<kFlashKeys / 8, decltype(masked)::value>(s, row_max, row_sum, correction, (kt + 1) * kFlashKeys,
                                                           last_key, keys, p.scale_log2, t4);
    WgmmaWaitAll();
    FenceRegisters<64>(o);
    BarrierArrive(&v_empty[stage]);
    RescaleOutput<kD / 8>(o, correction);
  };
  // Keys 0 .. whole * 64 - 1 are visible to every row of the warpgroup: at most its first row's last
  // key (causal) and below `keys`.
  const int64_t whole = WholeKeyTiles(kPaged ? first_pos + 64 * wg : keys - 1, keys);
  const int64_t unmasked_end = (whole < tiles ? whole : tiles) - 1;  // iterations kt whose tile kt + 1 is whole
  int64_t kt = 0;
  for (; kt < unmasked_end; ++kt) overlapped_tile(kt, std::false_type{});
  for (; kt + 1 < tiles; ++kt) overlapped_tile(kt, std::true_type{});
  const int64_t last = tiles - 1;
  ProbabilityFragments(s, pa);
  BarrierWait(&v_full[last % kStages], phase(last));
  WgmmaFence();
  IssueOutput(o, pa, vs + (last % kStages) * kTileBytes);
  WgmmaCommit();
  WgmmaWaitAll();
  FenceRegisters<64>(o);

  if (tile.rows <= 64 * wg) return;  // a segment's last tile of 64 rows or fewer: the second warpgroup's are past it
  const int64_t q_stride = static_cast<int64_t>(p.heads) * kD, first = tile.first + 64 * wg;
  StoreFlashRows<kD / 8>(o, row_sum, 16 * warp_in_wg, tile.rows - 64 * wg, lane / 4, t4,
                         p.out + first * q_stride + col, q_stride);
}

}  // namespace

cudaError_t LaunchWgmmaFlashSegment(const bf16* q, const bf16* k, const bf16* v, const int32_t* offsets,
                                    int64_t segments, int64_t rows, int64_t heads, int64_t head_dim, bf16* out,
                                    cudaStream_t stream, int64_t in_stride) {
  if (!WgmmaFlashUsable(q, k, v, rows, heads, head_dim)) return cudaErrorNotSupported;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = FlashGridTiles(rows, segments, kTileRows);
  if (blocks > 0x7fffffff || heads > kMaxGridYZ || rows > 0x7fffffff) return cudaErrorInvalidValue;
  CUtensorMap q_map, k_map, v_map;
  // Within rows in_stride apart (q, k and v as the columns of one packed matrix, or each its own).
  cudaError_t e = EncodeBoxMap(q, rows, heads * kD, 64, &q_map, in_stride);
  if (e == cudaSuccess) e = EncodeBoxMap(k, rows, heads * kD, 64, &k_map, in_stride);
  if (e == cudaSuccess) e = EncodeBoxMap(v, rows, heads * kD, 64, &v_map, in_stride);
  if (e == cudaSuccess) e = AllowLargeSharedMemory<WgmmaFlashKernel<false>, kSmemBytes>();
  if (e != cudaSuccess) return e;
  const WgParams p{offsets, segments, static_cast<int>(heads), ScaleLog2(kD), out};
  return LaunchKernel(WgmmaFlashKernel<false>, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads)),
                      dim3(kThreads), kSmemBytes, stream, p, q_map, k_map, v_map);
}

cudaError_t LaunchWgmmaFlashPaged(const bf16* q, int64_t tokens, int64_t heads, const PagedKv& cache,
                                  const SeqBatch& seqs, bf16* out, cudaStream_t stream) {
  if (!WgmmaFlashPagedUsable(q, heads, cache)) return cudaErrorNotSupported;
  if (tokens == 0) return cudaSuccess;
  const int64_t blocks = FlashGridTiles(tokens, seqs.num_seqs, kTileRows);
  if (seqs.num_seqs <= 0 || blocks > 0x7fffffff || heads > kMaxGridYZ || tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  const int box_rows = PagedBoxRows(cache.block_size);
  const int64_t width = cache.kv_heads * kD;
  CUtensorMap q_map, k_map, v_map;
  cudaError_t e = EncodeBoxMap(q, tokens, heads * kD, 64, &q_map);
  if (e == cudaSuccess) e = EncodeBoxMap(static_cast<const bf16*>(cache.k), cache.slots, width, box_rows, &k_map);
  if (e == cudaSuccess) e = EncodeBoxMap(static_cast<const bf16*>(cache.v), cache.slots, width, box_rows, &v_map);
  if (e == cudaSuccess) e = AllowLargeSharedMemory<WgmmaFlashKernel<true>, kSmemBytes>();
  if (e != cudaSuccess) return e;
  WgParams p{seqs.seq_offsets, seqs.num_seqs, static_cast<int>(heads), ScaleLog2(kD), out};
  p.group = static_cast<int>(heads / cache.kv_heads);
  p.context_lens = seqs.context_lens;
  p.block_tables = seqs.block_tables;
  p.max_blocks = seqs.max_blocks;
  p.block_size = cache.block_size;
  p.box_rows = box_rows;
  p.past_row = cache.slots;  // WgmmaFlashPagedUsable: below 2^31 - 64, so that the box's rows fit TMA's int32
  return LaunchKernel(WgmmaFlashKernel<true>, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads)),
                      dim3(kThreads), kSmemBytes, stream, p, q_map, k_map, v_map);
}

}  // namespace ag::cuda
