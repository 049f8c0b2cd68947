// The Plan: everything the runtime needs to execute one batched forward step,
// and nothing else. Made by the compiler, stored as a versioned, checksummed
// file, validated completely on load.
#ifndef AUTOGLM_COMPILER_PLAN_H_
#define AUTOGLM_COMPILER_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ir/attrs.h"
#include "ir/op_table.h"
#include "ir/quant.h"
#include "ir/types.h"

namespace ag::compiler {

// 2: ModelInfo.config, the fingerprint of the config the plan was compiled from.
// 3: the tensor-parallel degree and each weight piece's shard.
// 4: rotary frequencies are fp32 for every checkpoint dtype (no freq_dtype attribute).
// 5: named programs (decoder, vision), the GLM-4.1V ops (kernel ids moved), M-RoPE.
// 6: weight formats: a weight piece's rows may be stored quantized (WeightPiece::quant).
// 7: static KV-cache scales (KvGeometry::scale_weights).
// 8: a weight format's input quantization (QuantFormat::act, W8A8), a byte after `symmetric`.
inline constexpr uint32_t kPlanVersion = 8;
inline constexpr int64_t kArenaAlignment = 256;
// Bounds a plan must keep; the compiler refuses options beyond them.
inline constexpr int64_t kMaxArenaBytes = int64_t{1} << 40;
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 20;
inline constexpr int64_t kMaxSeqs = int64_t{1} << 16;
inline constexpr int64_t kMaxKvBlockSize = int64_t{1} << 12;

// A step's runtime inputs. Every program declares the ones it reads; the
// runtime fills them all. The decoder's: tokens, slot_mapping i32[T];
// positions i32[T] (i32[3,T] with M-RoPE); logit_rows i32[R]; seq_offsets
// i32[S+1]; context_lens i32[S]; block_tables i32[S,MB]; mm_embeds
// dtype[M,hidden] and mm_rows i32[M] (image rows for the embeddings). The
// vision program's: pixels dtype[P,patch values], patch_pos i32[P,4],
// image_offsets i32[I+1].
inline constexpr const char* kRuntimeInputNames[] = {
    "tokens",   "positions", "logit_rows", "seq_offsets",   "slot_mapping", "block_tables", "context_lens",
    "mm_embeds", "mm_rows",  "pixels",     "patch_pos",     "image_offsets"};
// Checks a runtime input's declared type (its dtype may have to be the plan's
// `dtype`); an unknown name is an error.
absl::Status CheckRuntimeInput(absl::string_view name, const ir::TensorType& type, ir::DType dtype);

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
  // How its rows are stored (whole rows of the checkpoint tensor: a column
  // shard's groups are the whole row's); the loader quantizes them, or decodes
  // them when the checkpoint holds them packed (`packing`; `tensor` then names
  // the logical "<module>.weight").
  ir::QuantFormat quant;
  ir::QuantPacking packing = ir::QuantPacking::kNone;
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
  bool quantized() const;  // some piece is stored quantized
  // Bytes on a device: quantized rows in their format (ir::QuantFormat::DeviceBytes), the rest in `dtype`.
  int64_t DeviceBytes() const;
  // The same per format name ("bf16", "int4:g128:asym", ...).
  std::map<std::string, int64_t> DeviceBytesByFormat() const;
  // "bf16", "int4:g128:asym", or "int4:g128:asym+fp8e4m3" for a weight whose pieces differ.
  std::string FormatName() const;
  // How a product with this weight rounds its input rows (ValidatePlan: every piece agrees).
  ir::ActQuant input_quant() const { return pieces.empty() ? ir::ActQuant::kNone : pieces.front().quant.act; }
};

struct KvGeometry {
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  ir::DType dtype = ir::DType::kF32;
  // An 8-bit cache with a checkpoint's static scales: the plan weights (fp32, one value each) holding
  // layer l's K scale at 2 l and its V scale at 2 l + 1, used for every token instead of the token's
  // own amax; empty: each token's scales are its own.
  std::vector<int32_t> scale_weights;

  bool static_scales() const { return !scale_weights.empty(); }
  // 8-bit caches (i8, f8e4m3) hold an fp32 scale per token, K or V, and KV head beside the codes.
  bool quantized() const { return dtype == ir::DType::kI8 || dtype == ir::DType::kF8E4M3; }
  int64_t BytesPerToken() const {
    return num_layers * 2 * kv_heads * (head_dim * ir::DTypeSize(dtype) + (quantized() ? 4 : 0));
  }
};

// What the runtime must know about the model beyond the step itself.
struct ModelInfo {
  std::string layout;
  // GLM-4.1V: the prompt token that stands for an image (each is expanded to
  // the image's rows), and the patches that make one such row; -1, 0 for text models.
  int64_t image_token_id = -1;
  int64_t patches_per_token = 0;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> eos_token_ids;
  // "key=value" lines of every config value the plan depends on
  // (glm::ConfigFingerprint); a plan runs only with a model whose config gives the same.
  std::string config;
};

// One step function of the model over its own runtime inputs, state, arena and
// outputs. A text model's plan has one program, the decoder; GLM-4.1V's has a
// second, the vision tower (pixels in, rows for the decoder's embeddings out).
struct Program {
  std::string name;  // "decoder", "vision"
  // The largest value of each symbolic dimension of its inputs (decoder: T, R,
  // S; vision: P patches, I images, E merged rows); arena sizes are planned for them.
  ir::SymbolBindings bounds;
  int64_t arena_bytes = 0;
  std::vector<PlanInput> inputs;
  std::vector<PlanInput> states;  // the decoder's KV cache: kv.L, one per layer, [2,NB,B,KV,D]
  std::vector<PlanStep> steps;
  std::vector<std::string> output_names;  // decoder: "logits", "next_tokens"; vision: "image_embeds"
  std::vector<PlanTensor> outputs;

  // Index of the named input/output, or -1.
  int FindInput(absl::string_view name) const;
  int FindOutput(absl::string_view name) const;
};

inline constexpr const char* kDecoderProgram = "decoder";
inline constexpr const char* kVisionProgram = "vision";

struct Plan {
  uint32_t version = kPlanVersion;
  ModelInfo model;
  // Tensor-parallel degree: the steps are one rank's share (SPMD: every rank
  // runs them); weights name each rank's slice; `kv` is the geometry per rank.
  int32_t tp = 1;
  ir::DType dtype = ir::DType::kF32;
  int64_t max_batch_tokens = 0;  // the decoder's T and R
  int64_t max_seqs = 0;          // the decoder's S
  std::vector<std::string> passes;  // in the order they ran
  std::vector<WeightEntry> weights;
  KvGeometry kv;
  std::vector<Program> programs;  // the decoder first

  // Every program's arena, added up (each program has its own).
  int64_t ArenaBytes() const {
    int64_t bytes = 0;
    for (const Program& p : programs) bytes += p.arena_bytes;
    return bytes;
  }
  const Program& decoder() const { return programs.front(); }
  Program& decoder() { return programs.front(); }
  // The named program, or null.
  const Program* FindProgram(absl::string_view name) const;
};

// Checks every invariant the runtime relies on: a decoder first, known
// kernels, operand kinds and indices, types that follow the op table, arena
// buffers inside their program's arena and written before they are read,
// weight pieces that cover each weight.
absl::Status ValidatePlan(const Plan& plan);

// How `step` rounds the input rows of its product: its matrix operand's input_quant(), or none.
ir::ActQuant StepInputQuant(const Plan& plan, const PlanStep& step);

}  // namespace ag::compiler

#endif  // AUTOGLM_COMPILER_PLAN_H_
