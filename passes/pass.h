// The pass contract and the pipeline that runs passes in order.
//
// A pass rewrites a graph in place and says whether it changed anything. The
// pipeline verifies the graph after every pass (always in tests and debug
// builds, and whenever asked), can dump the IR after a named pass and can
// skip passes by name.
#ifndef AUTOGLM_PASSES_PASS_H_
#define AUTOGLM_PASSES_PASS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace ag::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual absl::string_view name() const = 0;
  // True when the graph changed.
  virtual absl::StatusOr<bool> Run(ir::Graph& graph) = 0;
};

struct PipelineOptions {
#ifdef NDEBUG
  bool verify_each = false;
#else
  bool verify_each = true;
#endif
  std::vector<std::string> disabled;  // pass names to skip
  std::string dump_after;             // pass name; "all" dumps after every pass
  std::function<void(absl::string_view pass, const ir::Graph& graph)> dump;
};

struct PassRecord {
  std::string name;
  bool changed = false;
};

class Pipeline {
 public:
  explicit Pipeline(PipelineOptions options) : options_(std::move(options)) {}
  void Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  // Names of the passes in order (including disabled ones).
  std::vector<std::string> Names() const;
  // Runs the enabled passes; returns what ran. Fails on an unknown disabled name.
  absl::StatusOr<std::vector<PassRecord>> Run(ir::Graph& graph) const;

 private:
  PipelineOptions options_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_PASS_H_
