// Values, nodes and graphs.
//
// A Graph is an ordered list of nodes over values. A value is a parameter
// (`@`, a weight), a runtime input (`%`), state (`$`, the KV cache) or the
// result of a node (`%`). Node order is execution order; nodes with side
// effects keep their relative order through every pass.
#ifndef AUTOGLM_IR_GRAPH_H_
#define AUTOGLM_IR_GRAPH_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "ir/attrs.h"
#include "ir/op_table.h"
#include "ir/quant.h"
#include "ir/types.h"

namespace ag::ir {

using ValueId = int32_t;

inline constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t { kParam, kInput, kState, kResult };

// One checkpoint-level parameter (HF naming) a graph parameter is made of.
struct ParamPart {
  std::string name;
  ShardSpec shard;
  QuantFormat quant;  // how its rows are stored (set by the quantize pass); none: the plan's dtype
};

struct Value {
  std::string name;
  ValueKind kind = ValueKind::kResult;
  TensorType type;
  int32_t producer = -1;  // node index, for results
  // Parameters only: when non-empty this parameter is the row-wise (axis 0)
  // concatenation of these checkpoint-level parameters (or this rank's shards
  // of them), made by a pass. Empty: the whole parameter of this name.
  std::vector<ParamPart> concat_of;
  int64_t arena_offset = -1;  // byte offset in the activation arena, set by plan-memory
};

struct Node {
  OpId op;
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  Attrs attrs;
  int32_t layer = -1;  // transformer layer this node belongs to, -1 outside layers
  bool dead = false;   // marked by a rewrite, removed by Graph::Compact
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }

  // Declarations. Names must be unique within the graph.
  absl::StatusOr<ValueId> AddParam(std::string name, TensorType type, std::vector<ParamPart> concat_of = {});
  absl::StatusOr<ValueId> AddInput(std::string name, TensorType type);
  absl::StatusOr<ValueId> AddState(std::string name, TensorType type);

  // Appends a node; result types come from the op table. `result_names` may be
  // empty (names are generated) or give one name per result.
  absl::StatusOr<std::vector<ValueId>> AddNode(OpId op, std::vector<ValueId> operands, Attrs attrs = {},
                                               int32_t layer = -1, std::vector<std::string> result_names = {});
  // As AddNode, but places the node before node index `position`.
  absl::StatusOr<std::vector<ValueId>> InsertNode(size_t position, OpId op, std::vector<ValueId> operands,
                                                  Attrs attrs = {}, int32_t layer = -1,
                                                  std::vector<std::string> result_names = {});
  absl::StatusOr<ValueId> AddResultOf(OpId op, std::vector<ValueId> operands, Attrs attrs = {}, int32_t layer = -1,
                                      std::string result_name = "");

  void AddOutput(ValueId v) { outputs_.push_back(v); }

  // Accessors.
  const Value& value(ValueId id) const { return values_[id]; }
  Value& mutable_value(ValueId id) { return values_[id]; }
  int32_t num_values() const { return static_cast<int32_t>(values_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  std::vector<ValueId>& mutable_outputs() { return outputs_; }
  std::vector<ValueId> ValuesOfKind(ValueKind kind) const;
  ValueId FindValue(absl::string_view name) const;  // kNoValue when absent

  // Symbol maxima used by memory planning (T, S, R).
  const SymbolBindings& symbol_bounds() const { return symbol_bounds_; }
  void set_symbol_bound(const std::string& symbol, int64_t bound) { symbol_bounds_[symbol] = bound; }
  int64_t arena_bytes() const { return arena_bytes_; }
  // Tensor-parallel degree (set by shard): the graph is one rank's share of the model.
  int32_t tp() const { return tp_; }
  void set_tp(int32_t tp) { tp_ = tp; }
  void set_arena_bytes(int64_t bytes) { arena_bytes_ = bytes; }

  // Renames a value; `name` must be unused.
  void RenameValue(ValueId id, std::string name);
  // A name not used yet, derived from `base`.
  std::string UniqueName(absl::string_view base) const;

  // Rewrites every use of `from` (node operands and graph outputs) to `to`.
  void ReplaceAllUses(ValueId from, ValueId to);
  // Users of every value: node indices, in order (dead nodes excluded).
  std::vector<std::vector<int32_t>> ComputeUsers() const;
  bool IsOutput(ValueId v) const;

  // Removes dead nodes, their results and parameters/states nothing uses any
  // more; renumbers values and node indices. Inputs are the step's signature
  // and are kept.
  void Compact();

 private:
  absl::StatusOr<ValueId> AddValue(std::string name, ValueKind kind, TensorType type);

  std::string name_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> outputs_;
  absl::flat_hash_map<std::string, ValueId> by_name_;
  SymbolBindings symbol_bounds_;
  int64_t arena_bytes_ = -1;
  int32_t tp_ = 1;
};

}  // namespace ag::ir

#endif  // AUTOGLM_IR_GRAPH_H_
