#include "compiler/lower.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm/weight_map.h"
#include "models/quant/checkpoint_quant.h"

namespace ag::compiler {
namespace {

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

absl::StatusOr<std::vector<int64_t>> StaticShape(const ir::TensorType& type, absl::string_view name) {
  std::vector<int64_t> dims;
  for (const ir::Dim& d : type.shape) {
    if (d.is_symbolic()) return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " has a symbolic shape"));
    dims.push_back(d.offset());
  }
  return dims;
}

}  // namespace

absl::StatusOr<Program> LowerProgram(const ir::Graph& graph, std::string name, const WeightMapper& map,
                                     int64_t kv_layers, Plan& plan) {
  Program program;
  program.name = std::move(name);
  program.bounds = graph.symbol_bounds();
  const ir::SymbolBindings& bounds = program.bounds;

  // Where each value lives.
  absl::flat_hash_map<ir::ValueId, PlanTensor> where;
  program.states.resize(kv_layers);
  std::vector<bool> have_state(kv_layers, false);
  int64_t next_free = 0;  // for graphs without a memory plan
  for (ir::ValueId v = 0; v < graph.num_values(); ++v) {
    const ir::Value& value = graph.value(v);
    PlanTensor t{TensorKind::kArena, 0, value.type};
    switch (value.kind) {
      case ir::ValueKind::kInput:
        t.kind = TensorKind::kInput;
        t.index = static_cast<int64_t>(program.inputs.size());
        program.inputs.push_back({value.name, value.type});
        break;
      case ir::ValueKind::kState: {
        int layer = -1;
        if (!absl::StartsWith(value.name, "kv.") || !absl::SimpleAtoi(value.name.substr(3), &layer) || layer < 0 ||
            layer >= kv_layers || have_state[layer]) {
          return absl::InvalidArgumentError(absl::StrCat("unexpected state $", value.name));
        }
        have_state[layer] = true;
        t.kind = TensorKind::kState;
        t.index = layer;
        program.states[layer] = {value.name, value.type};
        break;
      }
      case ir::ValueKind::kParam: {
        t.kind = TensorKind::kWeight;
        t.index = static_cast<int64_t>(plan.weights.size());
        WeightEntry entry;
        entry.name = value.name;
        entry.dtype = value.type.dtype;
        ASSIGN_OR_RETURN(entry.shape, StaticShape(value.type, value.name));
        const std::vector<ir::ParamPart> parts =
            value.concat_of.empty() ? std::vector<ir::ParamPart>{{value.name, {}}} : value.concat_of;
        int64_t rows_left = entry.shape[0];
        for (const ir::ParamPart& part : parts) {
          ASSIGN_OR_RETURN(glm::WeightSource src, map(part.name));
          // A checkpoint that stores the weight quantized decides its format (--quantize applies to dense weights).
          const bool packed = src.packing != ir::QuantPacking::kNone;
          entry.pieces.push_back({src.tensor, src.tensor_shape, src.row_begin, src.row_end, part.shard,
                                  packed ? src.quant : part.quant, src.packing});
          const PieceSlice slice = SliceForRank(entry.pieces.back(), 0, plan.tp);
          rows_left -= slice.row_end - slice.row_begin;
        }
        if (rows_left != 0) {
          return absl::InvalidArgumentError(absl::StrCat("parameter ", value.name, ": parts do not add up"));
        }
        plan.weights.push_back(std::move(entry));
        break;
      }
      case ir::ValueKind::kResult: {
        ASSIGN_OR_RETURN(int64_t bytes, value.type.ByteSize(bounds));
        if (graph.arena_bytes() >= 0) {
          t.index = value.arena_offset;
        } else {
          t.index = next_free;
          next_free += AlignUp(bytes, kArenaAlignment);
        }
        break;
      }
    }
    where[v] = std::move(t);
  }
  for (int64_t layer = 0; layer < kv_layers; ++layer) {
    if (!have_state[layer]) return absl::InvalidArgumentError(absl::StrCat("graph has no KV state for layer ", layer));
  }
  program.arena_bytes = graph.arena_bytes() >= 0 ? AlignUp(graph.arena_bytes(), kArenaAlignment) : next_free;

  for (const ir::Node& node : graph.nodes()) {
    PlanStep step;
    step.kernel = node.op;
    step.attrs = node.attrs;
    step.layer = node.layer;
    step.name = node.results.empty() ? std::string(ir::OpName(node.op)) : graph.value(node.results[0]).name;
    for (ir::ValueId v : node.operands) step.operands.push_back(where[v]);
    for (ir::ValueId v : node.results) step.results.push_back(where[v]);
    program.steps.push_back(std::move(step));
  }
  for (ir::ValueId v : graph.outputs()) {
    program.output_names.push_back(graph.value(v).name);
    program.outputs.push_back(where[v]);
  }
  return program;
}

