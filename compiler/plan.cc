#include "compiler/plan.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/checked_math.h"
#include "ir/status_macros.h"
#include "models/glm/config.h"

namespace ag::compiler {
namespace {

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("invalid plan: ", args...));
}

}  // namespace

absl::Status CheckRuntimeInput(absl::string_view name, const ir::TensorType& type, ir::DType dtype) {
  using ir::Dim;
  using ir::DType;
  const Dim t = Dim::Sym("T"), s = Dim::Sym("S"), p = Dim::Sym("P"), m = Dim::Sym("M");
  auto is = [&](const ir::TensorType& want) -> absl::Status {
    if (type == want) return absl::OkStatus();
    return Invalid("input ", name, " must be ", want.ToString(), ", got ", type.ToString());
  };
  // dtype[rows, width] with a static width (the model's).
  auto rows_of = [&](const Dim& rows) -> absl::Status {
    if (type.rank() != 2 || type.dtype != dtype || !(type.shape[0] == rows) || type.shape[1].is_symbolic() ||
        type.shape[1].offset() <= 0) {
      return Invalid("input ", name, " must be ", ir::DTypeName(dtype), "[", rows.ToString(), ", width], got ",
                     type.ToString());
    }
    return absl::OkStatus();
  };
  if (name == "tokens" || name == "slot_mapping") return is({DType::kI32, {t}});
  if (name == "positions") {  // one stream, or M-RoPE's three
    return type.rank() == 2 ? is({DType::kI32, {Dim(3), t}}) : is({DType::kI32, {t}});
  }
  if (name == "logit_rows") return is({DType::kI32, {Dim::Sym("R")}});
  if (name == "seq_offsets") return is({DType::kI32, {Dim::Sym("S", 1)}});
  if (name == "context_lens") return is({DType::kI32, {s}});
  if (name == "block_tables") return is({DType::kI32, {s, Dim::Sym("MB")}});
  if (name == "mm_embeds") return rows_of(m);
  if (name == "mm_rows") return is({DType::kI32, {m}});
  if (name == "pixels") return rows_of(p);
  if (name == "patch_pos") return is({DType::kI32, {p, Dim(4)}});
  if (name == "image_offsets") return is({DType::kI32, {Dim::Sym("I", 1)}});
  return Invalid("unknown runtime input '", name, "'");
}

namespace {

// The runtime input an index operand must be. Types alone cannot tell
// %tokens from %slot_mapping (both i32[T]), and kernels index memory with
// these values: a plan that wired token ids in as slots wrote past the KV cache.
struct IndexOperand {
  ir::OpId op;
  int operand;
  const char* input;
};
constexpr IndexOperand kIndexOperands[] = {
    {ir::OpId::k_embedding, 0, "tokens"},
    {ir::OpId::k_rotary, 1, "positions"},
    {ir::OpId::k_gather_rows, 1, "logit_rows"},
    {ir::OpId::k_kv_cache_write, 2, "slot_mapping"},
    {ir::OpId::k_paged_attention, 2, "seq_offsets"},
    {ir::OpId::k_paged_attention, 3, "block_tables"},
    {ir::OpId::k_paged_attention, 4, "context_lens"},
    {ir::OpId::k_norm_qkv_rope_kv_write, 3, "positions"},
    {ir::OpId::k_norm_qkv_rope_kv_write, 4, "slot_mapping"},
    {ir::OpId::k_scatter_rows, 1, "mm_embeds"},
    {ir::OpId::k_scatter_rows, 2, "mm_rows"},
    {ir::OpId::k_vision_pos_embed, 2, "patch_pos"},
    {ir::OpId::k_vision_rotary, 1, "patch_pos"},
    {ir::OpId::k_segment_attention, 3, "image_offsets"},
    {ir::OpId::k_vision_qkv_rotary, 1, "patch_pos"},
    {ir::OpId::k_packed_segment_attention, 1, "image_offsets"},
};

const char* RequiredInput(ir::OpId op, int operand) {
  for (const IndexOperand& r : kIndexOperands) {
    if (r.op == op && r.operand == operand) return r.input;
  }
  return nullptr;
}

}  // namespace

