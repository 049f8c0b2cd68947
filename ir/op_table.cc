#include "ir/op_table.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/checked_math.h"
#include "ir/status_macros.h"

namespace ag::ir {
namespace {

using Types = std::vector<TensorType>;
using Operands = std::span<const TensorType>;

absl::Status Err(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

template <typename... Args>
absl::Status Errf(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

absl::Status ExpectRank(const TensorType& t, int rank, absl::string_view what) {
  if (t.rank() != rank) return Errf(what, " must have rank ", rank, ", got ", t.ToString());
  return absl::OkStatus();
}

absl::Status ExpectDType(const TensorType& t, DType dtype, absl::string_view what) {
  if (t.dtype != dtype) return Errf(what, " must be ", DTypeName(dtype), ", got ", t.ToString());
  return absl::OkStatus();
}

absl::Status ExpectFloat(const TensorType& t, absl::string_view what) {
  if (!IsFloat(t.dtype)) return Errf(what, " must be a float tensor, got ", t.ToString());
  return absl::OkStatus();
}

absl::Status ExpectSameDim(const Dim& a, const Dim& b, absl::string_view what) {
  if (!(a == b)) return Errf(what, ": ", a.ToString(), " vs ", b.ToString());
  return absl::OkStatus();
}

// A weight or vector [n] whose dtype matches the activation.
absl::Status ExpectVector(const TensorType& t, const Dim& n, DType dtype, absl::string_view what) {
  RETURN_IF_ERROR(ExpectRank(t, 1, what));
  RETURN_IF_ERROR(ExpectDType(t, dtype, what));
  return ExpectSameDim(t.shape[0], n, absl::StrCat(what, " length"));
}

// x [T, K] float, W [N, K] of the same dtype; returns N.
absl::StatusOr<Dim> CheckLinear(const TensorType& x, const TensorType& w) {
  RETURN_IF_ERROR(ExpectRank(x, 2, "input"));
  RETURN_IF_ERROR(ExpectFloat(x, "input"));
  RETURN_IF_ERROR(ExpectRank(w, 2, "weight"));
  RETURN_IF_ERROR(ExpectDType(w, x.dtype, "weight"));
  RETURN_IF_ERROR(ExpectSameDim(w.shape[1], x.shape[1], "weight columns vs input width"));
  return w.shape[0];
}

struct AttentionDims {
  int64_t heads, kv_heads, head_dim;
};

// Head counts and head sizes are at most this (real models: tens of heads of
// 64-256), so products like heads * head_dim cannot overflow.
constexpr int64_t kMaxHeadAttr = int64_t{1} << 16;

absl::StatusOr<int64_t> GetHeadAttr(const Attrs& attrs, absl::string_view name) {
  ASSIGN_OR_RETURN(int64_t v, GetInt(attrs, name));
  if (v <= 0 || v > kMaxHeadAttr) return Errf(name, " must be in [1, ", kMaxHeadAttr, "], got ", v);
  return v;
}

absl::StatusOr<AttentionDims> CheckHeads(const Attrs& attrs) {
  AttentionDims d;
  ASSIGN_OR_RETURN(d.heads, GetHeadAttr(attrs, "heads"));
  ASSIGN_OR_RETURN(d.kv_heads, GetHeadAttr(attrs, "kv_heads"));
  ASSIGN_OR_RETURN(d.head_dim, GetHeadAttr(attrs, "head_dim"));
  if (d.heads % d.kv_heads != 0) return Errf("heads (", d.heads, ") must be a multiple of kv_heads (", d.kv_heads, ")");
  return d;
}

absl::Status CheckRotaryAttrs(const Attrs& attrs, int64_t head_dim) {
  ASSIGN_OR_RETURN(int64_t rot, GetInt(attrs, "rot"));
  ASSIGN_OR_RETURN(double theta, GetFloat(attrs, "theta"));
  if (rot < 0 || rot > head_dim || rot % 2 != 0) {
    return Errf("rot (", rot, ") must be even and within head_dim (", head_dim, ")");
  }
  if (!(theta >= kMinRopeTheta && theta <= kMaxRopeTheta)) {
    return Errf("theta must be in [", kMinRopeTheta, ", ", kMaxRopeTheta, "], got ", theta);
  }
  return absl::OkStatus();
}

absl::Status CheckEps(const Attrs& attrs) {
  ASSIGN_OR_RETURN(double eps, GetFloat(attrs, "eps"));
  if (!(eps >= 0 && eps <= kMaxNormEps)) return Errf("eps must be in [0, ", kMaxNormEps, "], got ", eps);
  return absl::OkStatus();
}

// KV pool [2, NB, B, KV, D] of the activation dtype, or 8-bit (i8 or f8e4m3:
// each token's K and V rows of a KV head quantized with their own scale).
absl::Status CheckKvPool(const TensorType& kv, const AttentionDims& d, DType dtype) {
  RETURN_IF_ERROR(ExpectRank(kv, 5, "kv cache"));
  if (kv.dtype != DType::kI8 && kv.dtype != DType::kF8E4M3) RETURN_IF_ERROR(ExpectDType(kv, dtype, "kv cache"));
  if (!(kv.shape[0] == Dim(2)) || !(kv.shape[3] == Dim(d.kv_heads)) || !(kv.shape[4] == Dim(d.head_dim))) {
    return Errf("kv cache must be [2,NB,B,", d.kv_heads, ",", d.head_dim, "], got ", kv.ToString());
  }
  if (kv.shape[2].is_symbolic()) return Err("kv cache block size must be static");
  return absl::OkStatus();
}

// An i32 vector [n] (runtime metadata).
absl::Status ExpectIndexVector(const TensorType& t, const Dim& n, absl::string_view what) {
  RETURN_IF_ERROR(ExpectRank(t, 1, what));
  RETURN_IF_ERROR(ExpectDType(t, DType::kI32, what));
  return ExpectSameDim(t.shape[0], n, absl::StrCat(what, " length"));
}

// The positions a rotary step reads: one stream [T], or M-RoPE's three
// [3, T] (temporal, height, width) when the optional mrope_section attribute
// says how many rotary pairs take each stream (they add up to rot / 2).
absl::Status CheckRotaryPositions(const TensorType& positions, const Dim& t, const Attrs& attrs) {
  const auto it = attrs.find("mrope_section");
  if (it == attrs.end()) return ExpectIndexVector(positions, t, "positions");
  ASSIGN_OR_RETURN(int64_t rot, GetInt(attrs, "rot"));
  const std::vector<int64_t>& sections = std::get<std::vector<int64_t>>(it->second);
  int64_t pairs = 0;
  for (int64_t s : sections) pairs += s >= 0 && s <= kMaxHeadAttr ? s : kMaxHeadAttr + 1;
  if (sections.size() != 3 || 2 * pairs != rot) {
    return Errf("mrope_section must be three pair counts adding up to rot / 2 (", rot / 2, ")");
  }
  RETURN_IF_ERROR(ExpectRank(positions, 2, "positions"));
  RETURN_IF_ERROR(ExpectDType(positions, DType::kI32, "positions"));
  RETURN_IF_ERROR(ExpectSameDim(positions.shape[0], Dim(3), "M-RoPE position streams"));
  return ExpectSameDim(positions.shape[1], t, "positions length");
}

absl::Status ExpectRows(const TensorType& x, const Dim& rows, int64_t width, absl::string_view what) {
  RETURN_IF_ERROR(ExpectRank(x, 2, what));
  RETURN_IF_ERROR(ExpectSameDim(x.shape[0], rows, absl::StrCat(what, " rows")));
  return ExpectSameDim(x.shape[1], Dim(width), absl::StrCat(what, " width"));
}

// ---- type rules, one per op ----

absl::StatusOr<Types> InferEmbedding(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectRank(o[0], 1, "token ids"));
  RETURN_IF_ERROR(ExpectDType(o[0], DType::kI32, "token ids"));
  RETURN_IF_ERROR(ExpectRank(o[1], 2, "embedding table"));
  RETURN_IF_ERROR(ExpectFloat(o[1], "embedding table"));
  return Types{{o[1].dtype, {o[0].shape[0], o[1].shape[1]}}};
}

absl::StatusOr<Types> InferRmsNorm(Operands o, const Attrs& a) {
  RETURN_IF_ERROR(CheckEps(a));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  if (o[0].rank() < 1) return Err("input must have rank >= 1");
  RETURN_IF_ERROR(ExpectVector(o[1], o[0].shape.back(), o[0].dtype, "norm weight"));
  return Types{o[0]};
}

absl::StatusOr<Types> InferLinear(Operands o, const Attrs&) {
  ASSIGN_OR_RETURN(Dim n, CheckLinear(o[0], o[1]));
  if (o.size() == 3) RETURN_IF_ERROR(ExpectVector(o[2], n, o[0].dtype, "bias"));
  return Types{{o[0].dtype, {o[0].shape[0], n}}};
}

absl::StatusOr<Types> InferRotary(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t heads, GetHeadAttr(a, "heads"));
  ASSIGN_OR_RETURN(int64_t head_dim, GetHeadAttr(a, "head_dim"));
  RETURN_IF_ERROR(CheckRotaryAttrs(a, head_dim));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectRows(o[0], o[0].shape[0], heads * head_dim, "input"));
  RETURN_IF_ERROR(CheckRotaryPositions(o[1], o[0].shape[0], a));
  return Types{o[0]};
}

absl::StatusOr<Types> InferAttention(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(AttentionDims d, CheckHeads(a));
  RETURN_IF_ERROR(ExpectFloat(o[0], "q"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "q"));
  const Dim& t = o[0].shape[0];
  RETURN_IF_ERROR(ExpectRows(o[0], t, d.heads * d.head_dim, "q"));
  RETURN_IF_ERROR(ExpectRows(o[1], t, d.kv_heads * d.head_dim, "k"));
  RETURN_IF_ERROR(ExpectRows(o[2], t, d.kv_heads * d.head_dim, "v"));
  RETURN_IF_ERROR(ExpectDType(o[1], o[0].dtype, "k"));
  RETURN_IF_ERROR(ExpectDType(o[2], o[0].dtype, "v"));
  RETURN_IF_ERROR(CheckKvPool(o[3], d, o[0].dtype));
  return Types{o[0]};
}

absl::StatusOr<Types> InferBinary(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectFloat(o[0], "lhs"));
  if (!(o[0] == o[1])) return Errf("operand types differ: ", o[0].ToString(), " vs ", o[1].ToString());
  return Types{o[0]};
}

