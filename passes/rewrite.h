// Small helpers for passes that match and rewrite node patterns.
#ifndef AUTOGLM_PASSES_REWRITE_H_
#define AUTOGLM_PASSES_REWRITE_H_

#include <string>
#include <vector>

#include "ir/graph.h"

namespace ag::passes {

// Users of every value (node indices), recomputed by passes as they go.
using Users = std::vector<std::vector<int32_t>>;

// The live node producing `v` with op `op`, or null.
const ir::Node* ProducerOf(const ir::Graph& g, ir::ValueId v, ir::OpId op);
int32_t ProducerIndex(const ir::Graph& g, ir::ValueId v);  // -1 when not a node result

// True when `v` is used by exactly `count` node uses and is not a graph output.
bool HasExactlyUsers(const ir::Graph& g, const Users& users, ir::ValueId v, size_t count);

// Frees `v`'s name for a value that replaces it: renames `v` and returns the old name.
std::string TakeName(ir::Graph& g, ir::ValueId v);

// True when attribute `name` is equal in both nodes.
bool SameAttr(const ir::Node& a, const ir::Node& b, const char* name);

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_REWRITE_H_
