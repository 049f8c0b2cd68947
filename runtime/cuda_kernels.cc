#include <array>

#include "absl/algorithm/container.h"

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/input_quant.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/quant_linear.cuh"
#include "ir/status_macros.h"
#include "kernels/cuda/vision.cuh"
#include "kernels/cuda/vocab.cuh"
#include "runtime/cuda_step.h"

namespace ag::runtime {

cuda::RopePositions CudaStepArgs::Positions(size_t index) const {
  cuda::RopePositions p{operands[index].as<const int32_t>(), operands[index].dims.back()};
  if (const auto it = step->attrs.find("mrope_section"); it != step->attrs.end()) {
    const auto& s = std::get<std::vector<int64_t>>(it->second);
    p.mrope = true;
    p.section0 = static_cast<int>(s[0]);
    p.section1 = static_cast<int>(s[0] + s[1]);
  }
  return p;
}

namespace {

using A = CudaStepArgs;
using bf16 = __nv_bfloat16;

absl::Status Check(cudaError_t e, const A& a) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("step ", a.step->name, " (", ir::OpName(a.step->kernel),
                                          "): ", cudaGetErrorString(e)));
}

const bf16* In(const A& a, size_t i) { return a.operands[i].as<const bf16>(); }
bf16* Out(const A& a, size_t i = 0) { return a.results[i].as<bf16>(); }
const bf16* Optional(const A& a, size_t i) { return i < a.operands.size() ? In(a, i) : nullptr; }

cuda::LinearParams Linear(const A& a, const CudaTensor& x, const bf16* norm_w, const CudaTensor& w) {
  cuda::LinearParams p;
  p.x = x.as<const bf16>();
  p.m = x.dim(0);
  p.k = x.dim(1);
  p.norm_w = norm_w;
  p.w = w.as<const bf16>();
  p.n = w.dim(0);
  p.y = Out(a);
  p.scratch = static_cast<bf16*>(a.linear_scratch);
  if (norm_w != nullptr) p.eps = a.Float("eps");
  return p;
}

