// Every CUDA kernel against kernels/ref on odd sizes (the quantized linear's in
// quant_kernels_test.cc). Inputs are bf16 values; the reference computes in fp32
// from the same values. Tolerances: an output stored in bf16 is within 2^-8
// relative of the exact value, accumulation order adds a little: atol 1e-2,
// rtol 1e-2 unless a case says otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/vocab.cuh"
#include "kernels/ref/quant.h"
#include "kernels/ref/ref.h"
#include "runtime/weights.h"
#include "tests/gpu/gpu_testing.h"

namespace ag {
namespace {

using testing::Bf16;
using testing::Bf16Array;
using testing::DeviceArray;
using testing::ExpectClose;
using testing::RandomBf16;

constexpr float kAtol = 1e-2f, kRtol = 1e-2f;

TEST(GpuKernels, Embedding) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 31, hidden = 72, tokens = 17;
  const std::vector<float> table = RandomBf16(vocab * hidden, 1);
  std::vector<int32_t> ids(tokens);
  for (int64_t t = 0; t < tokens; ++t) ids[t] = static_cast<int32_t>((t * 7) % vocab);
  Bf16Array d_table(table), d_out(tokens * hidden);
  DeviceArray<int32_t> d_ids(ids);
  ASSERT_CUDA(cuda::LaunchEmbedding(d_ids.get(), tokens, d_table.get(), hidden, d_out.get(), nullptr));
  std::vector<float> want(tokens * hidden);
  ref::Embedding(ids.data(), tokens, table.data(), hidden, want.data());
  ExpectClose(d_out.Download(), want, 0, 0, "embedding");
}

TEST(GpuKernels, NormFamily) {
  SKIP_WITHOUT_GPU();
  for (int64_t rows : {1, 17, 97}) {
    for (int64_t n : {64, 200, 4096}) {
      const std::vector<float> x = RandomBf16(rows * n, 2), r = RandomBf16(rows * n, 3), w = RandomBf16(n, 4);
      Bf16Array dx(x), dr(r), dw(w), out(rows * n), sum(rows * n);
      std::vector<float> want(rows * n), want_sum(rows * n);
      ASSERT_CUDA(cuda::LaunchRmsNorm(dx.get(), dw.get(), rows, n, 1e-5f, out.get(), nullptr));
      ref::RmsNorm(x.data(), w.data(), rows, n, 1e-5f, want.data());
      ExpectClose(out.Download(), want, kAtol, kRtol, "rms_norm");
      // In place over the residual.
      ASSERT_CUDA(cuda::LaunchRmsNormResidual(dx.get(), dw.get(), dr.get(), rows, n, 1e-5f, dr.get(), nullptr));
      ref::RmsNormResidual(x.data(), w.data(), r.data(), rows, n, 1e-5f, want.data());
      ExpectClose(dr.Download(), want, kAtol, kRtol, "rms_norm_residual");
      dr.Upload(r);
      ASSERT_CUDA(cuda::LaunchAddRmsNorm(dx.get(), dr.get(), dw.get(), rows, n, 1e-5f, sum.get(), out.get(), nullptr));
      ref::AddRmsNorm(x.data(), r.data(), w.data(), rows, n, 1e-5f, want_sum.data(), want.data());
      ExpectClose(sum.Download(), want_sum, kAtol, kRtol, "add_rms_norm sum");
      ExpectClose(out.Download(), want, kAtol, kRtol, "add_rms_norm normed");
    }
  }
}

TEST(GpuKernels, ElementwiseSliceGather) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1001;
  const std::vector<float> a = RandomBf16(n, 5), b = RandomBf16(n, 6);
  Bf16Array da(a), db(b), out(n);
  std::vector<float> want(n);
  ASSERT_CUDA(cuda::LaunchBinary(cuda::Binary::kAdd, da.get(), db.get(), n, out.get(), nullptr));
  ref::Add(a.data(), b.data(), n, want.data());
  ExpectClose(out.Download(), Bf16(want), 0, 0, "add");
  ASSERT_CUDA(cuda::LaunchBinary(cuda::Binary::kMul, da.get(), db.get(), n, out.get(), nullptr));
  ref::Mul(a.data(), b.data(), n, want.data());
  ExpectClose(out.Download(), Bf16(want), 0, 0, "mul");
  ASSERT_CUDA(cuda::LaunchSilu(da.get(), n, out.get(), nullptr));
  ref::Silu(a.data(), n, want.data());
  ExpectClose(out.Download(), want, kAtol, kRtol, "silu");

  const int64_t rows = 17, cols = 97;
  const std::vector<float> x = RandomBf16(rows * cols, 7);
  Bf16Array dx(x), sliced(rows * 40), gathered(5 * cols);
  ASSERT_CUDA(cuda::LaunchSliceColumns(dx.get(), rows, cols, 13, 40, sliced.get(), nullptr));
  std::vector<float> want_slice(rows * 40);
  ref::SliceColumns(x.data(), rows, cols, 13, 40, want_slice.data());
  ExpectClose(sliced.Download(), want_slice, 0, 0, "slice");
  const std::vector<int32_t> pick = {16, 0, 3, 3, 9};
  DeviceArray<int32_t> dpick(pick);
  ASSERT_CUDA(cuda::LaunchGatherRows(dx.get(), dpick.get(), 5, cols, gathered.get(), nullptr));
  std::vector<float> want_gather(5 * cols);
  ref::GatherRows(x.data(), pick.data(), 5, cols, want_gather.data());
  ExpectClose(gathered.Download(), want_gather, 0, 0, "gather_rows");
}

TEST(GpuKernels, RotaryAndKvCacheWrite) {
  SKIP_WITHOUT_GPU();
  const int64_t tokens = 17, heads = 3, head_dim = 16;
  const std::vector<float> x = RandomBf16(tokens * heads * head_dim, 8);
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t * 37 + 5);
  for (int64_t rot : {8, 16}) {
    Bf16Array dx(x), out(x.size());
    DeviceArray<int32_t> dpos(pos);
    ASSERT_CUDA(cuda::LaunchRotary(dx.get(), {dpos.get(), tokens}, tokens, heads, head_dim, rot, 10000.0f, out.get(),
                                   nullptr));
    std::vector<float> want(x.size());
    ref::Rotary(x.data(), {pos.data(), tokens}, tokens, heads, head_dim, rot, 10000.0f, want.data());
    ExpectClose(out.Download(), want, kAtol, kRtol, "rotary");
  }
  for (int64_t block : {1, 16}) {
    const int64_t kv_heads = 2, width = kv_heads * head_dim, blocks = 40;
    const std::vector<float> k = RandomBf16(tokens * width, 9), v = RandomBf16(tokens * width, 10);
    std::vector<int32_t> slots(tokens);
    for (int64_t t = 0; t < tokens; ++t) slots[t] = t == 4 ? -1 : static_cast<int32_t>((t * 13) % (blocks * block));
    Bf16Array dk(k), dv(v), kc(blocks * block * width), vc(blocks * block * width);
    cudaMemset(kc.get(), 0, kc.size() * 2);
    cudaMemset(vc.get(), 0, vc.size() * 2);
    DeviceArray<int32_t> ds(slots);
    const cuda::PagedKv cache{kc.get(), vc.get(), block, kv_heads, head_dim};
    ASSERT_CUDA(cuda::LaunchKvCacheWrite(dk.get(), dv.get(), ds.get(), tokens, cache, nullptr));
    std::vector<float> want_k(kc.size(), 0.0f), want_v(vc.size(), 0.0f);
    ref::KvCacheWrite(k.data(), v.data(), slots.data(), tokens,
                      {want_k.data(), want_v.data(), blocks, block, kv_heads, head_dim});
    ExpectClose(kc.Download(), want_k, 0, 0, "kv write k");
    ExpectClose(vc.Download(), want_v, 0, 0, "kv write v");
  }
}

