// Checks, before anything is allocated, that a plan's weights, activation
// arena and KV cache fit in the memory a backend has, so that an absurd size
// (from a plan, a config or a flag) is a one-line error that says what would
// fit, never a std::bad_alloc or an out-of-memory kill.
#ifndef AUTOGLM_RUNTIME_MEMORY_CHECK_H_
#define AUTOGLM_RUNTIME_MEMORY_CHECK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "compiler/plan.h"

namespace ag::runtime {

// How a backend stores a plan: bytes per weight / KV element, and bytes of
// backend memory per byte of the plan's arena.
struct StorageLayout {
  int64_t weight_element_bytes;
  int64_t kv_element_bytes;
  int64_t arena_scale_num, arena_scale_den;  // memory = arena_bytes * num / den
  // Quantized weights take their stored bytes (WeightEntry::DeviceBytes), not weight_element_bytes
  // an element: a device keeps the codes; the CPU backend computes with floats.
  bool weights_as_stored = false;
  // The KV cache takes its stored bytes a token (KvGeometry::BytesPerToken: an 8-bit cache's codes
  // and scales), not kv_element_bytes a value.
  bool kv_as_stored = false;
  // Weights (plan indices) the backend keeps in host memory instead: not counted.
  std::vector<int32_t> weights_elsewhere;
};

// The host's available memory (MemAvailable), or its physical memory.
int64_t HostMemoryAvailable();

// OK when weights + arena + a KV cache of `kv_blocks` blocks, plus
// `extra_bytes`, fit in `available` bytes; otherwise an error naming each
// part, `memory` ("host memory", "GPU memory") and the KV-cache size that would fit.
absl::Status CheckPlanFits(const compiler::Plan& plan, int64_t kv_blocks, const StorageLayout& layout,
                           int64_t extra_bytes, int64_t available, absl::string_view memory);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_MEMORY_CHECK_H_
