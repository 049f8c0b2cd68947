// Weight sources: a checkpoint (safetensors, memory-mapped) or a seeded
// random generator for runs at real model shapes without a checkpoint.
#ifndef AUTOGLM_RUNTIME_WEIGHTS_H_
#define AUTOGLM_RUNTIME_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

#include "models/glm/safetensors.h"
#include "runtime/backend.h"

namespace ag::runtime {

// Reads each weight's pieces from the checkpoint (shape-checked) and converts
// to float. Under tensor parallelism only the rank's slice is read, so a rank
// touches about 1/tp of the memory-mapped bytes.
class CheckpointWeights : public WeightSource {
 public:
  explicit CheckpointWeights(const glm::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  // A pre-quantized piece (WeightPiece::packing) is decoded exactly (models/quant/packed.h).
  absl::Status Fill(const compiler::WeightEntry& entry, RankInfo rank, float* out) const override;
  bool Decodes(const compiler::WeightPiece& piece) const override { return piece.packing != ir::QuantPacking::kNone; }
  absl::StatusOr<quant::UnpackedWeight> Unpack(const compiler::WeightPiece& piece) const override;

 private:
  const glm::Checkpoint& checkpoint_;
};

// Deterministic pseudo-random weights, never zero: norm weights near 1, other
// matrices uniform with a scale that keeps activations bounded (1/sqrt(fan_in)).
// Each rank draws its own slice from its own stream (RankStream): a sharded
// model's random weights are not the unsharded model's (benchmarks only).
class RandomWeights : public WeightSource {
 public:
  explicit RandomWeights(uint64_t seed) : seed_(seed) {}
  absl::Status Fill(const compiler::WeightEntry& entry, RankInfo rank, float* out) const override;
  // The parameters of the distribution Fill draws from, shared with the device generator.
  static void Distribution(const compiler::WeightEntry& entry, float* center, float* half_width);
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
};

// This rank's values of `entry` as a float-holding backend stores them: the
// rows of quantized pieces quantized by their format and dequantized again
// (exactly: kernels/ref/quant.h), the others rounded to `dtype` (bf16: to
// bf16; f32: as they are). A quantized weight is read whole and quantized
// before the rank's slice is taken, so a column shard's groups and channel
// scales are the whole row's and every degree runs the same numbers.
absl::Status FillStored(const compiler::WeightEntry& entry, const WeightSource& source, RankInfo rank,
                        ir::DType dtype, float* out);

// A plan's static KV-cache scales (plan.kv.scale_weights), layer l's K scale at 2 l and V scale at
// 2 l + 1, as read from the checkpoint in fp32; empty without them. A scale that is not finite and
// positive is an error naming its tensor.
absl::StatusOr<std::vector<float>> ReadStaticKvScales(const compiler::Plan& plan, const WeightSource& source,
                                                      RankInfo rank);

// One piece of a quantized weight as a device stores it: this rank's block of
// the piece's rows (`rows` x `cols`), codes one byte each, scales and zero
// points of the groups its columns touch (zeros empty when symmetric: z is
// 2^(bits-1)): a column block may start inside a group, `group_offset` inputs
// into it. An act-order checkpoint's codes are stored with each group's inputs
// together: stored input j is input `input_order[j]` (empty: in order). A rank
// holding a slice of an act-order weight's inputs keeps its part of each group,
// padded to whole groups of kActOrderRankGroup stored inputs by codes worth zero
// (input_order -1), each with its group's scale: then `cols` (stored) exceeds
// `inputs` (the rank's x).
struct QuantizedRows {
  ir::QuantFormat format;
  int64_t rows = 0, cols = 0, group_offset = 0;
  int64_t inputs = 0;  // the rank's inputs when act-order padding makes cols larger; 0: cols
  std::vector<uint8_t> codes, zeros;
  std::vector<float> scales;
  std::vector<int32_t> input_order;
  // A piece kept in the plan's dtype (format none): its values, rounded as FillStored rounds them.
  std::vector<float> values;
};

// The stored group of a rank's slice of an act-order weight's inputs: every group size the
// formats allow (32, 64, 128) is a multiple, so that padding each group's part costs < 32 inputs.
inline constexpr int64_t kActOrderRankGroup = 32;

// This rank's pieces of a quantized weight, so that a device that dequantizes
// them computes with FillStored's values: quantized exactly as FillStored
// quantizes them (the whole weight, then the rank's block), or a pre-quantized
// checkpoint's codes as they are; a piece kept in the plan's dtype as values.
// Unimplemented, naming the weight, for what a device cannot store as codes
// today: an act-order weight whose groups are not `group` inputs each; a zero
// point past 255.
absl::StatusOr<std::vector<QuantizedRows>> QuantizeForDevice(const compiler::WeightEntry& entry,
                                                             const WeightSource& source, RankInfo rank);

// A counter-based generator: value i of weight `name` under `seed` (splitmix64).
float RandomUniform(uint64_t seed, uint64_t stream, uint64_t index);
uint64_t WeightStream(absl::string_view name);
// The stream of weight `name` on `rank` (WeightStream on rank 0).
uint64_t RankStream(absl::string_view name, RankInfo rank);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_WEIGHTS_H_