// ---- linear: every epilogue, with and without the norm prologue, GEMV and GEMM ----

struct LinearCase {
  int64_t m, n, k;
  cuda::Epilogue epilogue;
  bool norm;
};

// kSkinny: LaunchSkinny (the staged kernel to 32 rows), kSkinnyRegisters: the register-fed skinny
// kernel; kGemm: the wgmma GEMM on Hopper (LaunchGemm), kGemmMmaSync: the mma.sync one; kGemm192 and
// kGemmWide: the wgmma GEMM's 192- and 256-wide tiles, whatever the shape would choose.
enum class Path { kGemv, kSkinny, kSkinnyRegisters, kGemm, kGemmMmaSync, kGemm128, kGemm192, kGemmWide };

void CheckLinear(const LinearCase& c, Path path) {
  SCOPED_TRACE(::testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k << " epilogue="
                                    << static_cast<int>(c.epilogue) << " norm=" << c.norm
                                    << " path=" << static_cast<int>(path));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.k));
  const std::vector<float> x = RandomBf16(c.m * c.k, 11), w = RandomBf16(c.n * c.k, 12, scale),
                           nw = RandomBf16(c.k, 13), bias = RandomBf16(c.n, 14), res = RandomBf16(c.m * c.n, 15);
  // The input of the matrix product, as the reference sees it.
  std::vector<float> h = x;
  // Where the kernel applies the norm itself (the GEMV; the staged skinny kernel, LaunchSkinny's to
  // kStagedSkinnyMaxRows rows; the register-fed one to kSkinnyNormMaxRows) the normalised rows never
  // exist in bf16; elsewhere a launch of its own writes them in bf16, as transformers' RMSNorm does:
  // round them here too (unrounded, a SiLU gate of 3 on an `up` that cancels to 0.01 amplifies the
  // difference past 1e-2).
  if (c.norm) {
    ref::RmsNorm(x.data(), nw.data(), c.m, c.k, 1e-5f, h.data());
    const bool in_kernel = path == Path::kGemv || (path == Path::kSkinny && c.m <= cuda::kStagedSkinnyMaxRows) ||
                           (path == Path::kSkinnyRegisters && c.m <= cuda::kSkinnyNormMaxRows);
    if (!in_kernel) h = Bf16(h);
  }
  std::vector<float> full(c.m * c.n);
  ref::Linear(h.data(), w.data(), nullptr, c.m, c.k, c.n, full.data());

  std::vector<float> w_device = w;
  if (c.epilogue == cuda::Epilogue::kSiluMul) {  // rows interleaved as the backend uploads them
    for (int64_t r = 0; r < c.n; ++r) {
      std::copy(w.begin() + r * c.k, w.begin() + (r + 1) * c.k,
                w_device.begin() + cuda::InterleavedGateUpRow(r, c.n / 2) * c.k);
    }
  }
  Bf16Array dx(x), dw(w_device), dnw(nw), db(bias), dr(res), scratch(c.m * c.k);
  cuda::LinearParams p;
  p.x = dx.get();
  p.w = dw.get();
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.norm_w = c.norm ? dnw.get() : nullptr;
  p.eps = 1e-5f;
  p.epilogue = c.epilogue;
  p.scratch = scratch.get();
  auto launch = [&] {
    switch (path) {
      case Path::kGemv:
        return cuda::LaunchGemv(p, nullptr);
      case Path::kSkinny:
        return cuda::LaunchSkinny(p, nullptr);
      case Path::kSkinnyRegisters:
        return cuda::LaunchSkinnyRegisters(p, nullptr);
      case Path::kGemm:
        return cuda::LaunchGemm(p, nullptr);
      case Path::kGemmMmaSync:
        return cuda::LaunchGemmMmaSync(p, nullptr);
      case Path::kGemm128:
        return cuda::LaunchGemmTileColumns(p, 128, nullptr);
      case Path::kGemm192:
        return cuda::LaunchGemmTileColumns(p, 192, nullptr);
      case Path::kGemmWide:
        return cuda::LaunchGemmTileColumns(p, 256, nullptr);
    }
    return cudaErrorInvalidValue;
  };

  switch (c.epilogue) {
    case cuda::Epilogue::kNone:
    case cuda::Epilogue::kBias: {
      Bf16Array y(c.m * c.n);
      p.y = y.get();
      p.bias = c.epilogue == cuda::Epilogue::kBias ? db.get() : nullptr;
      ASSERT_CUDA(launch());
      std::vector<float> want = full;
      if (p.bias != nullptr) {
        for (int64_t i = 0; i < c.m * c.n; ++i) want[i] += bias[i % c.n];
      }
      ExpectClose(y.Download(), want, kAtol, kRtol, "linear");
      break;
    }
    case cuda::Epilogue::kResidual: {
      p.y = dr.get();  // in place over the residual
      p.residual = dr.get();
      ASSERT_CUDA(launch());
      std::vector<float> want(c.m * c.n);
      ref::Add(res.data(), full.data(), c.m * c.n, want.data());
      ExpectClose(dr.Download(), want, kAtol, kRtol, "linear_residual");
      break;
    }
    case cuda::Epilogue::kSiluMul: {
      const int64_t inter = c.n / 2;
      Bf16Array y(c.m * inter);
      p.y = y.get();
      ASSERT_CUDA(launch());
      std::vector<float> gate(c.m * inter), up(c.m * inter), want(c.m * inter);
      ref::SliceColumns(full.data(), c.m, c.n, 0, inter, gate.data());
      ref::SliceColumns(full.data(), c.m, c.n, inter, inter, up.data());
      ref::Silu(gate.data(), c.m * inter, gate.data());
      ref::Mul(gate.data(), up.data(), c.m * inter, want.data());
      ExpectClose(y.Download(), want, kAtol, kRtol, "gate_up_silu");
      break;
    }
    case cuda::Epilogue::kQkvRope:
      // One position stream, and M-RoPE's three (GLM-4.1V's decoder), the pairs in three sections:
      // M-RoPE at the shorter K only (the epilogue does not depend on K; the reference is the cost).
      for (const bool mrope : {false, true}) {
        if (mrope && c.k > 1024) break;
        SCOPED_TRACE(mrope ? "M-RoPE" : "one position stream");
        const int heads = 3, kv_heads = 1, head_dim = static_cast<int>(c.n / 5), rot = head_dim / 2;
        // A slot a row (t * 7 modulo a power of two: a permutation), so no two rows race for one.
        const int64_t block = 4, blocks = std::max<int64_t>(64, std::bit_ceil(static_cast<uint64_t>(c.m)) / block);
        const int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim;
        std::vector<int32_t> pos(3 * c.m), slots(c.m);
        for (int64_t t = 0; t < c.m; ++t) {
          pos[t] = static_cast<int32_t>(3 * t + 1);
          pos[c.m + t] = static_cast<int32_t>(2 * t + 5);
          pos[2 * c.m + t] = static_cast<int32_t>(t + 7);
          slots[t] = t == 1 ? -1 : static_cast<int32_t>((t * 7) % (blocks * block));
        }
        DeviceArray<int32_t> dpos(pos), dslots(slots);
        const int section0 = rot / 8, section1 = rot / 4;  // of rot / 2 pairs
        const ref::RotaryPositions positions{pos.data(), c.m, mrope, section0, section1};
        Bf16Array q(c.m * q_width), kc(blocks * block * kv_width), vc(blocks * block * kv_width);
        cudaMemset(kc.get(), 0, kc.size() * 2);
        cudaMemset(vc.get(), 0, vc.size() * 2);
        p.y = q.get();
        p.bias = db.get();
        p.qkv = {{dpos.get(), c.m, mrope, section0, section1}, dslots.get(), {kc.get(), vc.get(), block, kv_heads, head_dim},
                 heads, kv_heads, head_dim, cuda::RopeFrequencies::Of(rot, 10000.0f)};
        ASSERT_CUDA(launch());
        std::vector<float> wq(q_width * c.k), wk(kv_width * c.k), wv(kv_width * c.k);
        std::vector<float> want_q(c.m * q_width), k(c.m * kv_width), v(c.m * kv_width);
        std::vector<float> want_kc(kc.size(), 0.0f), want_vc(vc.size(), 0.0f);
        if (c.norm) {
          ref::NormQkvRope(x.data(), nw.data(), w.data(), bias.data(), positions, c.m, c.k, 1e-5f, heads, kv_heads,
                           head_dim, rot, 10000.0f, want_q.data(), k.data(), v.data());
        } else {
          std::vector<float> qkv(c.m * c.n);
          ref::Linear(x.data(), w.data(), bias.data(), c.m, c.k, c.n, qkv.data());
          ref::SliceColumns(qkv.data(), c.m, c.n, 0, q_width, want_q.data());
          ref::SliceColumns(qkv.data(), c.m, c.n, q_width, kv_width, k.data());
          ref::SliceColumns(qkv.data(), c.m, c.n, q_width + kv_width, kv_width, v.data());
          ref::Rotary(want_q.data(), positions, c.m, heads, head_dim, rot, 10000.0f, want_q.data());
          ref::Rotary(k.data(), positions, c.m, kv_heads, head_dim, rot, 10000.0f, k.data());
        }
        ref::KvCacheWrite(k.data(), v.data(), slots.data(), c.m,
                          {want_kc.data(), want_vc.data(), blocks, block, kv_heads, head_dim});
        ExpectClose(q.Download(), want_q, kAtol, kRtol, "qkv q");
        ExpectClose(kc.Download(), want_kc, kAtol, kRtol, "qkv k cache");
        ExpectClose(vc.Download(), want_vc, kAtol, kRtol, "qkv v cache");
      }
      break;
  }
}