absl::StatusOr<Types> InferUnary(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  return Types{o[0]};
}

absl::StatusOr<Types> InferSlice(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t axis, GetInt(a, "axis"));
  ASSIGN_OR_RETURN(int64_t start, GetInt(a, "start"));
  ASSIGN_OR_RETURN(int64_t size, GetInt(a, "size"));
  if (axis < 0 || axis >= o[0].rank()) return Errf("axis ", axis, " out of range for ", o[0].ToString());
  const Dim& dim = o[0].shape[axis];
  if (dim.is_symbolic()) return Err("slice along a symbolic dimension");
  if (start < 0 || size <= 0 || start > dim.offset() || size > dim.offset() - start) {
    return Errf("slice of ", size, " at ", start, " out of range for dimension ", dim.offset());
  }
  TensorType r = o[0];
  r.shape[axis] = Dim(size);
  return Types{r};
}

absl::StatusOr<Types> InferGatherRows(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectRank(o[1], 1, "row indices"));
  RETURN_IF_ERROR(ExpectDType(o[1], DType::kI32, "row indices"));
  return Types{{o[0].dtype, {o[1].shape[0], o[0].shape[1]}}};
}

absl::StatusOr<Types> InferArgmax(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  return Types{{DType::kI32, {o[0].shape[0]}}};
}