Plan PlanHeader(const glm::ModelConfig& config, const glm::BuildOptions& options, std::vector<std::string> passes,
                int32_t tp, int64_t kv_heads_per_rank) {
  Plan plan;
  plan.model.layout = std::string(glm::LayoutName(config.layout));
  plan.model.vocab_size = config.vocab_size;
  plan.model.hidden_size = config.hidden_size;
  plan.model.num_layers = config.num_layers;
  plan.model.max_position_embeddings = config.max_position_embeddings;
  plan.model.eos_token_ids = config.eos_token_ids;
  plan.model.config = glm::ConfigFingerprint(config);
  plan.dtype = options.dtype;
  plan.max_batch_tokens = options.max_batch_tokens;
  plan.max_seqs = options.max_seqs;
  plan.passes = std::move(passes);
  plan.tp = tp;
  plan.kv = {config.num_layers, options.kv_block_size, kv_heads_per_rank, config.head_dim, options.KvDType()};
  return plan;
}

int64_t KvHeadsOfGraph(const ir::Graph& graph, int64_t fallback) {
  // Per rank: the shard pass may have left fewer KV heads on each (the states say how many).
  int64_t kv_heads = fallback;
  for (ir::ValueId v : graph.ValuesOfKind(ir::ValueKind::kState)) {
    const ir::TensorType& t = graph.value(v).type;
    if (t.rank() == 5 && !t.shape[3].is_symbolic()) kv_heads = t.shape[3].offset();
  }
  return kv_heads;
}

absl::Status AddStaticKvScales(const quant::CheckpointQuant& stored, const WeightMapper& map, Plan& plan) {
  if (!stored.kv_cache || !plan.kv.quantized()) return absl::OkStatus();
  if (plan.kv.dtype != *stored.kv_cache) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: quantization_config.kv_cache_scheme holds scales for ", ir::DTypeName(*stored.kv_cache),
        " codes, not the ", ir::DTypeName(plan.kv.dtype), " cache asked for (--kv-cache-dtype)"));
  }
  for (int64_t layer = 0; layer < plan.kv.num_layers; ++layer) {
    for (const absl::string_view suffix : glm::kKvScaleSuffixes) {
      const std::string param = absl::StrCat("model.layers.", layer, ".", suffix);
      ASSIGN_OR_RETURN(const glm::WeightSource src, map(param));
      WeightEntry entry{param, ir::DType::kF32, {1}, {}};
      entry.pieces.push_back({src.tensor, src.tensor_shape, 0, 1, ir::ShardSpec{}, {}, ir::QuantPacking::kNone});
      plan.kv.scale_weights.push_back(static_cast<int32_t>(plan.weights.size()));
      plan.weights.push_back(std::move(entry));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> LowerToPlan(const ir::Graph& graph, const glm::ModelConfig& config,
                                 const glm::BuildOptions& options, std::vector<std::string> passes) {
  Plan plan = PlanHeader(config, options, std::move(passes), graph.tp(), KvHeadsOfGraph(graph, config.num_kv_heads));
  // A pre-quantized checkpoint's linears keep the checkpoint's storage.
  ASSIGN_OR_RETURN(const quant::CheckpointQuant stored, quant::ParseCheckpointQuant(config));
  const WeightMapper map = [&config, &stored](absl::string_view param) -> absl::StatusOr<glm::WeightSource> {
    ASSIGN_OR_RETURN(glm::WeightSource source, glm::MapWeight(config, param));
    return quant::Annotate(stored, std::move(source));
  };
  ASSIGN_OR_RETURN(Program decoder, LowerProgram(graph, kDecoderProgram, map, config.num_layers, plan));
  plan.programs.push_back(std::move(decoder));
  RETURN_IF_ERROR(AddStaticKvScales(stored, map, plan));
  RETURN_IF_ERROR(ValidatePlan(plan));
  return plan;
}

}  // namespace ag::compiler