TEST(GpuKernels, LinearEveryEpilogueEveryPath) {
  SKIP_WITHOUT_GPU();
  const cuda::Epilogue epilogues[] = {cuda::Epilogue::kNone, cuda::Epilogue::kBias, cuda::Epilogue::kResidual,
                                      cuda::Epilogue::kSiluMul, cuda::Epilogue::kQkvRope};
  for (cuda::Epilogue e : epilogues) {
    for (bool norm : {false, true}) {
      for (int64_t m : {1, 3, 9, 17, 64, 97}) {
        for (int64_t k : {64, 200, 4104}) {
          // n: 80 (q+2kv = 5 heads of 16), 160 for the pairs; 97 (odd) for the plain epilogues.
          const bool pairs = e == cuda::Epilogue::kSiluMul || e == cuda::Epilogue::kQkvRope;
          for (int64_t n : pairs ? std::vector<int64_t>{80, 160} : std::vector<int64_t>{97, 160}) {
            if (m <= 3) CheckLinear({m, n, k, e, norm}, Path::kGemv);  // any M works; M = 1 is its job
            if (m <= cuda::kSkinnyMaxRows) CheckLinear({m, n, k, e, norm}, Path::kSkinny);
            // The register-fed kernel (measured in run 3 at every epilogue) at two of its tile counts.
            if (m == 3 || m == 17) CheckLinear({m, n, k, e, norm}, Path::kSkinnyRegisters);
            CheckLinear({m, n, k, e, norm}, Path::kGemm);
            CheckLinear({m, n, k, e, norm}, Path::kGemmMmaSync);
            if (m == 9 || m == 97) {  // the other tile widths, on fewer shapes (the reference is the cost)
              CheckLinear({m, n, k, e, norm}, Path::kGemm192);
              CheckLinear({m, n, k, e, norm}, Path::kGemmWide);
            }
          }
        }
      }
    }
  }
}