// ---- the vision tower's ops (GLM-4.1V) ----

// (x [T, H], src [M, H], rows i32[M]) -> x with row rows[i] replaced by src[i].
absl::StatusOr<Types> InferScatterRows(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  RETURN_IF_ERROR(ExpectRank(o[1], 2, "rows to scatter"));
  RETURN_IF_ERROR(ExpectDType(o[1], o[0].dtype, "rows to scatter"));
  RETURN_IF_ERROR(ExpectSameDim(o[1].shape[1], o[0].shape[1], "scattered row width"));
  RETURN_IF_ERROR(ExpectIndexVector(o[2], o[1].shape[0], "row indices"));
  return Types{o[0]};
}

// (x, w [n], b [n]) -> w * (x - mean) / sqrt(var + eps) + b, per row of n.
absl::StatusOr<Types> InferLayerNorm(Operands o, const Attrs& a) {
  RETURN_IF_ERROR(CheckEps(a));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  if (o[0].rank() < 1) return Err("input must have rank >= 1");
  RETURN_IF_ERROR(ExpectVector(o[1], o[0].shape.back(), o[0].dtype, "norm weight"));
  RETURN_IF_ERROR(ExpectVector(o[2], o[0].shape.back(), o[0].dtype, "norm bias"));
  return Types{o[0]};
}

// Per patch row: (h, w, grid_h, grid_w).
absl::Status ExpectPatchPositions(const TensorType& t, const Dim& rows) {
  RETURN_IF_ERROR(ExpectRank(t, 2, "patch positions"));
  RETURN_IF_ERROR(ExpectDType(t, DType::kI32, "patch positions"));
  RETURN_IF_ERROR(ExpectSameDim(t.shape[0], rows, "patch positions rows"));
  return ExpectSameDim(t.shape[1], Dim(4), "patch positions width");
}

