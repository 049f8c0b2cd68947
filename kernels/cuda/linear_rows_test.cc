// RowsOf (linear.cuh): the quantized skinny path runs 65-128 rows as 64-row launches of their own,
// each moving every row-indexed pointer of the linear. Plain host code: checked on every machine
// that builds the CUDA kernels.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/linear.cuh"

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

}  // namespace
}  // namespace ag::cuda
