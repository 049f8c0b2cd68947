#include "ir/quant.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ag::ir {

int QuantFormat::bits() const {
  switch (kind) {
    case QuantKind::kNone:
      return 16;
    case QuantKind::kFp8E4M3:
    case QuantKind::kInt8:
      return 8;
    case QuantKind::kInt4:
      return 4;
  }
  return 16;
}

std::string QuantFormat::ToString() const {
  const char* act_suffix = act == ActQuant::kFp8 ? ":act-fp8" : act == ActQuant::kInt8 ? ":act-int8" : "";
  switch (kind) {
    case QuantKind::kNone:
      return "none";
    case QuantKind::kFp8E4M3:
      return absl::StrCat("fp8e4m3", act_suffix);
    case QuantKind::kInt8:
    case QuantKind::kInt4:
      return absl::StrCat("int", bits(), ":", group == 0 ? "channel" : absl::StrCat("g", group), ":",
                          symmetric ? "sym" : "asym", act_suffix);
  }
  return "?";
}

int64_t QuantFormat::DeviceBytes(int64_t n, int64_t k) const {
  if (!quantized()) return n * k * 2;
  const int64_t codes = n * k * bits() / 8;
  const int64_t groups = n * Groups(k);
  const int64_t scales = groups * (group == 0 ? 4 : 2);
  return codes + scales + (symmetric ? 0 : groups);
}

absl::Status QuantFormat::CheckRow(int64_t k) const {
  if (group != 0 && (k <= 0 || k % group != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(ToString(), ": group size ", group, " does not divide the ",
                                                   k, " inputs of a row"));
  }
  if (kind == QuantKind::kInt4 && k % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(ToString(), ": a row of ", k, " inputs is not whole bytes"));
  }
  return absl::OkStatus();
}

absl::string_view QuantPackingName(QuantPacking packing) {
  switch (packing) {
    case QuantPacking::kNone:
      return "dense";
    case QuantPacking::kGptq:
      return "gptq";
    case QuantPacking::kGptqV2:
      return "gptq_v2";
    case QuantPacking::kAwq:
      return "awq";
    case QuantPacking::kCtInt:
      return "compressed-tensors pack-quantized";
    case QuantPacking::kCtFp8:
      return "compressed-tensors float-quantized";
    case QuantPacking::kCtInt8:
      return "compressed-tensors int-quantized";
  }
  return "?";
}

absl::StatusOr<QuantFormat> ParseQuantFormat(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  QuantFormat f;
  const absl::string_view kind = parts[0];
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("unknown weight format '", text, "' (", why,
                                                   "; formats: none, fp8e4m3, int8[:channel|:gN][:sym|:asym], "
                                                   "int4[:gN|:channel][:sym|:asym], N in 32, 64, 128; "
                                                   "a quantized format may end in :act-fp8 or :act-int8)"));
  };
  // The input rows' quantization, last: any quantized format may take it.
  std::vector<absl::string_view> options(parts.begin() + 1, parts.end());
  ActQuant act = ActQuant::kNone;
  if (!options.empty() && (options.back() == "act-fp8" || options.back() == "act-int8")) {
    act = options.back() == "act-fp8" ? ActQuant::kFp8 : ActQuant::kInt8;
    options.pop_back();
  }
  if (kind == "none" || kind == "bf16" || kind == "f16" || kind == "f32") {
    if (parts.size() > 1) return bad("it takes no options");
    return f;
  }
  f.act = act;
  if (kind == "fp8" || kind == "fp8e4m3") {
    f.kind = QuantKind::kFp8E4M3;
    for (absl::string_view o : options) {
      if (o != "channel") return bad("fp8e4m3 has one scale per output channel");
    }
    return f;
  }
  if (kind == "int8") {
    f.kind = QuantKind::kInt8;
  } else if (kind == "int4") {
    f.kind = QuantKind::kInt4;
    f.group = 128;
    f.symmetric = false;
  } else {
    return bad(absl::StrCat("'", kind, "' is not a format"));
  }
  bool have_group = false, have_sym = false;
  for (absl::string_view p : options) {
    if ((p == "sym" || p == "asym") && !have_sym) {
      f.symmetric = p == "sym";
      have_sym = true;
      continue;
    }
    if (have_group) return bad(absl::StrCat("option '", p, "' repeats or is unknown"));
    have_group = true;
    if (p == "channel") {
      f.group = 0;
      continue;
    }
    bool known = false;
    for (int32_t g : kQuantGroups) {
      if (p == absl::StrCat("g", g)) {
        f.group = g;
        known = true;
      }
    }
    if (!known) return bad(absl::StrCat("option '", p, "' is not a group size or sym/asym"));
  }
  return f;
}

}  // namespace ag::ir
