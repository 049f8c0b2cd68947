#include "runtime/weights.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "kernels/cuda/quant_pack.h"
#include "kernels/ref/half.h"
#include "kernels/ref/parallel.h"
#include "kernels/ref/quant.h"
#include "models/glm/weight_map.h"
#include "models/quant/packed.h"

namespace ag::runtime {

absl::Status CheckpointWeights::Fill(const compiler::WeightEntry& entry, RankInfo rank, float* out) const {
  for (const compiler::WeightPiece& piece : entry.pieces) {
    const compiler::PieceSlice s = compiler::SliceForRank(piece, rank.rank, rank.tp);
    if (piece.packing != ir::QuantPacking::kNone) {  // decoded whole, then this rank's block of the piece's rows
      const int64_t n = piece.tensor_shape[0], k = piece.tensor_shape[1];
      std::vector<float> whole(static_cast<size_t>(n * k));
      RETURN_IF_ERROR(quant::DecodePacked(checkpoint_, piece.packing, piece.quant, quant::PackedModule(piece.tensor), n,
                                          k, whole.data()));
      for (int64_t r = s.row_begin; r < s.row_end; ++r) {
        out = std::copy(whole.data() + r * k + s.col_begin, whole.data() + r * k + s.col_end, out);
      }
      continue;
    }
    glm::WeightSource src{piece.tensor, piece.tensor_shape, piece.row_begin, piece.row_end};
    ASSIGN_OR_RETURN(const glm::TensorView* view, glm::FindSourceTensor(checkpoint_, src));
    const int64_t element = ir::DTypeSize(view->dtype), cols = s.col_end - s.col_begin;
    if (cols == s.row_elems) {  // whole rows: one contiguous block
      const int64_t elems = (s.row_end - s.row_begin) * cols;
      glm::ConvertToFloat(view->dtype, view->data + s.row_begin * s.row_elems * element, elems, out);
      out += elems;
      continue;
    }
    for (int64_t r = s.row_begin; r < s.row_end; ++r) {  // a column block of each row
      glm::ConvertToFloat(view->dtype, view->data + (r * s.row_elems + s.col_begin) * element, cols, out);
      out += cols;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadStaticKvScales(const compiler::Plan& plan, const WeightSource& source,
                                                      RankInfo rank) {
  std::vector<float> scales;
  for (const int32_t index : plan.kv.scale_weights) {
    const compiler::WeightEntry& entry = plan.weights[index];
    float s = 0.0f;
    RETURN_IF_ERROR(FillStored(entry, source, rank, ir::DType::kF32, &s));
    if (!std::isfinite(s) || s <= 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint tensor '", entry.pieces[0].tensor, "' is ", s,
                                                     "; a KV-cache scale must be finite and positive"));
    }
    scales.push_back(s);
  }
  return scales;
}

absl::StatusOr<quant::UnpackedWeight> CheckpointWeights::Unpack(const compiler::WeightPiece& piece) const {
  return quant::UnpackPacked(checkpoint_, piece.packing, piece.quant, quant::PackedModule(piece.tensor),
                             piece.tensor_shape[0], piece.tensor_shape[1]);
}

namespace {

void RoundRows(float* data, int64_t n, ir::DType dtype) {
  if (dtype == ir::DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) data[i] = RoundToBF16(data[i]);
  }
}

// Appends this rank's block `s` of piece `p` to `out`: `rows` holds the piece's rows (k values each,
// row p.row_begin first).
template <typename T, typename Out>
Out CopyRankBlock(const T* rows, int64_t k, const compiler::WeightPiece& p, const compiler::PieceSlice& s, Out out) {
  for (int64_t r = s.row_begin; r < s.row_end; ++r) {
    const T* row = rows + (r - p.row_begin) * k;
    out = std::copy(row + s.col_begin, row + s.col_end, out);
  }
  return out;
}

ref::QuantSpec SpecOf(const ir::QuantFormat& f) {
  return {f.kind == ir::QuantKind::kFp8E4M3, f.bits(), f.group, f.symmetric};
}

}  // namespace

namespace {

// The whole weight's values (every piece unsharded: ValidatePlan made a quantized weight 2-D, its
// pieces whole rows of k inputs), in piece order.
absl::Status ReadWhole(const compiler::WeightEntry& entry, const WeightSource& source, RankInfo rank,
                       std::vector<float>* values, int64_t* k) {
  compiler::WeightEntry whole = entry;
  int64_t rows = 0;
  for (compiler::WeightPiece& p : whole.pieces) {
    p.shard = {};
    rows += p.row_end - p.row_begin;
    *k = compiler::SliceForRank(p, 0, 1).row_elems;
  }
  whole.shape = {rows, *k};
  values->resize(static_cast<size_t>(rows * *k));
  return source.Fill(whole, rank, values->data());
}

// Quantizes the n rows of k values at `w` as `format` says.
absl::Status QuantizePiece(const compiler::WeightEntry& entry, const compiler::WeightPiece& p, const float* w, int64_t n,
                           int64_t k, std::vector<uint8_t>* codes, std::vector<float>* scales,
                           std::vector<uint8_t>* zeros) {
  const ref::QuantSpec spec = SpecOf(p.quant);
  codes->resize(static_cast<size_t>(n * k));
  scales->resize(static_cast<size_t>(n * spec.Groups(k)));
  zeros->resize(scales->size());
  // Rows are quantized on their own: a big matrix is split over the cores.
  const int64_t groups = spec.Groups(k);
  const int64_t parts = ThreadsFor(n * k, int64_t{1} << 22);
  std::vector<char> finite(static_cast<size_t>(parts), 1);  // parts past the rows do not run
  ParallelParts(n, parts, [&](int64_t begin, int64_t end, int64_t part) {
    finite[part] = ref::QuantizeRows(w + begin * k, end - begin, k, spec, codes->data() + begin * k,
                                     scales->data() + begin * groups, zeros->data() + begin * groups);
  });
  if (std::find(finite.begin(), finite.end(), 0) != finite.end()) {
    return absl::InvalidArgumentError(absl::StrCat("weight ", entry.name, ": ", p.tensor,
                                                   " holds a NaN or an infinity; it cannot be stored as ",
                                                   p.quant.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillStored(const compiler::WeightEntry& entry, const WeightSource& source, RankInfo rank,
                        ir::DType dtype, float* out) {
  if (!entry.quantized()) {
    RETURN_IF_ERROR(source.Fill(entry, rank, out));
    RoundRows(out, entry.NumElements(), dtype);
    return absl::OkStatus();
  }
  std::vector<float> values;
  int64_t k = 0;
  RETURN_IF_ERROR(ReadWhole(entry, source, rank, &values, &k));
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  int64_t first_row = 0;
  for (const compiler::WeightPiece& p : entry.pieces) {
    const int64_t n = p.row_end - p.row_begin;
    float* rows_of_piece = values.data() + first_row * k;
    if (p.quant.quantized() && !source.Decodes(p)) {
      RETURN_IF_ERROR(QuantizePiece(entry, p, rows_of_piece, n, k, &codes, &scales, &zeros));
      ref::DequantizeRows(codes.data(), scales.data(), zeros.data(), n, k, SpecOf(p.quant), rows_of_piece);
    } else if (!p.quant.quantized()) {
      RoundRows(rows_of_piece, n * k, dtype);  // decoded rows stay as the checkpoint's scales make them
    }
    out = CopyRankBlock(rows_of_piece, k, p, compiler::SliceForRank(p, rank.rank, rank.tp), out);
    first_row += n;
  }
  return absl::OkStatus();
}

namespace {

// A piece's codes, scales and zero points for all of its rows and inputs, before the rank's block is taken.
struct PieceCodes {
  int64_t groups = 0;
  std::vector<uint8_t> codes, zeros;  // [n, k], [n, groups] (empty: symmetric)
  std::vector<float> scales;          // [n, groups]
  std::vector<int32_t> input_order;   // act order: stored input j is input input_order[j]
};

// The inputs of an act-order weight sorted by group, or empty when they are in order already.
// Unimplemented unless every group then holds `group` consecutive inputs, as the kernels read them.
absl::StatusOr<std::vector<int32_t>> InputOrder(const compiler::WeightEntry& entry, const compiler::WeightPiece& p,
                                                const quant::UnpackedWeight& u) {
  std::vector<int32_t> order(static_cast<size_t>(u.k));
  for (int64_t j = 0; j < u.k; ++j) order[j] = static_cast<int32_t>(j);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return u.group_of[a] < u.group_of[b]; });
  bool identity = true;
  for (int64_t j = 0; j < u.k; ++j) {
    identity = identity && order[j] == j;
    if (p.quant.group > 0 && u.group_of[order[j]] != j / p.quant.group) {
      return absl::UnimplementedError(absl::StrCat("weight ", entry.name, ": ", p.tensor, "'s act-order groups are not ",
                                                   p.quant.group, " inputs each; only the CPU backend runs it"));
    }
  }
  if (identity) order.clear();
  return order;
}

// The rows of piece `p` of a pre-quantized checkpoint, as the device stores them; `u` is its tensor unpacked.
absl::StatusOr<PieceCodes> DecodedPiece(const compiler::WeightEntry& entry, const compiler::WeightPiece& p,
                                        const quant::UnpackedWeight& u) {
  PieceCodes c;
  c.groups = u.groups;
  ASSIGN_OR_RETURN(c.input_order, InputOrder(entry, p, u));
  const int64_t k = u.k, first = p.row_begin * k, last = p.row_end * k;
  c.codes.assign(u.codes.begin() + first, u.codes.begin() + last);
  if (!c.input_order.empty()) {
    for (int64_t r = 0; r < p.row_end - p.row_begin; ++r) {
      for (int64_t j = 0; j < k; ++j) c.codes[r * k + j] = u.codes[first + r * k + c.input_order[j]];
    }
  }
  c.scales.assign(u.scales.begin() + p.row_begin * u.groups, u.scales.begin() + p.row_end * u.groups);
  if (u.fp8) return c;
  const int half = 1 << (p.quant.bits() - 1);
  bool symmetric = true;
  for (int64_t i = p.row_begin * u.groups; i < p.row_end * u.groups; ++i) {
    const int32_t z = u.zeros[i];
    if (z < 0 || z > 255) {
      return absl::UnimplementedError(absl::StrCat("weight ", entry.name, ": ", p.tensor, " has a zero point of ", z,
                                                   ", which a device stores in one byte; only the CPU backend runs it"));
    }
    symmetric = symmetric && z == half;
    c.zeros.push_back(static_cast<uint8_t>(z));
  }
  if (symmetric) c.zeros.clear();
  return c;
}

// The code worth zero in group i of a piece stored as `f` (zero points `zeros`, empty when
// symmetric: z = 2^(bits-1)); E4M3's zero is code 0.
uint8_t ZeroValuedCode(const ir::QuantFormat& f, const std::vector<uint8_t>& zeros, int64_t i) {
  if (f.kind == ir::QuantKind::kFp8E4M3) return 0;
  return zeros.empty() ? static_cast<uint8_t>(1 << (f.bits() - 1)) : zeros[i];
}

// This rank's block `s` of an act-order piece whose inputs are split over ranks: for each group,
// the rank's inputs of it (in c's stored order) padded with zero-valued codes to a multiple of
// kActOrderRankGroup, the group's scale and zero point repeated for each stored group.
QuantizedRows ActOrderRankBlock(const PieceCodes& c, const compiler::WeightPiece& p, const compiler::PieceSlice& s,
                                int64_t k) {
  const int64_t group = p.quant.group, sub = kActOrderRankGroup;
  QuantizedRows q;
  q.format = p.quant;
  q.format.group = static_cast<int32_t>(sub);
  q.rows = s.row_end - s.row_begin;
  q.inputs = s.col_end - s.col_begin;
  std::vector<int64_t> stored;  // the stored position (in c) of each kept input, -1 for padding
  std::vector<int64_t> group_of_stored;  // each stored group's checkpoint group
  for (int64_t g = 0; g * group < k; ++g) {
    const size_t before = stored.size();
    for (int64_t j = g * group; j < (g + 1) * group; ++j) {
      const int32_t input = c.input_order[j];
      if (input >= s.col_begin && input < s.col_end) stored.push_back(j);
    }
    while ((stored.size() - before) % sub != 0) stored.push_back(-1);
    for (size_t i = before; i < stored.size(); i += sub) group_of_stored.push_back(g);
  }
  q.cols = static_cast<int64_t>(stored.size());
  for (const int64_t j : stored) q.input_order.push_back(j < 0 ? -1 : c.input_order[j] - static_cast<int32_t>(s.col_begin));
  for (int64_t r = s.row_begin; r < s.row_end; ++r) {
    const int64_t local = r - p.row_begin;
    for (const int64_t g : group_of_stored) {
      q.scales.push_back(c.scales[local * c.groups + g]);
      if (!c.zeros.empty()) q.zeros.push_back(c.zeros[local * c.groups + g]);
    }
    for (size_t i = 0; i < stored.size(); ++i) {
      q.codes.push_back(stored[i] < 0 ? ZeroValuedCode(p.quant, c.zeros, local * c.groups + group_of_stored[i / sub])
                                      : c.codes[local * k + stored[i]]);
    }
  }
  return q;
}

}  // namespace

absl::StatusOr<std::vector<QuantizedRows>> QuantizeForDevice(const compiler::WeightEntry& entry,
                                                             const WeightSource& source, RankInfo rank) {
  bool all_decoded = true;
  for (const compiler::WeightPiece& p : entry.pieces) all_decoded = all_decoded && source.Decodes(p);
  std::vector<float> values;  // the whole weight, when a piece is still to be quantized
  int64_t k = 0;
  if (!all_decoded) RETURN_IF_ERROR(ReadWhole(entry, source, rank, &values, &k));
  std::vector<QuantizedRows> pieces;
  std::optional<quant::UnpackedWeight> unpacked;  // the last pre-quantized tensor: a fused gate/up holds two pieces
  std::string unpacked_tensor;
  int64_t first_row = 0;
  for (const compiler::WeightPiece& p : entry.pieces) {
    const int64_t n = p.row_end - p.row_begin;
    k = compiler::SliceForRank(p, 0, 1).row_elems;
    if (!p.quant.quantized()) {  // kept in the plan's dtype: this rank's block of its rows, rounded
      const compiler::PieceSlice s = compiler::SliceForRank(p, rank.rank, rank.tp);
      QuantizedRows q;
      q.format = p.quant;
      q.rows = s.row_end - s.row_begin;
      q.cols = s.col_end - s.col_begin;
      CopyRankBlock(values.data() + first_row * k, k, p, s, std::back_inserter(q.values));
      RoundRows(q.values.data(), static_cast<int64_t>(q.values.size()), entry.dtype);
      first_row += n;
      pieces.push_back(std::move(q));
      continue;
    }
    PieceCodes c;
    if (source.Decodes(p)) {
      if (!unpacked || unpacked_tensor != p.tensor) {
        ASSIGN_OR_RETURN(unpacked, source.Unpack(p));
        unpacked_tensor = p.tensor;
      }
      ASSIGN_OR_RETURN(c, DecodedPiece(entry, p, *unpacked));
    } else {
      RETURN_IF_ERROR(QuantizePiece(entry, p, values.data() + first_row * k, n, k, &c.codes, &c.scales, &c.zeros));
      c.groups = p.quant.Groups(k);
      if (p.quant.symmetric || p.quant.kind == ir::QuantKind::kFp8E4M3) c.zeros.clear();
    }
    first_row += n;
    compiler::PieceSlice s = compiler::SliceForRank(p, rank.rank, rank.tp);
    if (!c.input_order.empty() && s.col_end - s.col_begin != k) {
      pieces.push_back(ActOrderRankBlock(c, p, s, k));
      continue;
    }
    const int64_t group = p.quant.group, groups = c.groups;
    QuantizedRows q;
    q.format = p.quant;
    q.rows = s.row_end - s.row_begin;
    q.input_order = std::move(c.input_order);
    // A rank whose inputs start or end inside a 16-byte load of codes (int4 at GLM-4-9B's down_proj,
    // tp 8: 1,712 inputs a rank) stores the whole loads around them, with an input order that
    // gathers its x into place (zeros under the neighbours' inputs, whose codes become zero-valued).
    const int64_t per_load = cuda::CodesPerLoad(p.quant.bits());
    if (q.input_order.empty() && (s.col_begin % per_load != 0 || s.col_end % per_load != 0)) {
      const int64_t begin = s.col_begin - s.col_begin % per_load;
      const int64_t end = std::min(k, (s.col_end + per_load - 1) / per_load * per_load);
      for (int64_t j = begin; j < end; ++j) {
        q.input_order.push_back(j >= s.col_begin && j < s.col_end ? static_cast<int32_t>(j - s.col_begin) : -1);
      }
      q.inputs = s.col_end - s.col_begin;
      s.col_begin = begin;
      s.col_end = end;
    }
    q.cols = s.col_end - s.col_begin;
    q.group_offset = group == 0 ? 0 : s.col_begin % group;
    // Groups [g0, g1) of each row cover this rank's columns (the whole row's one scale when group is 0).
    const int64_t g0 = group == 0 ? 0 : s.col_begin / group, g1 = group == 0 ? 1 : (s.col_end + group - 1) / group;
    CopyRankBlock(c.codes.data(), k, p, s, std::back_inserter(q.codes));
    for (int64_t r = s.row_begin; r < s.row_end; ++r) {
      const int64_t local = r - p.row_begin;
      q.scales.insert(q.scales.end(), c.scales.begin() + local * groups + g0, c.scales.begin() + local * groups + g1);
      if (!c.zeros.empty()) {
        q.zeros.insert(q.zeros.end(), c.zeros.begin() + local * groups + g0, c.zeros.begin() + local * groups + g1);
      }
    }
    if (q.inputs > 0) {  // the neighbours' codes become zeros too: no NaN code of theirs reaches this rank
      for (int64_t r = 0; r < q.rows; ++r) {
        for (int64_t j = 0; j < q.cols; ++j) {
          const int64_t g = group == 0 ? 0 : (j + q.group_offset) / group;
          if (q.input_order[j] < 0) q.codes[r * q.cols + j] = ZeroValuedCode(p.quant, q.zeros, r * (g1 - g0) + g);
        }
      }
    }
    pieces.push_back(std::move(q));
  }
  return pieces;
}

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t WeightStream(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t RankStream(absl::string_view name, RankInfo rank) {
  return WeightStream(name) ^ (static_cast<uint64_t>(rank.rank) * 0x9E3779B97F4A7C15ull);
}

float RandomUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = SplitMix64(SplitMix64(seed ^ stream) + index);
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}

void RandomWeights::Distribution(const compiler::WeightEntry& entry, float* center, float* half_width) {
  if (absl::EndsWith(entry.name, "_scale")) {
    *center = 0.0625f;  // a static KV-cache scale: positive
    *half_width = 0.03125f;
  } else if (entry.shape.size() == 1 && entry.name.find("norm") != std::string::npos) {
    *center = 1.0f;  // norm weights
    *half_width = 0.1f;
  } else if (entry.shape.size() == 1) {
    *center = 0.0f;  // biases
    *half_width = 0.05f;
  } else {
    *center = 0.0f;
    *half_width = 1.0f / std::sqrt(static_cast<float>(entry.shape.back()));
  }
}

absl::Status RandomWeights::Fill(const compiler::WeightEntry& entry, RankInfo rank, float* out) const {
  float center, half_width;
  Distribution(entry, &center, &half_width);
  const uint64_t stream = RankStream(entry.name, rank);
  const int64_t n = entry.NumElements();
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = center + half_width * (2.0f * RandomUniform(seed_, stream, static_cast<uint64_t>(i)) - 1.0f);
    }
  };
  // Value i depends on i alone: a big matrix (a quantized 9B model is drawn on the host) is split
  // over the cores.
  ParallelFor(n, int64_t{1} << 22, fill);
  return absl::OkStatus();
}

}  // namespace ag::runtime
