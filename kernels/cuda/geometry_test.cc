// The CUDA kernels' index math, checked on the CPU: an emulation of
// mma.sync.m16n8k16 from the PTX fragment tables, fed the way the skinny
// kernel feeds it (16-byte loads in the permuted k order), must compute
// W x^T; ldmatrix, emulated the same way, must give the fragments the
// kernels expect, and the flash kernel's chain (S = Q K^T, S's accumulators as
// P's A fragments, P V) must compute (Q K^T) V; the K splits must cover K with
// work for every rank; the quantized GEMM's dequantizing threads must put
// every code where wgmma reads its input. Attention's work split and tiles:
// attention_plan_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "kernels/cuda/peer_flags.h"
#include "kernels/cuda/per_device.h"
#include "kernels/cuda/linear_split.h"
#include "kernels/cuda/mma_layout.h"
#include "kernels/cuda/quant_gemm_layout.h"
#include "kernels/cuda/quant_pack.h"
#include "kernels/cuda/w8a8_gemm_layout.h"

namespace ag::cuda {
namespace {

using Reg = std::pair<float, float>;  // (low half, high half) of a 32-bit register holding two bf16

TEST(MmaLayout, FragmentTablesCoverEveryElementOnce) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      for (int h = 0; h < 2; ++h) a.insert({mma::AElement(lane, r, h).row, mma::AElement(lane, r, h).col});
    }
    for (int r = 0; r < 2; ++r) {
      for (int h = 0; h < 2; ++h) b.insert({mma::BElement(lane, r, h).row, mma::BElement(lane, r, h).col});
    }
    for (int e = 0; e < 4; ++e) c.insert({mma::CElement(lane, e).row, mma::CElement(lane, e).col});
  }
  EXPECT_EQ(a.size(), 256u);  // 16 x 16
  EXPECT_EQ(b.size(), 128u);  // 16 x 8
  EXPECT_EQ(c.size(), 128u);  // 16 x 8
}

TEST(MmaLayout, PermutationIsABijectionOverTheChunk) {
  std::set<int> seen;
  for (int step = 0; step < 2; ++step) {
    for (int k = 0; k < 16; ++k) seen.insert(mma::PhysicalK(k, step));
  }
  EXPECT_EQ(seen.size(), 32u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 31);
}

// One warp of the skinny kernel over K = 32 * chunks: lane (g, t) loads eight
// consecutive values at 8t of each chunk from weight rows g and g + 8 and from
// x row g; registers are built from the loads' words as the kernel does; the
// emulated instruction reads them through the PTX tables.
TEST(MmaLayout, SkinnyFeedComputesTheProduct) {
  const int chunks = 3, K = 32 * chunks;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-8, 8);  // small integers: exact in float
  std::vector<float> w(16 * K), x(8 * K);
  for (float& v : w) v = static_cast<float>(small(rng));
  for (float& v : x) v = static_cast<float>(small(rng));

  float acc[32][4] = {};
  for (int chunk = 0; chunk < chunks; ++chunk) {
    // words[lane][row 0 (g) / 1 (g + 8)][word]; xwords[lane][word]
    Reg words[32][2][4], xwords[32][4];
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, k0 = 32 * chunk + 8 * (lane % 4);
      for (int i = 0; i < 4; ++i) {
        for (int r = 0; r < 2; ++r) words[lane][r][i] = {w[(g + 8 * r) * K + k0 + 2 * i], w[(g + 8 * r) * K + k0 + 2 * i + 1]};
        xwords[lane][i] = {x[g * K + k0 + 2 * i], x[g * K + k0 + 2 * i + 1]};
      }
    }
    for (int step = 0; step < 2; ++step) {
      float A[16][16] = {}, B[16][8] = {};
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r) {
          const Reg reg = words[lane][r % 2][mma::AWord(step, r)];
          const mma::At lo = mma::AElement(lane, r, 0), hi = mma::AElement(lane, r, 1);
          A[lo.row][lo.col] = reg.first;
          A[hi.row][hi.col] = reg.second;
          // The kernel's claim: logical column c of A holds physical k PhysicalK(c, step).
          EXPECT_EQ(reg.first, w[lo.row * K + 32 * chunk + mma::PhysicalK(lo.col, step)]);
        }
        for (int r = 0; r < 2; ++r) {
          const Reg reg = xwords[lane][mma::BWord(step, r)];
          const mma::At lo = mma::BElement(lane, r, 0), hi = mma::BElement(lane, r, 1);
          B[lo.row][lo.col] = reg.first;
          B[hi.row][hi.col] = reg.second;
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        for (int e = 0; e < 4; ++e) {
          const mma::At at = mma::CElement(lane, e);
          for (int kk = 0; kk < 16; ++kk) acc[lane][e] += A[at.row][kk] * B[kk][at.col];
        }
      }
    }
  }
  // C rows are weight rows (features), columns x rows: C = W x^T.
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 4; ++e) {
      const mma::At at = mma::CElement(lane, e);
      float want = 0.0f;
      for (int k = 0; k < K; ++k) want += w[at.row * K + k] * x[at.col * K + k];
      EXPECT_EQ(acc[lane][e], want) << "lane " << lane << " element " << e;
    }
  }
}

// ldmatrix.x4 emulated from its PTX description: lane 8j + i addresses row i
// of matrix j, register j of a lane holds LdMatrixHolds of matrix j. The three
// ways the tensor-core kernels point the lanes must yield the mma's fragments.
struct Tile {
  int cols;
  std::vector<float> v;
  float at(int r, int c) const { return v[r * cols + c]; }
};

// Element `half` of register `reg` of `lane` after ldmatrix.x4 with lanes addressing `row_of(lane)`.
template <typename RowOf>
float LdMatrix(const Tile& t, RowOf row_of, int lane, int reg, int half, bool trans) {
  const mma::At in = mma::LdMatrixHolds(lane, half, trans);  // within matrix `reg`
  const mma::At addr = row_of(8 * reg + in.row);             // the lane that gave that row
  return t.at(addr.row, addr.col + in.col);
}

Tile Numbered(int rows, int cols) {
  Tile t{cols, std::vector<float>(rows * cols)};
  for (int i = 0; i < rows * cols; ++i) t.v[i] = static_cast<float>(i);
  return t;
}

