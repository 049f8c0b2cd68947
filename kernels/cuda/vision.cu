// The vision tower's kernels. Each is small next to the tower's linears (which
// run on the GEMM); segment attention is the exception: the head sizes of
// flash_attention.cuh (FlashHeadDim: GLM-4.1V's 128 among them) take the tensor-core flash
// kernel, any other the FMA kernel here (a warp per query row and head,
// online softmax), correct at every size and far slower.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/vision.cuh"

namespace ag::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((items + kThreads - 1) / kThreads, 65535 * 8)));
}

__global__ void CopyKernel(const bf16* x, int64_t n, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) out[i] = x[i];
}

__global__ void ScatterKernel(const bf16* src, const int32_t* rows, int64_t m, int64_t width, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t n = m * width;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / width, c = i % width;
    out[static_cast<int64_t>(rows[r]) * width + c] = src[i];
  }
}

// One block per row: mean, then the variance about it, both in fp32.
__global__ void LayerNormKernel(const bf16* x, const bf16* w, const bf16* b, int64_t n, float eps, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  __shared__ float scratch[kThreads / 32];
  const bf16* xr = x + blockIdx.x * n;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += __bfloat162float(xr[i]);
  const float mean = BlockSum<kThreads / 32>(sum, scratch) / static_cast<float>(n);
  float var = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float d = __bfloat162float(xr[i]) - mean;
    var += d * d;
  }
  const float rstd = rsqrtf(BlockSum<kThreads / 32>(var, scratch) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float y = (__bfloat162float(xr[i]) - mean) * rstd * __bfloat162float(w[i]) + __bfloat162float(b[i]);
    out[blockIdx.x * n + i] = __float2bfloat16(y);
  }
}

__global__ void GeluKernel(const bf16* x, int64_t n, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const float v = __bfloat162float(x[i]);
    out[i] = __float2bfloat16(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

__device__ __forceinline__ float Cubic1(float x) { return ((-0.75f + 2) * x - (-0.75f + 3)) * x * x + 1; }
__device__ __forceinline__ float Cubic2(float x) {
  return ((-0.75f * x - 5 * -0.75f) * x + 8 * -0.75f) * x - 4 * -0.75f;
}

// One thread per (patch, channel): the 4 x 4 bicubic taps of the table, border-clamped.
__global__ void PosEmbedKernel(const bf16* x, const bf16* table, int64_t side, const int32_t* patch_pos, int64_t rows,
                               int64_t width, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t n = rows * width;
  const float size = static_cast<float>(side);
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / width, c = i % width;
    const int32_t* p = patch_pos + r * 4;
    const float gx = ((static_cast<float>(p[1]) + 0.5f) / static_cast<float>(p[3])) * 2.0f - 1.0f;
    const float gy = ((static_cast<float>(p[0]) + 0.5f) / static_cast<float>(p[2])) * 2.0f - 1.0f;
    const float ix = ((gx + 1.0f) * size - 1.0f) / 2.0f, iy = ((gy + 1.0f) * size - 1.0f) / 2.0f;
    const float fx = floorf(ix), fy = floorf(iy), tx = ix - fx, ty = iy - fy;
    const float cx[4] = {Cubic2(tx + 1.0f), Cubic1(tx), Cubic1(1.0f - tx), Cubic2(2.0f - tx)};
    const float cy[4] = {Cubic2(ty + 1.0f), Cubic1(ty), Cubic1(1.0f - ty), Cubic2(2.0f - ty)};
    const int64_t x0 = static_cast<int64_t>(fx) - 1, y0 = static_cast<int64_t>(fy) - 1;
    float acc = 0.0f;
#pragma unroll
    for (int yi = 0; yi < 4; ++yi) {
      const int64_t ty_i = min(max(y0 + yi, int64_t{0}), side - 1);
      float along = 0.0f;
#pragma unroll
      for (int xi = 0; xi < 4; ++xi) {
        const int64_t tx_i = min(max(x0 + xi, int64_t{0}), side - 1);
        along += __bfloat162float(table[(ty_i * side + tx_i) * width + c]) * cx[xi];
      }
      acc += along * cy[yi];
    }
    out[i] = __float2bfloat16(__bfloat162float(x[i]) + acc);
  }
}

// One thread per (row, channel pair d, d + half), over every head of the row: the angle depends on
// the row and d only, so its powf and sincosf (most of the work: run 3 measured the two rotaries of
// a screenshot at 6.0 ms, 6x their bytes' time, with a thread per head) are paid once for all heads.
// Neighbouring threads take neighbouring d: each head's halves are read and written whole.
__global__ void VisionRotaryKernel(const bf16* x, const int32_t* patch_pos, int64_t rows, int64_t heads,
                                   int64_t head_dim, float theta, bf16* out, int64_t x_stride, int64_t out_stride) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t half = head_dim / 2, quarter = head_dim / 4;
  const int64_t n = rows * half;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t d = i % half, r = i / half;
    const float inv_freq = 1.0f / powf(theta, static_cast<float>(2 * (d % quarter)) / static_cast<float>(half));
    const float angle = static_cast<float>(patch_pos[r * 4 + (d < quarter ? 0 : 1)]) * inv_freq;
    float s, c;
    sincosf(angle, &s, &c);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t in = r * x_stride + h * head_dim + d, at = r * out_stride + h * head_dim + d;
      const float x1 = __bfloat162float(x[in]), x2 = __bfloat162float(x[in + half]);
      out[at] = __float2bfloat16(x1 * c - x2 * s);
      out[at + half] = __float2bfloat16(x2 * c + x1 * s);
    }
  }
}

