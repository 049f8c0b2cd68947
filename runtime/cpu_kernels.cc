#include "runtime/cpu_kernels.h"

#include <algorithm>
#include <array>

#include "kernels/ref/half.h"

namespace ag::runtime {

int64_t CpuStepArgs::Int(const char* name) const { return *ir::GetInt(step->attrs, name); }
float CpuStepArgs::Float(const char* name) const { return static_cast<float>(*ir::GetFloat(step->attrs, name)); }
ref::RotaryPositions CpuStepArgs::Positions(size_t index) const {
  ref::RotaryPositions p{operands[index].i(), operands[index].dims.back()};
  if (const auto it = step->attrs.find("mrope_section"); it != step->attrs.end()) {
    const auto& s = std::get<std::vector<int64_t>>(it->second);
    p.mrope = true;
    p.section0 = s[0];
    p.section1 = s[0] + s[1];
  }
  return p;
}

namespace {

using A = CpuStepArgs;

void Embedding(const A& a) {
  ref::Embedding(a.operands[0].i(), a.operands[0].dim(0), a.operands[1].f(), a.operands[1].dim(1), a.results[0].f());
}
void RmsNorm(const A& a) {
  const CpuTensor& x = a.operands[0];
  const int64_t n = x.dims.back();
  ref::RmsNorm(x.f(), a.operands[1].f(), x.numel() / n, n, a.Float("eps"), a.results[0].f());
}
void Linear(const A& a) {
  const CpuTensor& x = a.operands[0];
  const float* in = x.f();
  std::vector<float> rounded;
  if (a.input_quant != ref::InputQuant::kNone) {
    rounded.assign(in, in + x.numel());
    ref::QuantizeInputRows(rounded.data(), x.dim(0), x.dim(1), a.input_quant);
    in = rounded.data();
  }
  ref::Linear(in, a.operands[1].f(), a.Optional(2), x.dim(0), x.dim(1), a.operands[1].dim(0), a.results[0].f());
}
void Rotary(const A& a) {
  ref::Rotary(a.operands[0].f(), a.Positions(1), a.operands[0].dim(0), a.Int("heads"), a.Int("head_dim"), a.Int("rot"),
              a.Float("theta"), a.results[0].f());
}
void Attention(const A& a) {
  ref::KvCacheWrite(a.operands[1].f(), a.operands[2].f(), a.slot_mapping, a.operands[1].dim(0), a.kv);
  ref::PagedAttention(a.operands[0].f(), a.Int("heads"), a.kv, a.seqs, a.results[0].f());
}
void Add(const A& a) { ref::Add(a.operands[0].f(), a.operands[1].f(), a.results[0].numel(), a.results[0].f()); }
void Mul(const A& a) { ref::Mul(a.operands[0].f(), a.operands[1].f(), a.results[0].numel(), a.results[0].f()); }
void Silu(const A& a) { ref::Silu(a.operands[0].f(), a.results[0].numel(), a.results[0].f()); }
void Slice(const A& a) {
  const ColumnSlice s = AsColumnSlice(a.operands[0], a.Int("axis"), a.Int("start"), a.Int("size"));
  ref::SliceColumns(a.operands[0].f(), s.rows, s.cols, s.start, s.size, a.results[0].f());
}
void GatherRows(const A& a) {
  ref::GatherRows(a.operands[0].f(), a.operands[1].i(), a.operands[1].dim(0), a.operands[0].dim(1), a.results[0].f());
}
void Argmax(const A& a) {
  ref::Argmax(a.operands[0].f(), a.operands[0].dim(0), a.operands[0].dim(1), a.results[0].i());
}
void ScatterRows(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::ScatterRows(x.f(), x.dim(0), a.operands[1].f(), a.operands[2].i(), a.operands[2].dim(0), x.dim(1),
                   a.results[0].f());
}
void LayerNorm(const A& a) {
  const CpuTensor& x = a.operands[0];
  const int64_t n = x.dims.back();
  ref::LayerNorm(x.f(), a.operands[1].f(), a.operands[2].f(), x.numel() / n, n, a.Float("eps"), a.results[0].f());
}
void Gelu(const A& a) { ref::Gelu(a.operands[0].f(), a.results[0].numel(), a.results[0].f()); }
void VisionPosEmbed(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::VisionPosEmbed(x.f(), a.operands[1].f(), a.Int("side"), a.operands[2].i(), x.dim(0), x.dim(1), a.results[0].f());
}
void VisionRotary(const A& a) {
  ref::VisionRotary(a.operands[0].f(), a.operands[1].i(), a.operands[0].dim(0), a.Int("heads"), a.Int("head_dim"),
                    a.Float("theta"), a.results[0].f());
}
void SegmentAttention(const A& a) {
  ref::SegmentAttention(a.operands[0].f(), a.operands[1].f(), a.operands[2].f(), a.operands[3].i(),
                        a.operands[3].dim(0) - 1, a.Int("heads"), a.Int("head_dim"), a.results[0].f());
}
// (qkv [P, 3 heads d], patch_pos): q's and k's heads rotated, v copied unless in place.
void VisionQkvRotary(const A& a) {
  const CpuTensor& qkv = a.operands[0];
  const int64_t rows = qkv.dim(0), width = qkv.dim(1), heads = a.Int("heads"), d = a.Int("head_dim");
  float* out = a.results[0].f();
  if (out != qkv.f()) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(qkv.f() + r * width + 2 * heads * d, qkv.f() + (r + 1) * width, out + r * width + 2 * heads * d);
    }
  }
  ref::VisionRotaryRows(qkv.f(), width, a.operands[1].i(), rows, 2 * heads, d, a.Float("theta"), out, width);
}
void PackedSegmentAttention(const A& a) {
  const CpuTensor& qkv = a.operands[0];
  const int64_t width = a.Int("heads") * a.Int("head_dim");
  ref::SegmentAttention(qkv.f(), qkv.f() + width, qkv.f() + 2 * width, a.operands[1].i(), a.operands[1].dim(0) - 1,
                        a.Int("heads"), a.Int("head_dim"), a.results[0].f(), 3 * width);
}
void MergeRows(const A& a) {
  const CpuTensor& x = a.operands[0];
  const int64_t group = a.Int("group");
  if (x.dim(0) != a.results[0].dim(0) * group) {
    a.status = absl::InvalidArgumentError("merge_rows: the rows do not make whole groups");
    return;
  }
  ref::MergeRows(x.f(), x.dim(0), x.dim(1), group, a.results[0].f());
}

