// Lowers a final graph to a Plan: one step per node, operands resolved to
// arena offsets, weights, runtime inputs or KV state; the weight manifest
// from the weight map.
#ifndef AUTOGLM_COMPILER_LOWER_H_
#define AUTOGLM_COMPILER_LOWER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"
#include "ir/graph.h"
#include "models/glm/builder.h"
#include "models/glm/config.h"
#include "models/glm/weight_map.h"
#include "models/quant/checkpoint_quant.h"

namespace ag::compiler {

// Graph parameter -> the checkpoint tensor (slice) it is read from.
using WeightMapper = std::function<absl::StatusOr<glm::WeightSource>(absl::string_view param)>;

// Lowers one final graph to a program named `name`, appending its weights to
// `plan`'s manifest (the graph's symbol bounds become the program's; it holds
// `kv_layers` KV states). When the graph has no memory plan (plan-memory
// disabled) every buffer gets its own slot, no reuse.
absl::StatusOr<Program> LowerProgram(const ir::Graph& graph, std::string name, const WeightMapper& map,
                                     int64_t kv_layers, Plan& plan);

// A plan with no programs yet: the model's facts, the options, the passes that ran.
Plan PlanHeader(const glm::ModelConfig& config, const glm::BuildOptions& options, std::vector<std::string> passes,
                int32_t tp, int64_t kv_heads_per_rank);
// The KV heads per rank a final decoder graph holds (`fallback` when it has no KV state).
int64_t KvHeadsOfGraph(const ir::Graph& graph, int64_t fallback);

// A checkpoint's static KV-cache scales (compressed-tensors' kv_cache_scheme): with an 8-bit
// cache of the scheme's codes, each layer's k_scale and v_scale become fp32 weights of the plan,
// listed in plan.kv.scale_weights; with the model's dtype (--kv-cache-dtype auto) the scheme is
// not used, as vLLM's "auto"; with the other 8-bit code, a one-line error.
absl::Status AddStaticKvScales(const quant::CheckpointQuant& stored, const WeightMapper& map, Plan& plan);

// A text model: its decoder graph lowered to a validated one-program plan.
absl::StatusOr<Plan> LowerToPlan(const ir::Graph& graph, const glm::ModelConfig& config,
                                 const glm::BuildOptions& options, std::vector<std::string> passes);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_LOWER_H_