TEST(MmaLayout, LdMatrixAddressesYieldTheFragments) {
  const Tile t = Numbered(16, 16);
  for (int lane = 0; lane < 32; ++lane) {
    for (int reg = 0; reg < 4; ++reg) {
      for (int half = 0; half < 2; ++half) {
        // A of a 16 x 16 row-major tile.
        const mma::At a = mma::AElement(lane, reg, half);
        EXPECT_EQ(LdMatrix(t, mma::AFragmentRow, lane, reg, half, false), t.at(a.row, a.col));
        // B of n-tiles 0 and 1 from a [n][k] tile: (k, n) -> row n, column k.
        const mma::At b = mma::BElement(lane, reg % 2, half);
        const int n = b.col + 8 * (reg / 2);
        EXPECT_EQ(LdMatrix(t, mma::BPairRow, lane, reg, half, false), t.at(n, b.row));
        // B of n-tiles 0 and 1 from a [k][n] tile through .trans: row k, column n.
        EXPECT_EQ(LdMatrix(t, mma::BPairTransRow, lane, reg, half, true), t.at(b.row, n));
      }
    }
  }
}

// One warp of the flash kernel: S = Q K^T over 64 keys from [key][d] K, S's
// accumulators reused as P's A fragments, O = P V from [key][d] V through
// .trans; small integers, so the emulation must equal (Q K^T) V exactly.
TEST(MmaLayout, FlashWarpComputesQKTransposeV) {
  constexpr int kRows = 16, kKeys = 64, kD = 32;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-3, 3);
  Tile q{kD, std::vector<float>(kRows * kD)}, k{kD, std::vector<float>(kKeys * kD)}, v{kD, std::vector<float>(kKeys * kD)};
  for (Tile* m : {&q, &k, &v}) {
    for (float& x : m->v) x = static_cast<float>(small(rng));
  }
  auto shifted = [](auto row_of, int r0, int c0) {
    return [=](int lane) { return mma::At{row_of(lane).row + r0, row_of(lane).col + c0}; };
  };
  // S accumulators of every lane: s[lane][score tile][element].
  float s[32][kKeys / 8][4] = {};
  for (int kk = 0; kk < kD; kk += 16) {
    float A[16][16];
    for (int lane = 0; lane < 32; ++lane) {
      for (int reg = 0; reg < 4; ++reg) {
        for (int half = 0; half < 2; ++half) {
          const mma::At e = mma::AElement(lane, reg, half);
          A[e.row][e.col] = LdMatrix(q, shifted(mma::AFragmentRow, 0, kk), lane, reg, half, false);
        }
      }
    }
    for (int n = 0; n < kKeys / 8; n += 2) {
      float B[2][16][8];
      for (int lane = 0; lane < 32; ++lane) {
        for (int reg = 0; reg < 4; ++reg) {
          for (int half = 0; half < 2; ++half) {
            const mma::At e = mma::BElement(lane, reg % 2, half);
            B[reg / 2][e.row][e.col] = LdMatrix(k, shifted(mma::BPairRow, 8 * n, kk), lane, reg, half, false);
          }
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        for (int e = 0; e < 4; ++e) {
          const mma::At c = mma::CElement(lane, e);
          for (int j = 0; j < 16; ++j) {
            s[lane][n][e] += A[c.row][j] * B[0][j][c.col];
            s[lane][n + 1][e] += A[c.row][j] * B[1][j][c.col];
          }
        }
      }
    }
  }
  float o[32][kD / 8][4] = {};
  for (int chunk = 0; chunk < kKeys / 16; ++chunk) {
    float P[16][16];
    for (int lane = 0; lane < 32; ++lane) {
      for (int reg = 0; reg < 4; ++reg) {
        for (int half = 0; half < 2; ++half) {
          const mma::At e = mma::AElement(lane, reg, half);
          P[e.row][e.col] = s[lane][2 * chunk + mma::AFromCTile(reg)][mma::AFromCElement(reg) + half];
        }
      }
    }
    for (int d = 0; d < kD / 8; d += 2) {
      float B[2][16][8];
      for (int lane = 0; lane < 32; ++lane) {
        for (int reg = 0; reg < 4; ++reg) {
          for (int half = 0; half < 2; ++half) {
            const mma::At e = mma::BElement(lane, reg % 2, half);
            B[reg / 2][e.row][e.col] = LdMatrix(v, shifted(mma::BPairTransRow, 16 * chunk, 8 * d), lane, reg, half, true);
          }
        }
      }
      for (int lane = 0; lane < 32; ++lane) {
        for (int e = 0; e < 4; ++e) {
          const mma::At c = mma::CElement(lane, e);
          for (int j = 0; j < 16; ++j) {
            o[lane][d][e] += P[c.row][j] * B[0][j][c.col];
            o[lane][d + 1][e] += P[c.row][j] * B[1][j][c.col];
          }
        }
      }
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int d = 0; d < kD / 8; ++d) {
      for (int e = 0; e < 4; ++e) {
        const mma::At c = mma::CElement(lane, e);
        float want = 0.0f;
        for (int key = 0; key < kKeys; ++key) {
          float score = 0.0f;
          for (int x = 0; x < kD; ++x) score += q.at(c.row, x) * k.at(key, x);
          want += score * v.at(key, 8 * d + c.col);
        }
        EXPECT_EQ(o[lane][d][e], want) << "lane " << lane << " d-tile " << d << " element " << e;
      }
    }
  }
}