// (x [P, C], table [side * side, C], patch_pos i32[P, 4]) -> x + the table resampled bicubically to each grid.
absl::StatusOr<Types> InferVisionPosEmbed(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t side, GetHeadAttr(a, "side"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  RETURN_IF_ERROR(ExpectRank(o[1], 2, "position table"));
  RETURN_IF_ERROR(ExpectDType(o[1], o[0].dtype, "position table"));
  RETURN_IF_ERROR(ExpectSameDim(o[1].shape[0], Dim(side * side), "position table rows"));
  RETURN_IF_ERROR(ExpectSameDim(o[1].shape[1], o[0].shape[1], "position table width"));
  RETURN_IF_ERROR(ExpectPatchPositions(o[2], o[0].shape[0]));
  return Types{o[0]};
}

// (x [P, parts * heads * head_dim], patch_pos): the 2-D rotary's checks.
absl::Status CheckVisionRotary(Operands o, const Attrs& a, int64_t parts) {
  ASSIGN_OR_RETURN(int64_t heads, GetHeadAttr(a, "heads"));
  ASSIGN_OR_RETURN(int64_t head_dim, GetHeadAttr(a, "head_dim"));
  ASSIGN_OR_RETURN(double theta, GetFloat(a, "theta"));
  if (head_dim % 4 != 0) return Errf("head_dim (", head_dim, ") must be a multiple of 4 for the 2-D rotary");
  if (!(theta >= kMinRopeTheta && theta <= kMaxRopeTheta)) {
    return Errf("theta must be in [", kMinRopeTheta, ", ", kMaxRopeTheta, "], got ", theta);
  }
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectRows(o[0], o[0].shape[0], parts * heads * head_dim, "input"));
  return ExpectPatchPositions(o[1], o[0].shape[0]);
}

// (x [P, heads * head_dim], patch_pos) -> 2-D rotary, rotate-half over each whole head.
absl::StatusOr<Types> InferVisionRotary(Operands o, const Attrs& a) {
  RETURN_IF_ERROR(CheckVisionRotary(o, a, 1));
  return Types{o[0]};
}

// (qkv [P, 3 * heads * head_dim], patch_pos) -> qkv with the 2-D rotary applied to its q and k
// heads, v as it is (fuse's vision-qkv-attention: no slices before the rotaries; in place, not even v
// is copied).
absl::StatusOr<Types> InferVisionQkvRotary(Operands o, const Attrs& a) {
  RETURN_IF_ERROR(CheckVisionRotary(o, a, 3));
  return Types{o[0]};
}

// (qkv [P, 3 * heads * head_dim], offsets i32[I+1]) -> [P, heads * head_dim]: segment_attention
// reading q, k and v from their columns of one packed matrix.
absl::StatusOr<Types> InferPackedSegmentAttention(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t heads, GetHeadAttr(a, "heads"));
  ASSIGN_OR_RETURN(int64_t head_dim, GetHeadAttr(a, "head_dim"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "qkv"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "qkv"));
  RETURN_IF_ERROR(ExpectRows(o[0], o[0].shape[0], 3 * heads * head_dim, "qkv"));
  RETURN_IF_ERROR(ExpectRank(o[1], 1, "segment offsets"));
  RETURN_IF_ERROR(ExpectDType(o[1], DType::kI32, "segment offsets"));
  if (!o[1].shape[0].is_symbolic() || o[1].shape[0].offset() != 1) return Err("segment offsets must be [I+1]");
  return Types{{o[0].dtype, {o[0].shape[0], Dim(heads * head_dim)}}};
}

// (q, k, v [P, heads * head_dim], offsets i32[I+1]) -> full attention within each segment.
absl::StatusOr<Types> InferSegmentAttention(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t heads, GetHeadAttr(a, "heads"));
  ASSIGN_OR_RETURN(int64_t head_dim, GetHeadAttr(a, "head_dim"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "q"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "q"));
  const Dim& p = o[0].shape[0];
  for (int i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(ExpectRows(o[i], p, heads * head_dim, "q, k and v"));
    RETURN_IF_ERROR(ExpectDType(o[i], o[0].dtype, "q, k and v"));
  }
  RETURN_IF_ERROR(ExpectRank(o[3], 1, "segment offsets"));
  RETURN_IF_ERROR(ExpectDType(o[3], DType::kI32, "segment offsets"));
  if (!o[3].shape[0].is_symbolic() || o[3].shape[0].offset() != 1) return Err("segment offsets must be [I+1]");
  return Types{o[0]};
}