int64_t WeightEntry::NumElements() const {
  // ValidatePlan bounds the product, so this never saturates on a valid plan.
  return ir::CheckedProduct(shape).value_or(ir::kMaxSize);
}

bool WeightEntry::quantized() const {
  for (const WeightPiece& p : pieces) {
    if (p.quant.quantized()) return true;
  }
  return false;
}

std::map<std::string, int64_t> WeightEntry::DeviceBytesByFormat() const {
  const std::string plain(ir::DTypeName(dtype));
  if (!quantized() || shape.size() != 2) return {{plain, NumElements() * ir::DTypeSize(dtype)}};
  std::map<std::string, int64_t> bytes;
  for (const WeightPiece& p : pieces) {
    const PieceSlice s = SliceForRank(p, 0, 1);  // rank 0's share of a sharded piece's rows
    const int64_t rows = s.row_end - s.row_begin;  // of shape[1] inputs each
    if (p.quant.quantized()) {
      bytes[p.quant.ToString()] += p.quant.DeviceBytes(rows, shape[1]);
    } else {
      bytes[plain] += rows * shape[1] * ir::DTypeSize(dtype);
    }
  }
  return bytes;
}

int64_t WeightEntry::DeviceBytes() const {
  int64_t total = 0;
  for (const auto& [format, bytes] : DeviceBytesByFormat()) total += bytes;
  return total;
}