// One block of the staged skinny kernel (linear_skinny_staged.cuh), emulated through the stage
// layout it addresses by (StagedPiece, StagedARow, StagedBRow): the loads fill each stage piece by
// piece, the norm pass multiplies x by norm_w and sums each row's squares by pieces (the ending
// adds eight consecutive threads' sums a row), the warps' ldmatrix fragments feed the emulated mma
// and the C fragments land in the [batch row][feature] tile: it must hold W (x norm_w)^T and the
// rows' sums of squares, for one to eight n-tiles, rows past M and a last k-tile cut short.
TEST(MmaLayout, StagedSkinnyBlockComputesTheNormedProduct) {
  constexpr int kThreads = 128, kLd = 72;
  for (int nt : {1, 2, 4, 8}) {
    SCOPED_TRACE(nt);
    const int m = 8 * nt - 3, K = 64 * 2 + 24, x_row0 = 64, norm_row = 64 + 8 * nt, pieces = 64 * nt;
    const int per_thread = (pieces + kThreads - 1) / kThreads;
    std::mt19937 rng(static_cast<unsigned>(nt));
    std::uniform_int_distribution<int> small(-3, 3);
    std::vector<float> w(64 * K), x(m * K), nw(K);
    for (std::vector<float>* v : {&w, &x, &nw}) {
      for (float& e : *v) e = static_cast<float>(small(rng));
    }
    std::vector<float> acc(4 * nt * 32 * 4, 0.0f);                 // [warp][n-tile][lane][element]
    std::vector<float> squares(kThreads * per_thread, 0.0f);       // [thread][piece]
    for (int k0 = 0; k0 < K; k0 += 64) {
      Tile st{kLd, std::vector<float>((norm_row + 1) * kLd, 0.0f)};
      auto fill = [&](int row0, int piece, const std::vector<float>& from, int rows) {
        const mma::At at = mma::StagedPiece(piece);
        for (int e = 0; e < 8; ++e) {
          const int k = k0 + at.col + e;
          st.v[(row0 + at.row) * kLd + at.col + e] = at.row < rows && k < K ? from[at.row * K + k] : 0.0f;
        }
      };
      for (int c = 0; c < 64 * 8; ++c) fill(0, c, w, 64);
      for (int c = 0; c < pieces; ++c) fill(x_row0, c, x, m);
      for (int c = 0; c < 8; ++c) fill(norm_row, c, nw, 1);
      for (int tid = 0; tid < kThreads; ++tid) {
        for (int i = 0; i < per_thread; ++i) {
          const int c = tid + i * kThreads;
          if (c >= pieces) continue;
          const mma::At at = mma::StagedPiece(c);
          for (int e = 0; e < 8; ++e) {
            float& v = st.v[(x_row0 + at.row) * kLd + at.col + e];
            squares[tid * per_thread + i] += v * v;
            v *= st.at(norm_row, at.col + e);
          }
        }
      }
      for (int warp = 0; warp < 4; ++warp) {
        for (int kk = 0; kk < 64; kk += 16) {
          float A[16][16];
          for (int lane = 0; lane < 32; ++lane) {
            for (int reg = 0; reg < 4; ++reg) {
              for (int half = 0; half < 2; ++half) {
                const mma::At e = mma::AElement(lane, reg, half);
                const auto a_row = [&](int l) { return mma::StagedARow(warp, l, kk); };
                A[e.row][e.col] = LdMatrix(st, a_row, lane, reg, half, false);
              }
            }
          }
          for (int j = 0; j < nt; j += 2) {
            const bool one = nt == 1;
            float B[2][16][8] = {};
            for (int lane = 0; lane < 32; ++lane) {
              for (int reg = 0; reg < (one ? 2 : 4); ++reg) {
                for (int half = 0; half < 2; ++half) {
                  const mma::At e = mma::BElement(lane, reg % 2, half);
                  const auto b_row = [&](int l) { return mma::StagedBRow(x_row0, j, l, kk, one); };
                  B[reg / 2][e.row][e.col] = LdMatrix(st, b_row, lane, reg, half, false);
                }
              }
            }
            for (int t = 0; t < (one ? 1 : 2); ++t) {
              for (int lane = 0; lane < 32; ++lane) {
                for (int e = 0; e < 4; ++e) {
                  const mma::At c = mma::CElement(lane, e);
                  float& a = acc[((warp * nt + j + t) * 32 + lane) * 4 + e];
                  for (int q = 0; q < 16; ++q) a += A[c.row][q] * B[t][q][c.col];
                }
              }
            }
          }
        }
      }
    }
    // The ending: C rows are features, columns batch rows (StoreSkinnyAccumulators); a row's squares
    // are the sum over its eight consecutive threads' pieces.
    std::vector<float> tile(8 * nt * 64, -1.0f), row_squares(8 * nt, -1.0f);
    for (int warp = 0; warp < 4; ++warp) {
      for (int j = 0; j < nt; ++j) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int e = 0; e < 4; ++e) {
            const mma::At c = mma::CElement(lane, e);
            tile[(8 * j + c.col) * 64 + warp * 16 + c.row] = acc[((warp * nt + j) * 32 + lane) * 4 + e];
          }
        }
      }
    }
    for (int tid = 0; tid < kThreads; tid += 8) {
      for (int i = 0; i < per_thread; ++i) {
        const int c = tid + i * kThreads;
        if (c >= pieces) continue;
        float sum = 0.0f;
        for (int t = 0; t < 8; ++t) sum += squares[(tid + t) * per_thread + i];
        row_squares[mma::StagedPiece(c).row] = sum;
      }
    }
    for (int r = 0; r < 8 * nt; ++r) {
      float want_squares = 0.0f;
      for (int k = 0; r < m && k < K; ++k) want_squares += x[r * K + k] * x[r * K + k];
      EXPECT_EQ(row_squares[r], want_squares) << "row " << r;
      for (int f = 0; f < 64; ++f) {
        float want = 0.0f;
        for (int k = 0; r < m && k < K; ++k) want += w[f * K + k] * x[r * K + k] * nw[k];
        EXPECT_EQ(tile[r * 64 + f], want) << "row " << r << " feature " << f;
      }
    }
  }
}

