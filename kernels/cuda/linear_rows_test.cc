// RowsOf (linear.cuh): the quantized skinny path runs 65-128 rows as 64-row launches of their own,
// each moving every row-indexed pointer of the linear. RopeFrequencies and QkvRopeValid: the
// rotary table the kernels read and the shapes they take. Plain host code: checked on every machine
// that builds the CUDA kernels.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/linear.cuh"
#include "kernels/ref/ref.h"

namespace ag::cuda {
namespace {

TEST(LinearRows, RowsOfMovesEveryRowIndexedPointer) {
  std::vector<__nv_bfloat16> x(1), y(1), residual(1), scratch(1);
  std::vector<int32_t> positions(1), slots(1);
  std::vector<float> staging(1);
  LinearParams p;
  p.x = x.data();
  p.y = y.data();
  p.residual = residual.data();
  p.scratch = scratch.data();
  p.m = 130;
  p.n = 96;
  p.k = 64;
  p.qkv.positions.data = positions.data();
  p.qkv.positions.tokens = 130;
  p.qkv.slots = slots.data();
  p.qkv.kv_staging = staging.data();
  p.qkv.heads = 4;
  p.qkv.kv_heads = 1;
  p.qkv.head_dim = 16;
  for (const Epilogue e : {Epilogue::kNone, Epilogue::kResidual, Epilogue::kSiluMul, Epilogue::kQkvRope}) {
    p.epilogue = e;
    const LinearParams r = RowsOf(p, 64, 2);
    const int64_t y_width = e == Epilogue::kSiluMul ? 48 : e == Epilogue::kQkvRope ? 64 : 96;
    EXPECT_EQ(r.m, 2);
    EXPECT_EQ(r.n, p.n);
    EXPECT_EQ(r.x - p.x, 64 * 64);
    EXPECT_EQ(r.y - p.y, 64 * y_width) << static_cast<int>(e);
    EXPECT_EQ(r.residual - p.residual, 64 * 96);
    EXPECT_EQ(r.scratch - p.scratch, 64 * 64);
    EXPECT_EQ(r.qkv.positions.data - p.qkv.positions.data, 64);
    EXPECT_EQ(r.qkv.positions.tokens, 130) << "M-RoPE's streams keep their stride";
    EXPECT_EQ(r.qkv.slots - p.qkv.slots, 64);
    EXPECT_EQ(r.qkv.kv_staging - p.qkv.kv_staging, 64 * 2 * 16);
  }
  p.residual = nullptr;  // absent pointers stay absent
  p.qkv.kv_staging = nullptr;
  const LinearParams r = RowsOf(p, 64, 2);
  EXPECT_EQ(r.residual, nullptr);
  EXPECT_EQ(r.qkv.kv_staging, nullptr);
}

// The table the kernels rotate with is the CPU reference's inv_freq bit for bit (the GPU's powf
// differed from it in the last place for some pairs), at GLM-4's partial rotary, a full one, and
// past the table, whose pairs stay zero for the device to compute.
TEST(RopeFrequencies, TableIsTheReferencesInvFreq) {
  for (const int rot : {8, 52, 64, 128, 160}) {
    for (const float theta : {10000.0f, 500000.0f, 1e6f}) {
      const RopeFrequencies f = RopeFrequencies::Of(rot, theta);
      std::vector<float> want(rot / 2);
      ref::RotaryInvFreq(rot, theta, want.data());
      EXPECT_EQ(f.rot, rot);
      EXPECT_EQ(f.theta, theta);
      for (int i = 0; i < RopeFrequencies::kTablePairs; ++i) {
        if (i < rot / 2) {
          EXPECT_EQ(f.inv_freq[i], want[i]) << "rot " << rot << " theta " << theta << " pair " << i;
        } else {
          EXPECT_EQ(f.inv_freq[i], 0.0f) << "rot " << rot << " pair " << i;
        }
      }
    }
  }
}

TEST(LinearParams, QkvRopeValidTakesWholeEvenHeads) {
  LinearParams p;
  p.epilogue = Epilogue::kQkvRope;
  p.qkv.heads = 32;
  p.qkv.kv_heads = 2;
  p.qkv.head_dim = 128;
  p.qkv.rope = RopeFrequencies::Of(64, 10000.0f);
  p.n = 36 * 128;
  EXPECT_TRUE(QkvRopeValid(p));
  LinearParams q = p;
  q.n -= 2;  // not whole heads
  EXPECT_FALSE(QkvRopeValid(q));
  q = p;
  q.qkv.rope.rot = 130;  // past the head
  EXPECT_FALSE(QkvRopeValid(q));
  q = p;
  q.qkv.rope.rot = 63;  // odd
  EXPECT_FALSE(QkvRopeValid(q));
  q = p;
  q.qkv.head_dim = 0;  // no channel to divide by
  q.n = 0;
  EXPECT_FALSE(QkvRopeValid(q));
  q = p;  // columns past the epilogue's 32-bit channel math
  q.qkv.heads = 1 << 22;
  q.qkv.head_dim = 1 << 10;
  q.n = static_cast<int64_t>(q.qkv.heads + 4) * q.qkv.head_dim;
  EXPECT_FALSE(QkvRopeValid(q));
}

}  // namespace
}  // namespace ag::cuda
