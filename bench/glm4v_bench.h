// autoglm-bench --glm4v: a GLM-4.1V phone-agent step (see glm4v_bench.cc).
#ifndef AUTOGLM_BENCH_GLM4V_BENCH_H_
#define AUTOGLM_BENCH_GLM4V_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ag::tools {

// `config_file` empty: GLM-4.1V-9B's shapes. Prints the table; writes JSON to `json_path` when given.
absl::Status RunGlm4vBench(const std::string& config_file, const std::string& device, int iterations, uint64_t seed,
                           const std::string& json_path);

}  // namespace ag::tools

#endif  // AUTOGLM_BENCH_GLM4V_BENCH_H_