// wgmma's descriptor, decoded field by field from the PTX table: a stage at 0x14400 (1024-aligned).
// The staged skinny kernel copies with addresses computed once (linear_skinny_staged.cuh): thread
// tid's pieces tid + 128 i are rows StagedPiece(tid).row + 16 i at StagedPiece(tid).col, and the
// threads' pieces cover a stage's 64 weight rows (and 8 nt rows of x) once.
TEST(MmaLayout, StagedCopiesStepSixteenRowsAPiece) {
  constexpr int kThreads = 128, kPieceRows = kThreads / 8;
  for (int rows : {8, 16, 32, 64}) {  // x's at one to eight n-tiles; W's 64
    std::set<std::pair<int, int>> seen;
    for (int tid = 0; tid < kThreads; ++tid) {
      const mma::At first = mma::StagedPiece(tid);
      for (int i = 0; tid + i * kThreads < rows * 8; ++i) {
        const mma::At at = mma::StagedPiece(tid + i * kThreads);
        EXPECT_EQ(at.row, first.row + kPieceRows * i);
        EXPECT_EQ(at.col, first.col);
        EXPECT_TRUE(seen.insert({at.row, at.col}).second);
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(rows * 8));
    EXPECT_EQ(seen.rbegin()->first, rows - 1);
  }
}

TEST(MmaLayout, WgmmaDescriptorFields) {
  const uint64_t d = mma::Sw128KMajorDescriptor(0x14400);
  EXPECT_EQ(d & 0x3FFF, 0x14400u >> 4);            // start address
  EXPECT_EQ((d >> 16) & 0x3FFF, 1u);               // leading byte offset (unused with the swizzle)
  EXPECT_EQ(((d >> 32) & 0x3FFF) << 4, 1024u);     // 8 rows of 128 bytes
  EXPECT_EQ((d >> 49) & 0x7, 0u);                  // base offset
  EXPECT_EQ(d >> 62, 1u);                          // 128-byte swizzle
  for (int s = 0; s < 4; ++s) {                    // k-steps of 16 bf16 = 32 bytes
    EXPECT_EQ(mma::DescriptorAtK(d, s) & 0x3FFF, (0x14400u + 32u * s) >> 4);
    EXPECT_EQ(mma::DescriptorAtK(d, s) >> 14, d >> 14);  // nothing but the address moves
  }
  // The largest shared address (227 KB) still fits the 14-bit field.
  EXPECT_EQ(mma::Sw128KMajorDescriptor(227 * 1024) & 0x3FFF, (227u * 1024u) >> 4);
}

// The MN-major descriptor of the wgmma flash kernel's V operand: boxes of 64 columns 8 KB apart
// (the leading byte offset), groups of 8 rows 1024 bytes apart (the stride byte offset).
TEST(MmaLayout, WgmmaMnMajorDescriptorFields) {
  const uint64_t d = mma::Sw128MnMajorDescriptor(0x8800 + 2048, 8192);
  EXPECT_EQ(d & 0x3FFF, (0x8800u + 2048u) >> 4);
  EXPECT_EQ(((d >> 16) & 0x3FFF) << 4, 8192u);
  EXPECT_EQ(((d >> 32) & 0x3FFF) << 4, 1024u);
  EXPECT_EQ((d >> 49) & 0x7, 0u);
  EXPECT_EQ(d >> 62, 1u);
}

// One warpgroup of the wgmma flash kernel (flash_wgmma.cu) emulated: Q, K and V tiles laid out as
// TMA writes them (two 64-column boxes each, the 128-byte swizzle), S = Q K^T read through the
// kernel's K-major descriptors, S's accumulators (wgmma's layout: mma.sync's C fragment per warp
// of 16 rows) turned into P's A fragments, and O = P V read through the MN-major descriptor of
// each 16-key chunk. Integer data: every product is exact, so O must equal the direct Q K^T V.
TEST(MmaLayout, WgmmaFlashWarpgroupComputesQKTransposeV) {
  constexpr int kRows = 64, kKeys = 64, kD = 128, kBox = 64 * 128;
  std::mt19937 rng(23);
  auto fill = [&](int rows) {
    std::vector<float> m(rows * kD);
    for (float& v : m) v = static_cast<float>(static_cast<int>(rng() % 5) - 2);
    return m;
  };
  const std::vector<float> q = fill(kRows), k = fill(kKeys), v = fill(kKeys);
  // TMA: element (r, c) of a [64][128] tile at box c / 64, row r, chunk (c % 64) / 8 swizzled.
  auto place = [](const std::vector<float>& m) {
    std::vector<float> smem(2 * kBox / 2, NAN);  // indexed by bf16 slot
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < kD; ++c) {
        const uint32_t byte = (c / 64) * kBox + SwizzledOffset(static_cast<uint32_t>(r * 128 + (c % 64) * 2), 128);
        smem[byte / 2] = m[r * kD + c];
      }
    }
    return smem;
  };
  const std::vector<float> qs = place(q), ks = place(k), vs = place(v);
  auto read = [](const std::vector<float>& smem, uint32_t start, uint32_t offset) {
    return smem[SwizzledOffset(start + offset, 128) / 2];  // tiles are 1024-aligned: the offset is the address
  };
  // Q as the kernel's registers hold it (LoadQFragments): step kk's A register r of warp w's lane,
  // read from where Sw128BoxedOffset says TMA put the pair; every element of Q once.
  std::vector<float> q_regs(kRows * kD, NAN);
  for (int w = 0; w < 4; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int kk = 0; kk < kD / 16; ++kk) {
        for (int r = 0; r < 4; ++r) {
          const mma::At at = mma::AElement(lane, r, 0);
          const uint32_t byte = mma::Sw128BoxedOffset(16 * w + at.row, 16 * kk + at.col, kBox);
          ASSERT_EQ(byte % 4, 0u) << "a register is one aligned 32-bit read";
          for (int half = 0; half < 2; ++half) {
            const mma::At e = mma::AElement(lane, r, half);
            float& slot = q_regs[(16 * w + e.row) * kD + 16 * kk + e.col];
            ASSERT_TRUE(std::isnan(slot)) << "element read twice";
            slot = qs[byte / 2 + half];
          }
        }
      }
    }
  }
  ASSERT_EQ(q_regs, q);
  // S: Q from those registers, K through the descriptors (step kk reads 16 columns of d at box kk / 4,
  // 32 bytes a step).
  std::vector<float> s_mat(kRows * kKeys, 0.0f);
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t start = (kk / 4) * kBox + 32 * (kk % 4);
    for (int m = 0; m < kRows; ++m) {
      for (int n = 0; n < kKeys; ++n) {
        for (int kq = 0; kq < 16; ++kq) {
          s_mat[m * kKeys + n] += q_regs[m * kD + 16 * kk + kq] * read(ks, start, mma::Sw128KMajorOffset(n, kq));
        }
      }
    }
  }
  // Each thread's accumulators, then its P fragments, then O = P V through the MN-major descriptor.
  std::vector<float> o(kRows * kD, 0.0f);
  for (int c = 0; c < kKeys / 16; ++c) {
    std::vector<float> a(kRows * 16, NAN);  // P's 16 keys of chunk c as the threads' A registers give them
    for (int w = 0; w < 4; ++w) {
      for (int lane = 0; lane < 32; ++lane) {
        float acc[32];
        for (int j = 0; j < kKeys / 8; ++j) {
          for (int e = 0; e < 4; ++e) {
            const mma::At at = mma::CElement(lane, e);
            acc[4 * j + e] = s_mat[(16 * w + at.row) * kKeys + 8 * j + at.col];
          }
        }
        for (int r = 0; r < 4; ++r) {
          const float* pair = &acc[4 * (2 * c + mma::AFromCTile(r)) + mma::AFromCElement(r)];
          for (int half = 0; half < 2; ++half) {
            const mma::At at = mma::AElement(lane, r, half);
            a[(16 * w + at.row) * 16 + at.col] = pair[half];
          }
        }
      }
    }
    const uint32_t start = c * 16 * 128;
    for (int m = 0; m < kRows; ++m) {
      for (int n = 0; n < kD; ++n) {
        for (int kq = 0; kq < 16; ++kq) {
          o[m * kD + n] += a[m * 16 + kq] * read(vs, start, mma::Sw128MnMajorOffset(kq, n, kBox));
        }
      }
    }
  }
  for (int m = 0; m < kRows; ++m) {
    for (int n = 0; n < kD; ++n) {
      float want = 0.0f;
      for (int key = 0; key < kKeys; ++key) {
        float dot = 0.0f;
        for (int d = 0; d < kD; ++d) dot += q[m * kD + d] * k[key * kD + d];
        want += dot * v[key * kD + n];
      }
      ASSERT_EQ(o[m * kD + n], want) << "row " << m << " column " << n;
    }
  }
}

