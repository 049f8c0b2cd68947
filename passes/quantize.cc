#include "passes/quantize.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ir/status_macros.h"

namespace ag::passes {
namespace {

// Glob match of the whole text: '*' any run of characters, '?' one.
bool Glob(absl::string_view pattern, absl::string_view text) {
  size_t p = 0, t = 0, star = absl::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace

bool PatternMatchesWeight(absl::string_view pattern, absl::string_view name) {
  absl::string_view short_name = name;
  absl::ConsumePrefix(&short_name, "model.");
  for (absl::string_view candidate : {name, short_name}) {
    if (Glob(pattern, candidate)) return true;
    absl::string_view bare = candidate;
    if (absl::ConsumeSuffix(&bare, ".weight") && Glob(pattern, bare)) return true;
  }
  return false;
}

QuantPolicy DefaultQuantPolicy(ir::QuantFormat body) {
  QuantPolicy policy;
  policy.body = body;
  if (body.kind == ir::QuantKind::kInt4) {
    // The K/V rows share x with the q rows (one QKV product): they quantize it as the body does.
    const ir::QuantFormat fp8{ir::QuantKind::kFp8E4M3, 0, true, body.act};
    for (const char* pattern : {"lm_head", "*.self_attn.k_proj", "*.self_attn.v_proj"}) {
      policy.rules.push_back({pattern, fp8, ""});
    }
  }
  return policy;
}

absl::StatusOr<std::vector<QuantRule>> ParseQuantPolicy(absl::string_view text, absl::string_view file) {
  std::vector<QuantRule> rules;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string origin = absl::StrCat(file, ":", line_number);
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const size_t colon = line.find(": ");
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": expected 'PATTERN: FORMAT', got '", line, "'"));
    }
    QuantRule rule;
    rule.pattern = std::string(absl::StripAsciiWhitespace(line.substr(0, colon)));
    rule.origin = origin;
    if (rule.pattern.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": empty pattern"));
    absl::StatusOr<ir::QuantFormat> format = ir::ParseQuantFormat(absl::StripAsciiWhitespace(line.substr(colon + 2)));
    if (!format.ok()) return absl::InvalidArgumentError(absl::StrCat(origin, ": ", format.status().message()));
    rule.format = *format;
    rules.push_back(std::move(rule));
  }
  return rules;
}

absl::StatusOr<bool> QuantizePass::Run(ir::Graph& graph) {
  if (policy_.empty()) return false;
  // Candidates: parameters every live user reads as a linear's W.
  const std::vector<std::vector<int32_t>> users = graph.ComputeUsers();
  std::vector<bool> matched(policy_.rules.size(), false);
  bool changed = false;
  for (ir::ValueId v : graph.ValuesOfKind(ir::ValueKind::kParam)) {
    if (users[v].empty() || graph.IsOutput(v)) continue;
    bool as_matrix = true;
    for (int32_t n : users[v]) {
      const ir::Node& node = graph.nodes()[n];
      const int m = ir::GetOpInfo(node.op).matrix_operand;
      for (size_t i = 0; i < node.operands.size(); ++i) {
        if (node.operands[i] == v && static_cast<int>(i) != m) as_matrix = false;
      }
    }
    ir::Value& value = graph.mutable_value(v);
    if (!as_matrix || value.type.rank() != 2) continue;
    if (value.concat_of.empty()) value.concat_of = {{value.name, {}, {}}};
    for (ir::ParamPart& part : value.concat_of) {
      ir::QuantFormat format = policy_.body;
      for (size_t r = 0; r < policy_.rules.size(); ++r) {
        const QuantRule& rule = policy_.rules[r];
        if (PatternMatchesWeight(rule.pattern, part.name) || PatternMatchesWeight(rule.pattern, value.name)) {
          format = rule.format;
          matched[r] = true;
          break;
        }
      }
      if (format.quantized()) {
        const int64_t k = value.type.shape[1].offset() * (part.shard.axis == 1 ? part.shard.parts : 1);
        if (absl::Status row = format.CheckRow(k); !row.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("@", part.name, ": ", row.message(),
                                                         " (a --quantize-policy rule can give it another format)"));
        }
      }
      changed = changed || !(part.quant == format);
      part.quant = format;
    }
    // A weight with nothing quantized goes back to its plain form.
    bool any = false;
    for (const ir::ParamPart& part : value.concat_of) any = any || part.quant.quantized();
    if (!any && value.concat_of.size() == 1 && value.concat_of[0].name == value.name && !value.concat_of[0].shard.sharded()) {
      value.concat_of.clear();
    }
  }
  for (size_t r = 0; r < policy_.rules.size(); ++r) {
    if (!matched[r] && !policy_.rules[r].origin.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(policy_.rules[r].origin, ": '", policy_.rules[r].pattern,
                                                     "' names no linear weight of the model"));
    }
  }
  return changed;
}

}  // namespace ag::passes