// The sandwich norm folded into the GEMV (LinearParams::pre, residual_norm_gate_up_silu at one row):
// h = residual + rms_norm(y) * w1, rounded to bf16 and written (the new residual stream), then the
// linear's norm prologue on h, against the unfused pair's reference; several rows (the GEMV loops
// over them), K below, at and past one 8-column piece a thread, two epilogues.
TEST(GpuKernels, SandwichNormFoldedIntoTheGemv) {
  SKIP_WITHOUT_GPU();
  for (const cuda::Epilogue e : {cuda::Epilogue::kSiluMul, cuda::Epilogue::kNone}) {
    for (const int64_t m : {1, 3}) {
      for (const int64_t k : {64, 200, 4104}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << k << " epilogue=" << static_cast<int>(e));
        const int64_t n = 160;
        const std::vector<float> y = RandomBf16(m * k, 31, 3.0f), res = RandomBf16(m * k, 32), w1 = RandomBf16(k, 33),
                                 nw = RandomBf16(k, 34), w = RandomBf16(n * k, 35, 1.0f / std::sqrt(static_cast<float>(k)));
        std::vector<float> h(m * k), normed(m * k), full(m * n);
        ref::RmsNormResidual(y.data(), w1.data(), res.data(), m, k, 1e-6f, h.data());
        h = Bf16(h);  // stored as rms_norm_residual stores it
        ref::RmsNorm(h.data(), nw.data(), m, k, 1e-5f, normed.data());
        ref::Linear(normed.data(), w.data(), nullptr, m, k, n, full.data());
        std::vector<float> w_device = w;
        if (e == cuda::Epilogue::kSiluMul) {
          for (int64_t r = 0; r < n; ++r) {
            std::copy(w.begin() + r * k, w.begin() + (r + 1) * k, w_device.begin() + cuda::InterleavedGateUpRow(r, n / 2) * k);
          }
        }
        const int64_t width = e == cuda::Epilogue::kSiluMul ? n / 2 : n;
        Bf16Array dy(y), dres(res), dw1(w1), dnw(nw), dw(w_device), dh(m * k), out(m * width);
        cuda::LinearParams p;
        p.w = dw.get();
        p.m = m;
        p.n = n;
        p.k = k;
        p.norm_w = dnw.get();
        p.eps = 1e-5f;
        p.epilogue = e;
        p.y = out.get();
        p.pre = {dy.get(), dw1.get(), dres.get(), 1e-6f, dh.get()};
        ASSERT_CUDA(cuda::LaunchGemv(p, nullptr));
        ExpectClose(dh.Download(), h, kAtol, kRtol, "h");
        std::vector<float> want = full;
        if (e == cuda::Epilogue::kSiluMul) {
          std::vector<float> gate(m * width), up(m * width);
          ref::SliceColumns(full.data(), m, n, 0, width, gate.data());
          ref::SliceColumns(full.data(), m, n, width, width, up.data());
          ref::Silu(gate.data(), m * width, gate.data());
          want.resize(m * width);
          ref::Mul(gate.data(), up.data(), m * width, want.data());
        }
        ExpectClose(out.Download(), want, kAtol, kRtol, "output");
        // Only the GEMV computes a pre-norm; the other paths refuse one rather than read x.
        EXPECT_EQ(cuda::LaunchSkinny(p, nullptr), cudaErrorInvalidValue);
        p.norm_w = nullptr;
        EXPECT_EQ(cuda::LaunchGemv(p, nullptr), cudaErrorInvalidValue);
      }
    }
  }
}

// The wgmma GEMM's edges: row tiles of 128 (one row past, several), columns past a 128-wide tile,
// K below, at and past its 64-wide TMA boxes, and short grids that split K over a cluster (K = 4104:
// 65 k-tiles, the last rank's box half out of bounds); every epilogue.
TEST(GpuKernels, WgmmaGemmEdges) {
  SKIP_WITHOUT_GPU();
  for (int64_t m : {65, 128, 129, 300}) {
    for (int64_t k : {8, 64, 200, 4104}) {
      CheckLinear({m, 97, k, cuda::Epilogue::kNone, false}, Path::kGemm);
      CheckLinear({m, 257, k, cuda::Epilogue::kResidual, true}, Path::kGemm);
      CheckLinear({m, 160, k, cuda::Epilogue::kSiluMul, k % 2 == 0}, Path::kGemm);
      CheckLinear({m, 80, k, cuda::Epilogue::kQkvRope, true}, Path::kGemm);
      CheckLinear({m, 130, k, cuda::Epilogue::kBias, false}, Path::kGemm);
    }
  }
  // The 192- and 256-wide tiles: N within one tile (97), past one with W's last boxes wholly out of
  // bounds (257), past two (520 for the pairs); row tiles of 128 and past, K split or not.
  for (const auto& [m, k] : {std::pair<int64_t, int64_t>{65, 4104}, {129, 64}, {300, 200}}) {
    for (Path path : {Path::kGemm192, Path::kGemmWide}) {
      for (int64_t n : {97, 257}) CheckLinear({m, n, k, cuda::Epilogue::kResidual, k % 2 == 0}, path);
      CheckLinear({m, 520, k, cuda::Epilogue::kSiluMul, false}, path);
      CheckLinear({m, 520, k, cuda::Epilogue::kQkvRope, true}, path);
    }
  }
}

// The persistent wgmma GEMM (WgTiles): grids of more tiles than multiprocessors, so a block walks
// two tiles with its ring of stages running on from one into the next -- 9 row tiles (one past a
// group of GroupedGemmTile's 8) by 17 column tiles, 3 k-tiles each; and 2 by 67, 6 k-tiles each on
// 5 stages (4 at 256 wide), so the ring wraps within a tile; the last column tile partial. Short K
// keeps the grid unsplit (SplitWgmmaK wants 4 k-tiles a rank). Every tile width, the pair epilogues.
TEST(GpuKernels, WgmmaGemmPersistentBlocks) {
  SKIP_WITHOUT_GPU();
  const std::pair<Path, int64_t> widths[] = {{Path::kGemm128, 128}, {Path::kGemm192, 192}, {Path::kGemmWide, 256}};
  for (const auto& [path, width] : widths) {
    // Column counts a multiple of 20 (kQkvRope: five heads of an even head_dim with an even rot).
    const int64_t tall = 17 * width / 20 * 20, wide = 67 * width / 20 * 20;
    CheckLinear({1100, tall, 136, cuda::Epilogue::kResidual, true}, path);
    CheckLinear({200, wide, 328, cuda::Epilogue::kQkvRope, true}, path);
    CheckLinear({200, wide, 328, cuda::Epilogue::kSiluMul, false}, path);
  }
  CheckLinear({200, 67 * 128 - 3, 328, cuda::Epilogue::kBias, false}, Path::kGemm128);
  CheckLinear({1100, 17 * 128 - 5, 136, cuda::Epilogue::kNone, false}, Path::kGemm128);
}

// The skinny (swap-AB) kernel at every M it takes (the staged one: one, two, four and eight
// n-tiles), odd M, odd N and K at the edges of its 64-wide k-tiles and of the cluster split (K =
// 4104 over N = 4097: 65 k-tiles on 8 ranks, the last rank's two tiles, the second 8 wide).
void CheckSkinnyBatches(Path path, int big_every) {
  for (int64_t m = 1; m <= cuda::kSkinnyMaxRows; ++m) {
    CheckLinear({m, 97, 200, cuda::Epilogue::kBias, m % 2 == 0}, path);
    if (m % big_every == 1 || m == cuda::kSkinnyMaxRows) {
      CheckLinear({m, 4097, 4104, cuda::Epilogue::kResidual, true}, path);  // an 8-way K split
      CheckLinear({m, 160, 40, cuda::Epilogue::kSiluMul, false}, path);     // K: one chunk and a piece
      CheckLinear({m, 80, 8, cuda::Epilogue::kQkvRope, true}, path);        // K = 8: one piece
    }
  }
}

TEST(GpuKernels, SkinnyEveryBatchSize) {
  SKIP_WITHOUT_GPU();
  CheckSkinnyBatches(Path::kSkinny, 7);
}

// The register-fed skinny kernel (AUTOGLM_SKINNY_STAGED=0, and the quantized paths' kernel): its
// 32-wide chunks' edges, fewer of the large cases (a test of its own: a stall limit counts a test's
// silence).
TEST(GpuKernels, SkinnyRegistersEveryBatchSize) {
  SKIP_WITHOUT_GPU();
  CheckSkinnyBatches(Path::kSkinnyRegisters, 21);
}

