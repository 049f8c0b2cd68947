// The GLM-4.1V kernels (vision tower, M-RoPE, scattering image rows into the
// embeddings) against kernels/ref on odd sizes, as kernels_test.cc does for the rest.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/vision.cuh"
#include "kernels/ref/ref.h"
#include "tests/gpu/gpu_testing.h"

namespace ag {
namespace {

using testing::Bf16;
using testing::Bf16Array;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::RandomBf16;

constexpr float kAtol = 1e-2f, kRtol = 1e-2f;

// (h, w, grid_h, grid_w) of `rows` patches over grids of 6 x 8 and 4 x 10.
std::vector<int32_t> PatchPositions(int64_t rows) {
  std::vector<int32_t> pos;
  for (int64_t r = 0; r < rows; ++r) {
    const bool first = r < 48;
    const int64_t i = first ? r : r - 48, gw = first ? 8 : 10;
    pos.insert(pos.end(), {static_cast<int32_t>(i / gw), static_cast<int32_t>(i % gw), first ? 6 : 4,
                           static_cast<int32_t>(gw)});
  }
  return pos;
}

TEST(GpuVision, ScatterLayerNormGeluMergeRows) {
  SKIP_WITHOUT_GPU();
  const int64_t tokens = 37, width = 96, m = 5;
  const std::vector<float> x = RandomBf16(tokens * width, 1), src = RandomBf16(m * width, 2);
  const std::vector<int32_t> rows = {3, 4, 5, 30, 36};
  Bf16Array dx(x), dsrc(src), out(tokens * width);
  DeviceArray<int32_t> drows(rows);
  std::vector<float> want(tokens * width);
  ASSERT_CUDA(cuda::LaunchScatterRows(dx.get(), tokens, dsrc.get(), drows.get(), m, width, out.get(), nullptr));
  ref::ScatterRows(x.data(), tokens, src.data(), rows.data(), m, width, want.data());
  ExpectClose(out.Download(), want, 0, 0, "scatter_rows");
  ASSERT_CUDA(cuda::LaunchScatterRows(dx.get(), tokens, dsrc.get(), drows.get(), m, width, dx.get(), nullptr));
  ExpectClose(dx.Download(), want, 0, 0, "scatter_rows in place");

  const std::vector<float> w = RandomBf16(width, 3), b = RandomBf16(width, 4);
  Bf16Array dw(w), db(b), dy(x);
  ASSERT_CUDA(cuda::LaunchLayerNorm(dy.get(), dw.get(), db.get(), tokens, width, 1e-5f, out.get(), nullptr));
  ref::LayerNorm(x.data(), w.data(), b.data(), tokens, width, 1e-5f, want.data());
  ExpectClose(out.Download(), want, kAtol, kRtol, "layer_norm");
  ASSERT_CUDA(cuda::LaunchGelu(dy.get(), tokens * width, out.get(), nullptr));
  ref::Gelu(x.data(), tokens * width, want.data());
  ExpectClose(out.Download(), want, kAtol, kRtol, "gelu");

  const int64_t patches = 36;  // 9 groups of 4
  Bf16Array merged(patches * width);
  ASSERT_CUDA(cuda::LaunchMergeRows(dy.get(), patches, width, 4, merged.get(), nullptr));
  std::vector<float> want_merged(patches * width);
  ref::MergeRows(x.data(), patches, width, 4, want_merged.data());
  ExpectClose(merged.Download(), want_merged, 0, 0, "merge_rows");
}

TEST(GpuVision, PositionEmbeddingRotaryAttention) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 88, heads = 3;  // two images: 48 and 40 patches
  for (int64_t head_dim : {16, 40, 128}) {  // 16 and 128 on the flash kernel, 40 on the FMA kernel
    const int64_t width = heads * head_dim, side = 5;
    const std::vector<int32_t> pos = PatchPositions(rows);
    DeviceArray<int32_t> dpos(pos);
    const std::vector<float> x = RandomBf16(rows * width, 5), table = RandomBf16(side * side * width, 6);
    Bf16Array dx(x), dtable(table), out(rows * width);
    std::vector<float> want(rows * width);
    ASSERT_CUDA(cuda::LaunchVisionPosEmbed(dx.get(), dtable.get(), side, dpos.get(), rows, width, out.get(), nullptr));
    ref::VisionPosEmbed(x.data(), table.data(), side, pos.data(), rows, width, want.data());
    ExpectClose(out.Download(), want, kAtol, kRtol, "vision_pos_embed");
    ASSERT_CUDA(cuda::LaunchVisionRotary(dx.get(), dpos.get(), rows, heads, head_dim, 10000.0f, out.get(), nullptr));
    ref::VisionRotary(x.data(), pos.data(), rows, heads, head_dim, 10000.0f, want.data());
    ExpectClose(out.Download(), want, kAtol, kRtol, "vision_rotary");

    const std::vector<float> k = RandomBf16(rows * width, 7), v = RandomBf16(rows * width, 8);
    Bf16Array dk(k), dv(v);
    const std::vector<int32_t> offsets = {0, 48, 88};
    DeviceArray<int32_t> doff(offsets);
    ASSERT_CUDA(cuda::LaunchSegmentAttention(dx.get(), dk.get(), dv.get(), doff.get(), 2, rows, heads, head_dim,
                                             out.get(), nullptr));
    ref::SegmentAttention(x.data(), k.data(), v.data(), offsets.data(), 2, heads, head_dim, want.data());
    ExpectClose(out.Download(), want, kAtol, kRtol, "segment_attention");
  }
}

// Segments of several 64-row tiles and keys, one of a single row: the flash kernel's tiles and masks.
TEST(GpuVision, FlashSegmentAttention) {
  SKIP_WITHOUT_GPU();
  const std::vector<int32_t> offsets = {0, 200, 201, 333, 461};
  const int64_t rows = offsets.back(), segments = 4, heads = 2;
  for (int64_t head_dim : {64, 128}) {
    const int64_t width = heads * head_dim;
    const std::vector<float> q = RandomBf16(rows * width, 21), k = RandomBf16(rows * width, 22),
                             v = RandomBf16(rows * width, 23);
    Bf16Array dq(q), dk(k), dv(v), out(rows * width);
    DeviceArray<int32_t> doff(offsets);
    ASSERT_CUDA(cuda::LaunchSegmentAttention(dq.get(), dk.get(), dv.get(), doff.get(), segments, rows, heads,
                                             head_dim, out.get(), nullptr));
    std::vector<float> want(rows * width);
    ref::SegmentAttention(q.data(), k.data(), v.data(), offsets.data(), segments, heads, head_dim, want.data());
    ExpectClose(out.Download(), want, kAtol, kRtol, "flash segment_attention d=" + std::to_string(head_dim));
  }
}

// The wgmma flash kernel itself (on Hopper; LaunchSegmentAttention takes it there), in 128-row
// blocks of two warpgroups: a segment of 1,000 rows (16 key tiles: the rings of four stages refilled
// four times, the barriers' phases turning; its last block 104 rows, the second warpgroup's 40), one
// of a single row, of 129 (a block of one row), 170, 64 (the second warpgroup stores nothing) and
// 65; three heads.
TEST(GpuVision, WgmmaFlashSegmentAttention) {
  SKIP_WITHOUT_GPU();
  const std::vector<int32_t> offsets = {0, 1000, 1001, 1130, 1300, 1364, 1429};
  const int64_t rows = offsets.back(), segments = 6, heads = 3, head_dim = 128, width = heads * head_dim;
  const std::vector<float> q = RandomBf16(rows * width, 31), k = RandomBf16(rows * width, 32),
                           v = RandomBf16(rows * width, 33);
  Bf16Array dq(q), dk(k), dv(v), out(rows * width);
  if (!cuda::WgmmaFlashUsable(dq.get(), dk.get(), dv.get(), rows, heads, head_dim)) {
    GTEST_SKIP() << "not a Hopper device (or AUTOGLM_WGMMA_FLASH=0)";
  }
  DeviceArray<int32_t> doff(offsets);
  ASSERT_CUDA(cuda::LaunchWgmmaFlashSegment(dq.get(), dk.get(), dv.get(), doff.get(), segments, rows, heads, head_dim,
                                            out.get(), nullptr));
  std::vector<float> want(rows * width);
  ref::SegmentAttention(q.data(), k.data(), v.data(), offsets.data(), segments, heads, head_dim, want.data());
  ExpectClose(out.Download(), want, kAtol, kRtol, "wgmma flash segment_attention");
}

// The vision tower's fused attention (fuse's vision-qkv-attention): a packed [q | k | v] matrix,
// q's and k's heads rotated in place with row strides, then attention reading the three column
// blocks with a row stride, on every kernel: the FMA one (40), mma.sync flash (64), wgmma flash (128).
TEST(GpuVision, PackedQkvRotaryInPlaceAndAttention) {
  SKIP_WITHOUT_GPU();
  const std::vector<int32_t> offsets = {0, 48, 88};
  const int64_t rows = offsets.back(), heads = 3;
  for (int64_t head_dim : {40, 64, 128}) {
    const int64_t width = heads * head_dim, packed = 3 * width;
    const std::vector<int32_t> pos = PatchPositions(rows);
    DeviceArray<int32_t> dpos(pos), doff(offsets);
    const std::vector<float> qkv = RandomBf16(rows * packed, 41);
    Bf16Array dqkv(qkv), out(rows * width);
    ASSERT_CUDA(cuda::LaunchVisionRotary(dqkv.get(), dpos.get(), rows, 2 * heads, head_dim, 10000.0f, dqkv.get(), nullptr,
                                         packed, packed));
    std::vector<float> rotated = qkv;
    ref::VisionRotaryRows(qkv.data(), packed, pos.data(), rows, 2 * heads, head_dim, 10000.0f, rotated.data(), packed);
    ExpectClose(dqkv.Download(), rotated, kAtol, kRtol, "packed rotary d=" + std::to_string(head_dim));
    // Attention from the device's rotated values (rounded to bf16), as the plan runs it.
    const std::vector<float> device_rotated = dqkv.Download();
    ASSERT_CUDA(cuda::LaunchSegmentAttention(dqkv.get(), dqkv.get() + width, dqkv.get() + 2 * width, doff.get(), 2,
                                             rows, heads, head_dim, out.get(), nullptr, packed));
    std::vector<float> want(rows * width);
    ref::SegmentAttention(device_rotated.data(), device_rotated.data() + width, device_rotated.data() + 2 * width,
                          offsets.data(), 2, heads, head_dim, want.data(), packed);
    ExpectClose(out.Download(), want, kAtol, kRtol, "packed segment_attention d=" + std::to_string(head_dim));
  }
}

TEST(GpuVision, MRopeStreamsAndTheTextRope) {
  SKIP_WITHOUT_GPU();
  const int64_t tokens = 19, heads = 4, head_dim = 32, rot = 16;
  const std::vector<float> x = RandomBf16(tokens * heads * head_dim, 9);
  std::vector<int32_t> streams(3 * tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    streams[t] = static_cast<int32_t>(5 + t);
    streams[tokens + t] = static_cast<int32_t>(5 + t / 3);
    streams[2 * tokens + t] = static_cast<int32_t>(7 + t % 3);
  }
  DeviceArray<int32_t> dstreams(streams);
  Bf16Array dx(x), out(x.size());
  ASSERT_CUDA(cuda::LaunchRotary(dx.get(), {dstreams.get(), tokens, true, 2, 5}, tokens, heads, head_dim, rot, 10000.0f,
                                 out.get(), nullptr));
  std::vector<float> want(x.size());
  ref::Rotary(x.data(), {streams.data(), tokens, true, 2, 5}, tokens, heads, head_dim, rot, 10000.0f, want.data());
  ExpectClose(out.Download(), want, kAtol, kRtol, "M-RoPE");
}

}  // namespace
}  // namespace ag
