#include "runtime/backend.h"

#include "absl/strings/str_cat.h"
#include "runtime/communicator.h"

namespace ag::runtime {

absl::Status CheckDegree(const compiler::Plan& plan, int32_t ranks) {
  if (plan.tp == ranks) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the plan is compiled for tensor parallelism tp=", plan.tp,
                                                 ", but it is run on ", ranks, " rank", ranks == 1 ? "" : "s",
                                                 " (run it with --tp ", plan.tp, ")"));
}

absl::StatusOr<RankInfo> CheckRank(const compiler::Plan& plan, const Communicator* comm) {
  const int32_t size = comm == nullptr ? 1 : comm->size();
  if (absl::Status ok = CheckDegree(plan, size); !ok.ok()) return ok;
  return RankInfo{comm == nullptr ? 0 : comm->rank(), size};
}

const std::vector<int32_t>* StepBatch::Input(absl::string_view name) const {
  if (name == "tokens") return &tokens;
  if (name == "positions") return &positions;
  if (name == "slot_mapping") return &slot_mapping;
  if (name == "logit_rows") return &logit_rows;
  if (name == "seq_offsets") return &seq_offsets;
  if (name == "context_lens") return &context_lens;
  if (name == "block_tables") return &block_tables;
  return nullptr;
}

ir::SymbolBindings StepBatch::Bindings(int64_t num_kv_blocks) const {
  return {{"T", num_tokens}, {"S", num_seqs}, {"R", num_logit_rows}, {"MB", max_blocks}, {"NB", num_kv_blocks}};
}

}  // namespace ag::runtime
