#include "runtime/quant_storage.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "kernels/ref/half.h"
#include "kernels/ref/quant.h"
#include "runtime/weights.h"

namespace ag::runtime {

cuda::QuantCode QuantCodeOf(ir::QuantKind kind) {
  switch (kind) {
    case ir::QuantKind::kInt4:
      return cuda::QuantCode::kInt4;
    case ir::QuantKind::kInt8:
      return cuda::QuantCode::kInt8;
    case ir::QuantKind::kNone:
      return cuda::QuantCode::kBf16;
    default:
      return cuda::QuantCode::kFp8;
  }
}

namespace {

// `rows` rows of `v` reordered so that row 2j is row j and row 2j + 1 is row rows / 2 + j.
template <typename T>
std::vector<T> InterleaveHalves(const std::vector<T>& v, int64_t rows) {
  if (v.empty()) return {};
  const int64_t width = static_cast<int64_t>(v.size()) / rows, half = rows / 2;
  std::vector<T> out;
  out.reserve(v.size());
  for (int64_t r = 0; r < half; ++r) {
    out.insert(out.end(), v.begin() + r * width, v.begin() + (r + 1) * width);
    out.insert(out.end(), v.begin() + (half + r) * width, v.begin() + (half + r + 1) * width);
  }
  return out;
}

// Group scales as bytes of the narrowest type that holds each exactly.
void StoreGroupScales(const std::vector<float>& scales, HostQuantSegment* s) {
  bool bf16 = true, f16 = true;
  for (const float v : scales) {
    bf16 = bf16 && BF16ToFloat(FloatToBF16(v)) == v;
    f16 = f16 && HalfToFloat(FloatToHalf(v)) == v;
  }
  s->scale_type = bf16 ? cuda::ScaleType::kBF16 : f16 ? cuda::ScaleType::kF16 : cuda::ScaleType::kF32;
  const int bytes = cuda::ScaleBytes(s->scale_type);
  s->group_scales.resize(scales.size() * bytes);
  for (size_t i = 0; i < scales.size(); ++i) {
    const uint16_t h = bf16 ? FloatToBF16(scales[i]) : FloatToHalf(scales[i]);
    std::memcpy(s->group_scales.data() + i * bytes, bytes == 4 ? static_cast<const void*>(&scales[i]) : &h, bytes);
  }
}

float GroupScale(const HostQuantSegment& s, int64_t g) {
  if (s.scale_type == cuda::ScaleType::kF32) {
    float v;
    std::memcpy(&v, s.group_scales.data() + 4 * g, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, s.group_scales.data() + 2 * g, 2);
  return s.scale_type == cuda::ScaleType::kBF16 ? BF16ToFloat(h) : HalfToFloat(h);
}

}  // namespace

absl::StatusOr<std::vector<HostQuantSegment>> PrepareQuantSegments(const compiler::WeightEntry& entry,
                                                                   const WeightSource& source, RankInfo rank,
                                                                   bool interleave) {
  ASSIGN_OR_RETURN(std::vector<QuantizedRows> pieces, QuantizeForDevice(entry, source, rank));
  if (interleave) {  // the rank's rows (gate block, then up block) as one segment, halves alternating
    // A half whose zero points are all 2^(bits-1) has none stored: give it them if the other has.
    bool zeros = false;
    for (const QuantizedRows& q : pieces) zeros = zeros || !q.zeros.empty();
    for (QuantizedRows& q : pieces) {
      if (zeros && q.zeros.empty()) q.zeros.assign(q.scales.size(), static_cast<uint8_t>(1 << (q.format.bits() - 1)));
    }
    QuantizedRows all = pieces[0];
    for (size_t i = 1; i < pieces.size(); ++i) {
      if (!(pieces[i].format == all.format) || pieces[i].input_order != all.input_order) {
        return absl::UnimplementedError(absl::StrCat("weight ", entry.name, " feeds a gate/up projection, whose "
                                                     "halves a device stores interleaved: give them one format "
                                                     "(and one act order)"));
      }
      all.rows += pieces[i].rows;
      all.codes.insert(all.codes.end(), pieces[i].codes.begin(), pieces[i].codes.end());
      all.scales.insert(all.scales.end(), pieces[i].scales.begin(), pieces[i].scales.end());
      all.zeros.insert(all.zeros.end(), pieces[i].zeros.begin(), pieces[i].zeros.end());
    }
    if (all.rows % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("weight ", entry.name, ": a gate/up projection of odd rows"));
    }
    all.codes = InterleaveHalves(all.codes, all.rows);
    all.scales = InterleaveHalves(all.scales, all.rows);
    all.zeros = InterleaveHalves(all.zeros, all.rows);
    pieces = {std::move(all)};
  }
  std::vector<HostQuantSegment> segments;
  int64_t n_begin = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    QuantizedRows& q = pieces[i];
    HostQuantSegment s;
    s.code = QuantCodeOf(q.format.kind);
    s.group = q.format.group;
    s.group_offset = q.group_offset;
    s.n_begin = n_begin;
    s.rows = q.rows;
    s.cols = q.cols;
    s.inputs = q.inputs > 0 ? q.inputs : q.cols;
    const int bits = cuda::QuantCodeBits(s.code);
    const int64_t per_load = cuda::CodesPerLoad(bits);
    if (s.cols % per_load != 0 || s.group % per_load != 0 || s.group_offset % per_load != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "weight ", entry.name, ": the CUDA kernels read ", q.format.ToString(), " codes ", per_load,
          " at a time, each load inside one group; this rank's ", s.cols, " inputs a row, starting ", s.group_offset,
          " into a group, are not whole loads (a smaller tensor-parallel degree or an 8-bit format fits)"));
    }
    if (s.rows % 2 != 0 && i + 1 < pieces.size()) {
      return absl::UnimplementedError(absl::StrCat("weight ", entry.name, ": a piece of ", s.rows,
                                                   " rows before another; the CUDA kernels store column pairs"));
    }
    s.words.resize(static_cast<size_t>(s.rows * cuda::PackedRowWords(s.cols, bits)));
    if (s.code == cuda::QuantCode::kBf16) {  // two bf16 values a word, no scale
      for (size_t w = 0; w < s.words.size(); ++w) {
        s.words[w] = FloatToBF16(q.values[2 * w]) | static_cast<uint32_t>(FloatToBF16(q.values[2 * w + 1])) << 16;
      }
      n_begin += s.rows;
      segments.push_back(std::move(s));
      continue;
    }
    cuda::PackQuantCodes(q.codes.data(), s.rows, s.cols, bits, s.words.data());
    if (s.group == 0) {
      s.row_scales = std::move(q.scales);
    } else {
      StoreGroupScales(q.scales, &s);
    }
    s.zeros = std::move(q.zeros);
    s.input_order = std::move(q.input_order);
    n_begin += s.rows;
    segments.push_back(std::move(s));
  }
  return segments;
}

