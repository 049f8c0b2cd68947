#include "models/quant/packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "kernels/ref/quant.h"

namespace ag::quant {
namespace {

using ir::QuantPacking;

// One tensor a packing reads: its name suffix, the dtypes it may have, its shape.
struct Part {
  std::string suffix;
  std::vector<ir::DType> dtypes;
  std::vector<int64_t> shape;
  bool optional = false;  // act-order indices: GPTQ writes them always, compressed-tensors only with actorder
};

const std::vector<ir::DType> kScaleTypes = {ir::DType::kF16, ir::DType::kBF16, ir::DType::kF32};

int64_t Ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The tensors of a packing for a logical [n, k] weight.
std::vector<Part> PartsOf(QuantPacking packing, const ir::QuantFormat& f, int64_t n, int64_t k) {
  const int64_t pf = 32 / f.bits(), groups = f.Groups(k);
  const std::vector<ir::DType> i32 = {ir::DType::kI32};
  switch (packing) {
    case QuantPacking::kGptq:
    case QuantPacking::kGptqV2:
      return {{"qweight", i32, {k / pf, n}}, {"qzeros", i32, {groups, n / pf}}, {"scales", kScaleTypes, {groups, n}},
              {"g_idx", i32, {k}, true}};
    case QuantPacking::kAwq:
      return {{"qweight", i32, {k, n / 8}}, {"qzeros", i32, {groups, n / 8}}, {"scales", kScaleTypes, {groups, n}}};
    case QuantPacking::kCtInt: {
      std::vector<Part> parts = {{"weight_packed", i32, {n, Ceil(k, pf)}},
                                 {"weight_scale", kScaleTypes, {n, groups}},
                                 {"weight_shape", {ir::DType::kI32, ir::DType::kI64}, {2}},
                                 {"weight_g_idx", i32, {k}, true}};
      if (!f.symmetric) parts.push_back({"weight_zero_point", i32, {Ceil(n, pf), groups}});
      return parts;
    }
    case QuantPacking::kCtFp8:
      return {{"weight", {ir::DType::kF8E4M3}, {n, k}}, {"weight_scale", kScaleTypes, {n, 1}}};
    case QuantPacking::kCtInt8:
      return {{"weight", {ir::DType::kI8}, {n, k}}, {"weight_scale", kScaleTypes, {n, 1}}};
    case QuantPacking::kNone:
      break;
  }
  return {};
}

absl::Status Mismatch(const glm::TensorView& view, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(*view.file, ": tensor '", view.name, "' ", what));
}

// The tensor for `part`, checked; null for an optional part that is absent.
absl::StatusOr<const glm::TensorView*> Find(const glm::Checkpoint& checkpoint, absl::string_view module,
                                            const Part& part, QuantPacking packing, const ir::QuantFormat& f) {
  const std::string name = absl::StrCat(module, ".", part.suffix);
  absl::StatusOr<const glm::TensorView*> view = checkpoint.Find(name);
  if (!view.ok()) {
    if (part.optional) return nullptr;
    return absl::InvalidArgumentError(absl::StrCat(checkpoint.dir(), ": tensor '", name, "' is missing (the config says ",
                                                   module, " is stored ", ir::QuantPackingName(packing), " ",
                                                   f.ToString(), ")"));
  }
  const glm::TensorView& v = **view;
  if (std::find(part.dtypes.begin(), part.dtypes.end(), v.dtype) == part.dtypes.end()) {
    return Mismatch(v, absl::StrCat("is ", ir::DTypeName(v.dtype), ", which ", ir::QuantPackingName(packing),
                                    " does not store it as"));
  }
  bool shape_ok = v.shape == part.shape;
  // A per-tensor scale ([1] or []) is every row's.
  if ((packing == QuantPacking::kCtFp8 || packing == QuantPacking::kCtInt8) && part.suffix == "weight_scale") {
    int64_t elems = 1;
    for (int64_t d : v.shape) elems *= d;
    shape_ok = shape_ok || elems == 1;
  }
  if (!shape_ok) {
    return Mismatch(v, absl::StrCat("has shape [", absl::StrJoin(v.shape, ","), "], expected [",
                                    absl::StrJoin(part.shape, ","), "] for ", ir::QuantPackingName(packing), " ",
                                    f.ToString()));
  }
  return &v;
}

int32_t I32At(const glm::TensorView& v, int64_t i) {
  int32_t x;
  std::memcpy(&x, v.data + 4 * i, 4);
  return x;
}

// Element i of an I32 or I64 tensor.
int64_t IntAt(const glm::TensorView& v, int64_t i) {
  if (v.dtype == ir::DType::kI32) return I32At(v, i);
  int64_t x;
  std::memcpy(&x, v.data + 8 * i, 8);
  return x;
}

// Bits [shift, shift + bits) of a packed int32, as an unsigned value.
int Field(int32_t word, int shift, int bits) { return static_cast<int>((static_cast<uint32_t>(word) >> shift) & ((1u << bits) - 1)); }

// Reads a scale tensor as float, refusing values that are not finite.
absl::StatusOr<std::vector<float>> Scales(const glm::TensorView& v) {
  int64_t elems = 1;
  for (int64_t d : v.shape) elems *= d;
  std::vector<float> s(static_cast<size_t>(elems));
  glm::ConvertToFloat(v.dtype, v.data, elems, s.data());
  for (float x : s) {
    if (!std::isfinite(x)) return Mismatch(v, "holds a scale that is not finite");
  }
  return s;
}

// Each input's group: `g_idx` (act order) or k / group.
absl::StatusOr<std::vector<int32_t>> Groups(const glm::TensorView* g_idx, const ir::QuantFormat& f, int64_t k) {
  const int64_t groups = f.Groups(k), len = k / groups;
  std::vector<int32_t> g(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    g[i] = g_idx != nullptr ? I32At(*g_idx, i) : static_cast<int32_t>(i / len);
    if (g[i] < 0 || g[i] >= groups) return Mismatch(*g_idx, absl::StrCat("sends input ", i, " to group ", g[i],
                                                                        " of ", groups));
  }
  return g;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> CheckPacked(const glm::Checkpoint& checkpoint, QuantPacking packing,
                                                     const ir::QuantFormat& format, absl::string_view module,
                                                     int64_t n, int64_t k) {
  RETURN_IF_ERROR(format.CheckRow(k));
  const int64_t pf = 32 / format.bits();
  const bool gptq = packing == QuantPacking::kGptq || packing == QuantPacking::kGptqV2;
  if ((gptq && (k % pf != 0 || n % pf != 0)) || (packing == QuantPacking::kAwq && n % 8 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(module, ": a [", n, ", ", k, "] weight cannot be stored ",
                                                   ir::QuantPackingName(packing), " ", format.ToString()));
  }
  std::vector<std::string> names;
  for (const Part& part : PartsOf(packing, format, n, k)) {
    ASSIGN_OR_RETURN(const glm::TensorView* v, Find(checkpoint, module, part, packing, format));
    if (v != nullptr) names.push_back(v->name);
  }
  return names;
}

float UnpackedWeight::Value(int64_t r, int64_t j) const {
  const int64_t g = r * groups + group_of[j];
  const uint8_t q = codes[r * k + j];
  if (fp8) return scales[g] * ref::E4M3ToFloat(q);
  return scales[g] * static_cast<float>(static_cast<int>(q) - zeros[g]);
}

absl::StatusOr<UnpackedWeight> UnpackPacked(const glm::Checkpoint& checkpoint, QuantPacking packing,
                                            const ir::QuantFormat& format, absl::string_view module, int64_t n,
                                            int64_t k) {
  RETURN_IF_ERROR(CheckPacked(checkpoint, packing, format, module, n, k).status());
  std::vector<const glm::TensorView*> t;
  for (const Part& part : PartsOf(packing, format, n, k)) {
    ASSIGN_OR_RETURN(const glm::TensorView* v, Find(checkpoint, module, part, packing, format));
    t.push_back(v);
  }
  const int bits = format.bits(), pf = 32 / bits, half = 1 << (bits - 1);
  UnpackedWeight u;
  u.n = n;
  u.k = k;
  u.groups = format.Groups(k);
  u.codes.resize(static_cast<size_t>(n * k));
  const int64_t groups = u.groups;
  switch (packing) {
    case QuantPacking::kGptq:
    case QuantPacking::kGptqV2: {  // qweight [k/pf, n], qzeros [groups, n/pf], scales [groups, n], g_idx [k]
      ASSIGN_OR_RETURN(const std::vector<float> s, Scales(*t[2]));
      ASSIGN_OR_RETURN(u.group_of, Groups(t[3], format, k));
      const int z_offset = packing == QuantPacking::kGptq ? 1 : 0;  // v1 stores z - 1
      u.scales.resize(static_cast<size_t>(n * groups));
      u.zeros.resize(u.scales.size());
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t nn = 0; nn < n; ++nn) {
          u.scales[nn * groups + g] = s[g * n + nn];
          u.zeros[nn * groups + g] = Field(I32At(*t[1], g * (n / pf) + nn / pf), bits * static_cast<int>(nn % pf), bits) +
                                     z_offset;
        }
      }
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t nn = 0; nn < n; ++nn) {
          u.codes[nn * k + kk] = static_cast<uint8_t>(
              Field(I32At(*t[0], (kk / pf) * n + nn), bits * static_cast<int>(kk % pf), bits));
        }
      }
      return u;
    }
    case QuantPacking::kAwq: {  // qweight [k, n/8], qzeros [groups, n/8], scales [groups, n]; AWQ's nibble order
      constexpr int kNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};
      ASSIGN_OR_RETURN(const std::vector<float> s, Scales(*t[2]));
      ASSIGN_OR_RETURN(u.group_of, Groups(nullptr, format, k));
      u.scales.resize(static_cast<size_t>(n * groups));
      u.zeros.resize(u.scales.size());
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t nn = 0; nn < n; ++nn) {
          u.scales[nn * groups + g] = s[g * n + nn];
          u.zeros[nn * groups + g] = Field(I32At(*t[1], g * (n / 8) + nn / 8), 4 * kNibbleOfColumn[nn % 8], 4);
        }
      }
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t nn = 0; nn < n; ++nn) {
          u.codes[nn * k + kk] =
              static_cast<uint8_t>(Field(I32At(*t[0], kk * (n / 8) + nn / 8), 4 * kNibbleOfColumn[nn % 8], 4));
        }
      }
      return u;
    }
    case QuantPacking::kCtInt: {  // weight_packed [n, ceil(k/pf)], weight_scale [n, groups], weight_shape, g_idx, zero points
      const int64_t rows = IntAt(*t[2], 0), cols = IntAt(*t[2], 1);
      if (rows != n || cols != k) return Mismatch(*t[2], absl::StrCat("says [", rows, ", ", cols, "], not [", n, ", ", k, "]"));
      ASSIGN_OR_RETURN(u.scales, Scales(*t[1]));
      ASSIGN_OR_RETURN(u.group_of, Groups(t[3], format, k));
      // Codes and zero points are stored offset by 2^(bits-1) (signed values made unsigned).
      u.zeros.assign(u.scales.size(), half);
      if (!format.symmetric) {
        for (int64_t nn = 0; nn < n; ++nn) {
          for (int64_t g = 0; g < groups; ++g) {
            u.zeros[nn * groups + g] = Field(I32At(*t[4], (nn / pf) * groups + g), bits * static_cast<int>(nn % pf), bits);
          }
        }
      }
      const int64_t words = Ceil(k, pf);
      for (int64_t nn = 0; nn < n; ++nn) {
        for (int64_t kk = 0; kk < k; ++kk) {
          u.codes[nn * k + kk] =
              static_cast<uint8_t>(Field(I32At(*t[0], nn * words + kk / pf), bits * static_cast<int>(kk % pf), bits));
        }
      }
      return u;
    }
    case QuantPacking::kCtFp8: {  // weight [n, k] E4M3, weight_scale [n, 1] or one for the tensor
      ASSIGN_OR_RETURN(const std::vector<float> s, Scales(*t[1]));
      for (int64_t i = 0; i < n * k; ++i) {
        if ((t[0]->data[i] & 0x7F) == 0x7F) return Mismatch(*t[0], "holds a NaN");
      }
      u.fp8 = true;
      u.groups = 1;
      u.group_of.assign(static_cast<size_t>(k), 0);
      u.scales.resize(static_cast<size_t>(n));
      for (int64_t nn = 0; nn < n; ++nn) u.scales[nn] = s.size() == 1 ? s[0] : s[nn];
      std::memcpy(u.codes.data(), t[0]->data, static_cast<size_t>(n * k));
      return u;
    }
    case QuantPacking::kCtInt8: {  // weight [n, k] int8 (symmetric), weight_scale [n, 1] or one for the tensor
      ASSIGN_OR_RETURN(const std::vector<float> s, Scales(*t[1]));
      u.groups = 1;
      u.group_of.assign(static_cast<size_t>(k), 0);
      u.scales.resize(static_cast<size_t>(n));
      for (int64_t nn = 0; nn < n; ++nn) u.scales[nn] = s.size() == 1 ? s[0] : s[nn];
      u.zeros.assign(static_cast<size_t>(n), half);  // codes stored offset by 128, as the packed int formats
      for (int64_t i = 0; i < n * k; ++i) u.codes[i] = static_cast<uint8_t>(static_cast<int8_t>(t[0]->data[i]) + half);
      return u;
    }
    case QuantPacking::kNone:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(module, ": not a packed weight"));
}

absl::Status DecodePacked(const glm::Checkpoint& checkpoint, QuantPacking packing, const ir::QuantFormat& format,
                          absl::string_view module, int64_t n, int64_t k, float* out) {
  ASSIGN_OR_RETURN(const UnpackedWeight u, UnpackPacked(checkpoint, packing, format, module, n, k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) out[r * k + j] = u.Value(r, j);
  }
  return absl::OkStatus();
}

}  // namespace ag::quant
