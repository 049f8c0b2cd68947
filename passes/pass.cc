#include "passes/pass.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "ir/verifier.h"

namespace ag::passes {

std::vector<std::string> Pipeline::Names() const {
  std::vector<std::string> names;
  for (const auto& p : passes_) names.emplace_back(p->name());
  return names;
}

absl::StatusOr<std::vector<PassRecord>> Pipeline::Run(ir::Graph& graph) const {
  const std::vector<std::string> names = Names();
  auto known = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const std::string& d : options_.disabled) {
    if (!known(d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown pass '", d, "' (passes: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  if (!options_.dump_after.empty() && options_.dump_after != "all" && !known(options_.dump_after)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pass '", options_.dump_after, "' (passes: ", absl::StrJoin(names, ", "), ")"));
  }
  if (options_.verify_each) RETURN_IF_ERROR(ir::Verify(graph));
  std::vector<PassRecord> ran;
  for (const auto& pass : passes_) {
    const std::string name(pass->name());
    if (std::find(options_.disabled.begin(), options_.disabled.end(), name) != options_.disabled.end()) continue;
    absl::StatusOr<bool> changed = pass->Run(graph);
    if (!changed.ok()) {
      return absl::Status(changed.status().code(), absl::StrCat("pass ", name, ": ", changed.status().message()));
    }
    if (options_.verify_each) {
      absl::Status v = ir::Verify(graph);
      if (!v.ok()) return absl::InternalError(absl::StrCat("after pass ", name, ": ", v.message()));
    }
    if (options_.dump && (options_.dump_after == name || options_.dump_after == "all")) options_.dump(name, graph);
    ran.push_back({name, *changed});
  }
  return ran;
}

}  // namespace ag::passes