void ExpectCovers(const KSplit& s, int64_t k, int64_t k_tile, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_GE(s.ranks, 1);
  EXPECT_EQ(s.ranks & (s.ranks - 1), 0) << "a power of two";
  EXPECT_EQ(s.k_per_rank % k_tile, 0);
  EXPECT_GE(s.ranks * s.k_per_rank, k);                // the ranks cover K
  EXPECT_LT((s.ranks - 1) * s.k_per_rank, k);          // and the last one has work
}

TEST(LinearSplit, GlmShapes) {
  // GLM-4-9B decode at batch 8 on 132 multiprocessors: the N = 4096 projections split 8 ways
  // (512 blocks), QKV (N = 4608) 4 ways, gate/up (N = 27392, 428 blocks) and the LM head not at all.
  EXPECT_EQ(SplitSkinnyK(4096, 4096, 132).ranks, 8);
  EXPECT_EQ(SplitSkinnyK(4096, 13696, 132).ranks, 8);
  EXPECT_EQ(SplitSkinnyK(4608, 4096, 132).ranks, 4);
  EXPECT_EQ(SplitSkinnyK(27392, 4096, 132).ranks, 1);
  EXPECT_EQ(SplitSkinnyK(151552, 4096, 132).ranks, 1);
  // A 512-token prefill: 4 x 32 = 128 tiles for o_proj split in 2 (256 blocks on 264 slots); gate/up's
  // 856 tiles in 4 waves (the last 24 % full) split in 2: 7 fuller waves of half the work.
  EXPECT_EQ(SplitGemmK(512, 4096, 4096, 132).ranks, 2);
  EXPECT_EQ(SplitGemmK(512, 27392, 4096, 132).ranks, 2);
  // Small K keeps a rank's pipeline full: 8 k-tiles split at most in 2.
  EXPECT_EQ(SplitGemmK(128, 128, 256, 132).ranks, 2);
  EXPECT_EQ(SplitGemmK(128, 128, 224, 132).ranks, 1);
  // The wgmma GEMM, one block a SM: o_proj's 128 tiles at 512 tokens fill the GPU unsplit; one row
  // tile of a narrow projection splits 4 ways.
  EXPECT_EQ(SplitWgmmaK(512, 4096, 4096, 132).ranks, 1);
  EXPECT_EQ(SplitWgmmaK(97, 160, 4104, 132).ranks, 4);
  // QKV at 512 tokens: 144 tiles, two waves 55 % full; split in 2, three waves of half the work
  // (WaveCost 108 k-tiles against 134). gate/up's 856 tiles (6.5 waves) and down_proj's 128 not;
  // at 4096 tokens QKV's 1,152 tiles (8.7 waves) not either.
  EXPECT_EQ(SplitWgmmaK(512, 4608, 4096, 132).ranks, 2);
  EXPECT_EQ(WaveCost(144, 64, 2, 132, 3), 108);
  EXPECT_EQ(WaveCost(144, 64, 1, 132, 3), 134);
  EXPECT_EQ(SplitWgmmaK(512, 27392, 4096, 132).ranks, 1);
  EXPECT_EQ(SplitWgmmaK(512, 4096, 13696, 132).ranks, 1);
  EXPECT_EQ(SplitWgmmaK(4096, 4608, 4096, 132).ranks, 1);
  EXPECT_EQ(SplitWgmmaK(97, 160, 4104, 132).k_per_rank % 64, 0);
}

// The staged skinny kernel (2..32 rows) on 132 SMs: 4 blocks a SM at 8 rows (528 slots), 3 past them
// (396). Gate/up's 428 blocks fit 528 slots unsplit; on 396 a 2-way split (3 waves of 35 k-tiles
// against 2 of 66). down_proj's 64 blocks split 8 ways on 528 slots (one wave of 36 against 59 at 4
// ways), 4 on 396 (59 against 2 waves of 36); o_proj likewise; QKV's 72 blocks 4 ways (8 would be
// 576 blocks: two waves); the LM head's 2,368 not at all.
TEST(LinearSplit, StagedSkinnyGlmShapes) {
  EXPECT_EQ(SplitStagedSkinnyK(27392, 4096, 528).ranks, 1);
  EXPECT_EQ(SplitStagedSkinnyK(27392, 4096, 396).ranks, 2);
  EXPECT_EQ(WaveCost(428, 64, 2, 396, 2), 105);
  EXPECT_EQ(WaveCost(428, 64, 1, 396, 2), 132);
  EXPECT_EQ(SplitStagedSkinnyK(4096, 13696, 528).ranks, 8);
  EXPECT_EQ(SplitStagedSkinnyK(4096, 13696, 396).ranks, 4);
  EXPECT_EQ(SplitStagedSkinnyK(4096, 4096, 528).ranks, 8);
  EXPECT_EQ(SplitStagedSkinnyK(4096, 4096, 396).ranks, 4);
  EXPECT_EQ(SplitStagedSkinnyK(4608, 4096, 528).ranks, 4);
  EXPECT_EQ(SplitStagedSkinnyK(151552, 4096, 396).ranks, 1);
  EXPECT_EQ(SplitStagedSkinnyK(4096, 13696, 396).k_per_rank, 54 * kStagedSkinnyKTile);
}

// The tile width chosen for GLM-4-9B's projections at a 512-token prompt (132 SMs), by WaveCost
// with 192- and 256-wide k-tiles at 1.3 and 1.6 narrow ones (in tenths of a narrow k-tile):
// gate/up 428 wide tiles split in 2 (7 waves of 36 k-tiles: 4,032 against 4,690 narrow), down_proj
// 64 split in 2 (one wave of 111: 1,776 against 2,170), o_proj 64 split in 2 (576 against 670);
// QKV's 96 tiles of 192 in one wave (871) against its narrow grid split in 2 (1,080) and 72 wide
// ones (1,072). At 64 rows or fewer the narrow tile, always.
TEST(LinearSplit, WideWgmmaTilesWhereThePredictedWavesAreShorter) {
  EXPECT_EQ(WgmmaTileColumns(512, 27392, 4096, 132), 256);
  EXPECT_EQ(SplitWgmmaK(512, 27392, 4096, 132, 256).ranks, 2);
  EXPECT_EQ(WaveCost(428, 64, 2, 132, 3), 252);
  EXPECT_EQ(WaveCost(856, 64, 1, 132, 3), 469);
  EXPECT_EQ(WgmmaTileCost(512, 27392, 4096, 132, 256), 4032);
  EXPECT_EQ(WgmmaTileCost(512, 27392, 4096, 132, 128), 4690);
  EXPECT_EQ(WgmmaTileColumns(512, 4096, 13696, 132), 256);
  EXPECT_EQ(WgmmaTileColumns(512, 4096, 4096, 132), 256);
  EXPECT_EQ(WgmmaTileColumns(512, 4608, 4096, 132), 192);
  EXPECT_EQ(WgmmaTileCost(512, 4608, 4096, 132, 192), 871);
  EXPECT_EQ(WgmmaTileCost(512, 4608, 4096, 132, 128), 1080);
  EXPECT_EQ(WgmmaTileCost(512, 4608, 4096, 132, 256), 1072);
  EXPECT_EQ(SplitWgmmaK(512, 4608, 4096, 132, 192).ranks, 1);
  for (int64_t m : {1, 33, 64}) EXPECT_EQ(WgmmaTileColumns(m, 27392, 4096, 132), 128) << m;
  // The vision tower's 13,416 patches: long grids of either width, the wide tile's price decides.
  EXPECT_EQ(WgmmaTileColumns(13416, 4608, 1536, 132), 256);
  // A narrow matrix: one 256-wide tile half empty does not pay.
  EXPECT_EQ(WgmmaTileColumns(512, 128, 4096, 132), 128);
}

