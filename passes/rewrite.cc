#include "passes/rewrite.h"

#include "absl/strings/str_cat.h"

namespace ag::passes {

int32_t ProducerIndex(const ir::Graph& g, ir::ValueId v) {
  const ir::Value& value = g.value(v);
  if (value.kind != ir::ValueKind::kResult || g.nodes()[value.producer].dead) return -1;
  return value.producer;
}

const ir::Node* ProducerOf(const ir::Graph& g, ir::ValueId v, ir::OpId op) {
  const int32_t p = ProducerIndex(g, v);
  if (p < 0 || g.nodes()[p].op != op) return nullptr;
  return &g.nodes()[p];
}

bool HasExactlyUsers(const ir::Graph& g, const Users& users, ir::ValueId v, size_t count) {
  if (g.IsOutput(v)) return false;
  size_t uses = 0;
  for (int32_t n : users[v]) {
    for (ir::ValueId operand : g.nodes()[n].operands) uses += operand == v;
  }
  return uses == count;
}

std::string TakeName(ir::Graph& g, ir::ValueId v) {
  const std::string name = g.value(v).name;
  g.RenameValue(v, g.UniqueName(absl::StrCat(name, ".replaced")));
  return name;
}

bool SameAttr(const ir::Node& a, const ir::Node& b, const char* name) {
  auto ia = a.attrs.find(name), ib = b.attrs.find(name);
  if (ia == a.attrs.end() || ib == b.attrs.end()) return ia == a.attrs.end() && ib == b.attrs.end();
  return ia->second == ib->second;
}

}  // namespace ag::passes
