// The Plan: everything the runtime needs to execute one batched forward step,
// and nothing else. Made by the compiler, stored as a versioned, checksummed
// file, validated completely on load.
#ifndef AUTOGLM_COMPILER_PLAN_H_
#define AUTOGLM_COMPILER_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/attrs.h"
#include "ir/op_table.h"
#include "ir/types.h"

namespace ag::compiler {

// 2: ModelInfo.config, the fingerprint of the config the plan was compiled from.
// 3: the tensor-parallel degree and each weight piece's shard.
// 4: rotary frequencies are fp32 for every checkpoint dtype (no freq_dtype attribute).
inline constexpr uint32_t kPlanVersion = 4;
inline constexpr int64_t kArenaAlignment = 256;
// Bounds a plan must keep; the compiler refuses options beyond them.
inline constexpr int64_t kMaxArenaBytes = int64_t{1} << 40;
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 20;
inline constexpr int64_t kMaxSeqs = int64_t{1} << 16;
inline constexpr int64_t kMaxKvBlockSize = int64_t{1} << 12;

// The step's runtime inputs. Every plan declares the ones it reads; the
// runtime fills them all. Types: tokens, positions, slot_mapping i32[T];
// logit_rows i32[R]; seq_offsets i32[S+1]; context_lens i32[S];
// block_tables i32[S,MB].
inline constexpr const char* kRuntimeInputNames[] = {"tokens",      "positions",    "logit_rows",  "seq_offsets",
                                                     "slot_mapping", "block_tables", "context_lens"};
// The type a runtime input must have, or an error for an unknown name.
absl::StatusOr<ir::TensorType> RuntimeInputType(absl::string_view name);

enum class TensorKind : uint8_t { kArena, kWeight, kInput, kState };

struct PlanTensor {
  TensorKind kind = TensorKind::kArena;
  int64_t index = 0;  // arena: byte offset; weight, input, state: index into the plan's lists
  ir::TensorType type;
};

struct PlanStep {
  ir::OpId kernel;
  ir::Attrs attrs;
  std::vector<PlanTensor> operands;
  std::vector<PlanTensor> results;
  int32_t layer = -1;
  std::string name;  // for profiles and inspect: the first result's name, or the op's
};

struct PlanInput {
  std::string name;
  ir::TensorType type;
};

// A parameter is the row-wise concatenation of one or more checkpoint tensor slices.
// Under tensor parallelism each slice is split further (`shard`): rank r of tp
// reads part r * parts / tp of it, along rows or columns (SliceForRank).
struct WeightPiece {
  std::string tensor;
  std::vector<int64_t> tensor_shape;
  int64_t row_begin = 0;  // the whole slice, before sharding
  int64_t row_end = 0;
  ir::ShardSpec shard;
};

// The block of a checkpoint tensor (rows x columns, columns = the product of
// the trailing dims) that one rank reads for a piece.
struct PieceSlice {
  int64_t row_begin = 0, row_end = 0;
  int64_t col_begin = 0, col_end = 0;
  int64_t row_elems = 0;  // the tensor's elements per row
};
PieceSlice SliceForRank(const WeightPiece& piece, int32_t rank, int32_t tp);

struct WeightEntry {
  std::string name;
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> shape;
  std::vector<WeightPiece> pieces;

  int64_t NumElements() const;
};

struct KvGeometry {
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  ir::DType dtype = ir::DType::kF32;

  int64_t BytesPerToken() const { return num_layers * 2 * kv_heads * head_dim * ir::DTypeSize(dtype); }
};

// What the runtime must know about the model beyond the step itself.
struct ModelInfo {
  std::string layout;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> eos_token_ids;
  // "key=value" lines of every config value the plan depends on
  // (glm::ConfigFingerprint); a plan runs only with a model whose config gives the same.
  std::string config;
};

struct Plan {
  uint32_t version = kPlanVersion;
  ModelInfo model;
  // Tensor-parallel degree: the steps are one rank's share (SPMD: every rank
  // runs them); weights name each rank's slice; `kv` is the geometry per rank.
  int32_t tp = 1;
  ir::DType dtype = ir::DType::kF32;
  int64_t max_batch_tokens = 0;
  int64_t max_seqs = 0;
  int64_t arena_bytes = 0;
  std::vector<std::string> passes;  // in the order they ran
  std::vector<PlanInput> inputs;
  std::vector<PlanInput> states;    // kv.L, one per layer, type [2,NB,B,KV,D]
  std::vector<WeightEntry> weights;
  KvGeometry kv;
  std::vector<PlanStep> steps;
  std::vector<std::string> output_names;  // "logits", "next_tokens"
  std::vector<PlanTensor> outputs;

  // Index of the named input/output, or -1.
  int FindInput(absl::string_view name) const;
  int FindOutput(absl::string_view name) const;
  // Bounds of the symbolic dims for memory sizes: T, R <= max_batch_tokens, S <= max_seqs.
  ir::SymbolBindings MaxBindings() const;
};

// Checks every invariant the runtime relies on: known kernels, operand kinds
// and indices, types that follow the op table, arena buffers inside the arena
// and written before they are read, weight pieces that cover each weight.
absl::Status ValidatePlan(const Plan& plan);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_PLAN_H_