constexpr int kMaxHeadDim = 256;

// A warp per (row, head); lane l holds channels l, l + 32, ... of q and of the
// output; keys one at a time with an online softmax.
__global__ void SegmentAttentionKernel(const bf16* q, const bf16* k, const bf16* v, const int32_t* offsets,
                                       int64_t segments, int64_t rows, int64_t heads, int64_t head_dim, bf16* out,
                                       int64_t in_stride) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t warp = (blockIdx.x * int64_t{kThreads} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows * heads) return;  // whole warps leave together
  const int64_t row = warp / heads, head = warp % heads;
  // The row's segment: the last offset at or below it.
  int64_t lo = 0, hi = segments;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= row) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t begin = offsets[lo], end = offsets[lo + 1];
  const int64_t width = heads * head_dim;
  const float scale = rsqrtf(static_cast<float>(head_dim));
  float qv[kMaxHeadDim / 32], acc[kMaxHeadDim / 32];
#pragma unroll
  for (int j = 0; j < kMaxHeadDim / 32; ++j) {
    const int64_t c = lane + 32 * j;
    qv[j] = c < head_dim ? __bfloat162float(q[row * in_stride + head * head_dim + c]) * scale : 0.0f;
    acc[j] = 0.0f;
  }
  float best = -INFINITY, total = 0.0f;
  for (int64_t key = begin; key < end; ++key) {
    const bf16* kr = k + key * in_stride + head * head_dim;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxHeadDim / 32; ++j) {
      const int64_t c = lane + 32 * j;
      if (c < head_dim) dot += qv[j] * __bfloat162float(kr[c]);
    }
    dot = WarpSum(dot);
    const float next_best = fmaxf(best, dot);
    const float rescale = __expf(best - next_best), weight = __expf(dot - next_best);
    total = total * rescale + weight;
    const bf16* vr = v + key * in_stride + head * head_dim;
#pragma unroll
    for (int j = 0; j < kMaxHeadDim / 32; ++j) {
      const int64_t c = lane + 32 * j;
      if (c < head_dim) acc[j] = acc[j] * rescale + weight * __bfloat162float(vr[c]);
    }
    best = next_best;
  }
#pragma unroll
  for (int j = 0; j < kMaxHeadDim / 32; ++j) {
    const int64_t c = lane + 32 * j;
    if (c < head_dim) out[row * width + head * head_dim + c] = __float2bfloat16(acc[j] / total);
  }
}