void KvCacheWrite(const A& a) {
  ref::KvCacheWrite(a.operands[0].f(), a.operands[1].f(), a.operands[2].i(), a.operands[0].dim(0), a.kv);
}
void PagedAttention(const A& a) { ref::PagedAttention(a.operands[0].f(), a.Int("heads"), a.kv, a.seqs, a.results[0].f()); }

// (x, norm weight, W, positions, slot mapping, kv, bias?) -> q; k and v go to the cache.
void NormQkvRopeKvWrite(const A& a) {
  const CpuTensor& x = a.operands[0];
  const int64_t tokens = x.dim(0), kv_width = a.Int("kv_heads") * a.Int("head_dim");
  std::vector<float> k(tokens * kv_width), v(tokens * kv_width);
  ref::NormQkvRope(x.f(), a.operands[1].f(), a.operands[2].f(), a.Optional(6), a.Positions(3), tokens, x.dim(1),
                   a.Float("eps"), a.Int("heads"), a.Int("kv_heads"), a.Int("head_dim"), a.Int("rot"), a.Float("theta"),
                   a.results[0].f(), k.data(), v.data(), a.input_quant);
  ref::KvCacheWrite(k.data(), v.data(), a.operands[4].i(), tokens, a.kv);
}
void NormGateUpSilu(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::NormGateUpSilu(x.f(), a.operands[1].f(), a.operands[2].f(), x.dim(0), x.dim(1), a.results[0].dim(1),
                      a.Float("eps"), a.results[0].f(), a.input_quant);
}
void LinearResidual(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::LinearResidual(x.f(), a.operands[1].f(), a.operands[2].f(), x.dim(0), x.dim(1), a.operands[1].dim(0),
                      a.results[0].f(), a.input_quant);
}
void RmsNormResidual(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::RmsNormResidual(x.f(), a.operands[1].f(), a.operands[2].f(), x.dim(0), x.dim(1), a.Float("eps"),
                       a.results[0].f());
}
// (residual, norm weight, W, y, post-norm weight) -> (norm_gate_up_silu of h, h) with
// h = residual + rms_norm(y): the two steps it folds, in order, h rounded between them as a bf16
// plan stores it, so the answer is the unfused steps' bit for bit.
void ResidualNormGateUpSilu(const A& a) {
  const CpuTensor& y = a.operands[3];
  float* h = a.results[1].f();
  ref::RmsNormResidual(y.f(), a.operands[4].f(), a.operands[0].f(), y.dim(0), y.dim(1), a.Float("residual_eps"), h);
  if (a.bf16_storage) {
    for (int64_t i = 0; i < y.numel(); ++i) h[i] = RoundToBF16(h[i]);
  }
  ref::NormGateUpSilu(h, a.operands[1].f(), a.operands[2].f(), y.dim(0), y.dim(1), a.results[0].dim(1), a.Float("eps"),
                      a.results[0].f(), a.input_quant);
}
void AddRmsNorm(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::AddRmsNorm(x.f(), a.operands[1].f(), a.operands[2].f(), x.dim(0), x.dim(1), a.Float("eps"), a.results[0].f(),
                  a.results[1].f());
}
void NormLinear(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::NormLinear(x.f(), a.operands[1].f(), a.operands[2].f(), x.dim(0), x.dim(1), a.operands[2].dim(0),
                  a.Float("eps"), a.results[0].f(), a.input_quant);
}