// ---- paged attention: GQA groups that are not powers of two, block sizes 1 and 16,
// contexts crossing block edges, one batch mixing prefill chunks and decode tokens ----

// An 8-bit cache (code fp8 or int8) is filled by LaunchKvQuantize from the same values, and the
// reference attends over what ref::RoundTripKvRows gives back for them.
struct AttentionBatch {
  std::vector<int32_t> new_tokens, context;
};
// Sequence 0: a 5-token prompt (prefill). 1: one decode token at context 37. 2: a 3-token chunk at context 20.
// Few rows a sequence: the slice kernel.
const AttentionBatch kDecodeBatch = {{5, 1, 3}, {5, 37, 20}};
// Decode rows over longer contexts: with a bound of 512 the grouped-query kernel's 8 slices of 64 keys
// merge in a cluster, most of them holding keys (PlanGqaDecode), a context of 64 ends on a slice's edge.
const AttentionBatch kLongDecodeBatch = {{1, 1, 1, 1}, {500, 129, 64, 300}};
// Many rows a sequence (attention_plan.h: UseFlashAttention): the flash kernel. A 130-token prompt (three
// row tiles, the last of 2 rows), a 64-row chunk after 136 cached tokens, a decode row, a 77-token prompt.
const AttentionBatch kPrefillBatch = {{130, 64, 1, 77}, {130, 200, 70, 77}};
// A mixed step as the engine orders it: three decode rows first (contexts 40, 600, 33), then prompts
// and a chunk. The decode rows take the decode kernels (AttentionShape::decode_seqs), the rest flash.
const AttentionBatch kMixedBatch = {{1, 1, 1, 130, 64, 77}, {40, 600, 33, 130, 200, 77}};

// wgmma: LaunchWgmmaFlashPaged itself rather than the dispatcher (which falls back when it cannot run).
void CheckAttention(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block,
                    cuda::KvCode code = cuda::KvCode::kBF16, const AttentionBatch& shape = kDecodeBatch,
                    bool wgmma = false) {
  SCOPED_TRACE(::testing::Message() << "heads=" << heads << " kv=" << kv_heads << " d=" << head_dim
                                    << " block=" << block << " code=" << static_cast<int>(code)
                                    << " seqs=" << shape.context.size());
  const std::vector<int32_t>& new_tokens = shape.new_tokens;
  const std::vector<int32_t>& context = shape.context;
  const int64_t seqs = static_cast<int64_t>(context.size());
  const int64_t longest = *std::max_element(context.begin(), context.end());
  const int64_t max_blocks = (longest + block - 1) / block, pool_blocks = seqs * max_blocks + 3;
  std::vector<int32_t> offsets = {0}, tables(seqs * max_blocks, 0);
  for (int64_t s = 0; s < seqs; ++s) offsets.push_back(offsets.back() + new_tokens[s]);
  // Blocks handed out in a scrambled order.
  std::vector<int32_t> order(pool_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(16));
  int next = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < (context[s] + block - 1) / block; ++b) tables[s * max_blocks + b] = order[next++];
  }
  const int64_t tokens = offsets.back(), width = kv_heads * head_dim;
  const std::vector<float> kc = RandomBf16(pool_blocks * block * width, 17),
                           vc = RandomBf16(pool_blocks * block * width, 18),
                           q = RandomBf16(tokens * heads * head_dim, 19);
  Bf16Array dk(kc), dv(vc), dq(q), out(tokens * heads * head_dim);
  DeviceArray<int32_t> doff(offsets), dctx(context), dtab(tables);
  cuda::PagedKv cache{dk.get(), dv.get(), block, kv_heads, head_dim};
  const cuda::SeqBatch batch{doff.get(), dctx.get(), dtab.get(), seqs, max_blocks};
  const int64_t slots = pool_blocks * block;
  DeviceArray<uint8_t> k_codes(slots * width), v_codes(slots * width);
  DeviceArray<float> k_scales(slots * kv_heads), v_scales(slots * kv_heads);
  std::vector<float> k_ref = kc, v_ref = vc;  // what the cache gives back
  cache.slots = slots;  // the wgmma prefill kernel's bound (the runtime's KvOfLayer gives it)
  if (code != cuda::KvCode::kBF16) {
    cache = {k_codes.get(), v_codes.get(), block, kv_heads, head_dim, code, k_scales.get(), v_scales.get()};
    std::vector<int32_t> all(slots);
    std::iota(all.begin(), all.end(), 0);
    DeviceArray<int32_t> dall(all);
    ASSERT_CUDA(cuda::LaunchKvQuantize(dk.get(), dv.get(), width, dall.get(), slots, cache, nullptr));
    ref::RoundTripKvRows(k_ref.data(), slots * kv_heads, head_dim, code == cuda::KvCode::kFp8);
    ref::RoundTripKvRows(v_ref.data(), slots * kv_heads, head_dim, code == cuda::KvCode::kFp8);
  }
  // The leading one-row sequences, as the runtime passes them (StepBatch::LeadingDecodeSeqs).
  int64_t decode_seqs = 0;
  while (decode_seqs < seqs && new_tokens[decode_seqs] == 1) ++decode_seqs;
  // Few slices (the grouped-query kernel merges up to 8 in a cluster), and many (most of them empty:
  // partials and the combine step). A bound holds every context (the backend's context bucket).
  for (int64_t bound : {longest, std::max<int64_t>(longest, 512), std::max<int64_t>(longest, 4096)}) {
    const cuda::AttentionShape shape{tokens, heads, bound, decode_seqs};
    DeviceArray<float> workspace(static_cast<size_t>(cuda::PagedAttentionWorkspace(shape, kv_heads, head_dim)));
    if (wgmma) {
      if (!cuda::WgmmaFlashPagedUsable(dq.get(), heads, cache)) {
        GTEST_SKIP() << "not a Hopper device (or AUTOGLM_WGMMA_FLASH=0)";
      }
      ASSERT_CUDA(cuda::LaunchWgmmaFlashPaged(dq.get(), tokens, heads, cache, batch, out.get(), nullptr));
    } else {
      ASSERT_CUDA(cuda::LaunchPagedAttention(dq.get(), shape, cache, batch, workspace.get(), out.get(), nullptr));
    }
    std::vector<float> want(out.size());
    std::vector<float> k_copy = k_ref, v_copy = v_ref;
    ref::PagedAttention(q.data(), heads, {k_copy.data(), v_copy.data(), pool_blocks, block, kv_heads, head_dim},
                        {offsets.data(), context.data(), tables.data(), seqs, max_blocks}, want.data());
    ExpectClose(out.Download(), want, kAtol, kRtol, "paged attention");
  }
}