std::string WeightEntry::FormatName() const {
  std::vector<std::string> names;
  for (const WeightPiece& p : pieces) {
    std::string name = p.quant.quantized() ? p.quant.ToString() : std::string(ir::DTypeName(dtype));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
  return absl::StrJoin(names, "+");
}

int Program::FindInput(absl::string_view name) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Program::FindOutput(absl::string_view name) const {
  for (size_t i = 0; i < output_names.size(); ++i) {
    if (output_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

const Program* Plan::FindProgram(absl::string_view name) const {
  for (const Program& p : programs) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

PieceSlice SliceForRank(const WeightPiece& piece, int32_t rank, int32_t tp) {
  PieceSlice s;
  s.row_elems = 1;
  for (size_t i = 1; i < piece.tensor_shape.size(); ++i) s.row_elems *= piece.tensor_shape[i];
  s.row_begin = piece.row_begin;
  s.row_end = piece.row_end;
  s.col_begin = 0;
  s.col_end = s.row_elems;
  if (!piece.shard.sharded()) return s;
  const int64_t part = static_cast<int64_t>(rank) * piece.shard.parts / tp;
  if (piece.shard.axis == 0) {
    const int64_t len = (piece.row_end - piece.row_begin) / piece.shard.parts;
    s.row_begin = piece.row_begin + part * len;
    s.row_end = s.row_begin + len;
  } else {
    const int64_t len = s.row_elems / piece.shard.parts;
    s.col_begin = part * len;
    s.col_end = s.col_begin + len;
  }
  return s;
}

namespace {

// One program's inputs, state, steps and outputs (the plan-wide facts are checked already).
absl::Status ValidateProgram(const Plan& plan, const Program& program) {
  const ModelInfo& m = plan.model;
  const KvGeometry& kv = plan.kv;
  const bool decoder = program.name == kDecoderProgram;
  if (program.arena_bytes < 0 || program.arena_bytes > kMaxArenaBytes || program.arena_bytes % kArenaAlignment != 0) {
    return Invalid("arena size ", program.arena_bytes, " is not a multiple of ", kArenaAlignment, " in [0, ",
                   kMaxArenaBytes, "]");
  }
  // The symbols a program's inputs use, and what bounds them.
  for (const auto& [symbol, bound] : program.bounds) {
    const bool known = decoder ? (symbol == "T" || symbol == "R" || symbol == "S" || symbol == "M")
                               : (symbol == "P" || symbol == "I" || symbol == "E");
    if (!known || bound <= 0 || bound > kMaxBatchTokens) {
      return Invalid(program.name, ": bound ", symbol, " = ", bound, " is not one of its symbols in [1, ",
                     kMaxBatchTokens, "]");
    }
  }
  if (decoder) {
    const ir::SymbolBindings want = {{"T", plan.max_batch_tokens}, {"R", plan.max_batch_tokens},
                                     {"S", plan.max_seqs}, {"M", plan.max_batch_tokens}};
    if (program.bounds != want) return Invalid("the decoder's bounds must be the plan's batch limits");
  } else if (!program.bounds.contains("P") || !program.bounds.contains("I") || !program.bounds.contains("E")) {
    return Invalid(program.name, ": bounds of P, I and E expected");
  }
  absl::flat_hash_set<std::string> names;
  for (const PlanInput& in : program.inputs) {
    RETURN_IF_ERROR(CheckRuntimeInput(in.name, in.type, plan.dtype));
    if (!names.insert(in.name).second) return Invalid("input ", in.name, " declared twice");
  }
  if (static_cast<int64_t>(program.states.size()) != (decoder ? kv.num_layers : 0)) {
    return Invalid(program.name, ": one KV state per decoder layer expected");
  }
  const ir::TensorType kv_type{kv.dtype, {2, ir::Dim::Sym("NB"), kv.block_size, kv.kv_heads, kv.head_dim}};
  for (const PlanInput& st : program.states) {
    if (!(st.type == kv_type)) return Invalid("state ", st.name, " must be ", kv_type.ToString());
  }
  ir::SymbolBindings bounds = program.bounds;
  // Arena buffers written so far: offset -> types written there.
  std::map<int64_t, std::vector<ir::TensorType>> written;
  auto check_arena = [&](const PlanTensor& t, const std::string& where) -> absl::Status {
    ASSIGN_OR_RETURN(int64_t bytes, t.type.ByteSize(bounds));
    if (t.index < 0 || t.index % kArenaAlignment != 0 || t.index > program.arena_bytes ||
        bytes > program.arena_bytes - t.index) {
      return Invalid(where, ": arena buffer of ", bytes, " bytes at ", t.index, " outside the arena of ",
                     program.arena_bytes, " bytes");
    }
    return absl::OkStatus();
  };
  auto check_ref = [&](const PlanTensor& t, const std::string& where) -> absl::Status {
    switch (t.kind) {
      case TensorKind::kArena: {
        RETURN_IF_ERROR(check_arena(t, where));
        auto it = written.find(t.index);
        if (it == written.end() || std::find(it->second.begin(), it->second.end(), t.type) == it->second.end()) {
          return Invalid(where, ": reads arena offset ", t.index, " before anything writes it");
        }
        return absl::OkStatus();
      }
      case TensorKind::kWeight: {
        if (t.index < 0 || t.index >= static_cast<int64_t>(plan.weights.size())) return Invalid(where, ": bad weight");
        const WeightEntry& w = plan.weights[t.index];
        ir::TensorType wt{w.dtype, {}};
        for (int64_t d : w.shape) wt.shape.emplace_back(d);
        if (!(wt == t.type)) return Invalid(where, ": weight ", w.name, " type mismatch");
        return absl::OkStatus();
      }
      case TensorKind::kInput:
        if (t.index < 0 || t.index >= static_cast<int64_t>(program.inputs.size()) ||
            !(program.inputs[t.index].type == t.type)) {
          return Invalid(where, ": bad input reference");
        }
        return absl::OkStatus();
      case TensorKind::kState:
        if (t.index < 0 || t.index >= static_cast<int64_t>(program.states.size()) || !(program.states[t.index].type == t.type)) {
          return Invalid(where, ": bad state reference");
        }
        return absl::OkStatus();
    }
    return Invalid(where, ": unknown operand kind");
  };

  for (size_t i = 0; i < program.steps.size(); ++i) {
    const PlanStep& step = program.steps[i];
    if (static_cast<int>(step.kernel) >= ir::kOpCount) return Invalid("step ", i, ": unknown kernel id");
    const ir::OpInfo& info = ir::GetOpInfo(step.kernel);
    const std::string where = absl::StrCat("step ", i, " (", info.name, ")");
    if (step.layer < -1 || step.layer >= (decoder ? m.num_layers : glm::kMaxLayers)) return Invalid(where, ": bad layer");
    if (step.kernel == ir::OpId::k_all_gather) {
      const absl::StatusOr<int64_t> parts = ir::GetInt(step.attrs, "parts");
      if (parts.ok() && *parts != plan.tp) {
        return Invalid(where, ": gathers ", *parts, " parts in a plan for tp=", plan.tp);
      }
    }
    std::vector<ir::TensorType> operand_types;
    for (size_t j = 0; j < step.operands.size(); ++j) {
      const PlanTensor& t = step.operands[j];
      RETURN_IF_ERROR(check_ref(t, where));
      if ((t.kind == TensorKind::kState) != (static_cast<int>(j) == info.state_operand)) {
        return Invalid(where, ": operand ", j, " has the wrong kind");
      }
      if (t.kind == TensorKind::kWeight && plan.weights[t.index].quantized() &&
          static_cast<int>(j) != info.matrix_operand) {
        return Invalid(where, ": operand ", j, " (@", plan.weights[t.index].name,
                       ") is stored quantized; only a linear weight may be");
      }
      if (const char* input = RequiredInput(step.kernel, static_cast<int>(j))) {
        if (t.kind != TensorKind::kInput || program.inputs[t.index].name != input) {
          return Invalid(where, ": operand ", j, " must be the runtime input %", input);
        }
      }
      operand_types.push_back(t.type);
    }
    absl::StatusOr<std::vector<ir::TensorType>> types = ir::InferResultTypes(step.kernel, operand_types, step.attrs);
    if (!types.ok()) return Invalid(where, ": ", types.status().message());
    if (types->size() != step.results.size()) return Invalid(where, ": wrong number of results");
    for (size_t j = 0; j < step.results.size(); ++j) {
      const PlanTensor& r = step.results[j];
      if (r.kind != TensorKind::kArena) return Invalid(where, ": results must live in the arena");
      if (!(r.type == (*types)[j])) return Invalid(where, ": result ", j, " type mismatch");
      RETURN_IF_ERROR(check_arena(r, where));
      written[r.index].push_back(r.type);
    }
  }
  if (program.outputs.size() != program.output_names.size()) return Invalid("outputs and output names differ in number");
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    if (program.outputs[i].kind != TensorKind::kArena) return Invalid("output ", program.output_names[i], " not in arena");
    RETURN_IF_ERROR(check_ref(program.outputs[i], absl::StrCat("output ", program.output_names[i])));
  }
  if (!decoder) {
    const int embeds = program.FindOutput("image_embeds");
    if (embeds < 0) return Invalid(program.name, ": no 'image_embeds' output");
    const ir::TensorType& et = program.outputs[embeds].type;
    if (et.rank() != 2 || !(et.shape[0] == ir::Dim::Sym("E")) || !(et.shape[1] == ir::Dim(m.hidden_size))) {
      return Invalid("image_embeds must be [E, hidden]");
    }
    return absl::OkStatus();
  }
  for (const char* required : {"logits", "next_tokens"}) {
    if (program.FindOutput(required) < 0) return Invalid("no '", required, "' output");
  }
  const int logits = program.FindOutput("logits");
  const ir::TensorType& lt = program.outputs[logits].type;
  if (lt.rank() != 2 || !(lt.shape[1] == ir::Dim(m.vocab_size))) return Invalid("logits must be [R, vocab]");
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePlan(const Plan& plan) {
  if (plan.version != kPlanVersion) return Invalid("version ", plan.version, ", expected ", kPlanVersion);
  if (!ir::IsFloat(plan.dtype)) return Invalid("model dtype must be a float type");
  if (plan.max_batch_tokens <= 0 || plan.max_seqs <= 0 || plan.max_batch_tokens > kMaxBatchTokens ||
      plan.max_seqs > kMaxSeqs) {
    return Invalid("batch limits (", plan.max_batch_tokens, " tokens, ", plan.max_seqs, " sequences) outside [1, ",
                   kMaxBatchTokens, "] and [1, ", kMaxSeqs, "]");
  }
  if (plan.tp < 1 || plan.tp > ir::kMaxTensorParallel) {
    return Invalid("tensor-parallel degree ", plan.tp, " outside [1, ", ir::kMaxTensorParallel, "]");
  }
  const ModelInfo& m = plan.model;
  if (m.vocab_size <= 0 || m.hidden_size <= 0 || m.num_layers <= 0 || m.max_position_embeddings <= 0 ||
      m.vocab_size > glm::kMaxVocabSize || m.hidden_size > glm::kMaxHiddenSize || m.num_layers > glm::kMaxLayers ||
      m.max_position_embeddings > glm::kMaxPositions) {
    return Invalid("model dimensions must be positive and within the config limits");
  }
  for (int64_t id : m.eos_token_ids) {
    if (id < 0 || id >= m.vocab_size) return Invalid("eos id ", id, " outside the vocabulary");
  }
  const KvGeometry& kv = plan.kv;
  if (kv.num_layers != m.num_layers || kv.block_size <= 0 || kv.block_size > kMaxKvBlockSize || kv.kv_heads <= 0 ||
      kv.kv_heads > glm::kMaxHeads || kv.head_dim <= 0 || kv.head_dim > glm::kMaxHeadDim || (kv.dtype != plan.dtype && !kv.quantized())) {
    return Invalid("KV-cache geometry does not match the model");
  }
  // Static scales: two fp32 one-value weights a layer, only beside an 8-bit cache.
  absl::flat_hash_set<int32_t> scale_weights;
  if (kv.static_scales() && (!kv.quantized() || static_cast<int64_t>(kv.scale_weights.size()) != 2 * kv.num_layers)) {
    return Invalid("static KV scales need an 8-bit cache and two scales a layer");
  }
  for (int32_t i : kv.scale_weights) {
    if (i < 0 || static_cast<size_t>(i) >= plan.weights.size() || !scale_weights.insert(i).second ||
        plan.weights[i].dtype != ir::DType::kF32 || plan.weights[i].shape != std::vector<int64_t>{1} ||
        plan.weights[i].quantized()) {
      return Invalid("static KV scale ", i, " is not a distinct one-value fp32 weight");
    }
  }

  absl::flat_hash_set<std::string> names;
  for (const WeightEntry& w : plan.weights) {
    if (!names.insert(w.name).second) return Invalid("weight ", w.name, " declared twice");
    const bool kv_scale = scale_weights.contains(static_cast<int32_t>(&w - plan.weights.data()));
    if (w.dtype != plan.dtype && !kv_scale) return Invalid("weight ", w.name, " has a different dtype than the model");
    if (w.shape.empty() || w.pieces.empty()) return Invalid("weight ", w.name, " needs a shape and sources");
    for (int64_t d : w.shape) {
      if (d <= 0) return Invalid("weight ", w.name, " has a bad dimension");
    }
    if (!ir::CheckedProduct(w.shape)) return Invalid("weight ", w.name, " is implausibly large");
    int64_t rows = 0;
    for (const WeightPiece& p : w.pieces) {
      // A piece has the weight's rank, or a 2-D weight takes a tensor's trailing dimensions
      // flattened into its columns (a convolution's kernel read as a linear's weight).
      const bool flattened = w.shape.size() == 2 && p.tensor_shape.size() > 2;
      if ((p.tensor_shape.size() != w.shape.size() && !flattened) || p.tensor_shape.empty() || p.row_begin < 0 ||
          p.row_end <= p.row_begin || p.row_end > p.tensor_shape[0] || !ir::CheckedProduct(p.tensor_shape)) {
        return Invalid("weight ", w.name, ": bad slice of ", p.tensor);
      }
      const ir::ShardSpec& sh = p.shard;
      if (!sh.Fits(plan.tp) || (sh.axis == 1 && (w.shape.size() != 2 || flattened)) ||
          (sh.axis == 0 && (p.row_end - p.row_begin) % sh.parts != 0) ||
          (sh.axis == 1 && p.tensor_shape[1] % sh.parts != 0)) {
        return Invalid("weight ", w.name, ": bad shard (axis ", sh.axis, ", parts ", sh.parts, ") of ", p.tensor,
                       " at tp=", plan.tp);
      }
      // Every rank's slice has the same size; rank 0's stands for all.
      const PieceSlice slice = SliceForRank(p, 0, plan.tp);
      if (slice.row_end - slice.row_begin > w.shape[0] - rows) return Invalid("weight ", w.name, ": bad slice of ", p.tensor);
      if (flattened) {
        if (slice.row_elems != w.shape[1]) return Invalid("weight ", w.name, ": ", p.tensor, " has other columns");
      }
      for (size_t i = 1; i < w.shape.size() && !flattened; ++i) {
        const int64_t have = sh.axis == 1 ? p.tensor_shape[i] / sh.parts : p.tensor_shape[i];  // axis 1: 2-D only
        if (have != w.shape[i]) return Invalid("weight ", w.name, ": ", p.tensor, " has other columns");
      }
      if (p.quant.quantized()) {
        const ir::QuantFormat& q = p.quant;
        if (!ir::IsQuantGroup(q.group) || (q.kind == ir::QuantKind::kFp8E4M3 && (q.group != 0 || !q.symmetric))) {
          return Invalid("weight ", w.name, ": bad format of ", p.tensor, " (group ", q.group, ")");
        }
        if (w.shape.size() != 2 || flattened) {
          return Invalid("weight ", w.name, ": only a matrix [N, K] can be stored as ", q.ToString());
        }
        if (absl::Status row = q.CheckRow(p.tensor_shape[1]); !row.ok()) {
          return Invalid("weight ", w.name, ": ", p.tensor, ": ", row.message());
        }
      }
      // The input rows are quantized once for the whole product: every piece must agree.
      if (p.quant.act != ir::ActQuant::kNone && !p.quant.quantized()) {
        return Invalid("weight ", w.name, ": ", p.tensor, " quantizes its input but not its weight");
      }
      if (p.quant.act != w.pieces.front().quant.act) {
        return Invalid("weight ", w.name, ": its pieces quantize the input differently (", p.tensor, ": ",
                       p.quant.ToString(), ", ", w.pieces.front().tensor, ": ", w.pieces.front().quant.ToString(), ")");
      }
      const bool fp8 = p.quant.kind == ir::QuantKind::kFp8E4M3;
      if (p.packing != ir::QuantPacking::kNone &&
          (!p.quant.quantized() || !absl::EndsWith(p.tensor, ".weight") || fp8 != (p.packing == ir::QuantPacking::kCtFp8) ||
           (p.packing == ir::QuantPacking::kAwq && (p.quant.kind != ir::QuantKind::kInt4 || p.quant.symmetric)) ||
           (p.packing == ir::QuantPacking::kCtInt8 &&
            (p.quant.kind != ir::QuantKind::kInt8 || p.quant.group != 0 || !p.quant.symmetric)))) {
        return Invalid("weight ", w.name, ": ", p.tensor, " cannot be stored ", ir::QuantPackingName(p.packing), " as ",
                       p.quant.ToString());
      }
      rows += slice.row_end - slice.row_begin;
    }
    if (rows != w.shape[0]) return Invalid("weight ", w.name, ": pieces give ", rows, " rows, not ", w.shape[0]);
  }

  if (plan.programs.empty() || plan.programs.front().name != kDecoderProgram) {
    return Invalid("the first program must be the decoder");
  }
  if (plan.programs.size() > 2 || (plan.programs.size() == 2 && plan.programs[1].name != kVisionProgram)) {
    return Invalid("a plan has a decoder and at most a vision program");
  }
  if ((plan.programs.size() == 2) != (m.image_token_id >= 0) ||
      (m.image_token_id >= 0 && (m.image_token_id >= m.vocab_size || m.patches_per_token < 1 ||
                                 m.patches_per_token > 64))) {
    return Invalid("an image token id (and patches per token) goes with a vision program, and only with one");
  }
  for (const Program& program : plan.programs) RETURN_IF_ERROR(ValidateProgram(plan, program));
  return absl::OkStatus();
}

ir::ActQuant StepInputQuant(const Plan& plan, const PlanStep& step) {
  const int m = ir::GetOpInfo(step.kernel).matrix_operand;
  if (m < 0 || static_cast<size_t>(m) >= step.operands.size()) return ir::ActQuant::kNone;
  const PlanTensor& t = step.operands[m];
  if (t.kind != TensorKind::kWeight || t.index < 0 || static_cast<size_t>(t.index) >= plan.weights.size()) {
    return ir::ActQuant::kNone;
  }
  return plan.weights[t.index].input_quant();
}

}  // namespace ag::compiler
