#include "compiler/summary.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ag::compiler {

PlanSummary Summarize(const Plan& plan, const Program& program) {
  PlanSummary s;
  s.total_steps = static_cast<int64_t>(program.steps.size());
  s.tp = plan.tp;
  size_t layers = 0;
  for (const PlanStep& step : program.steps) layers = std::max(layers, static_cast<size_t>(step.layer + 1));
  std::vector<int64_t> per_layer(layers, 0), collectives(layers, 0), launches(layers, 0);
  std::vector<bool> streamed(plan.weights.size(), false), used(plan.weights.size(), false);
  for (const PlanStep& step : program.steps) {
    ++s.kernels[std::string(ir::OpName(step.kernel))];
    const ir::OpInfo& info = ir::GetOpInfo(step.kernel);
    const bool collective = info.Has(ir::kCollective);
    s.collectives += collective;
    if (step.layer >= 0) {
      const size_t l = static_cast<size_t>(step.layer);
      ++per_layer[l];
      collectives[l] += collective;
      launches[l] += 1 + (collective && info.Has(ir::kFused));  // the NCCL count
    } else {
      ++s.steps_outside_layers;
    }
    for (const PlanTensor& t : step.operands) {
      if (t.kind != TensorKind::kWeight) continue;
      used[t.index] = true;
      if (step.kernel != ir::OpId::k_embedding) streamed[t.index] = true;
    }
  }
  if (layers > 0) {
    s.steps_per_layer = *std::max_element(per_layer.begin(), per_layer.end());
    s.collectives_per_layer = *std::max_element(collectives.begin(), collectives.end());
    s.launches_per_layer = s.steps_per_layer;
    s.launches_per_layer_nccl = *std::max_element(launches.begin(), launches.end());
  }
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const WeightEntry& w = plan.weights[i];
    const int64_t bytes = w.DeviceBytes();
    if (used[i]) {
      s.weight_bytes += bytes;
      for (const auto& [format, b] : w.DeviceBytesByFormat()) s.bytes_by_format[format] += b;
    }
    if (streamed[i]) s.weight_bytes_read_per_step += bytes;
  }
  for (const int32_t i : LookupOnlyWeights(plan)) s.lookup_only_bytes += plan.weights[i].DeviceBytes();
  return s;
}

std::vector<int32_t> LookupOnlyWeights(const Plan& plan) {
  std::vector<bool> looked_up(plan.weights.size(), false), other(plan.weights.size(), false);
  for (const Program& program : plan.programs) {
    for (const PlanStep& step : program.steps) {
      for (const PlanTensor& t : step.operands) {
        if (t.kind != TensorKind::kWeight || t.index < 0 || static_cast<size_t>(t.index) >= plan.weights.size()) continue;
        (step.kernel == ir::OpId::k_embedding ? looked_up : other)[t.index] = true;
      }
    }
  }
  std::vector<int32_t> out;
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    if (looked_up[i] && !other[i]) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

namespace {

std::string Ref(const Plan& plan, const Program& program, const PlanTensor& t) {
  switch (t.kind) {
    case TensorKind::kArena:
      return absl::StrCat("arena+", t.index);
    case TensorKind::kWeight:
      return absl::StrCat("@", plan.weights[t.index].name);
    case TensorKind::kInput:
      return absl::StrCat("%", program.inputs[t.index].name);
    case TensorKind::kState:
      return absl::StrCat("$", program.states[t.index].name);
  }
  return "?";
}

}  // namespace

std::string DescribeSteps(const Plan& plan, const Program& program) {
  std::string out;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const PlanStep& step = program.steps[i];
    absl::StrAppend(&out, "  ", i, " ", step.name, " = ", ir::OpName(step.kernel), "(",
                    absl::StrJoin(step.operands, ", ",
                                  [&](std::string* o, const PlanTensor& t) { o->append(Ref(plan, program, t)); }),
                    ")");
    if (!step.attrs.empty()) {
      absl::StrAppend(&out, " {", absl::StrJoin(step.attrs, ", ", [](std::string* o, const auto& kv) {
                        absl::StrAppend(o, kv.first, "=", ir::AttrValueToString(kv.second));
                      }),
                      "}");
    }
    if (!step.results.empty()) {
      absl::StrAppend(&out, " -> ", absl::StrJoin(step.results, ", ", [&](std::string* o, const PlanTensor& t) {
                        absl::StrAppend(o, t.type.ToString(), " ", Ref(plan, program, t));
                      }));
    }
    if (step.layer >= 0) absl::StrAppend(&out, " [layer ", step.layer, "]");
    out += "\n";
  }
  return out;
}

}  // namespace ag::compiler
