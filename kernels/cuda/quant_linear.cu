#include "kernels/cuda/quant_linear.cuh"

#include "kernels/cuda/quant_gemm.cuh"
#include "kernels/cuda/w8a8_gemm.cuh"

namespace ag::cuda {
namespace {

// The segment's shape against k: whole 16-byte loads of codes, each inside one group.
bool SegmentFits(const QuantSegment& s, int64_t k) {
  const int64_t per_load = CodesPerLoad(QuantCodeBits(s.code));
  if (s.n < 0 || s.n_begin < 0 || k <= 0 || k % per_load != 0 || s.group < 0) return false;
  const bool values = s.code == QuantCode::kBf16;  // no scales, no groups
  if (s.n > 0 && (s.codes == nullptr || (s.scales == nullptr && !values))) return false;
  if (values) return s.group == 0 && s.group_offset == 0 && s.input_order == nullptr;
  if (s.group == 0) return s.group_offset == 0;
  if (s.code == QuantCode::kFp8) return false;  // E4M3 weights have one scale a row
  // Every load inside one group: groups and the offset in whole loads.
  return s.group % per_load == 0 && s.group_offset >= 0 && s.group_offset < s.group && s.group_offset % per_load == 0;
}

// One thread per 16-byte load of codes: kCodes weights of one row.
template <QuantCode kCode>
__global__ void __launch_bounds__(256) DequantizeKernel(QuantSegment s, int64_t k, bf16* w) {
  constexpr int kCodes = 128 / QuantCodeBits(kCode);
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t stored = StoredK(s, k);
  const int64_t loads = stored / kCodes, groups = SegmentGroups(stored, s.group, s.group_offset);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < s.n * loads;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / loads, first = (t % loads) * kCodes;
    float scale, zero, v[kCodes];
    GroupParams<kCode>(s, row, groups, GroupOf(first, s.group, s.group_offset), &scale, &zero);
    DequantizeLoad<kCode>(reinterpret_cast<const uint4*>(s.codes)[t], zero, v);
#pragma unroll
    for (int j = 0; j < kCodes; ++j) v[j] *= scale;  // s * (q - z): one rounding, as the CPU's
    bf16* out = w + (s.n_begin + row) * k;
    if (s.input_order == nullptr) {
#pragma unroll
      for (int j = 0; j < kCodes; j += 8) Store8(out + first + j, FromFloat8(v + j));
    } else {  // act order: each weight back to its own input, so the GEMM reads x as it is
#pragma unroll
      for (int j = 0; j < kCodes; ++j) {
        const int32_t input = s.input_order[first + j];
        if (input >= 0) out[input] = __float2bfloat16(v[j]);  // -1: a rank's padding
      }
    }
  }
}

template <QuantCode kCode>
cudaError_t LaunchDequantizeFor(const QuantSegment& s, int64_t k, bf16* w, cudaStream_t stream) {
  const int64_t loads = s.n * (StoredK(s, k) / (128 / QuantCodeBits(kCode)));
  const int64_t blocks = std::min<int64_t>((loads + 255) / 256, int64_t{1} << 16);
  return LaunchKernel(DequantizeKernel<kCode>, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, s, k, w);
}

// One thread per 8 outputs: y[r, j..j+8) gathered from row r of x.
__global__ void __launch_bounds__(256) OrderInputsKernel(const bf16* x, int64_t m, int64_t k, const int32_t* order,
                                                         bf16* y, int64_t y_k) {
  AllowNextKernel();
  WaitForPreviousKernel();
  const int64_t chunks = y_k / 8;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < m * chunks;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t / chunks, j = (t % chunks) * 8;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int32_t input = order[j + e];
      v[e] = input >= 0 ? __bfloat162float(x[r * k + input]) : 0.0f;  // -1: a rank's padding
    }
    Store8(y + r * y_k + j, FromFloat8(v));
  }
}