// x normalised into the scratch when the step has a norm prologue (the quantized kernels have none).
absl::Status NormalizeFirst(const A& a, cuda::LinearParams* p) {
  if (p->norm_w == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(Check(cuda::LaunchRmsNorm(p->x, p->norm_w, p->m, p->k, p->eps, p->scratch, a.stream), a));
  p->x = p->scratch;
  p->norm_w = nullptr;
  return absl::OkStatus();
}

cuda::InputQuantCode InputCode(const A& a) {
  return a.input_quant == ir::ActQuant::kFp8 ? cuda::InputQuantCode::kFp8 : cuda::InputQuantCode::kInt8;
}

// A W8A8 weight's product: x's rows rounded through 8-bit codes into the scratch (normalised first
// when the step has a norm prologue); the product kernels then read them as any bf16 rows.
absl::Status QuantizeInput(const A& a, cuda::LinearParams* p) {
  RETURN_IF_ERROR(
      Check(cuda::LaunchQuantizeInputRows(p->x, p->norm_w, p->m, p->k, p->eps, InputCode(a), p->scratch, a.stream), a));
  p->x = p->scratch;
  p->norm_w = nullptr;
  return absl::OkStatus();
}

// A W8A8 weight's prefill on the 8-bit tensor cores, when every segment can take it: x's codes
// (normalised first when the step has a norm prologue) into the scratch -- W8A8ScratchLayout's
// bytes, within the m * k bf16 it holds for k >= 16 -- then each segment's product on them.
bool W8A8Gemm(const A& a, const cuda::LinearParams& p) {
  return p.m > cuda::kQuantLinearMaxRows && absl::c_all_of(*a.quant, [&](const cuda::QuantSegment& s) {
           return cuda::W8A8GemmTakes(s, InputCode(a), p.k);
         });
}
absl::Status RunW8A8Gemm(const A& a, cuda::LinearParams p) {
  RETURN_IF_ERROR(Check(
      cuda::LaunchQuantizeInputCodes(p.x, p.norm_w, p.m, p.k, p.eps, InputCode(a), a.linear_scratch, a.stream), a));
  p.x = nullptr;  // the product reads the codes
  p.norm_w = nullptr;
  for (const cuda::QuantSegment& s : *a.quant) {
    RETURN_IF_ERROR(Check(cuda::LaunchW8A8Gemm(p, s, InputCode(a), a.linear_scratch, a.stream), a));
  }
  return absl::OkStatus();
}

// Whether every segment of a quantized prefill step can take the in-load GEMM (Hopper, no act order).
bool InLoadGemm(const A& a, const cuda::LinearParams& p) {
  cuda::LinearParams q = p;
  if (q.norm_w != nullptr) {  // as NormalizeFirst will leave it
    q.x = q.scratch;
    q.norm_w = nullptr;
  }
  return absl::c_all_of(*a.quant, [&](const cuda::QuantSegment& s) { return cuda::QuantGemmUsable(q, s); });
}

// A linear step, over a bf16 weight or a quantized one. Quantized, up to kQuantLinearMaxRows rows
// (decode) run on the codes, x normalised first when there is a norm prologue, unless the decode
// kernel applies it itself (cuda::QuantLinearNormalises: one row); more rows
// (prefill) take the wgmma GEMM that dequantizes each segment's tiles as they arrive, or, where it
// cannot (not Hopper, act order), dequantize the weight into the scratch for the bf16 GEMM, unless
// the scratch was not sized for it (the LM head's logit rows: the codes kernel takes any rows). An
// act-order segment's codes kernel reads x reordered into the order scratch; its dequantized
// weight is written back in input order. A W8A8 weight's input is rounded first (QuantizeInput),
// or, for prefill on Hopper, multiplied as codes (RunW8A8Gemm).
absl::Status RunLinear(const A& a, cuda::LinearParams p) {
  if (p.pre.y != nullptr) {  // a folded sandwich norm: in the GEMV's prologue, or its own kernel first
    if (a.quant == nullptr && a.input_quant == ir::ActQuant::kNone && cuda::GemvFoldsPreNorm(p)) {
      return Check(cuda::LaunchLinear(p, a.stream), a);
    }
    const cuda::PreNorm& pre = p.pre;
    RETURN_IF_ERROR(Check(
        cuda::LaunchRmsNormResidual(pre.y, pre.w, pre.residual, p.m, p.k, pre.eps, pre.out, a.stream), a));
    p.x = pre.out;
    p.pre = {};
  }
  if (a.quant == nullptr) return Check(cuda::LaunchLinear(p, a.stream), a);
  if (a.input_quant != ir::ActQuant::kNone) {
    if (W8A8Gemm(a, p)) return RunW8A8Gemm(a, p);
    RETURN_IF_ERROR(QuantizeInput(a, &p));
  }
  if (p.m > cuda::kQuantLinearMaxRows && InLoadGemm(a, p)) {
    RETURN_IF_ERROR(NormalizeFirst(a, &p));
    for (const cuda::QuantSegment& s : *a.quant) RETURN_IF_ERROR(Check(cuda::LaunchQuantGemm(p, s, a.stream), a));
    return absl::OkStatus();
  }
  if (p.m > cuda::kQuantLinearMaxRows && static_cast<size_t>(p.n * p.k) * 2 <= a.dequant_bytes) {
    p.w = static_cast<const bf16*>(a.dequant_scratch);
    for (const cuda::QuantSegment& s : *a.quant) {
      RETURN_IF_ERROR(Check(cuda::LaunchDequantize(s, p.k, static_cast<bf16*>(a.dequant_scratch), a.stream), a));
    }
    return Check(cuda::LaunchLinear(p, a.stream), a);
  }
  // The decode kernels may apply the norm prologue themselves (cuda::QuantLinearNormalises).
  const bool kernel_normalises = absl::c_all_of(*a.quant, [&](const cuda::QuantSegment& s) {
    return cuda::QuantLinearNormalises(p.m, s.code, s.input_order != nullptr);
  });
  if (!kernel_normalises) RETURN_IF_ERROR(NormalizeFirst(a, &p));
  for (const cuda::QuantSegment& s : *a.quant) {
    cuda::LinearParams q = p;
    if (s.input_order != nullptr) {  // an act-order segment reads x in its own input order (widened when padded)
      q.k = cuda::StoredK(s, p.k);
      if (static_cast<size_t>(p.m * q.k) * 2 > a.order_bytes) {
        return absl::InternalError(absl::StrCat("step ", a.step->name, ": ", p.m, " rows outgrow the act-order scratch"));
      }
      q.x = static_cast<const bf16*>(a.order_scratch);
      RETURN_IF_ERROR(Check(cuda::LaunchOrderInputs(p.x, p.m, p.k, s.input_order, static_cast<bf16*>(a.order_scratch),
                                                    q.k, a.stream),
                            a));
    }
    RETURN_IF_ERROR(Check(cuda::LaunchQuantLinear(q, s, a.stream), a));
  }
  return absl::OkStatus();
}

cuda::AttentionShape Shape(const A& a, int64_t tokens) {
  return {tokens, a.Int("heads"), a.max_context, a.decode_seqs};
}

absl::Status Embedding(const A& a) {
  return Check(cuda::LaunchEmbedding(a.operands[0].as<const int32_t>(), a.operands[0].dim(0), In(a, 1),
                                     a.operands[1].dim(1), Out(a), a.stream),
               a);
}
absl::Status RmsNorm(const A& a) {
  const int64_t n = a.operands[0].dims.back();
  return Check(cuda::LaunchRmsNorm(In(a, 0), In(a, 1), a.operands[0].numel() / n, n, a.Float("eps"), Out(a), a.stream),
               a);
}
absl::Status LinearOp(const A& a) {
  cuda::LinearParams p = Linear(a, a.operands[0], nullptr, a.operands[1]);
  p.bias = Optional(a, 2);
  p.epilogue = p.bias != nullptr ? cuda::Epilogue::kBias : cuda::Epilogue::kNone;
  return RunLinear(a, p);
}
absl::Status Rotary(const A& a) {
  return Check(cuda::LaunchRotary(In(a, 0), a.Positions(1), a.operands[0].dim(0), a.Int("heads"),
                                  a.Int("head_dim"), a.Int("rot"), a.Float("theta"), Out(a), a.stream),
               a);
}
absl::Status PagedAttention(const A& a) {
  return Check(cuda::LaunchPagedAttention(In(a, 0), Shape(a, a.operands[0].dim(0)), a.kv, a.seqs,
                                          a.attention_workspace, Out(a), a.stream),
               a);
}
absl::Status Attention(const A& a) {
  absl::Status s = Check(cuda::LaunchKvCacheWrite(In(a, 1), In(a, 2), a.slot_mapping, a.operands[1].dim(0), a.kv,
                                                  a.stream),
                         a);
  if (!s.ok()) return s;
  return PagedAttention(a);
}
absl::Status Add(const A& a) {
  return Check(cuda::LaunchBinary(cuda::Binary::kAdd, In(a, 0), In(a, 1), a.results[0].numel(), Out(a), a.stream), a);
}
absl::Status Mul(const A& a) {
  return Check(cuda::LaunchBinary(cuda::Binary::kMul, In(a, 0), In(a, 1), a.results[0].numel(), Out(a), a.stream), a);
}
absl::Status Silu(const A& a) { return Check(cuda::LaunchSilu(In(a, 0), a.results[0].numel(), Out(a), a.stream), a); }
absl::Status Slice(const A& a) {
  const ColumnSlice s = AsColumnSlice(a.operands[0], a.Int("axis"), a.Int("start"), a.Int("size"));
  return Check(cuda::LaunchSliceColumns(In(a, 0), s.rows, s.cols, s.start, s.size, Out(a), a.stream), a);
}
absl::Status GatherRows(const A& a) {
  return Check(cuda::LaunchGatherRows(In(a, 0), a.operands[1].as<const int32_t>(), a.operands[1].dim(0),
                                      a.operands[0].dim(1), Out(a), a.stream),
               a);
}
absl::Status Argmax(const A& a) {
  return Check(cuda::LaunchArgmax(In(a, 0), a.operands[0].dim(0), a.operands[0].dim(1),
                                  a.results[0].as<int32_t>(), a.stream),
               a);
}
absl::Status ScatterRows(const A& a) {
  const CudaTensor& x = a.operands[0];
  return Check(cuda::LaunchScatterRows(In(a, 0), x.dim(0), In(a, 1), a.operands[2].as<const int32_t>(),
                                       a.operands[2].dim(0), x.dim(1), Out(a), a.stream),
               a);
}
absl::Status LayerNorm(const A& a) {
  const CudaTensor& x = a.operands[0];
  const int64_t n = x.dims.back();
  return Check(cuda::LaunchLayerNorm(In(a, 0), In(a, 1), In(a, 2), x.numel() / n, n, a.Float("eps"), Out(a), a.stream),
               a);
}
absl::Status Gelu(const A& a) { return Check(cuda::LaunchGelu(In(a, 0), a.results[0].numel(), Out(a), a.stream), a); }
absl::Status VisionPosEmbed(const A& a) {
  const CudaTensor& x = a.operands[0];
  return Check(cuda::LaunchVisionPosEmbed(In(a, 0), In(a, 1), a.Int("side"), a.operands[2].as<const int32_t>(), x.dim(0),
                                          x.dim(1), Out(a), a.stream),
               a);
}
absl::Status VisionRotary(const A& a) {
  return Check(cuda::LaunchVisionRotary(In(a, 0), a.operands[1].as<const int32_t>(), a.operands[0].dim(0),
                                        a.Int("heads"), a.Int("head_dim"), a.Float("theta"), Out(a), a.stream),
               a);
}
absl::Status SegmentAttention(const A& a) {
  return Check(cuda::LaunchSegmentAttention(In(a, 0), In(a, 1), In(a, 2), a.operands[3].as<const int32_t>(),
                                            a.operands[3].dim(0) - 1, a.operands[0].dim(0), a.Int("heads"),
                                            a.Int("head_dim"), Out(a), a.stream),
               a);
}
// (qkv [P, 3 heads d], patch_pos): q's and k's heads rotated where they are; v copied only when the
// planner did not put the result over qkv.
absl::Status VisionQkvRotary(const A& a) {
  const CudaTensor& qkv = a.operands[0];
  const int64_t rows = qkv.dim(0), width = qkv.dim(1), heads = a.Int("heads"), d = a.Int("head_dim");
  if (Out(a) != In(a, 0) && rows > 0) {
    const size_t pitch = static_cast<size_t>(width) * sizeof(bf16);
    RETURN_IF_ERROR(Check(cudaMemcpy2DAsync(Out(a) + 2 * heads * d, pitch, In(a, 0) + 2 * heads * d, pitch,
                                            static_cast<size_t>(heads * d) * sizeof(bf16), static_cast<size_t>(rows),
                                            cudaMemcpyDeviceToDevice, a.stream),
                          a));
  }
  return Check(cuda::LaunchVisionRotary(In(a, 0), a.operands[1].as<const int32_t>(), rows, 2 * heads, d,
                                        a.Float("theta"), Out(a), a.stream, width, width),
               a);
}
// (qkv [P, 3 heads d], offsets): attention reading q, k and v from their columns of qkv.
absl::Status PackedSegmentAttention(const A& a) {
  const int64_t heads = a.Int("heads"), d = a.Int("head_dim");
  const bf16* qkv = In(a, 0);
  return Check(cuda::LaunchSegmentAttention(qkv, qkv + heads * d, qkv + 2 * heads * d, a.operands[1].as<const int32_t>(),
                                            a.operands[1].dim(0) - 1, a.operands[0].dim(0), heads, d, Out(a), a.stream,
                                            3 * heads * d),
               a);
}
absl::Status MergeRows(const A& a) {
  const CudaTensor& x = a.operands[0];
  if (x.dim(0) != a.results[0].dim(0) * a.Int("group")) {
    return absl::InvalidArgumentError("merge_rows: the rows do not make whole groups");
  }
  return Check(cuda::LaunchMergeRows(In(a, 0), x.dim(0), x.dim(1), a.Int("group"), Out(a), a.stream), a);
}
absl::Status KvCacheWrite(const A& a) {
  return Check(cuda::LaunchKvCacheWrite(In(a, 0), In(a, 1), a.operands[2].as<const int32_t>(), a.operands[0].dim(0),
                                        a.kv, a.stream),
               a);
}
// (x, norm weight, W, positions, slot mapping, kv, bias?) -> q
absl::Status NormQkvRopeKvWrite(const A& a) {
  cuda::LinearParams p = Linear(a, a.operands[0], In(a, 1), a.operands[2]);
  p.epilogue = cuda::Epilogue::kQkvRope;
  p.bias = Optional(a, 6);
  cuda::QkvRope& r = p.qkv;
  r.positions = a.Positions(3);
  r.slots = a.operands[4].as<const int32_t>();
  r.cache = a.kv;
  r.heads = static_cast<int>(a.Int("heads"));
  r.kv_heads = static_cast<int>(a.Int("kv_heads"));
  r.head_dim = static_cast<int>(a.Int("head_dim"));
  r.rope = cuda::RopeFrequencies::Of(static_cast<int>(a.Int("rot")), a.Float("theta"));
  if (a.kv.code == cuda::KvCode::kBF16) return RunLinear(a, p);
  // An 8-bit cache: the epilogue leaves K and V in fp32, then each head's row is quantized with its scale.
  r.kv_staging = a.kv_staging;
  RETURN_IF_ERROR(RunLinear(a, p));
  const int64_t width = a.kv.kv_heads * a.kv.head_dim;
  return Check(cuda::LaunchKvQuantize(a.kv_staging, a.kv_staging + width, 2 * width, r.slots, p.m, a.kv, a.stream), a);
}
// The gate/up weight was uploaded with its rows interleaved (see the backend).
absl::Status NormGateUpSilu(const A& a) {
  cuda::LinearParams p = Linear(a, a.operands[0], In(a, 1), a.operands[2]);
  p.epilogue = cuda::Epilogue::kSiluMul;
  return RunLinear(a, p);
}
// (residual, norm weight, W, y, post-norm weight) -> (norm_gate_up_silu of h, h), with
// h = residual + rms_norm(y) (RunLinear: the GEMV computes it at one row).
absl::Status ResidualNormGateUpSilu(const A& a) {
  cuda::LinearParams p = Linear(a, a.operands[0], In(a, 1), a.operands[2]);
  p.epilogue = cuda::Epilogue::kSiluMul;
  p.pre = {In(a, 3), In(a, 4), In(a, 0), a.Float("residual_eps"), Out(a, 1)};  // x is h, once RunLinear has it
  return RunLinear(a, p);
}
absl::Status LinearResidual(const A& a) {
  cuda::LinearParams p = Linear(a, a.operands[0], nullptr, a.operands[1]);
  p.epilogue = cuda::Epilogue::kResidual;
  p.residual = In(a, 2);
  return RunLinear(a, p);
}
absl::Status RmsNormResidual(const A& a) {
  const CudaTensor& x = a.operands[0];
  return Check(cuda::LaunchRmsNormResidual(In(a, 0), In(a, 1), In(a, 2), x.dim(0), x.dim(1), a.Float("eps"), Out(a),
                                           a.stream),
               a);
}
absl::Status AddRmsNorm(const A& a) {
  const CudaTensor& x = a.operands[0];
  return Check(cuda::LaunchAddRmsNorm(In(a, 0), In(a, 1), In(a, 2), x.dim(0), x.dim(1), a.Float("eps"), Out(a, 0),
                                      Out(a, 1), a.stream),
               a);
}
absl::Status NormLinear(const A& a) {
  cuda::LinearParams p = Linear(a, a.operands[0], In(a, 1), a.operands[2]);
  return RunLinear(a, p);
}

// Collectives: NCCL on the step stream (captured into the step's graph like
// the kernels). Without a communicator the group is this rank alone.
// A communicator's error, naming the step (as Check does for CUDA errors).
absl::Status InStep(const A& a, const absl::Status& s) {
  return s.ok() ? s : absl::Status(s.code(), absl::StrCat("step ", a.step->name, ": ", s.message()));
}
absl::Status ReduceInPlace(const A& a, bf16* data, int64_t n) {
  if (a.comm == nullptr) return absl::OkStatus();
  return InStep(a, a.comm->AllReduceSum(data, n, ir::DType::kBF16, a.stream));
}
absl::Status AllReduce(const A& a) {
  const int64_t n = a.results[0].numel();
  if (a.results[0].data != a.operands[0].data) {
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(Out(a), In(a, 0), static_cast<size_t>(n) * 2, cudaMemcpyDeviceToDevice,
                                          a.stream),
                          a));
  }
  return ReduceInPlace(a, Out(a), n);
}
// [R, n] from each rank -> [R, parts * n]. One row lands in place; more rows
// land rank-major in the scratch and move into their columns with 2-D copies.
absl::Status AllGather(const A& a) {
  const CudaTensor& x = a.operands[0];
  const int64_t rows = x.dim(0), cols = x.dim(1), parts = a.Int("parts");
  if ((a.comm == nullptr ? 1 : a.comm->size()) != parts) {
    return absl::InvalidArgumentError(absl::StrCat("step ", a.step->name, ": the group's size differs from parts"));
  }
  if (rows == 0) return absl::OkStatus();
  bf16* landing = rows == 1 ? Out(a) : static_cast<bf16*>(a.gather_scratch);
  if (a.comm == nullptr) {
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(landing, In(a, 0), static_cast<size_t>(rows * cols) * 2,
                                          cudaMemcpyDeviceToDevice, a.stream),
                          a));
  } else {
    RETURN_IF_ERROR(InStep(a, a.comm->AllGather(In(a, 0), landing, rows * cols, ir::DType::kBF16, a.stream)));
  }
  if (rows == 1) return absl::OkStatus();
  const size_t block = static_cast<size_t>(cols) * 2;
  for (int64_t p = 0; p < parts; ++p) {
    RETURN_IF_ERROR(Check(cudaMemcpy2DAsync(Out(a) + p * cols, block * parts, landing + p * rows * cols, block, block,
                                            rows, cudaMemcpyDeviceToDevice, a.stream),
                          a));
  }
  return absl::OkStatus();
}
// Small messages (decode) on one node: one launch of the one-shot all-reduce,
// which sums the ranks' partials and adds the residual (after the norm) in the
// same kernel. Otherwise NCCL sums the partial products in place (the operand
// dies here), then one kernel adds the residual (normalising first, for glm4's
// sandwich norms). Every rank takes the same branch: same plan, same shapes.
bool OneShot(const A& a) {
  const CudaTensor& x = a.operands[0];
  return a.peer != nullptr && cuda::OneShotFits(x.dim(0), x.dim(1));
}
absl::Status AllReduceResidual(const A& a) {
  const CudaTensor& x = a.operands[0];
  if (OneShot(a)) {
    return Check(cuda::LaunchOneShotAllReduce(*a.peer, In(a, 0), In(a, 1), nullptr, 0.0f, x.dim(0), x.dim(1), Out(a),
                                              a.stream),
                 a);
  }
  RETURN_IF_ERROR(ReduceInPlace(a, x.as<bf16>(), x.numel()));
  return Check(cuda::LaunchBinary(cuda::Binary::kAdd, In(a, 1), In(a, 0), a.results[0].numel(), Out(a), a.stream), a);
}
absl::Status AllReduceNormResidual(const A& a) {
  const CudaTensor& x = a.operands[0];
  if (OneShot(a)) {
    return Check(cuda::LaunchOneShotAllReduce(*a.peer, In(a, 0), In(a, 2), In(a, 1), a.Float("eps"), x.dim(0),
                                              x.dim(1), Out(a), a.stream),
                 a);
  }
  RETURN_IF_ERROR(ReduceInPlace(a, x.as<bf16>(), x.numel()));
  return Check(cuda::LaunchRmsNormResidual(In(a, 0), In(a, 1), In(a, 2), x.dim(0), x.dim(1), a.Float("eps"), Out(a),
                                           a.stream),
               a);
}