// x [P, C] -> [rows, group * C]: each group of rows side by side, channel-major
// (out[e, c * group + k] = x[e * group + k, c]: a 2x2 Conv2d's weight, reshaped, reads it so).
absl::StatusOr<Types> InferMergeRows(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t group, GetHeadAttr(a, "group"));
  ASSIGN_OR_RETURN(std::string rows, GetString(a, "rows"));
  if (rows.empty()) return Err("rows must name the merged rows' dimension");
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  if (!o[0].shape[0].is_symbolic() || o[0].shape[1].is_symbolic()) return Err("input must be [symbol, width]");
  const std::optional<int64_t> width = CheckedMul(o[0].shape[1].offset(), group);
  if (!width) return Err("merged width too large");
  return Types{{o[0].dtype, {Dim::Sym(rows), Dim(*width)}}};
}

absl::StatusOr<Types> InferKvCacheWrite(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(AttentionDims d, CheckHeads(a));
  RETURN_IF_ERROR(ExpectFloat(o[0], "k"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "k"));
  const Dim& t = o[0].shape[0];
  RETURN_IF_ERROR(ExpectRows(o[0], t, d.kv_heads * d.head_dim, "k"));
  RETURN_IF_ERROR(ExpectRows(o[1], t, d.kv_heads * d.head_dim, "v"));
  RETURN_IF_ERROR(ExpectDType(o[1], o[0].dtype, "v"));
  RETURN_IF_ERROR(ExpectIndexVector(o[2], t, "slot mapping"));
  RETURN_IF_ERROR(CheckKvPool(o[3], d, o[0].dtype));
  return Types{};
}

absl::StatusOr<Types> InferPagedAttention(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(AttentionDims d, CheckHeads(a));
  RETURN_IF_ERROR(ExpectFloat(o[0], "q"));
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "q"));
  RETURN_IF_ERROR(ExpectRows(o[0], o[0].shape[0], d.heads * d.head_dim, "q"));
  RETURN_IF_ERROR(CheckKvPool(o[1], d, o[0].dtype));
  RETURN_IF_ERROR(ExpectRank(o[2], 1, "sequence offsets"));
  RETURN_IF_ERROR(ExpectDType(o[2], DType::kI32, "sequence offsets"));
  const Dim& s1 = o[2].shape[0];
  if (!s1.is_symbolic() || s1.offset() != 1) return Err("sequence offsets must be [S+1]");
  const Dim s = Dim::Sym(s1.symbol());
  RETURN_IF_ERROR(ExpectRank(o[3], 2, "block tables"));
  RETURN_IF_ERROR(ExpectDType(o[3], DType::kI32, "block tables"));
  RETURN_IF_ERROR(ExpectSameDim(o[3].shape[0], s, "block tables rows"));
  RETURN_IF_ERROR(ExpectIndexVector(o[4], s, "context lengths"));
  return Types{o[0]};
}

// The fused QKV op's checks: x [T,K], norm weight [K], W [(H+2KV)D, K],
// positions [T], optional bias. Returns the q, k, v types.
absl::StatusOr<Types> CheckNormQkvRope(const TensorType& x, const TensorType& norm_w, const TensorType& w,
                                       const TensorType& positions, const TensorType* bias, const Attrs& a,
                                       AttentionDims* dims) {
  RETURN_IF_ERROR(CheckEps(a));
  ASSIGN_OR_RETURN(AttentionDims d, CheckHeads(a));
  RETURN_IF_ERROR(CheckRotaryAttrs(a, d.head_dim));
  ASSIGN_OR_RETURN(Dim n, CheckLinear(x, w));
  const int64_t q = d.heads * d.head_dim, kv = d.kv_heads * d.head_dim;
  RETURN_IF_ERROR(ExpectSameDim(n, Dim(q + 2 * kv), "qkv weight rows"));
  RETURN_IF_ERROR(ExpectVector(norm_w, x.shape[1], x.dtype, "norm weight"));
  RETURN_IF_ERROR(CheckRotaryPositions(positions, x.shape[0], a));
  if (bias != nullptr) RETURN_IF_ERROR(ExpectVector(*bias, n, x.dtype, "bias"));
  *dims = d;
  const Dim& t = x.shape[0];
  return Types{{x.dtype, {t, Dim(q)}}, {x.dtype, {t, Dim(kv)}}, {x.dtype, {t, Dim(kv)}}};
}

// (x, norm_w, W, positions, slot_mapping, kv, bias?) -> q
absl::StatusOr<Types> InferNormQkvRopeKvWrite(Operands o, const Attrs& a) {
  AttentionDims d;
  ASSIGN_OR_RETURN(Types qkv, CheckNormQkvRope(o[0], o[1], o[2], o[3], o.size() == 7 ? &o[6] : nullptr, a, &d));
  RETURN_IF_ERROR(ExpectIndexVector(o[4], o[0].shape[0], "slot mapping"));
  RETURN_IF_ERROR(CheckKvPool(o[5], d, o[0].dtype));
  return Types{qkv[0]};
}

