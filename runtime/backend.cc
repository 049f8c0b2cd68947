#include "runtime/backend.h"

namespace ag::runtime {

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
