#include "runtime/memory_check.h"

#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/checked_math.h"

namespace ag::runtime {
namespace {

std::string GiB(int64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

int64_t HostMemoryAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

absl::Status CheckPlanFits(const compiler::Plan& plan, int64_t kv_blocks, const StorageLayout& layout,
                           int64_t extra_bytes, int64_t available, absl::string_view memory) {
  using ir::CheckedAdd;
  using ir::CheckedMul;
  std::optional<int64_t> weights = 0;
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const compiler::WeightEntry& w = plan.weights[i];
    if (absl::c_linear_search(layout.weights_elsewhere, static_cast<int32_t>(i))) continue;
    const std::optional<int64_t> bytes = layout.weights_as_stored && w.quantized()
                                             ? std::optional<int64_t>(w.DeviceBytes())
                                             : CheckedMul(w.NumElements(), layout.weight_element_bytes);
    weights = CheckedAdd(*weights, bytes.value_or(ir::kMaxSize));
    if (!weights) break;
  }
  const std::optional<int64_t> arena_scaled = CheckedMul(plan.ArenaBytes(), layout.arena_scale_num);
  const int64_t arena = arena_scaled ? *arena_scaled / layout.arena_scale_den : ir::kMaxSize;
  const compiler::KvGeometry& kv = plan.kv;
  const int64_t per_token = layout.kv_as_stored ? kv.BytesPerToken()
                                                : kv.num_layers * 2 * kv.kv_heads * kv.head_dim * layout.kv_element_bytes;
  const std::optional<int64_t> kv_tokens = CheckedMul(kv_blocks, kv.block_size);
  const std::optional<int64_t> kv_bytes = kv_tokens ? CheckedMul(*kv_tokens, per_token) : std::nullopt;
  std::optional<int64_t> total = weights;
  for (std::optional<int64_t> part : {std::optional<int64_t>(arena), kv_bytes, std::optional<int64_t>(extra_bytes)}) {
    total = total && part ? CheckedAdd(*total, *part) : std::nullopt;
  }
  if (total && *total <= available) return absl::OkStatus();
  const int64_t fixed = CheckedAdd(CheckedAdd(weights.value_or(ir::kMaxSize), arena).value_or(ir::kMaxSize),
                                   extra_bytes).value_or(ir::kMaxSize);
  const std::string fits =
      fixed < available
          ? absl::StrCat("a KV cache of at most ", (available - fixed) / per_token / kv.block_size * kv.block_size,
                         " tokens would fit (--kv-cache-tokens, --max-context)")
          : "the weights and activations alone do not fit (a smaller --max-batch-tokens shrinks the activations)";
  return absl::ResourceExhaustedError(absl::StrCat(
      "the model needs ", total ? GiB(*total) : "more than 256 TiB", " of ", memory, " (weights ",
      GiB(weights.value_or(ir::kMaxSize)), ", activations ", GiB(arena), ", KV cache ",
      kv_bytes ? GiB(*kv_bytes) : "over 256 TiB", " for ", kv_tokens.value_or(ir::kMaxSize), " tokens) but ",
      GiB(available), " is available; ", fits));
}

}  // namespace ag::runtime