// (x, norm_w, W [2I, K]) -> [T, I]
absl::StatusOr<Types> InferNormGateUpSilu(Operands o, const Attrs& a) {
  RETURN_IF_ERROR(CheckEps(a));
  ASSIGN_OR_RETURN(Dim n, CheckLinear(o[0], o[2]));
  RETURN_IF_ERROR(ExpectVector(o[1], o[0].shape[1], o[0].dtype, "norm weight"));
  if (n.is_symbolic() || n.offset() % 2 != 0) return Err("gate_up weight rows must be even");
  return Types{{o[0].dtype, {o[0].shape[0], Dim(n.offset() / 2)}}};
}

// (x, W, residual) -> residual + x W^T
absl::StatusOr<Types> InferLinearResidual(Operands o, const Attrs&) {
  ASSIGN_OR_RETURN(Dim n, CheckLinear(o[0], o[1]));
  TensorType out{o[0].dtype, {o[0].shape[0], n}};
  if (!(o[2] == out)) return Errf("residual must be ", out.ToString(), ", got ", o[2].ToString());
  return Types{out};
}

// (x, w, residual) -> residual + rms_norm(x)
absl::StatusOr<Types> InferRmsNormResidual(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(Types t, InferRmsNorm(o.first(2), a));
  if (!(o[2] == t[0])) return Errf("residual must be ", t[0].ToString(), ", got ", o[2].ToString());
  return t;
}

// (a, b, w) -> (a + b, rms_norm(a + b))
absl::StatusOr<Types> InferAddRmsNorm(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(Types sum, InferBinary(o.first(2), a));
  const TensorType norm_operands[2] = {sum[0], o[2]};
  ASSIGN_OR_RETURN(Types norm, InferRmsNorm(norm_operands, a));
  return Types{sum[0], norm[0]};
}

// (x, w, W) -> rms_norm(x) W^T
absl::StatusOr<Types> InferNormLinear(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(Types normed, InferRmsNorm(o.first(2), a));
  ASSIGN_OR_RETURN(Dim n, CheckLinear(normed[0], o[2]));
  return Types{{o[0].dtype, {o[0].shape[0], n}}};
}

// (residual, norm_w, W [2I, K], y, post_w) -> (norm_gate_up_silu(h, norm_w, W), h), where
// h = residual + rms_norm(y, post_w) with eps residual_eps (rms_norm_residual's): GLM-4.1V's and
// GLM-4-0414's sandwich norm after attention folded into the MLP's first projection.
absl::StatusOr<Types> InferResidualNormGateUpSilu(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(double residual_eps, GetFloat(a, "residual_eps"));
  if (!(residual_eps >= 0 && residual_eps <= kMaxNormEps)) {
    return Errf("residual_eps must be in [0, ", kMaxNormEps, "], got ", residual_eps);
  }
  const TensorType pre[3] = {o[3], o[4], o[0]};
  ASSIGN_OR_RETURN(Types h, InferRmsNormResidual(pre, Attrs{{"eps", residual_eps}}));
  const TensorType consumer[3] = {h[0], o[1], o[2]};
  ASSIGN_OR_RETURN(Types out, InferNormGateUpSilu(consumer, a));
  return Types{out[0], h[0]};
}

// x -> the sum of x over the tensor-parallel group (every rank gets it).
absl::StatusOr<Types> InferAllReduce(Operands o, const Attrs&) {
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  return Types{o[0]};
}

// x [R, n] -> [R, n * parts]: rank r's columns land at r * n.
absl::StatusOr<Types> InferAllGather(Operands o, const Attrs& a) {
  ASSIGN_OR_RETURN(int64_t parts, GetInt(a, "parts"));
  if (parts < 1 || parts > kMaxHeadAttr) return Errf("parts must be in [1, ", kMaxHeadAttr, "], got ", parts);
  RETURN_IF_ERROR(ExpectRank(o[0], 2, "input"));
  RETURN_IF_ERROR(ExpectFloat(o[0], "input"));
  const Dim& n = o[0].shape[1];
  if (n.is_symbolic()) return Err("all_gather along a symbolic dimension");
  const std::optional<int64_t> width = CheckedMul(n.offset(), parts);
  if (!width) return Err("all_gather result too large");
  return Types{{o[0].dtype, {o[0].shape[0], Dim(*width)}}};
}

// (x, residual) -> residual + all_reduce(x)
absl::StatusOr<Types> InferAllReduceResidual(Operands o, const Attrs& a) { return InferBinary(o, a); }

// (x, w, residual) -> residual + rms_norm(all_reduce(x))
absl::StatusOr<Types> InferAllReduceNormResidual(Operands o, const Attrs& a) {
  return InferRmsNormResidual(o, a);
}