std::vector<float> DequantizeSegment(const HostQuantSegment& s) {
  const int bits = cuda::QuantCodeBits(s.code);
  const int64_t groups = cuda::SegmentGroups(s.cols, s.group, s.group_offset);
  std::vector<float> w(static_cast<size_t>(s.rows * s.inputs));
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t j = 0; j < s.cols; ++j) {
      const int64_t g = r * groups + cuda::GroupOf(j, s.group, s.group_offset);
      if (!s.input_order.empty() && s.input_order[j] < 0) continue;  // padding
      float& out = w[r * s.inputs + (s.input_order.empty() ? j : s.input_order[j])];
      if (s.code == cuda::QuantCode::kBf16) {
        const uint32_t word = s.words[(r * s.cols + j) / 2];
        out = BF16ToFloat(static_cast<uint16_t>(j % 2 == 0 ? word & 0xFFFF : word >> 16));
        continue;
      }
      const float scale = s.group == 0 ? s.row_scales[r] : GroupScale(s, g);
      const uint8_t q = cuda::PackedCode(s.words.data(), s.cols, bits, r, j);
      if (s.code == cuda::QuantCode::kFp8) {
        out = scale * ref::E4M3ToFloat(q);
      } else {
        const int z = s.zeros.empty() ? 1 << (bits - 1) : s.zeros[g];
        out = scale * static_cast<float>(static_cast<int>(q) - z);  // as ref::DequantizeRows
      }
    }
  }
  return w;
}

int64_t StoredBytes(const HostQuantSegment& segment) {
  return static_cast<int64_t>(segment.words.size() * sizeof(uint32_t) + segment.row_scales.size() * sizeof(float) +
                              segment.group_scales.size() + segment.zeros.size() +
                              segment.input_order.size() * sizeof(int32_t));
}

int64_t QuantStorageSlack(const compiler::WeightEntry& entry, int32_t tp) {
  if (!entry.quantized() || entry.shape.size() != 2) return 0;
  const int64_t k = entry.shape[1];
  int64_t slack = 0;
  for (const compiler::WeightPiece& p : entry.pieces) {
    if (!p.quant.quantized()) continue;
    const compiler::PieceSlice slice = compiler::SliceForRank(p, 0, 1);  // a rank's rows, as DeviceBytes
    const int64_t rows = slice.row_end - slice.row_begin;
    const int bits = p.quant.bits();
    const bool packed = p.packing != ir::QuantPacking::kNone;
    if (packed && p.quant.group != 0) slack += rows * p.quant.Groups(k) * 2;  // fp32 group scales, not bf16
    // Packings that may carry an act order (g_idx): the plan does not say which weights do.
    const bool act_order = p.packing == ir::QuantPacking::kGptq || p.packing == ir::QuantPacking::kGptqV2 ||
                           p.packing == ir::QuantPacking::kCtInt;
    const int64_t load = cuda::CodesPerLoad(bits);
    const int64_t unit = act_order ? std::max<int64_t>(p.quant.group, load) : load;
    const bool padded = p.shard.axis == 1 && tp > 1;
    if (padded) {
      // A rank's inputs widened by up to a unit (a load of codes; a whole group under act order) at
      // each end: their codes, and a scale (up to fp32) and a zero point for each extra group.
      slack += rows * (2 * unit * bits / 8 + 2 * 5);
    }
    if (act_order || padded) slack += (k + 2 * unit) * 4;  // an input order (padding: -1)
  }
  return slack;
}

}  // namespace ag::runtime