// A wide tile's weight operand is TMA boxes one after the other in a stage (two of 128 rows for
// 256 columns, three of 64 for 192): row box_rows b + r of box b sits where one K-major SW128
// operand of all the rows has it, so a single descriptor for m64n256k16 or m64n192k16 reads them.
TEST(MmaLayout, WeightBoxesAreOneWideOperand) {
  for (const auto& [box_rows, boxes] : {std::pair{128, 2}, std::pair{64, 3}}) {
    const uint32_t box_bytes = static_cast<uint32_t>(box_rows) * 64 * 2;
    for (int b = 0; b < boxes; ++b) {
      for (int r = 0; r < box_rows; ++r) {
        for (int k = 0; k < 64; k += 8) {
          EXPECT_EQ(mma::Sw128KMajorOffset(box_rows * b + r, k), b * box_bytes + mma::Sw128KMajorOffset(r, k));
        }
      }
    }
  }
}

TEST(LinearSplit, EveryShapeIsCoveredWithWorkForEveryRank) {
  for (int64_t n : {1, 2, 63, 64, 97, 160, 4096, 4608, 27392}) {
    for (int64_t k : {8, 24, 32, 40, 64, 200, 4104, 13696}) {
      ExpectCovers(SplitSkinnyK(n, k, 132), k, 32, "skinny");
      for (int64_t slots : {396, 528}) ExpectCovers(SplitStagedSkinnyK(n, k, slots), k, 64, "staged skinny");
      for (int64_t m : {65, 97, 512, 8192}) {
        ExpectCovers(SplitGemmK(m, n, k, 132), k, 32, "gemm");
        const KSplit w = SplitWgmmaK(m, n, k, 132);
        ExpectCovers(w, k, 64, "wgmma");  // a rank's K starts on a TMA box
        // Never slower than unsplit by the model it chooses by.
        const int64_t tiles = ((m + 127) / 128) * ((n + 127) / 128), k_tiles = (k + 63) / 64;
        EXPECT_LE(WaveCost(tiles, k_tiles, w.ranks, 132, 3), WaveCost(tiles, k_tiles, 1, 132, 3));
      }
    }
  }
}

// GroupedGemmTile: every (row tile, column tile) of the grid once; the first group goes down its
// rows first; a group of 1 is the grid's own order; and GLM-4-9B's gate/up at a 512-token prompt
// (4 x 214 tiles) has every row tile in its first wave of 132 blocks, each column tile of W in it
// wanted by all four (the old order put one row tile in that wave: W read four times).
TEST(LinearSplit, GroupedTilesCoverTheGridAndShareW) {
  for (int64_t group : {1, 2, 8}) {
    for (int64_t m_tiles : {1, 3, 4, 8, 9, 17, 105}) {
      for (int64_t n_tiles : {1, 5, 32, 214}) {
        std::vector<int> seen(m_tiles * n_tiles, 0);
        for (int64_t b = 0; b < m_tiles * n_tiles; ++b) {
          const GemmTileAt at = GroupedGemmTile(b, n_tiles, m_tiles, group);
          ASSERT_TRUE(at.m >= 0 && at.m < m_tiles && at.n >= 0 && at.n < n_tiles)
              << "block " << b << " of " << m_tiles << " x " << n_tiles << ", group " << group;
          ++seen[at.m * n_tiles + at.n];
          if (group == 1) {
            EXPECT_TRUE(at.m == b / n_tiles && at.n == b % n_tiles) << b;
          }
        }
        for (int64_t i = 0; i < m_tiles * n_tiles; ++i) ASSERT_EQ(seen[i], 1) << "tile " << i << ", group " << group;
        if (group > 1 && m_tiles >= group) {  // down the group's rows first, then the next column
          EXPECT_EQ(GroupedGemmTile(1, n_tiles, m_tiles, group).m, 1);
          if (n_tiles > 1) {  // block `group` is past a one-column grid of `group` row tiles
            const GemmTileAt next = GroupedGemmTile(group, n_tiles, m_tiles, group);
            EXPECT_TRUE(next.m == 0 && next.n == 1) << next.m << ", " << next.n;
          }
        }
      }
    }
  }
  std::set<int64_t> rows, columns;
  for (int64_t b = 0; b < 132; ++b) {
    const GemmTileAt at = GroupedGemmTile(b, 214, 4, kGemmTileGroup);
    rows.insert(at.m);
    columns.insert(at.n);
  }
  EXPECT_EQ(rows.size(), 4u);
  EXPECT_EQ(columns.size(), 33u);  // 132 blocks: 33 column tiles of W, each for all 4 row tiles
}

// The one-shot all-reduce waits for a peer behind, goes on with one at this call or one call
// ahead, and fails the launch for one further ahead (issue 19's review: it used to accept any).
TEST(PeerFlags, ReadyAtThisCallOrTheNextWaitBehindFailBeyond) {
  EXPECT_EQ(ClassifyPeerFlag(7, 7), PeerFlag::kReady);
  EXPECT_EQ(ClassifyPeerFlag(8, 7), PeerFlag::kReady);
  EXPECT_EQ(ClassifyPeerFlag(6, 7), PeerFlag::kWait);
  EXPECT_EQ(ClassifyPeerFlag(0, 7), PeerFlag::kWait);  // never set yet
  EXPECT_EQ(ClassifyPeerFlag(9, 7), PeerFlag::kCorrupt);
  EXPECT_EQ(ClassifyPeerFlag(0x80000000u, 7), PeerFlag::kCorrupt);
  EXPECT_EQ(ClassifyPeerFlag(0, 0xFFFFFFFFu), PeerFlag::kReady);  // the epoch wrapped
  EXPECT_EQ(ClassifyPeerFlag(0xFFFFFFFEu, 0xFFFFFFFFu), PeerFlag::kWait);
}