struct Row {
  ir::OpId op;
  CudaKernel kernel;
};

using ir::OpId;
constexpr std::array<Row, ir::kOpCount> kKernels = {{
    {OpId::k_embedding, Embedding},
    {OpId::k_rms_norm, RmsNorm},
    {OpId::k_linear, LinearOp},
    {OpId::k_rotary, Rotary},
    {OpId::k_attention, Attention},
    {OpId::k_add, Add},
    {OpId::k_mul, Mul},
    {OpId::k_silu, Silu},
    {OpId::k_slice, Slice},
    {OpId::k_gather_rows, GatherRows},
    {OpId::k_argmax, Argmax},
    {OpId::k_scatter_rows, ScatterRows},
    {OpId::k_layer_norm, LayerNorm},
    {OpId::k_gelu, Gelu},
    {OpId::k_vision_pos_embed, VisionPosEmbed},
    {OpId::k_vision_rotary, VisionRotary},
    {OpId::k_segment_attention, SegmentAttention},
    {OpId::k_merge_rows, MergeRows},
    {OpId::k_kv_cache_write, KvCacheWrite},
    {OpId::k_paged_attention, PagedAttention},
    {OpId::k_norm_qkv_rope_kv_write, NormQkvRopeKvWrite},
    {OpId::k_norm_gate_up_silu, NormGateUpSilu},
    {OpId::k_linear_residual, LinearResidual},
    {OpId::k_rms_norm_residual, RmsNormResidual},
    {OpId::k_add_rms_norm, AddRmsNorm},
    {OpId::k_norm_linear, NormLinear},
    {OpId::k_all_reduce, AllReduce},
    {OpId::k_all_gather, AllGather},
    {OpId::k_all_reduce_residual, AllReduceResidual},
    {OpId::k_all_reduce_norm_residual, AllReduceNormResidual},
    {OpId::k_vision_qkv_rotary, VisionQkvRotary},
    {OpId::k_packed_segment_attention, PackedSegmentAttention},
    {OpId::k_residual_norm_gate_up_silu, ResidualNormGateUpSilu},
}};
static_assert(ir::RowsCoverAllOps(kKernels), "every op needs a CUDA kernel, in OpId order");

}  // namespace

CudaKernel GetCudaKernel(ir::OpId op) { return kKernels[static_cast<size_t>(op)].kernel; }

}  // namespace ag::runtime