TEST(GpuKernels, PagedAttention) {
  SKIP_WITHOUT_GPU();
  for (int64_t block : {1, 16}) {
    CheckAttention(6, 2, 16, block);    // groups of 3
    CheckAttention(12, 4, 32, block);   // groups of 3
    CheckAttention(32, 2, 128, block);  // GLM-4-9B's geometry: the grouped-query kernel (attention_gqa.cu)
    CheckAttention(16, 4, 64, block);   // groups of 4 at head_dim 64: the grouped-query kernel, 12 rows empty
    CheckAttention(5, 5, 64, block);    // no grouping
    CheckAttention(32, 2, 128, block, cuda::KvCode::kBF16, kLongDecodeBatch);
    CheckAttention(16, 4, 64, block, cuda::KvCode::kBF16, kLongDecodeBatch);  // 4 rows: half the cluster idle
    CheckAttention(6, 2, 16, block, cuda::KvCode::kBF16, kLongDecodeBatch);
  }
}

// Prefill on the tensor cores: causal within each row tile and across tiles, chunked prefill over
// cached keys, a decode row in its own tile, every head size the kernel is built for; and 8-bit
// caches, dequantized as the tiles arrive (against the CPU's round trip of the cache).
TEST(GpuKernels, FlashPagedAttention) {
  SKIP_WITHOUT_GPU();
  for (int64_t block : {1, 16}) {
    CheckAttention(6, 2, 16, block, cuda::KvCode::kBF16, kPrefillBatch);
    CheckAttention(12, 4, 32, block, cuda::KvCode::kBF16, kPrefillBatch);
    CheckAttention(32, 2, 128, block, cuda::KvCode::kBF16, kPrefillBatch);  // GLM-4-9B's geometry
    CheckAttention(5, 5, 64, block, cuda::KvCode::kBF16, kPrefillBatch);
    CheckAttention(4, 2, 40, block, cuda::KvCode::kBF16, kPrefillBatch);   // no flash build: the slice kernel
  }
  CheckAttention(32, 2, 128, 16, cuda::KvCode::kFp8, kPrefillBatch);
  CheckAttention(6, 2, 16, 1, cuda::KvCode::kInt8, kPrefillBatch);
}

// A mixed step: its leading decode rows on the decode kernels (the grouped-query one at GLM's
// geometry, the slice kernel otherwise, an 8-bit cache's too), the prompts after them on flash
// (wgmma on Hopper at head_dim 128 with pages of 16).
TEST(GpuKernels, MixedStepAttention) {
  SKIP_WITHOUT_GPU();
  for (int64_t block : {1, 16}) {
    CheckAttention(32, 2, 128, block, cuda::KvCode::kBF16, kMixedBatch);
    CheckAttention(6, 2, 16, block, cuda::KvCode::kBF16, kMixedBatch);
    CheckAttention(5, 5, 64, block, cuda::KvCode::kBF16, kMixedBatch);
  }
  CheckAttention(32, 2, 128, 16, cuda::KvCode::kFp8, kMixedBatch);
}

// The causal kernel on wgmma (on Hopper, head_dim 128, a bf16 cache: LaunchPagedAttention takes it
// there) at every page size it takes: pages of 8, 16 and 32 rows (a key tile's boxes a page each),
// of 64, 128 and 192 (64-row boxes within a page); GLM-4-9B's groups of 16 query heads and no
// grouping; the prefill batch (a 130-token prompt: a block of 128 rows and one of 2; a chunk after
// cached keys; a decode row alone in its block) and a long chunk whose keys wrap the rings of four
// stages several times (600 rows after 300 cached: 15 key tiles).
TEST(GpuKernels, WgmmaFlashPagedAttention) {
  SKIP_WITHOUT_GPU();
  const AttentionBatch long_chunk = {{600, 1, 40}, {900, 33, 40}};
  for (int64_t block : {8, 16, 32, 64, 128, 192}) {
    CheckAttention(32, 2, 128, block, cuda::KvCode::kBF16, kPrefillBatch, true);
    if (IsSkipped()) return;
    CheckAttention(4, 4, 128, block, cuda::KvCode::kBF16, kPrefillBatch, true);
    CheckAttention(32, 2, 128, block, cuda::KvCode::kBF16, long_chunk, true);
  }
}

// The 8-bit KV cache: rows written (by the unfused write and the quantizer the fused QKV step
// uses) hold exactly the CPU's round trip, codes and scales; attention reads the codes.
TEST(GpuKernels, KvCache8Bit) {
  SKIP_WITHOUT_GPU();
  for (const cuda::KvCode code : {cuda::KvCode::kFp8, cuda::KvCode::kInt8}) {
    const bool fp8 = code == cuda::KvCode::kFp8;
    const int64_t tokens = 17, kv_heads = 2, head_dim = 128, width = kv_heads * head_dim, block = 16, slots = 640;
    std::vector<float> k = RandomBf16(tokens * width, 41, 3.0f), v = RandomBf16(tokens * width, 42);
    std::fill(k.begin() + 2 * width, k.begin() + 2 * width + head_dim, 0.0f);  // a zero row: scale 1
    std::vector<int32_t> slot_of(tokens);
    for (int64_t t = 0; t < tokens; ++t) slot_of[t] = t == 4 ? -1 : static_cast<int32_t>((t * 37) % slots);
    Bf16Array dk(k), dv(v);
    DeviceArray<int32_t> ds(slot_of);
    DeviceArray<uint8_t> k_codes(slots * width), v_codes(slots * width);
    DeviceArray<float> k_scales(slots * kv_heads), v_scales(slots * kv_heads);
    const cuda::PagedKv cache{k_codes.get(), v_codes.get(), block, kv_heads, head_dim, code, k_scales.get(), v_scales.get()};
    std::vector<float> f32(2 * tokens * width);  // the fused step's staging rows: k then v, fp32
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy(k.begin() + t * width, k.begin() + (t + 1) * width, f32.begin() + 2 * t * width);
      std::copy(v.begin() + t * width, v.begin() + (t + 1) * width, f32.begin() + (2 * t + 1) * width);
    }
    DeviceArray<float> staging(f32);
    for (const bool fused : {false, true}) {
      if (fused) {
        ASSERT_CUDA(cuda::LaunchKvQuantize(staging.get(), staging.get() + width, 2 * width, ds.get(), tokens, cache,
                                           nullptr));
      } else {
        ASSERT_CUDA(cuda::LaunchKvCacheWrite(dk.get(), dv.get(), ds.get(), tokens, cache, nullptr));
      }
      std::vector<float> want_k = k, want_v = v;
      ref::RoundTripKvRows(want_k.data(), tokens * kv_heads, head_dim, fp8);
      ref::RoundTripKvRows(want_v.data(), tokens * kv_heads, head_dim, fp8);
      const std::vector<uint8_t> kq = k_codes.Download(), vq = v_codes.Download();
      const std::vector<float> ks = k_scales.Download(), vs = v_scales.Download();
      std::vector<float> got_k, got_v, wk, wv;
      for (int64_t t = 0; t < tokens; ++t) {
        if (slot_of[t] < 0) continue;
        for (int64_t c = 0; c < width; ++c) {
          const int64_t at = slot_of[t] * width + c, scale = slot_of[t] * kv_heads + c / head_dim;
          auto value = [&](uint8_t q) { return fp8 ? ref::E4M3ToFloat(q) : static_cast<float>(static_cast<int8_t>(q)); };
          got_k.push_back(ks[scale] * value(kq[at]));
          got_v.push_back(vs[scale] * value(vq[at]));
          wk.push_back(want_k[t * width + c]);
          wv.push_back(want_v[t * width + c]);
        }
      }
      const std::string name = std::string(fp8 ? "fp8" : "int8") + (fused ? " staged" : " write");
      ExpectClose(got_k, wk, 0, 0, name + " k");
      ExpectClose(got_v, wv, 0, 0, name + " v");
    }
    CheckAttention(6, 2, 16, 1, code);
    CheckAttention(32, 2, 128, 16, code);  // GLM-4-9B's geometry
    CheckAttention(5, 5, 64, 16, code);
  }
}