// cudaFuncSetAttribute is per device: every device gets its own call, once, and a failure is retried.
TEST(PerDevice, EachDeviceIsSetOnceAndFailuresAreRetried) {
  PerDeviceOnce<int, 0> once;
  int calls = 0;
  auto ok = [&] { ++calls; return 0; };
  EXPECT_EQ(once.Get(0, ok), 0);
  EXPECT_EQ(once.Get(0, ok), 0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(once.Get(3, ok), 0);  // another rank's device: the attribute is set there too
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(once.Get(5, [] { return 7; }), 7);
  EXPECT_EQ(once.Get(5, ok), 0);  // tried again after the failure
  EXPECT_EQ(calls, 3);
}

// The quantized weight's packing: every code comes back from its word, and a 16-byte load's
// codes are consecutive inputs of one row (what the GEMV dequantizes per load).
TEST(QuantPack, CodesRoundTripAndLoadsStayInARow) {
  std::mt19937 rng(3);
  for (const int bits : {4, 8}) {
    const int64_t n = 5, k = 3 * CodesPerLoad(bits);
    std::vector<uint8_t> codes(n * k);
    for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() % (1u << bits));
    std::vector<uint32_t> words(n * PackedRowWords(k, bits));
    PackQuantCodes(codes.data(), n, k, bits, words.data());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(PackedCode(words.data(), k, bits, r, j), codes[r * k + j]) << bits;
    }
    EXPECT_EQ(PackedRowWords(k, bits) % 4, 0) << "a row is whole 16-byte loads";
    // Load i of row r holds inputs [i * CodesPerLoad, (i + 1) * CodesPerLoad), low bits first.
    const uint32_t* load = words.data() + 2 * PackedRowWords(k, bits) + 4;  // row 2, load 1
    EXPECT_EQ(load[0] & ((1u << bits) - 1), codes[2 * k + CodesPerLoad(bits)]);
    EXPECT_EQ(load[3] >> (32 - bits), codes[2 * k + 2 * CodesPerLoad(bits) - 1]);
  }
}

// The swizzles, from the CUDA driver's description of the TMA modes (the 16-byte chunk within
// each span XORed with the row's position in the 8 x 128-byte pattern), row by row rather than
// by address bits: 128-byte rows, chunk c ^ r % 8; 64-byte rows, c ^ (r / 2) % 4; 32-byte rows,
// c ^ (r / 4) % 2. Each a permutation of every 1024-byte atom, and eight consecutive rows taking
// the same chunk (a quarter-warp's 16-byte accesses) touch eight different 16-byte bank groups.
TEST(QuantGemmLayout, SwizzlesAreTheTmaModesAndConflictFree) {
  for (const int row_bytes : {32, 64, 128}) {
    SCOPED_TRACE(row_bytes);
    const int rows_per_atom = 1024 / row_bytes, chunks = row_bytes / 16;
    std::set<uint32_t> seen;
    for (int r = 0; r < 3 * rows_per_atom; ++r) {
      for (int c = 0; c < chunks; ++c) {
        const int pattern_row = (r * row_bytes / 128) % 8;  // the 128-byte line of the 1024-byte pattern
        const int want_chunk = c ^ (pattern_row % chunks);
        const uint32_t at = SwizzledOffset(r * row_bytes + 16 * c, row_bytes);
        EXPECT_EQ(at, static_cast<uint32_t>(r * row_bytes + 16 * want_chunk)) << "row " << r << " chunk " << c;
        EXPECT_TRUE(seen.insert(at).second);
        EXPECT_EQ(at / 1024, static_cast<uint32_t>(r * row_bytes / 1024)) << "stays in its atom";
      }
    }
    for (int r0 = 0; r0 < 64; r0 += 8) {
      for (int c = 0; c < chunks; ++c) {
        std::set<uint32_t> banks;  // 16-byte bank groups: offset / 16 mod 8
        for (int r = r0; r < r0 + 8; ++r) banks.insert((SwizzledOffset(r * row_bytes + 16 * c, row_bytes) / 16) % 8);
        EXPECT_EQ(banks.size(), 8u) << "rows " << r0 << ".. chunk " << c;
      }
    }
  }
  EXPECT_EQ(SwizzledOffset(6 * 64 + 16, 64), 6u * 64 + 16 * (1 ^ 3));
  EXPECT_EQ(SwizzledOffset(5 * 32, 32), 5u * 32 + 16);
  EXPECT_EQ(SwizzledOffset(100, 16), 100u) << "no swizzle";
}

// One k-tile of a segment through the dequantizing warpgroup, emulated: the codes box as TMA
// writes it (32 or 64 bytes of each of 128 rows at byte column k0 * bits / 8, zeros past the
// segment's rows and the row's end), thread r's loads at CodeLoadOffset unpacked low bits first,
// chunks written at TileChunkOffset; then wgmma's reading of a K-major operand with the 128-byte
// swizzle (rows of 128 bytes, 8-row groups 1024 bytes apart, chunk c of row n at c ^ n % 8)
// must find, for tile row n and input kk, the code of segment row tile_n + n, input k0 + kk.
TEST(QuantGemmLayout, DequantizingThreadsPlaceEveryCodeWhereWgmmaReadsIt) {
  std::mt19937 rng(5);
  for (const QuantCode code : {QuantCode::kInt4, QuantCode::kInt8, QuantCode::kFp8}) {
    const int bits = QuantCodeBits(code), row_bytes = QuantGemmCodeRowBytes(code);
    const int per_load = static_cast<int>(CodesPerLoad(bits)), loads = row_bytes / 16;
    SCOPED_TRACE(bits);
    const int64_t n = 150, k = 160;  // the second row tile and the third k-tile are partial
    std::vector<uint8_t> codes(n * k);
    for (uint8_t& c : codes) c = static_cast<uint8_t>(1 + rng() % ((1u << bits) - 1));  // 0: "nothing there"
    std::vector<uint32_t> words(n * PackedRowWords(k, bits));
    PackQuantCodes(codes.data(), n, k, bits, words.data());
    const auto* bytes = reinterpret_cast<const uint8_t*>(words.data());
    const int64_t row_pitch = k * bits / 8;
    for (const int64_t tile_n : {int64_t{0}, int64_t{128}}) {
      for (const int64_t k0 : {int64_t{0}, int64_t{64}, int64_t{128}}) {
        std::vector<uint8_t> stage(kQuantGemmBN * row_bytes, 0);
        for (int r = 0; r < kQuantGemmBN; ++r) {  // TMA: the box, swizzled
          for (int b = 0; b < row_bytes; ++b) {
            const int64_t row = tile_n + r, col = k0 * bits / 8 + b;
            if (row < n && col < row_pitch) stage[SwizzledOffset(r * row_bytes + b, row_bytes)] = bytes[row * row_pitch + col];
          }
        }
        std::vector<uint16_t> tile(kQuantGemmBN * kQuantGemmBK, 0xFFFF);  // "bf16" values: the codes
        for (int r = 0; r < kQuantGemmBN; ++r) {
          for (int j = 0; j < loads; ++j) {
            const bool live = tile_n + r < n && k0 + j * per_load < k;
            uint32_t w[4] = {};
            if (live) std::memcpy(w, &stage[CodeLoadOffset(r, j, row_bytes)], 16);
            for (int u = 0; u < per_load / 8; ++u) {
              uint16_t chunk[8];
              for (int e = 0; e < 8; ++e) {
                const int q = 8 * u + e;  // code q of the load
                chunk[e] = static_cast<uint16_t>((w[q / (32 / bits)] >> (bits * (q % (32 / bits)))) & ((1u << bits) - 1));
              }
              std::memcpy(reinterpret_cast<uint8_t*>(tile.data()) + TileChunkOffset(r, j * per_load / 8 + u), chunk, 16);
            }
          }
        }
        for (int nn = 0; nn < kQuantGemmBN; ++nn) {  // wgmma's view
          for (int kk = 0; kk < kQuantGemmBK; ++kk) {
            const int byte = (nn / 8) * 1024 + (nn % 8) * 128 + (((2 * kk) / 16) ^ (nn % 8)) * 16 + (2 * kk) % 16;
            const uint16_t got = tile[byte / 2];
            const int64_t row = tile_n + nn, input = k0 + kk;
            const uint16_t want = row < n && input < k ? codes[row * k + input] : 0;
            ASSERT_EQ(got, want) << "tile row " << nn << " input " << kk << " at k0 " << k0 << " tile_n " << tile_n;
          }
        }
      }
    }
  }
}