// Collectives: the CPU backend holds everything as float, so they run in f32
// whatever the plan's dtype (its bf16 emulation rounds the result afterwards).
// Without a communicator the group is this rank alone.
absl::Status SumOverRanks(const A& a, float* data, int64_t n) {
  if (a.comm == nullptr) return absl::OkStatus();
  return a.comm->AllReduceSum(data, n, ir::DType::kF32, nullptr);
}
void AllReduce(const A& a) {
  std::copy(a.operands[0].f(), a.operands[0].f() + a.results[0].numel(), a.results[0].f());
  a.status = SumOverRanks(a, a.results[0].f(), a.results[0].numel());
}
void AllGather(const A& a) {
  const CpuTensor& x = a.operands[0];
  const int parts = static_cast<int>(a.Int("parts"));
  if ((a.comm == nullptr ? 1 : a.comm->size()) != parts) {
    a.status = absl::InvalidArgumentError("all_gather: the group's size differs from the step's parts");
    return;
  }
  std::vector<float> rank_major(static_cast<size_t>(x.numel() * parts));
  if (a.comm == nullptr) {
    std::copy(x.f(), x.f() + x.numel(), rank_major.data());
  } else {
    a.status = a.comm->AllGather(x.f(), rank_major.data(), x.numel(), ir::DType::kF32, nullptr);
    if (!a.status.ok()) return;
  }
  ref::InterleaveColumns(rank_major.data(), parts, x.dim(0), x.dim(1), a.results[0].f());
}
// Operand 0 summed over the ranks, in a copy (the operand stays as it is).
std::vector<float> Summed(const A& a) {
  const CpuTensor& x = a.operands[0];
  std::vector<float> sum(x.f(), x.f() + x.numel());
  a.status = SumOverRanks(a, sum.data(), x.numel());
  return sum;
}
void AllReduceResidual(const A& a) {
  ref::Add(a.operands[1].f(), Summed(a).data(), a.results[0].numel(), a.results[0].f());
}
void AllReduceNormResidual(const A& a) {
  const CpuTensor& x = a.operands[0];
  ref::RmsNormResidual(Summed(a).data(), a.operands[1].f(), a.operands[2].f(), x.dim(0), x.dim(1), a.Float("eps"),
                       a.results[0].f());
}

struct Row {
  ir::OpId op;
  CpuKernel kernel;
};

using ir::OpId;
constexpr std::array<Row, ir::kOpCount> kKernels = {{
    {OpId::k_embedding, Embedding},
    {OpId::k_rms_norm, RmsNorm},
    {OpId::k_linear, Linear},
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
static_assert(ir::RowsCoverAllOps(kKernels), "every op needs a CPU kernel, in OpId order");

}  // namespace

CpuKernel GetCpuKernel(ir::OpId op) { return kKernels[static_cast<size_t>(op)].kernel; }

}  // namespace ag::runtime
