#include "runtime/step_profile.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "ir/op_table.h"
#include "kernels/cuda/switches.h"

namespace ag::runtime {

absl::StatusOr<std::vector<cudaEvent_t>> CreateEvents(size_t count) {
  std::vector<cudaEvent_t> events;
  for (size_t i = 0; i < count; ++i) {
    cudaEvent_t e = nullptr;
    if (const cudaError_t err = cudaEventCreate(&e); err != cudaSuccess) {
      for (cudaEvent_t made : events) cudaEventDestroy(made);
      return absl::InternalError(cudaGetErrorString(err));
    }
    events.push_back(e);
  }
  return events;
}

absl::StatusOr<std::vector<double>> EventIntervals(std::vector<cudaEvent_t>& events) {
  absl::Status status = absl::OkStatus();
  if (!events.empty()) {
    if (const cudaError_t e = cudaEventSynchronize(events.back()); e != cudaSuccess) {
      status = absl::InternalError(cudaGetErrorString(e));
    }
  }
  std::vector<double> us;
  for (size_t i = 0; status.ok() && i + 1 < events.size(); ++i) {
    float ms = 0;
    if (const cudaError_t e = cudaEventElapsedTime(&ms, events[i], events[i + 1]); e != cudaSuccess) {
      status = absl::InternalError(cudaGetErrorString(e));
    }
    us.push_back(ms * 1e3);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  events.clear();
  if (!status.ok()) return status;
  return us;
}

bool ProfilePrograms() { return cuda::SwitchedOnByHand("AUTOGLM_PROFILE_PROGRAMS"); }

void PrintStepProfile(const compiler::Program& program, const std::vector<double>& us, std::FILE* out) {
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> kinds;  // (name, kernel) -> (us, steps)
  double total = 0;
  for (size_t i = 0; i < program.steps.size() && i < us.size(); ++i) {
    std::string name = program.steps[i].name;
    // "v12.qkv" -> "qkv": a block's steps summed over the blocks.
    size_t j = name[0] == 'v' || name[0] == 'l' ? 1 : 0;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (j > 1 && j < name.size() && name[j] == '.') name = name.substr(j + 1);
    auto& [sum, count] = kinds[{name, std::string(ir::OpName(program.steps[i].kernel))}];
    sum += us[i];
    ++count;
    total += us[i];
  }
  std::vector<std::tuple<double, int, std::string, std::string>> rows;
  for (const auto& [key, value] : kinds) rows.emplace_back(value.first, value.second, key.first, key.second);
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(out, "profile of program %s: %.0f us over %zu steps\n%-24s %-28s %10s %6s %9s\n", program.name.c_str(),
               total, program.steps.size(), "step", "kernel", "us", "steps", "% of all");
  for (const auto& [sum, count, name, kernel] : rows) {
    std::fprintf(out, "%-24s %-28s %10.1f %6d %8.1f%%\n", name.c_str(), kernel.c_str(), sum, count,
                 total > 0 ? 100.0 * sum / total : 0.0);
  }
}

}  // namespace ag::runtime
