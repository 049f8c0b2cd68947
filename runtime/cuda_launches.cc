#include "runtime/cuda_launches.h"

#include <algorithm>
#include <map>

#include "absl/algorithm/container.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/linear_split.h"
#include "kernels/cuda/peer_flags.h"
#include "kernels/cuda/quant_pack.h"
#include "runtime/quant_storage.h"

namespace ag::runtime {
namespace {

using ir::OpId;

int64_t Attr(const compiler::PlanStep& step, const char* name) {
  const absl::StatusOr<int64_t> v = ir::GetInt(step.attrs, name);
  return v.ok() ? *v : 0;
}

// The step's weight matrix (the 2-D weight operand), or null.
const compiler::WeightEntry* Matrix(const compiler::Plan& plan, const compiler::PlanStep& step) {
  for (const compiler::PlanTensor& t : step.operands) {
    if (t.kind == compiler::TensorKind::kWeight && plan.weights[t.index].shape.size() == 2) {
      return &plan.weights[t.index];
    }
  }
  return nullptr;
}

// A linear step (RunLinear): bf16 weights take one kernel, which applies a norm prologue itself to
// kLinearNormMaxRows rows (the GEMV, the staged skinny kernel: the default dispatch's); more rows take x
// normalised by a launch first.
// Quantized ones: up to kQuantLinearMaxRows rows the codes kernels, one a segment (a piece; a fused
// gate/up is one), x normalised first at 2-16 rows (and at one with int4); more rows the in-load GEMM of Hopper, one a
// segment, x normalised first. Not counted: an act-order segment's gather of x (and at one row the
// normalising launch before it) and, more rows, its dequantization into the scratch and the bf16
// GEMM instead (the plan does not say which checkpoint weights have one), nor that path off Hopper.
// A weight that quantizes its input (W8A8) has x rounded, and normalised, by one launch before (past
// kQuantLinearMaxRows rows on Hopper into codes for the 8-bit GEMM, one a segment as the in-load one).
int64_t LinearLaunches(const compiler::Plan& plan, const compiler::PlanStep& step, int64_t rows, bool norm) {
  const compiler::WeightEntry* w = Matrix(plan, step);
  if (w == nullptr || !w->quantized()) return 1 + (norm && rows > cuda::kLinearNormMaxRows ? 1 : 0);
  const int64_t segments = ir::IsGateUpOp(step.kernel) ? 1 : static_cast<int64_t>(w->pieces.size());
  // A W8A8 weight: one launch rounds x (normalising it first when there is a norm) into the scratch.
  if (w->input_quant() != ir::ActQuant::kNone) {
    return 1 + segments * (rows <= cuda::kQuantLinearMaxRows ? cuda::SkinnyLaunches(rows) : 1);
  }
  // One launch a segment, one per 64-row chunk past 64 rows (the skinny kernel); the decode kernels
  // normalise x themselves at one row unless a piece is int4 (cuda::QuantLinearNormalises).
  if (rows <= cuda::kQuantLinearMaxRows) {
    const bool kernel_normalises = absl::c_all_of(w->pieces, [&](const compiler::WeightPiece& p) {
      return cuda::QuantLinearNormalises(rows, QuantCodeOf(p.quant.kind), /*reordered=*/false);
    });
    return (norm && !kernel_normalises ? 1 : 0) + segments * cuda::SkinnyLaunches(rows);
  }
  return (norm ? 1 : 0) + segments;
}

int64_t AttentionLaunches(const compiler::Plan& plan, const compiler::PlanStep& step, const LaunchShape& shape) {
  const int64_t rows = shape.seqs * shape.rows_per_seq;
  const int64_t heads = Attr(step, "heads"), kv_heads = std::max<int64_t>(Attr(step, "kv_heads"), 1);
  const int64_t head_dim = Attr(step, "head_dim");
  if (cuda::FlashHeadDim(head_dim) && cuda::UseFlashAttention(rows, shape.seqs)) return 1;
  // The backend sizes slices by its context bucket: the longest context's power of two, at least 256.
  int64_t bucket = 1;
  while (bucket < std::max<int64_t>(shape.context, 256)) bucket *= 2;
  const int64_t group = std::max<int64_t>(heads / kv_heads, 1);
  if (!plan.kv.quantized() && cuda::GqaDecodeShape(head_dim, group)) {  // the grouped-query kernel
    const cuda::GqaGeometry geo = cuda::PlanGqaDecode(rows, kv_heads, bucket, shape.multiprocessors);
    return cuda::RowChunks(rows) * (geo.slices > 1 && !geo.fold ? 2 : 1);
  }
  const cuda::AttentionGeometry geo = cuda::PlanAttention(rows, kv_heads, group, bucket, shape.multiprocessors);
  return cuda::RowChunks(rows) * (geo.slices > 1 ? 2 : 1);
}

}  // namespace

int64_t CudaStepLaunches(const compiler::Plan& plan, const compiler::PlanStep& step, const LaunchShape& shape) {
  const int64_t rows = shape.seqs * shape.rows_per_seq;
  const ir::Shape& x = step.operands.empty() ? ir::Shape{} : step.operands[0].type.shape;
  const int64_t width = x.empty() || x.back().is_symbolic() ? 0 : x.back().offset();
  switch (step.kernel) {
    case OpId::k_linear:
    case OpId::k_linear_residual:
      return LinearLaunches(plan, step, rows, false);
    case OpId::k_norm_linear:
    case OpId::k_norm_gate_up_silu:
      return LinearLaunches(plan, step, rows, true);
    case OpId::k_residual_norm_gate_up_silu: {  // rms_norm_residual's kernel first, unless the GEMV folds it
      const compiler::WeightEntry* w = Matrix(plan, step);
      const bool folded = rows == 1 && w != nullptr && !w->quantized() && width <= cuda::kGemvStagedMaxK;
      return LinearLaunches(plan, step, rows, true) + (folded ? 0 : 1);
    }
    case OpId::k_norm_qkv_rope_kv_write:  // an 8-bit cache: K and V quantized from the staging rows after
      return LinearLaunches(plan, step, rows, true) + (plan.kv.quantized() ? 1 : 0);
    case OpId::k_attention:  // the cache write, then attention
      return 1 + AttentionLaunches(plan, step, shape);
    case OpId::k_paged_attention:
      return AttentionLaunches(plan, step, shape);
    case OpId::k_all_reduce:  // NCCL in place (a copy first when the result has its own buffer: counted)
      return plan.tp > 1 ? 2 : 1;
    case OpId::k_all_reduce_residual:
    case OpId::k_all_reduce_norm_residual:
      return shape.peer_access && cuda::OneShotFits(rows, width) ? 1 : 2;
    case OpId::k_all_gather:
      return rows == 1 ? 1 : 1 + std::max<int64_t>(Attr(step, "parts"), 1);
    default:
      return 1;
  }
}

int64_t CudaLaunchesPerLayer(const compiler::Plan& plan, const LaunchShape& shape) {
  std::map<int32_t, int64_t> per_layer;
  for (const compiler::PlanStep& step : plan.decoder().steps) {
    if (step.layer >= 0) per_layer[step.layer] += CudaStepLaunches(plan, step, shape);
  }
  int64_t most = 0;
  for (const auto& [layer, n] : per_layer) most = std::max(most, n);
  return most;
}

}  // namespace ag::runtime
