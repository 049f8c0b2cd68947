// The Backend interface: what the engine needs from a device to run plans.
#ifndef AUTOGLM_RUNTIME_BACKEND_H_
#define AUTOGLM_RUNTIME_BACKEND_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/plan.h"
#include "kernels/ref/parallel.h"
#include "kernels/ref/ref.h"
#include "ir/types.h"
#include "models/quant/packed.h"
#include "runtime/constraint.h"

namespace ag::runtime {

// Float data of a step that stays where it already is, in pieces: an image's patches, its rows in the
// encoder cache. Building a step copies none of it (tens of megabytes a screenshot); the backend reads
// the pieces in order, once, into the storage it needs, within the Execute or RunProgram call that
// takes the step (the engine builds and runs a step in one go, and its sequences hold the rows).
class FloatParts {
 public:
  FloatParts() = default;
  // One piece: `values` must outlive the step.
  explicit FloatParts(const std::vector<float>& values) { Append(values.data(), static_cast<int64_t>(values.size())); }
  explicit FloatParts(std::vector<float>&&) = delete;  // a temporary would not outlive the step
  // Appends the n values at `data` (which must outlive the step): to the last piece when they follow it.
  void Append(const float* data, int64_t n);
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t pieces() const { return static_cast<int64_t>(pieces_.size()); }
  void Clear() {
    pieces_.clear();
    size_ = 0;
  }
  // All the values in order, as they are or rounded to bf16 (a big copy is split over the cores).
  void CopyTo(float* out) const;
  void CopyToBF16(uint16_t* out) const;

 private:
  std::vector<std::pair<const float*, int64_t>> pieces_;
  int64_t size_ = 0;
};

// A runtime input on the host: int32 indices, or float data the backend
// stores in the plan's dtype.
struct HostInput {
  ir::DType dtype = ir::DType::kI32;  // kI32 or kF32
  const int32_t* ints = nullptr;      // kI32's data
  const FloatParts* floats = nullptr; // kF32's data
  int64_t elements = 0;
};

// The runtime inputs of one step, on the host. Every program input is one of these.
struct StepBatch {
  // The decoder's.
  int64_t num_tokens = 0;      // T
  int64_t num_seqs = 0;        // S
  int64_t num_logit_rows = 0;  // R
  int64_t max_blocks = 0;      // MB: block-table width
  std::vector<int32_t> tokens, slot_mapping;  // [T]
  std::vector<int32_t> positions;             // [T], or M-RoPE's three streams [3, T] (GLM-4.1V)
  std::vector<int32_t> logit_rows;            // [R], indices into the step's tokens
  std::vector<int32_t> seq_offsets;           // [S+1]
  std::vector<int32_t> context_lens;          // [S]
  std::vector<int32_t> block_tables;          // [S, MB]
  int64_t num_mm_rows = 0;                    // M: image rows that replace token embeddings
  FloatParts mm_embeds;                       // [M, hidden]: the encoder cache's rows
  std::vector<int32_t> mm_rows;               // [M]: the step's token rows they replace
  // The vision program's (GLM-4.1V): the patches of some images.
  int64_t num_patches = 0, num_images = 0, num_merged_rows = 0;  // P, I, E
  FloatParts pixels;                          // [P, patch values]: the images' patches
  std::vector<int32_t> patch_pos;             // [P, 4]: (h, w, grid_h, grid_w)
  std::vector<int32_t> image_offsets;         // [I+1]: each image's first patch row

  // Every field emptied, the vectors keeping their capacity: the engine refills one batch a step
  // (a fresh one reallocated, and first touched, every vector every step).
  void Clear();
  // The data behind a program input name (see compiler::kRuntimeInputNames), or nothing.
  std::optional<HostInput> Input(absl::string_view name) const;
  // Each token row's sequence, from seq_offsets ([T]; rows past the last offset get none): the
  // CUDA attention kernels read it instead of searching seq_offsets in every block.
  std::vector<int32_t> RowSequences() const;
  // Sequences of one new row each before the first of more (the engine schedules decode rows
  // first): the CUDA attention keeps them on its decode kernels when the rest take flash.
  int64_t LeadingDecodeSeqs() const;
  ir::SymbolBindings Bindings(int64_t num_kv_blocks) const;
};

// Which share of a tensor-parallel plan a backend runs: rank `rank` of `tp`.
struct RankInfo {
  int32_t rank = 0;
  int32_t tp = 1;
};

// Where weights come from: a checkpoint, or a seeded generator.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Writes the weight's NumElements() values, as float, to `out`: this rank's
  // slice of every piece (compiler::SliceForRank).
  virtual absl::Status Fill(const compiler::WeightEntry& entry, RankInfo rank, float* out) const = 0;
  // Whether Fill gives a piece's stored values as they are (a pre-quantized
  // checkpoint's, decoded) rather than values still to be quantized to its format.
  virtual bool Decodes(const compiler::WeightPiece& /*piece*/) const { return false; }
  // The whole tensor of a piece that Decodes, unpacked to codes, scales and zero points: what a
  // device computing on codes stores (the values Fill gives are Value of these).
  virtual absl::StatusOr<quant::UnpackedWeight> Unpack(const compiler::WeightPiece& piece) const {
    return absl::UnimplementedError(absl::StrCat(piece.tensor, ": this weight source stores no codes"));
  }
};