__global__ void MergeRowsKernel(const bf16* x, int64_t rows, int64_t width, int64_t group, bf16* out) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / width, c = i % width;  // coalesced reads of x
    const int64_t e = r / group, j = r % group;
    out[e * group * width + c * group + j] = x[i];
  }
}

}  // namespace

cudaError_t LaunchScatterRows(const bf16* x, int64_t tokens, const bf16* src, const int32_t* rows, int64_t m,
                              int64_t width, bf16* out, cudaStream_t stream) {
  if (out != x && tokens * width > 0) {
    const cudaError_t e =
        LaunchKernel(CopyKernel, dim3(GridFor(tokens * width)), dim3(kThreads), 0, stream, x, tokens * width, out);
    if (e != cudaSuccess) return e;
  }
  if (m * width == 0) return cudaSuccess;
  return LaunchKernel(ScatterKernel, dim3(GridFor(m * width)), dim3(kThreads), 0, stream, src, rows, m, width, out);
}

cudaError_t LaunchLayerNorm(const bf16* x, const bf16* w, const bf16* b, int64_t rows, int64_t n, float eps, bf16* out,
                            cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  return LaunchKernel(LayerNormKernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream, x, w, b, n, eps,
                      out);
}

cudaError_t LaunchGelu(const bf16* x, int64_t n, bf16* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return LaunchKernel(GeluKernel, dim3(GridFor(n)), dim3(kThreads), 0, stream, x, n, out);
}

cudaError_t LaunchVisionPosEmbed(const bf16* x, const bf16* table, int64_t side, const int32_t* patch_pos, int64_t rows,
                                 int64_t width, bf16* out, cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  return LaunchKernel(PosEmbedKernel, dim3(GridFor(rows * width)), dim3(kThreads), 0, stream, x, table, side, patch_pos,
                      rows, width, out);
}

cudaError_t LaunchVisionRotary(const bf16* x, const int32_t* patch_pos, int64_t rows, int64_t heads, int64_t head_dim,
                               float theta, bf16* out, cudaStream_t stream, int64_t x_stride, int64_t out_stride) {
  if (rows == 0) return cudaSuccess;
  if (head_dim % 4 != 0 || x_stride < 0 || out_stride < 0) return cudaErrorInvalidValue;
  const int64_t width = heads * head_dim;
  if ((x_stride != 0 && x_stride < width) || (out_stride != 0 && out_stride < width)) return cudaErrorInvalidValue;
  return LaunchKernel(VisionRotaryKernel, dim3(GridFor(rows * head_dim / 2)), dim3(kThreads), 0, stream, x,
                      patch_pos, rows, heads, head_dim, theta, out, x_stride != 0 ? x_stride : width,
                      out_stride != 0 ? out_stride : width);
}

cudaError_t LaunchSegmentAttention(const bf16* q, const bf16* k, const bf16* v, const int32_t* offsets,
                                   int64_t segments, int64_t rows, int64_t heads, int64_t head_dim, bf16* out,
                                   cudaStream_t stream, int64_t in_stride) {
  if (rows == 0 || segments == 0) return cudaSuccess;
  if (head_dim <= 0 || head_dim > kMaxHeadDim) return cudaErrorInvalidValue;
  if (in_stride == 0) in_stride = heads * head_dim;
  if (in_stride < heads * head_dim) return cudaErrorInvalidValue;
  if (FlashHeadDim(head_dim)) {  // the tensor cores; other head sizes take the warp-a-row kernel
    return LaunchFlashSegmentAttention(q, k, v, offsets, segments, rows, heads, head_dim, out, stream, in_stride);
  }
  const int64_t warps = rows * heads;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return LaunchKernel(SegmentAttentionKernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, q, k, v,
                      offsets, segments, rows, heads, head_dim, out, in_stride);
}

cudaError_t LaunchMergeRows(const bf16* x, int64_t rows, int64_t width, int64_t group, bf16* out, cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  if (group <= 0 || rows % group != 0) return cudaErrorInvalidValue;
  return LaunchKernel(MergeRowsKernel, dim3(GridFor(rows * width)), dim3(kThreads), 0, stream, x, rows, width, group,
                      out);
}

}  // namespace ag::cuda
