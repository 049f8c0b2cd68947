#include "runtime/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/ref/half.h"
#include "kernels/ref/parallel.h"
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

void FloatParts::Append(const float* data, int64_t n) {
  if (n <= 0) return;
  if (!pieces_.empty() && pieces_.back().first + pieces_.back().second == data) {
    pieces_.back().second += n;
  } else {
    pieces_.emplace_back(data, n);
  }
  size_ += n;
}

void FloatParts::CopyTo(float* out) const {
  for (const std::pair<const float*, int64_t>& piece : pieces_) {
    const float* data = piece.first;  // not a structured binding: clang 14 cannot capture one
    ParallelFor(piece.second, kMinCopyPerThread, [&](int64_t begin, int64_t end) {
      std::copy(data + begin, data + end, out + begin);
    });
    out += piece.second;
  }
}

void FloatParts::CopyToBF16(uint16_t* out) const {
  for (const std::pair<const float*, int64_t>& piece : pieces_) {
    const float* data = piece.first;
    ParallelFor(piece.second, kMinCopyPerThread, [&](int64_t begin, int64_t end) {
      FloatsToBF16(data + begin, end - begin, out + begin);
    });
    out += piece.second;
  }
}

int64_t StepBatch::LeadingDecodeSeqs() const {
  int64_t n = 0;
  while (n < num_seqs && n + 1 < static_cast<int64_t>(seq_offsets.size()) && seq_offsets[n + 1] - seq_offsets[n] == 1) {
    ++n;
  }
  return n;
}

std::vector<int32_t> StepBatch::RowSequences() const {
  std::vector<int32_t> rows(static_cast<size_t>(std::max<int64_t>(num_tokens, 0)), 0);
  for (size_t s = 0; s + 1 < seq_offsets.size(); ++s) {
    const int32_t end = std::min<int32_t>(seq_offsets[s + 1], static_cast<int32_t>(rows.size()));
    for (int32_t t = std::max(seq_offsets[s], 0); t < end; ++t) rows[t] = static_cast<int32_t>(s);
  }
  return rows;
}

std::optional<HostInput> StepBatch::Input(absl::string_view name) const {
  auto ints = [](const std::vector<int32_t>& v) {
    return HostInput{ir::DType::kI32, v.data(), nullptr, static_cast<int64_t>(v.size())};
  };
  auto floats = [](const FloatParts& v) { return HostInput{ir::DType::kF32, nullptr, &v, v.size()}; };
  if (name == "tokens") return ints(tokens);
  if (name == "positions") return ints(positions);
  if (name == "slot_mapping") return ints(slot_mapping);
  if (name == "logit_rows") return ints(logit_rows);
  if (name == "seq_offsets") return ints(seq_offsets);
  if (name == "context_lens") return ints(context_lens);
  if (name == "block_tables") return ints(block_tables);
  if (name == "mm_embeds") return floats(mm_embeds);
  if (name == "mm_rows") return ints(mm_rows);
  if (name == "pixels") return floats(pixels);
  if (name == "patch_pos") return ints(patch_pos);
  if (name == "image_offsets") return ints(image_offsets);
  return std::nullopt;
}

void StepBatch::Clear() {
  num_tokens = num_seqs = num_logit_rows = max_blocks = num_mm_rows = 0;
  num_patches = num_images = num_merged_rows = 0;
  for (std::vector<int32_t>* v : {&tokens, &slot_mapping, &positions, &logit_rows, &seq_offsets, &context_lens,
                                  &block_tables, &mm_rows, &patch_pos, &image_offsets}) {
    v->clear();
  }
  mm_embeds.Clear();
  pixels.Clear();
}

ir::SymbolBindings StepBatch::Bindings(int64_t num_kv_blocks) const {
  return {{"T", num_tokens},     {"S", num_seqs},        {"R", num_logit_rows}, {"MB", max_blocks},
          {"NB", num_kv_blocks}, {"M", num_mm_rows},     {"P", num_patches},    {"I", num_images},
          {"E", num_merged_rows}};
}

}  // namespace ag::runtime