// One logits row of the last step to pick a token from, and how (ref::SampleFiltered's rule).
struct RowSampling {
  int64_t row = 0;
  ref::SampleParams params;
  // Applied to the row first (ref::ApplyPenalties); the caller's entries, kept alive through SampleRows.
  std::span<const ref::Penalty> penalties;
  // Empty: every id may be chosen. Else a bit an id (AllowedWords(vocab) words, a constraint's mask):
  // the ids whose bit is clear are -inf before the pick. The caller's, alive through SampleRows.
  std::span<const uint64_t> allowed;
};

// The log-probability of the token chosen from a logits row of the last step, and the `top` most likely.
struct LogprobRequest {
  int64_t row = 0;
  int32_t token = 0;
  int32_t top = 0;          // alternatives wanted, at most kMaxTopLogprobs
  int32_t vocab_limit = 0;  // the softmax runs over ids below it (0: all)
};
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;  // most likely first
  std::vector<float> top_logprobs;
};
inline constexpr int32_t kMaxTopLogprobs = 20;

class Communicator;

// An error when `plan`'s tensor-parallel degree is not `ranks`.
absl::Status CheckDegree(const compiler::Plan& plan, int32_t ranks);
// The rank a backend with communicator `comm` (null: alone) runs of `plan`
// (CheckDegree against the group's size).
absl::StatusOr<RankInfo> CheckRank(const compiler::Plan& plan, const Communicator* comm);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  // Allocates the arena and a KV pool of `kv_blocks` blocks per layer, and loads the weights.
  virtual absl::Status Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) = 0;
  // Runs every step of the plan's decoder for one batch.
  virtual absl::Status Execute(const StepBatch& batch) = 0;
  // Runs the plan's other program `program` (GLM-4.1V's vision tower) for one
  // batch and reads its output `output` back as float ([E, hidden] image rows).
  virtual absl::Status RunProgram(absl::string_view program, const StepBatch& batch, absl::string_view output,
                                  UninitializedVector<float>* out) = 0;
  // The last step's outputs: logits [R, vocab] as float, greedy tokens [R].
  virtual absl::Status ReadLogits(int64_t rows, std::vector<float>* out) = 0;
  // The logits rows `wanted` (ascending, each below `rows`) into their places of `out` ([rows,
  // vocab]); the other rows are left unspecified. A step that samples one sequence on the host
  // needs its row, not the batch's (at batch 64 and GLM-4's vocabulary, 0.6 MB instead of 39 MB).
  virtual absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& /*wanted*/, std::vector<float>* out) {
    return ReadLogits(rows, out);
  }
  virtual absl::Status ReadNextTokens(int64_t rows, std::vector<int32_t>* out) = 0;
  // Picks one token per entry from the last step's logits, where they are: on
  // the CUDA backend only the ids come back. The engine samples this way
  // when SamplesWhereLogitsAre(), penalties included (each row's entries).
  virtual absl::Status SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) = 0;
  virtual bool SamplesWhereLogitsAre() const = 0;
  // ref::LogProbs of the last step's logits rows, computed where they are (the CUDA backend
  // sends back only these numbers).
  virtual absl::Status RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) = 0;
  // Runs `batch` `warmup` times, then `iterations` times timing each run on
  // the device's clock; returns the times in milliseconds (for benchmarks).
  virtual absl::StatusOr<std::vector<double>> TimeExecute(const StepBatch& batch, int warmup, int iterations) = 0;
  // Runs `batch` once, eagerly, timing every plan step on the device's clock
  // (CUDA events between steps, which also stops kernels overlapping);
  // returns microseconds per step, in plan order (for profiles).
  virtual absl::StatusOr<std::vector<double>> ProfileExecute(const StepBatch& batch) = 0;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_BACKEND_H_