// ---- attribute schemas ----

constexpr AttrSpec kEps[] = {{"eps", AttrKind::kFloat}};
constexpr AttrSpec kRotary[] = {{"heads", AttrKind::kInt},
                                 {"head_dim", AttrKind::kInt},
                                 {"rot", AttrKind::kInt},
                                 {"theta", AttrKind::kFloat},
                                 {"mrope_section", AttrKind::kIntList, /*optional=*/true}};
constexpr AttrSpec kVisionRotary[] = {{"heads", AttrKind::kInt}, {"head_dim", AttrKind::kInt}, {"theta", AttrKind::kFloat}};
constexpr AttrSpec kSide[] = {{"side", AttrKind::kInt}};
constexpr AttrSpec kMergeRows[] = {{"group", AttrKind::kInt}, {"rows", AttrKind::kString}};
constexpr AttrSpec kAttentionHeads[] = {{"heads", AttrKind::kInt}, {"head_dim", AttrKind::kInt}};
constexpr AttrSpec kHeads[] = {{"heads", AttrKind::kInt}, {"kv_heads", AttrKind::kInt}, {"head_dim", AttrKind::kInt}};
constexpr AttrSpec kParts[] = {{"parts", AttrKind::kInt}};
constexpr AttrSpec kSlice[] = {{"axis", AttrKind::kInt}, {"start", AttrKind::kInt}, {"size", AttrKind::kInt}};
constexpr AttrSpec kNormQkvRope[] = {{"eps", AttrKind::kFloat},   {"heads", AttrKind::kInt},
                                     {"kv_heads", AttrKind::kInt}, {"head_dim", AttrKind::kInt},
                                     {"rot", AttrKind::kInt},      {"theta", AttrKind::kFloat},
                                     {"mrope_section", AttrKind::kIntList, /*optional=*/true}};

constexpr AttrSpec kEpsAndResidualEps[] = {{"eps", AttrKind::kFloat}, {"residual_eps", AttrKind::kFloat}};

constexpr std::span<const AttrSpec> kNone{};