// The shapes both quantized paths take: the segment against p, and the pair epilogues' needs.
bool SegmentLinearFits(const LinearParams& p, const QuantSegment& s) {
  // A padded act-order segment reads x widened to its stored_k (LaunchOrderInputs).
  if (s.stored_k > 0 && s.stored_k != p.k) return false;
  if (!SegmentFits(s, p.k) || p.m < 0 || s.n_begin + s.n > p.n) return false;
  // A norm prologue: where the decode path applies it (QuantLinearNormalises).
  if (p.norm_w != nullptr && !QuantLinearNormalises(p.m, s.code, s.input_order != nullptr)) return false;
  const bool pairs = p.epilogue == Epilogue::kSiluMul || p.epilogue == Epilogue::kQkvRope;
  if (pairs && (s.n % 2 != 0 || s.n_begin % 2 != 0)) return false;
  // The kernels store column pairs: an odd segment's last pair would overwrite the next segment's first column.
  if (s.n % 2 != 0 && s.n_begin + s.n != p.n) return false;
  if (p.epilogue == Epilogue::kQkvRope && !QkvRopeValid(p)) return false;
  return true;
}

}  // namespace

cudaError_t LaunchOrderInputs(const bf16* x, int64_t m, int64_t k, const int32_t* order, bf16* y, int64_t y_k,
                              cudaStream_t stream) {
  if (x == nullptr || order == nullptr || y == nullptr || m < 0 || k <= 0 || y_k < k || y_k % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  if (m == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((m * (y_k / 8) + 255) / 256, int64_t{1} << 16);
  return LaunchKernel(OrderInputsKernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, x, m, k, order, y,
                      y_k);
}

cudaError_t LaunchQuantGemm(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) {
  if (!SegmentLinearFits(p, s)) return cudaErrorInvalidValue;
  if (!QuantGemmUsable(p, s)) return cudaErrorNotSupported;
  if (p.m == 0 || s.n == 0) return cudaSuccess;
  switch (s.code) {
    case QuantCode::kInt4:
      return LaunchQuantGemmFor<QuantCode::kInt4>(p, s, stream);
    case QuantCode::kInt8:
      return LaunchQuantGemmFor<QuantCode::kInt8>(p, s, stream);
    case QuantCode::kFp8:
      return LaunchQuantGemmFor<QuantCode::kFp8>(p, s, stream);
    case QuantCode::kBf16:
      return LaunchQuantGemmFor<QuantCode::kBf16>(p, s, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchW8A8Gemm(const LinearParams& p, const QuantSegment& s, InputQuantCode act, const void* x_codes,
                           cudaStream_t stream) {
  if (!SegmentLinearFits(p, s) || x_codes == nullptr || p.norm_w != nullptr) return cudaErrorInvalidValue;
  if (!W8A8GemmTakes(s, act, p.k) || reinterpret_cast<uintptr_t>(x_codes) % 16 != 0) return cudaErrorNotSupported;
  if (p.m == 0 || s.n == 0) return cudaSuccess;
  return act == InputQuantCode::kFp8 ? LaunchW8A8GemmFor<true>(p, s, x_codes, stream)
                                     : LaunchW8A8GemmFor<false>(p, s, x_codes, stream);
}

cudaError_t LaunchQuantLinear(const LinearParams& p, const QuantSegment& s, cudaStream_t stream) {
  if (!SegmentLinearFits(p, s)) return cudaErrorInvalidValue;
  if (p.m == 0 || s.n == 0) return cudaSuccess;
  switch (s.code) {
    case QuantCode::kInt4:
      return LaunchQuantFor<QuantCode::kInt4>(p, s, stream);
    case QuantCode::kInt8:
      return LaunchQuantFor<QuantCode::kInt8>(p, s, stream);
    case QuantCode::kFp8:
      return LaunchQuantFor<QuantCode::kFp8>(p, s, stream);
    case QuantCode::kBf16:
      return LaunchQuantFor<QuantCode::kBf16>(p, s, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchDequantize(const QuantSegment& s, int64_t k, bf16* w, cudaStream_t stream) {
  if (s.stored_k > 0 && (s.stored_k < k || s.input_order == nullptr)) return cudaErrorInvalidValue;
  if (!SegmentFits(s, StoredK(s, k)) || w == nullptr) return cudaErrorInvalidValue;
  if (s.n == 0) return cudaSuccess;
  switch (s.code) {
    case QuantCode::kInt4:
      return LaunchDequantizeFor<QuantCode::kInt4>(s, k, w, stream);
    case QuantCode::kInt8:
      return LaunchDequantizeFor<QuantCode::kInt8>(s, k, w, stream);
    case QuantCode::kFp8:
      return LaunchDequantizeFor<QuantCode::kFp8>(s, k, w, stream);
    case QuantCode::kBf16:
      return LaunchDequantizeFor<QuantCode::kBf16>(s, k, w, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace ag::cuda
