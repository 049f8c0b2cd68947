#include "ir/verifier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace ag::ir {
namespace {

template <typename... Args>
absl::Status Fail(const Args&... args) {
  return absl::FailedPreconditionError(absl::StrCat("verifier: ", args...));
}

bool IsQuantized(const Value& value) {
  for (const ParamPart& part : value.concat_of) {
    if (part.quant.quantized()) return true;
  }
  return false;
}

}  // namespace

absl::Status Verify(const Graph& graph) {
  const auto& nodes = graph.nodes();
  for (ValueId v = 0; v < graph.num_values(); ++v) {
    const Value& value = graph.value(v);
    if (!value.concat_of.empty() && value.kind != ValueKind::kParam) {
      return Fail("%", value.name, " has concat_of but is not a parameter");
    }
    for (const ParamPart& part : value.concat_of) {
      if (!part.shard.Fits(graph.tp())) {
        return Fail("@", value.name, ": part @", part.name, " has a shard (axis ", part.shard.axis, ", parts ",
                    part.shard.parts, ") that does not fit the degree tp=", graph.tp());
      }
      if (part.quant.quantized()) {
        if (value.type.rank() != 2 || value.type.shape[1].is_symbolic()) {
          return Fail("@", value.name, ": only a matrix [N, K] can be stored as ", part.quant.ToString());
        }
        // A column shard holds 1/parts of each row: the format applies to the whole row.
        const int64_t k = value.type.shape[1].offset() * (part.shard.axis == 1 ? part.shard.parts : 1);
        if (absl::Status s = part.quant.CheckRow(k); !s.ok()) return Fail("@", value.name, " part @", part.name, ": ", s.message());
      }
    }
    if (value.kind == ValueKind::kResult) {
      const int32_t p = value.producer;
      if (p < 0 || p >= static_cast<int32_t>(nodes.size()) ||
          std::find(nodes[p].results.begin(), nodes[p].results.end(), v) == nodes[p].results.end()) {
        return Fail("%", value.name, " has no producing node");
      }
    }
  }
  std::vector<bool> defined(graph.num_values(), false);
  for (ValueId v = 0; v < graph.num_values(); ++v) defined[v] = graph.value(v).kind != ValueKind::kResult;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Node& node = nodes[n];
    const OpInfo& info = GetOpInfo(node.op);
    const std::string where = absl::StrCat("node ", n, " (", info.name, ")");
    if (node.dead) return Fail(where, " is marked dead");
    std::vector<TensorType> operand_types;
    for (size_t i = 0; i < node.operands.size(); ++i) {
      const ValueId v = node.operands[i];
      if (v < 0 || v >= graph.num_values()) return Fail(where, ": operand ", i, " is not a value");
      if (!defined[v]) return Fail(where, ": operand %", graph.value(v).name, " is used before it is defined");
      const bool is_state = graph.value(v).kind == ValueKind::kState;
      const bool state_slot = static_cast<int>(i) == info.state_operand;
      if (is_state != state_slot) {
        return Fail(where, ": operand ", i, state_slot ? " must be state" : " must not be state");
      }
      if (static_cast<int>(i) != info.matrix_operand && IsQuantized(graph.value(v))) {
        return Fail(where, ": operand @", graph.value(v).name, " is stored quantized; only a linear weight may be");
      }
      operand_types.push_back(graph.value(v).type);
    }
    absl::StatusOr<std::vector<TensorType>> types = InferResultTypes(node.op, operand_types, node.attrs);
    if (!types.ok()) return Fail(where, ": ", types.status().message());
    if (types->size() != node.results.size()) return Fail(where, ": wrong number of results");
    for (size_t i = 0; i < node.results.size(); ++i) {
      const ValueId r = node.results[i];
      if (r < 0 || r >= graph.num_values() || graph.value(r).producer != static_cast<int32_t>(n)) {
        return Fail(where, ": result ", i, " is not produced here");
      }
      if (!(graph.value(r).type == (*types)[i])) {
        return Fail(where, ": result %", graph.value(r).name, " is ", graph.value(r).type.ToString(),
                    " but the op gives ", (*types)[i].ToString());
      }
      if (defined[r]) return Fail(where, ": result %", graph.value(r).name, " is defined twice");
      defined[r] = true;
    }
  }
  for (ValueId v : graph.outputs()) {
    if (v < 0 || v >= graph.num_values()) return Fail("an output is not a value");
    const Value& value = graph.value(v);
    if (value.kind == ValueKind::kState || value.kind == ValueKind::kParam) {
      return Fail("output ", value.name, " must be a computed value or an input");
    }
  }
  if (graph.arena_bytes() >= 0) {
    for (ValueId v = 0; v < graph.num_values(); ++v) {
      const Value& value = graph.value(v);
      if (value.kind != ValueKind::kResult) continue;
      ASSIGN_OR_RETURN(int64_t bytes, value.type.ByteSize(graph.symbol_bounds()));
      if (value.arena_offset < 0 || value.arena_offset + bytes > graph.arena_bytes()) {
        return Fail("%", value.name, " (", bytes, " bytes at ", value.arena_offset, ") is outside the arena of ",
                    graph.arena_bytes(), " bytes");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ag::ir