// clang-format off
constexpr std::array<OpInfo, kOpCount> kOps = {{
  // id                         name                      operands results attrs         properties                         state inplace rule
  {OpId::k_embedding,           "embedding",              2, 2, 1, kNone,        0,                                  -1, -1, InferEmbedding},
  {OpId::k_rms_norm,            "rms_norm",               2, 2, 1, kEps,         0,                                  -1,  0, InferRmsNorm},
  {OpId::k_linear,              "linear",                 2, 3, 1, kNone,        0,                                  -1, -1, InferLinear, 1},
  {OpId::k_rotary,              "rotary",                 2, 2, 1, kRotary,      0,                                  -1,  0, InferRotary},
  {OpId::k_attention,           "attention",              4, 4, 1, kHeads,       kSideEffect,                         3, -1, InferAttention},
  {OpId::k_add,                 "add",                    2, 2, 1, kNone,        kElementwise | kCommutative,        -1,  0, InferBinary},
  {OpId::k_mul,                 "mul",                    2, 2, 1, kNone,        kElementwise | kCommutative,        -1,  0, InferBinary},
  {OpId::k_silu,                "silu",                   1, 1, 1, kNone,        kElementwise,                       -1,  0, InferUnary},
  {OpId::k_slice,               "slice",                  1, 1, 1, kSlice,       0,                                  -1, -1, InferSlice},
  {OpId::k_gather_rows,         "gather_rows",            2, 2, 1, kNone,        0,                                  -1, -1, InferGatherRows},
  {OpId::k_argmax,              "argmax",                 1, 1, 1, kNone,        0,                                  -1, -1, InferArgmax},
  {OpId::k_scatter_rows,        "scatter_rows",           3, 3, 1, kNone,        0,                                  -1,  0, InferScatterRows},
  {OpId::k_layer_norm,          "layer_norm",             3, 3, 1, kEps,         0,                                  -1,  0, InferLayerNorm},
  {OpId::k_gelu,                "gelu",                   1, 1, 1, kNone,        kElementwise,                       -1,  0, InferUnary},
  {OpId::k_vision_pos_embed,    "vision_pos_embed",       3, 3, 1, kSide,        0,                                  -1,  0, InferVisionPosEmbed},
  {OpId::k_vision_rotary,       "vision_rotary",          2, 2, 1, kVisionRotary, 0,                                 -1,  0, InferVisionRotary},
  {OpId::k_segment_attention,   "segment_attention",      4, 4, 1, kAttentionHeads, 0,                               -1, -1, InferSegmentAttention},
  {OpId::k_merge_rows,          "merge_rows",             1, 1, 1, kMergeRows,   0,                                  -1, -1, InferMergeRows},
  {OpId::k_kv_cache_write,      "kv_cache_write",         4, 4, 0, kHeads,       kSideEffect,                         3, -1, InferKvCacheWrite},
  {OpId::k_paged_attention,     "paged_attention",        5, 5, 1, kHeads,       0,                                   1, -1, InferPagedAttention},
  {OpId::k_norm_qkv_rope_kv_write, "norm_qkv_rope_kv_write", 6, 7, 1, kNormQkvRope, kFused | kSideEffect,           5, -1, InferNormQkvRopeKvWrite, 2},
  {OpId::k_norm_gate_up_silu,   "norm_gate_up_silu",      3, 3, 1, kEps,         kFused,                             -1, -1, InferNormGateUpSilu, 2},
  {OpId::k_linear_residual,     "linear_residual",        3, 3, 1, kNone,        kFused,                             -1,  2, InferLinearResidual, 1},
  {OpId::k_rms_norm_residual,   "rms_norm_residual",      3, 3, 1, kEps,         kFused,                             -1,  2, InferRmsNormResidual},
  {OpId::k_add_rms_norm,        "add_rms_norm",           3, 3, 2, kEps,         kFused,                             -1,  0, InferAddRmsNorm},
  {OpId::k_norm_linear,         "norm_linear",            3, 3, 1, kEps,         kFused,                             -1, -1, InferNormLinear, 2},
  {OpId::k_all_reduce,          "all_reduce",             1, 1, 1, kNone,        kCollective,                        -1,  0, InferAllReduce},
  {OpId::k_all_gather,          "all_gather",             1, 1, 1, kParts,       kCollective,                        -1, -1, InferAllGather},
  {OpId::k_all_reduce_residual, "all_reduce_residual",    2, 2, 1, kNone,        kFused | kCollective,               -1,  1, InferAllReduceResidual},
  {OpId::k_all_reduce_norm_residual, "all_reduce_norm_residual", 3, 3, 1, kEps, kFused | kCollective,               -1,  2, InferAllReduceNormResidual},
  {OpId::k_vision_qkv_rotary,   "vision_qkv_rotary",      2, 2, 1, kVisionRotary, kFused,                           -1,  0, InferVisionQkvRotary},
  {OpId::k_packed_segment_attention, "packed_segment_attention", 2, 2, 1, kAttentionHeads, kFused,                 -1, -1, InferPackedSegmentAttention},
  {OpId::k_residual_norm_gate_up_silu, "residual_norm_gate_up_silu", 5, 5, 2, kEpsAndResidualEps, kFused,           -1, -1, InferResidualNormGateUpSilu, 2},
}};
// clang-format on

constexpr bool OpTableIsComplete() {
  for (int i = 0; i < kOpCount; ++i) {
    if (static_cast<int>(kOps[i].id) != i || kOps[i].name.empty() || kOps[i].infer == nullptr) return false;
  }
  return true;
}
static_assert(OpTableIsComplete(), "kOps must have one complete row per OpId, in AG_IR_OPS order");

}  // namespace

const OpInfo& GetOpInfo(OpId op) { return kOps[static_cast<int>(op)]; }

std::optional<OpId> ParseOpName(absl::string_view name) {
  for (const OpInfo& info : kOps) {
    if (info.name == name) return info.id;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<TensorType>> InferResultTypes(OpId op, std::span<const TensorType> operands,
                                                         const Attrs& attrs) {
  const OpInfo& info = GetOpInfo(op);
  const int n = static_cast<int>(operands.size());
  if (n < info.min_operands || n > info.max_operands) {
    return Errf(info.name, " takes ",
                info.min_operands == info.max_operands ? absl::StrCat(info.min_operands)
                                                       : absl::StrCat(info.min_operands, "-", info.max_operands),
                " operands, got ", n);
  }
  for (const AttrSpec& spec : info.attrs) {
    auto it = attrs.find(spec.name);
    if (it == attrs.end() && spec.optional) continue;
    if (it == attrs.end()) return Errf(info.name, ": missing attribute '", spec.name, "'");
    if (KindOf(it->second) != spec.kind) {
      return Errf(info.name, ": attribute '", spec.name, "' must be ", AttrKindName(spec.kind));
    }
  }
  for (const auto& [name, value] : attrs) {
    bool known = false;
    for (const AttrSpec& spec : info.attrs) known = known || spec.name == name;
    if (!known) return Errf(info.name, ": unknown attribute '", name, "'");
  }
  absl::StatusOr<std::vector<TensorType>> types = info.infer(operands, attrs);
  if (!types.ok()) return Errf(info.name, ": ", types.status().message());
  return types;
}

}  // namespace ag::ir