// Every format's ring fits the 227 KB a block may take with its barriers and alignment slack, deep
// enough to cover TMA's latency; tiles stay on 1024-byte boundaries (the swizzles are offsets);
// the epilogue's fp32 tile fits over the x stages. Act-order segments are not taken.
TEST(QuantGemmLayout, StagesFitAndActOrderIsLeftToTheScratch) {
  for (const QuantCode code : {QuantCode::kInt4, QuantCode::kInt8, QuantCode::kFp8, QuantCode::kBf16}) {
    SCOPED_TRACE(static_cast<int>(code));
    EXPECT_LE(QuantGemmSmemBytes(code), kSm90MaxDynamicSmem);
    EXPECT_GE(QuantGemmStages(code), 5);
    EXPECT_EQ(QuantGemmCodeRowBytes(code) * kQuantGemmBN % 1024, 0);
    EXPECT_GE(static_cast<size_t>(QuantGemmStages(code)) * 2 * kQuantGemmBM * kQuantGemmBK, size_t{4} * kQuantGemmBM * (kQuantGemmBN + 4));
  }
  EXPECT_EQ(QuantGemmStages(QuantCode::kInt4), 6);
  EXPECT_EQ(QuantGemmStages(QuantCode::kInt8), 5);
  EXPECT_TRUE(QuantGemmTakesShape(QuantCode::kInt4, 4096, false, 0));
  EXPECT_TRUE(QuantGemmTakesShape(QuantCode::kInt4, 3424, false, 0));  // GLM-4-9B's down_proj at tp 4
  EXPECT_FALSE(QuantGemmTakesShape(QuantCode::kInt4, 4096, true, 0)) << "act order";
  EXPECT_FALSE(QuantGemmTakesShape(QuantCode::kInt4, 96, true, 128)) << "a padded act-order slice";
  EXPECT_FALSE(QuantGemmTakesShape(QuantCode::kInt4, 48, false, 0)) << "not whole loads of codes";
  EXPECT_TRUE(QuantGemmTakesShape(QuantCode::kInt8, 48, false, 0));
  EXPECT_FALSE(QuantGemmTakesShape(QuantCode::kBf16, 4, false, 0)) << "x rows of 8 bytes: not a TMA pitch";
}


// The W8A8 GEMM: its ring and the epilogue's fp32 tile fit; x's codes, scales and sums fit in the
// m x k bf16 the linear scratch holds (k >= 16, more than one row); it takes per-row 8-bit
// segments whose codes match the input's kind; its K split gives every rank whole 128-code
// k-tiles (TMA boxes start on one) and work.
TEST(W8A8GemmLayout, StagesScratchShapesAndSplits) {
  EXPECT_LE(kW8SmemBytes, kSm90MaxDynamicSmem);
  EXPECT_GE(kW8Stages * kW8StageBytes, size_t{4} * kW8BM * (kW8BN + 4));
  EXPECT_EQ(size_t{kW8BM} * kW8BK % 1024, 0u);
  for (const int64_t m : {2, 65, 200, 512, 4096}) {
    for (const int64_t k : {16, 48, 3424, 4096, 13696}) {
      const W8A8Scratch l = W8A8ScratchLayout(m, k);
      EXPECT_LE(l.bytes, static_cast<size_t>(2 * m * k)) << m << " x " << k;
      EXPECT_EQ(l.scales % 16, 0u);
      EXPECT_GE(l.scales, static_cast<size_t>(m * k));
      EXPECT_EQ(l.sums, l.scales + 4 * static_cast<size_t>(m));
    }
  }
  EXPECT_TRUE(W8A8GemmTakesShape(QuantCode::kFp8, true, 4096, 0, false, 0));
  EXPECT_TRUE(W8A8GemmTakesShape(QuantCode::kInt8, false, 3424, 0, false, 3424));  // down_proj at tp 4
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kInt8, true, 4096, 0, false, 0)) << "int8 weights, fp8 inputs";
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kFp8, false, 4096, 0, false, 0)) << "fp8 weights, int8 inputs";
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kInt4, false, 4096, 0, false, 0));
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kInt8, false, 4096, 128, false, 0)) << "group scales";
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kInt8, false, 4096, 0, true, 0)) << "act order";
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kInt8, false, 40, 0, false, 0)) << "not a 16-byte row pitch";
  EXPECT_FALSE(W8A8GemmTakesShape(QuantCode::kInt8, false, 96, 0, false, 128)) << "a padded slice";
  for (const int64_t m : {65, 512, 4096}) {
    for (const int64_t n : {1024, 4608, 4096, 27392}) {
      for (const int64_t k : {3424, 4096, 13696}) {
        const KSplit split = SplitW8A8K(m, n, k, 132);
        EXPECT_EQ(split.k_per_rank % kW8BK, 0) << m << " " << n << " " << k;
        EXPECT_GE(split.ranks * split.k_per_rank, k);
        EXPECT_LT((split.ranks - 1) * split.k_per_rank, k) << "the last rank has work";
      }
    }
  }
}

}  // namespace
}  // namespace ag::cuda
