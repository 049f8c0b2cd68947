#include "runtime/weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "kernels/ref/half.h"
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

namespace {

void RoundRows(float* data, int64_t n, ir::DType dtype) {
  if (dtype == ir::DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) data[i] = RoundToBF16(data[i]);
  }
}

ref::QuantSpec SpecOf(const ir::QuantFormat& f) {
  return {f.kind == ir::QuantKind::kFp8E4M3, f.bits(), f.group, f.symmetric};
}

}  // namespace

absl::Status FillStored(const compiler::WeightEntry& entry, const WeightSource& source, RankInfo rank,
                        ir::DType dtype, float* out) {
  if (!entry.quantized()) {
    RETURN_IF_ERROR(source.Fill(entry, rank, out));
    RoundRows(out, entry.NumElements(), dtype);
    return absl::OkStatus();
  }
  // The whole weight (every piece unsharded: ValidatePlan made it 2-D, its pieces whole rows of k inputs).
  compiler::WeightEntry whole = entry;
  int64_t rows = 0, k = 0;
  for (compiler::WeightPiece& p : whole.pieces) {
    p.shard = {};
    rows += p.row_end - p.row_begin;
    k = compiler::SliceForRank(p, 0, 1).row_elems;
  }
  whole.shape = {rows, k};
  std::vector<float> values(static_cast<size_t>(rows * k));
  RETURN_IF_ERROR(source.Fill(whole, rank, values.data()));
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  int64_t first_row = 0;
  for (const compiler::WeightPiece& p : entry.pieces) {
    const int64_t n = p.row_end - p.row_begin;
    float* rows_of_piece = values.data() + first_row * k;
    if (p.quant.quantized() && !source.Decodes(p)) {
      const ref::QuantSpec spec = SpecOf(p.quant);
      codes.resize(static_cast<size_t>(n * k));
      scales.resize(static_cast<size_t>(n * spec.Groups(k)));
      zeros.resize(scales.size());
      if (!ref::QuantizeRows(rows_of_piece, n, k, spec, codes.data(), scales.data(), zeros.data())) {
        return absl::InvalidArgumentError(absl::StrCat("weight ", entry.name, ": ", p.tensor,
                                                       " holds a NaN or an infinity; it cannot be stored as ",
                                                       p.quant.ToString()));
      }
      ref::DequantizeRows(codes.data(), scales.data(), zeros.data(), n, k, spec, rows_of_piece);
    } else if (!p.quant.quantized()) {
      RoundRows(rows_of_piece, n * k, dtype);  // decoded rows stay as the checkpoint's scales make them
    }
    // This rank's block of the piece.
    const compiler::PieceSlice s = compiler::SliceForRank(p, rank.rank, rank.tp);
    for (int64_t r = s.row_begin; r < s.row_end; ++r) {
      const float* src = values.data() + (first_row + r - p.row_begin) * k;
      out = std::copy(src + s.col_begin, src + s.col_end, out);
    }
    first_row += n;
  }
  return absl::OkStatus();
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
  if (entry.shape.size() == 1 && entry.name.find("norm") != std::string::npos) {
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
  for (int64_t i = 0; i < n; ++i) {
    out[i] = center + half_width * (2.0f * RandomUniform(seed_, stream, static_cast<uint64_t>(i)) - 1.0f);
  }
  return absl::OkStatus();
}

}  // namespace ag::runtime