TEST(GpuKernels, ArgmaxAndSampling) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 17, vocab = 1003;
  std::vector<float> logits = RandomBf16(rows * vocab, 20);
  logits[5 * vocab + 7] = logits[5 * vocab + 900] = 50.0f;  // a tie: the lower index wins
  Bf16Array dl(logits);
  DeviceArray<int32_t> out(rows);
  ASSERT_CUDA(cuda::LaunchArgmax(dl.get(), rows, vocab, out.get(), nullptr));
  std::vector<int32_t> want(rows);
  ref::Argmax(logits.data(), rows, vocab, want.data());
  EXPECT_EQ(out.Download(), want);

  // The reference's rules at the edges, on the vectorised path (vocab % 8 == 0) and the scalar one.
  for (const int64_t v : {int64_t{1024}, int64_t{1003}}) {
    const float nan = std::nanf(""), inf = INFINITY;
    std::vector<float> edge(4 * v, -inf);                    // row 0: all -inf -> 0
    for (int64_t i = 0; i < v; ++i) edge[v + i] = nan;      // row 1: all NaN -> 0
    edge[2 * v] = nan;                                       // row 2: NaN first, then a max -> 0
    edge[2 * v + 9] = 5.0f;
    for (int64_t i = 0; i < v; ++i) edge[3 * v + i] = i % 3 == 1 ? nan : -1.0f;  // row 3: NaNs skipped
    edge[3 * v + v - 1] = 2.0f;
    Bf16Array de(edge);
    DeviceArray<int32_t> eout(4);
    ASSERT_CUDA(cuda::LaunchArgmax(de.get(), 4, v, eout.get(), nullptr));
    std::vector<int32_t> ewant(4);
    ref::Argmax(edge.data(), 4, v, ewant.data());
    EXPECT_EQ(eout.Download(), ewant) << "vocab " << v;
  }

  // Inverse-CDF sampling over 4 tokens with probabilities .1 .2 .3 .4 at temperature 1.
  const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f};
  const std::vector<float> uniforms = {0.05f, 0.15f, 0.45f, 0.95f, 0.61f};
  const std::vector<int32_t> expected = {0, 1, 2, 3, 3};
  std::vector<float> rows_logits;
  for (size_t r = 0; r < uniforms.size(); ++r) {
    for (float p : probs) rows_logits.push_back(std::log(p));
  }
  Bf16Array drows(rows_logits);
  std::vector<cuda::SampleRow> plain, limited;
  for (size_t r = 0; r < uniforms.size(); ++r) {
    plain.push_back({static_cast<int32_t>(r), 0, 0, 1.0f, 1.0f, uniforms[r]});
    limited.push_back({static_cast<int32_t>(r), 0, 2, 1.0f, 1.0f, uniforms[r]});
  }
  DeviceArray<cuda::SampleRow> dplain(plain), dlimited(limited);
  DeviceArray<int32_t> picked(uniforms.size());
  ASSERT_CUDA(cuda::LaunchSampleRows(drows.get(), 4, dplain.get(), static_cast<int64_t>(plain.size()), nullptr,
                                     nullptr, nullptr, picked.get(), nullptr));
  EXPECT_EQ(picked.Download(), expected);
  // A vocabulary limit keeps ids at or past it out.
  ASSERT_CUDA(cuda::LaunchSampleRows(drows.get(), 4, dlimited.get(), static_cast<int64_t>(limited.size()), nullptr,
                                     nullptr, nullptr, picked.get(), nullptr));
  for (int32_t id : picked.Download()) EXPECT_LT(id, 2);
}

