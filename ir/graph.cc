#include "ir/graph.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"

namespace ag::ir {

absl::StatusOr<ValueId> Graph::AddValue(std::string name, ValueKind kind, TensorType type) {
  if (name.empty()) return absl::InvalidArgumentError("value name must not be empty");
  if (by_name_.contains(name)) return absl::AlreadyExistsError(absl::StrCat("duplicate value name '", name, "'"));
  const ValueId id = static_cast<ValueId>(values_.size());
  Value v;
  v.name = name;
  v.kind = kind;
  v.type = std::move(type);
  values_.push_back(std::move(v));
  by_name_.emplace(std::move(name), id);
  return id;
}

absl::StatusOr<ValueId> Graph::AddParam(std::string name, TensorType type, std::vector<ParamPart> concat_of) {
  ASSIGN_OR_RETURN(ValueId id, AddValue(std::move(name), ValueKind::kParam, std::move(type)));
  values_[id].concat_of = std::move(concat_of);
  return id;
}

absl::StatusOr<ValueId> Graph::AddInput(std::string name, TensorType type) {
  return AddValue(std::move(name), ValueKind::kInput, std::move(type));
}

absl::StatusOr<ValueId> Graph::AddState(std::string name, TensorType type) {
  return AddValue(std::move(name), ValueKind::kState, std::move(type));
}

absl::StatusOr<std::vector<ValueId>> Graph::AddNode(OpId op, std::vector<ValueId> operands, Attrs attrs,
                                                    int32_t layer, std::vector<std::string> result_names) {
  return InsertNode(nodes_.size(), op, std::move(operands), std::move(attrs), layer, std::move(result_names));
}

absl::StatusOr<std::vector<ValueId>> Graph::InsertNode(size_t position, OpId op, std::vector<ValueId> operands,
                                                       Attrs attrs, int32_t layer,
                                                       std::vector<std::string> result_names) {
  std::vector<TensorType> operand_types;
  for (ValueId v : operands) {
    if (v < 0 || v >= num_values()) return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": bad operand id"));
    operand_types.push_back(values_[v].type);
  }
  ASSIGN_OR_RETURN(std::vector<TensorType> types, InferResultTypes(op, operand_types, attrs));
  if (!result_names.empty() && result_names.size() != types.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " has ", types.size(), " results, got ", result_names.size(), " names"));
  }
  position = std::min(position, nodes_.size());
  Node node{op, std::move(operands), {}, std::move(attrs), layer};
  for (size_t i = 0; i < types.size(); ++i) {
    std::string name = result_names.empty() ? UniqueName(OpName(op)) : std::move(result_names[i]);
    ASSIGN_OR_RETURN(ValueId id, AddValue(std::move(name), ValueKind::kResult, std::move(types[i])));
    node.results.push_back(id);
  }
  nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(position), std::move(node));
  for (size_t n = position; n < nodes_.size(); ++n) {
    for (ValueId r : nodes_[n].results) values_[r].producer = static_cast<int32_t>(n);
  }
  return nodes_[position].results;
}

absl::StatusOr<ValueId> Graph::AddResultOf(OpId op, std::vector<ValueId> operands, Attrs attrs, int32_t layer,
                                           std::string result_name) {
  std::vector<std::string> names;
  if (!result_name.empty()) names.push_back(std::move(result_name));
  ASSIGN_OR_RETURN(std::vector<ValueId> results,
                   AddNode(op, std::move(operands), std::move(attrs), layer, std::move(names)));
  if (results.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(op), " does not have exactly one result"));
  }
  return results[0];
}

std::vector<ValueId> Graph::ValuesOfKind(ValueKind kind) const {
  std::vector<ValueId> ids;
  for (ValueId i = 0; i < num_values(); ++i) {
    if (values_[i].kind == kind) ids.push_back(i);
  }
  return ids;
}

ValueId Graph::FindValue(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNoValue : it->second;
}

void Graph::RenameValue(ValueId id, std::string name) {
  by_name_.erase(values_[id].name);
  values_[id].name = name;
  by_name_.emplace(std::move(name), id);
}

std::string Graph::UniqueName(absl::string_view base) const {
  if (!by_name_.contains(base)) return std::string(base);
  for (int i = 1;; ++i) {
    std::string candidate = absl::StrCat(base, ".", i);
    if (!by_name_.contains(candidate)) return candidate;
  }
}

void Graph::ReplaceAllUses(ValueId from, ValueId to) {
  for (Node& node : nodes_) {
    for (ValueId& v : node.operands) {
      if (v == from) v = to;
    }
  }
  for (ValueId& v : outputs_) {
    if (v == from) v = to;
  }
}

std::vector<std::vector<int32_t>> Graph::ComputeUsers() const {
  std::vector<std::vector<int32_t>> users(values_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].dead) continue;
    for (ValueId v : nodes_[n].operands) {
      std::vector<int32_t>& u = users[v];
      if (u.empty() || u.back() != static_cast<int32_t>(n)) u.push_back(static_cast<int32_t>(n));
    }
  }
  return users;
}

bool Graph::IsOutput(ValueId v) const { return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end(); }

void Graph::Compact() {
  std::vector<bool> used(values_.size(), false);
  for (const Node& node : nodes_) {
    if (node.dead) continue;
    for (ValueId v : node.operands) used[v] = true;
    for (ValueId v : node.results) used[v] = true;
  }
  for (ValueId v : outputs_) used[v] = true;
  std::vector<ValueId> remap(values_.size(), kNoValue);
  std::vector<Value> kept;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].kind == ValueKind::kInput || used[i]) {
      remap[i] = static_cast<ValueId>(kept.size());
      kept.push_back(std::move(values_[i]));
    }
  }
  values_ = std::move(kept);
  std::vector<Node> live;
  for (Node& node : nodes_) {
    if (node.dead) continue;
    for (ValueId& v : node.operands) v = remap[v];
    for (ValueId& v : node.results) v = remap[v];
    live.push_back(std::move(node));
  }
  nodes_ = std::move(live);
  for (ValueId& v : outputs_) v = remap[v];
  by_name_.clear();
  for (size_t i = 0; i < values_.size(); ++i) {
    values_[i].producer = -1;
    by_name_.emplace(values_[i].name, static_cast<ValueId>(i));
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (ValueId r : nodes_[n].results) values_[r].producer = static_cast<int32_t>(n);
  }
}

}  // namespace ag::ir