// The device sampler against ref::SampleFiltered on the same bf16 logits and draws: temperature,
// top-k, top-p, min-p, their mix, limits and greedy, penalties, and a constraint's mask (ids left
// out at -inf: every third case, some allowing a handful of ids as a JSON state does), on
// vocabularies with and without a multiple of 8.
TEST(GpuKernels, SampleRowsMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  for (const int64_t vocab : {int64_t{1003}, int64_t{151552}}) {
    const int64_t rows = 8;
    const std::vector<float> logits = RandomBf16(rows * vocab, 21, 4.0f);
    Bf16Array dl(logits);
    std::vector<cuda::SampleRow> cases;
    std::mt19937 rng(22);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    const cuda::SampleRow kinds[] = {{0, 0, 0, 1.0f, 1.0f, 0}, {0, 40, 0, 0.7f, 1.0f, 0}, {0, 0, 0, 1.3f, 0.9f, 0},
                                     {0, 50, 0, 1.0f, 0.8f, 0}, {0, 0, 500, 1.0f, 0.95f, 0}, {0, 0, 0, 0.0f, 1.0f, 0},
                                     {0, 1, 0, 1.0f, 1.0f, 0}, {0, 0, 0, 0.05f, 0.5f, 0}};
    for (int rep = 0; rep < 16; ++rep) {
      for (const cuda::SampleRow& k : kinds) {
        cuda::SampleRow c = k;
        c.row = static_cast<int32_t>(cases.size() % rows);
        c.uniform = u(rng);
        if (cases.size() % 3 == 1) c.min_p = rep % 2 == 0 ? 0.05f : 0.3f;  // min-p on a third of them
        cases.push_back(c);
      }
    }
    // Every other case carries frequency/presence penalties on a few hundred distinct ids (the
    // agent's frequency_penalty 0.2 over its answer so far), some large enough to move the pick;
    // every fourth a repetition penalty on them too (a factor, for ids of the prompt as well);
    // every id divisible by 11 a logit_bias (in [-4, 4], or a ban at -100 or min_tokens' -inf),
    // added before the rest.
    std::vector<cuda::SamplePenalty> penalties;
    std::vector<std::vector<ref::Penalty>> per_case(cases.size());
    for (size_t i = 1; i < cases.size(); i += 2) {
      cases[i].penalty_begin = static_cast<int32_t>(penalties.size());
      const float scale = i % 4 == 1 ? 1.3f : 1.0f;
      for (int64_t id = static_cast<int64_t>(i) % 7; id < vocab; id += vocab / 300 + 1) {
        const float delta = id % 2 == 0 ? 0.0f : 0.2f * static_cast<float>(1 + id % 5) + (id % 3 == 0 ? 1.5f : 0.0f);
        const float bias = id % 11 != 0   ? 0.0f
                           : id % 26 == 0 ? -INFINITY  // min_tokens' suppressed ids
                           : id % 13 == 0 ? -100.0f
                                          : 0.4f * static_cast<float>(id % 21 - 10);
        penalties.push_back({static_cast<int32_t>(id), delta, scale, bias});
        per_case[i].push_back({static_cast<int32_t>(id), delta, scale, bias});
      }
      cases[i].penalty_count = static_cast<int32_t>(penalties.size()) - cases[i].penalty_begin;
    }
    const size_t words = static_cast<size_t>((vocab + 63) / 64);
    std::vector<uint64_t> masks;
    std::vector<std::vector<uint64_t>> per_case_mask(cases.size());
    for (size_t i = 0; i < cases.size(); i += 3) {
      std::vector<uint64_t>& bits = per_case_mask[i];
      bits.assign(words, 0);
      const uint64_t keep = i % 2 == 0 ? 2 : 0;  // about 2 in 7 ids, or only those of the handful below
      for (int64_t id = 0; id < vocab; ++id) {
        if ((static_cast<uint64_t>(id) * 2654435761u) % 7 < keep || id % (vocab / 3) == 5) bits[id / 64] |= uint64_t{1} << (id % 64);
      }
      cases[i].mask_begin = static_cast<int64_t>(masks.size());
      masks.insert(masks.end(), bits.begin(), bits.end());
    }
    DeviceArray<cuda::SampleRow> dcases(cases);
    DeviceArray<cuda::SamplePenalty> dpenalties(penalties);
    DeviceArray<uint64_t> dmasks(masks);
    DeviceArray<float> workspace(cases.size() * static_cast<size_t>(vocab));
    DeviceArray<int32_t> out(cases.size());
    ASSERT_CUDA(cuda::LaunchSampleRows(dl.get(), vocab, dcases.get(), static_cast<int64_t>(cases.size()),
                                       dpenalties.get(), dmasks.get(), workspace.get(), out.get(), nullptr));
    const std::vector<int32_t> got = out.Download();
    int differ = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const cuda::SampleRow& c = cases[i];
      std::vector<float> row(logits.begin() + c.row * vocab, logits.begin() + (c.row + 1) * vocab);
      const std::vector<uint64_t>& bits = per_case_mask[i];
      for (int64_t id = 0; id < vocab && !bits.empty(); ++id) {
        if (((bits[id / 64] >> (id % 64)) & 1) == 0) row[id] = -INFINITY;
      }
      ref::ApplyPenalties(row.data(), vocab, per_case[i]);
      const int32_t want = ref::SampleFiltered(row.data(), vocab,
                                               {c.temperature, c.top_k, c.top_p, c.vocab_limit, c.uniform, c.min_p});
      if (c.temperature == 0.0f || c.top_k == 1) {
        EXPECT_EQ(got[i], want) << "greedy is exact, penalties or not";
      }
      if (!bits.empty()) {
        EXPECT_TRUE((bits[got[i] / 64] >> (got[i] % 64)) & 1) << "case " << i << " picked " << got[i] << ", outside its mask";
      }
      if (got[i] != want) ++differ;
      if (c.vocab_limit > 0) {
        EXPECT_LT(got[i], c.vocab_limit);
      }
    }
    // Float sums in another order may move a draw that lands within rounding of a boundary.
    EXPECT_LE(differ, 2) << "vocab " << vocab << ": " << differ << " of " << cases.size() << " differ";
  }
}

// Logprobs where the logits are against ref::LogProbs: the token's, and the top ids in order.
TEST(GpuKernels, LogprobsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 151552, rows = 6;
  std::vector<float> logits = RandomBf16(rows * vocab, 23, 3.0f);
  logits[2 * vocab + 10] = logits[2 * vocab + 20] = 30.0f;  // a tie at the top: the lower id first
  Bf16Array dl(logits);
  std::vector<cuda::LogprobRow> cases;
  for (int32_t r = 0; r < rows; ++r) cases.push_back({r, static_cast<int32_t>(r * 977), r % 2 == 0 ? 20 : 5, r == 5 ? 1000 : 0});
  DeviceArray<cuda::LogprobRow> dcases(cases);
  DeviceArray<float> lp(rows), top_lp(rows * cuda::kMaxTopLogprobs);
  DeviceArray<int32_t> top_ids(rows * cuda::kMaxTopLogprobs);
  ASSERT_CUDA(cuda::LaunchLogprobs(dl.get(), vocab, dcases.get(), rows, lp.get(), top_ids.get(), top_lp.get(), nullptr));
  const std::vector<float> got_lp = lp.Download(), got_top_lp = top_lp.Download();
  const std::vector<int32_t> got_ids = top_ids.Download();
  for (int64_t r = 0; r < rows; ++r) {
    const cuda::LogprobRow& c = cases[r];
    std::vector<int32_t> ids;
    std::vector<float> lps;
    const float want = ref::LogProbs(logits.data() + r * vocab, vocab, c.vocab_limit, c.token, c.top, &ids, &lps);
    if (std::isinf(want)) {  // a token past the row's vocabulary limit: -inf on both sides
      EXPECT_EQ(got_lp[r], want) << "row " << r;
    } else {
      EXPECT_NEAR(got_lp[r], want, 1e-3f) << "row " << r;
    }
    for (int j = 0; j < c.top; ++j) {
      EXPECT_EQ(got_ids[r * cuda::kMaxTopLogprobs + j], ids[j]) << "row " << r << " rank " << j;
      if (std::isinf(lps[j])) {
        EXPECT_EQ(got_top_lp[r * cuda::kMaxTopLogprobs + j], lps[j]) << "row " << r << " rank " << j;
      } else {
        EXPECT_NEAR(got_top_lp[r * cuda::kMaxTopLogprobs + j], lps[j], 1e-3f) << "row " << r << " rank " << j;
      }
    }
  }
}

TEST(GpuKernels, RandomWeightsMatchTheHostGenerator) {
  SKIP_WITHOUT_GPU();
  compiler::WeightEntry entry;
  entry.name = "model.layers.3.mlp.down_proj.weight";
  entry.shape = {97, 136};
  float center, half_width;
  runtime::RandomWeights::Distribution(entry, &center, &half_width);
  Bf16Array device(entry.NumElements());
  ASSERT_CUDA(cuda::LaunchFillRandom(device.get(), entry.NumElements(), 1234, runtime::WeightStream(entry.name), center,
                                     half_width, nullptr));
  std::vector<float> host(entry.NumElements());
  ASSERT_TRUE(runtime::RandomWeights(1234).Fill(entry, {}, host.data()).ok());
  ExpectClose(device.Download(), Bf16(host), 0, 0, "random weights");
}

}  // namespace
}  // namespace ag
