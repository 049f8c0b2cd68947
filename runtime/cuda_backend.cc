#include "runtime/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <array>
#include <memory>
#include <optional>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/summary.h"
#include "ir/status_macros.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/quant_linear.cuh"
#include "kernels/cuda/vocab.cuh"
#include "kernels/ref/half.h"
#include "kernels/ref/parallel.h"
#include "runtime/cuda_backend_impl.h"
#include "runtime/cuda_buffers.h"
#include "runtime/cuda_step.h"
#include "runtime/lru_cache.h"
#include "runtime/memory_check.h"
#include "runtime/quant_storage.h"
#include "runtime/step_profile.h"
#include "runtime/weights.h"

namespace ag::runtime {
namespace {

// Steps with at most this many tokens are replayed from CUDA graphs (decode).
constexpr int64_t kGraphMaxTokens = 64;

// Where each runtime input of `program` lives in its inputs buffer, sized for
// `bounds`: int32 indices, float data as bf16 (the plan's storage).
absl::StatusOr<std::map<std::string, size_t>> InputLayout(const compiler::Program& program,
                                                          const ir::SymbolBindings& bounds, size_t* total) {
  std::map<std::string, size_t> offsets;
  size_t offset = 0;
  for (const compiler::PlanInput& in : program.inputs) {
    ASSIGN_OR_RETURN(const int64_t elements, in.type.NumElements(bounds));
    offsets[in.name] = offset;
    offset += Round256(static_cast<size_t>(elements) * (in.type.dtype == ir::DType::kI32 ? 4 : 2));
  }
  *total = offset;
  return offsets;
}

// The decoder's step inputs hold this one beyond the plan's (see EnsureCapacity).
constexpr char kRowSequences[] = "row_seqs";

// Copies the batch's input `name` to `dst` in device storage (float data rounded to bf16).
void StageInput(const StepBatch& batch, const std::string& name, char* dst) {
  const std::optional<HostInput> in = batch.Input(name);
  if (!in || in->elements == 0) return;
  if (in->dtype == ir::DType::kI32) {
    std::memcpy(dst, in->ints, static_cast<size_t>(in->elements) * 4);
    return;
  }
  in->floats->CopyToBF16(reinterpret_cast<uint16_t*>(dst));
}

// Every input holds exactly the elements its type gives for the batch (no more than the buffer holds).
absl::Status CheckInputSizes(const compiler::Program& program, const StepBatch& batch, int64_t kv_blocks) {
  const ir::SymbolBindings bindings = batch.Bindings(kv_blocks);
  for (const compiler::PlanInput& in : program.inputs) {
    ASSIGN_OR_RETURN(const int64_t want, in.type.NumElements(bindings));
    const std::optional<HostInput> have = batch.Input(in.name);
    if (!have || have->elements != want) {
      return absl::InvalidArgumentError(absl::StrCat("runtime input ", in.name, " has the wrong size"));
    }
  }
  return absl::OkStatus();
}

int64_t NextPowerOfTwo(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

namespace internal {


absl::Status CudaBackend::UploadWeight(const compiler::WeightEntry& entry, const WeightSource& source, bool interleave,
                                       void* dst) {
  const int64_t n = entry.NumElements();
  const int64_t rows = entry.shape[0];
  const size_t row_bytes = static_cast<size_t>(n / rows) * 2;
  // The contents, in checkpoint row order, somewhere the copy below can read them.
  const void* src = nullptr;
  // cudaMemcpyDefault: dst may be mapped host memory (an embedding table on the host), src device or host.
  const cudaMemcpyKind kind = cudaMemcpyDefault;
  DeviceBuffer device_tmp;
  UninitializedVector<uint16_t> host;  // written by the parallel loop below first
  if (const auto* random = dynamic_cast<const RandomWeights*>(&source)) {
    float center, half_width;
    RandomWeights::Distribution(entry, &center, &half_width);
    void* target = dst;
    if (interleave) {
      ASSIGN_OR_RETURN(device_tmp, DeviceAlloc(static_cast<size_t>(n) * 2, entry.name.c_str()));
      target = device_tmp.get();
    }
    CUDA_RETURN_IF_ERROR(cuda::LaunchFillRandom(static_cast<__nv_bfloat16*>(target), n, random->seed(),
                                                RankStream(entry.name, rank_), center, half_width, stream_));
    if (!interleave) return absl::OkStatus();
    src = device_tmp.get();
  } else {
    std::vector<float> values(static_cast<size_t>(n));
    RETURN_IF_ERROR(source.Fill(entry, rank_, values.data()));
    host.resize(values.size());
    uint16_t* bits = host.data();
    ParallelFor(n, kMinCopyPerThread, [&](int64_t begin, int64_t end) {
      FloatsToBF16(values.data() + begin, end - begin, bits + begin);
    });
    src = host.data();
  }
  if (!interleave) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 2, kind, stream_));
  } else {
    // Gate rows go to even rows, up rows to odd rows (kernels/cuda/linear.cuh, kSiluMul).
    const int64_t half = rows / 2;
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(d, 2 * row_bytes, s, row_bytes, row_bytes, half, kind, stream_));
    CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(d + row_bytes, 2 * row_bytes, s + half * row_bytes, row_bytes, row_bytes,
                                           half, kind, stream_));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // the host or temporary source goes out of scope
  return absl::OkStatus();
}

absl::StatusOr<CudaBackend::QuantWeight> CudaBackend::UploadQuantWeight(const compiler::WeightEntry& entry,
                                                                          const WeightSource& source, bool interleave) {
  ASSIGN_OR_RETURN(std::vector<HostQuantSegment> host, PrepareQuantSegments(entry, source, rank_, interleave));
  QuantWeight out;
  auto upload = [&](const void* data, size_t bytes) -> absl::StatusOr<const void*> {
    if (bytes == 0) return nullptr;
    ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceAlloc(bytes, entry.name.c_str()));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(buffer.get(), data, bytes, cudaMemcpyHostToDevice));
    out.buffers.push_back(std::move(buffer));
    return out.buffers.back().get();
  };
  for (const HostQuantSegment& h : host) {
    cuda::QuantSegment s;
    s.code = h.code;
    s.group = h.group;
    s.group_offset = h.group_offset;
    s.n_begin = h.n_begin;
    s.n = h.rows;
    ASSIGN_OR_RETURN(const void* codes, upload(h.words.data(), h.words.size() * sizeof(uint32_t)));
    s.codes = static_cast<const uint32_t*>(codes);
    if (h.group == 0) {
      ASSIGN_OR_RETURN(s.scales, upload(h.row_scales.data(), h.row_scales.size() * sizeof(float)));
    } else {
      s.scale_type = h.scale_type;
      ASSIGN_OR_RETURN(s.scales, upload(h.group_scales.data(), h.group_scales.size()));
    }
    ASSIGN_OR_RETURN(const void* zeros, upload(h.zeros.data(), h.zeros.size()));
    s.zeros = static_cast<const uint8_t*>(zeros);
    ASSIGN_OR_RETURN(const void* order, upload(h.input_order.data(), h.input_order.size() * sizeof(int32_t)));
    s.input_order = static_cast<const int32_t*>(order);
    if (h.cols != h.inputs) s.stored_k = h.cols;  // a rank's act-order groups, padded
    out.segments.push_back(s);
  }
  return out;
}

namespace {

// Calls `visit` for every step of every program whose matrix operand is a weight (its index).
absl::Status ForEachWeightMatrix(
    const compiler::Plan& plan,
    const std::function<absl::Status(const compiler::Program&, const compiler::PlanStep&, int64_t)>& visit) {
  for (const compiler::Program& program : plan.programs) {
    for (const compiler::PlanStep& step : program.steps) {
      const int matrix = ir::GetOpInfo(step.kernel).matrix_operand;
      if (matrix < 0 || static_cast<size_t>(matrix) >= step.operands.size()) continue;
      const compiler::PlanTensor& w = step.operands[matrix];
      if (w.kind == compiler::TensorKind::kWeight) RETURN_IF_ERROR(visit(program, step, w.index));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<size_t> CudaBackend::DequantScratchBytes(const compiler::Plan& plan, bool uploaded) const {
  size_t bytes = 0;
  RETURN_IF_ERROR(ForEachWeightMatrix(plan, [&](const compiler::Program& program, const compiler::PlanStep& step,
                                                int64_t weight) -> absl::Status {
    if (!plan.weights[weight].quantized()) return absl::OkStatus();
    // Logit rows (R) are the sampled rows, few but for prompt logprobs: the LM head (the largest
    // matrix: 1.24 GB in bf16 for GLM-4-9B) stays on the codes kernel, 8 rows a block.
    const ir::Dim& rows_dim = step.operands[0].type.shape[0];
    if (rows_dim.symbol() == "R") return absl::OkStatus();
    ASSIGN_OR_RETURN(const int64_t rows, rows_dim.Resolve(program.bounds));
    ASSIGN_OR_RETURN(const int64_t k, step.operands[0].type.shape[1].Resolve(program.bounds));
    if (uploaded && absl::c_all_of(quant_[weight].segments,
                                   [k](const cuda::QuantSegment& s) { return cuda::QuantGemmTakes(s, k); })) {
      return absl::OkStatus();  // dequantized in the GEMM's loads
    }
    if (rows > cuda::kQuantLinearMaxRows) {
      bytes = std::max(bytes, static_cast<size_t>(plan.weights[weight].NumElements()) * 2);
    }
    return absl::OkStatus();
  }));
  return bytes;
}

namespace {

cuda::KvCode KvCodeOf(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF8E4M3:
      return cuda::KvCode::kFp8;
    case ir::DType::kI8:
      return cuda::KvCode::kInt8;
    default:
      return cuda::KvCode::kBF16;
  }
}

// One layer of the cache: K values, V values, then for an 8-bit cache the K scales and the V
// scales ([slots, kv_heads] fp32 each).
int64_t KvLayerBytes(const compiler::KvGeometry& kv, int64_t blocks) {
  const int64_t slots = blocks * kv.block_size;
  return 2 * slots * kv.kv_heads * (kv.head_dim * cuda::KvCodeBytes(KvCodeOf(kv.dtype)) + (kv.quantized() ? 4 : 0));
}

cuda::PagedKv KvOfLayer(const compiler::KvGeometry& kv, int64_t blocks, char* layer) {
  const int64_t values = blocks * kv.block_size * kv.kv_heads * kv.head_dim * cuda::KvCodeBytes(KvCodeOf(kv.dtype));
  cuda::PagedKv out{layer, layer + values, kv.block_size, kv.kv_heads, kv.head_dim, KvCodeOf(kv.dtype)};
  out.slots = blocks * kv.block_size;
  if (kv.quantized()) {
    out.k_scale = reinterpret_cast<float*>(layer + 2 * values);
    out.v_scale = out.k_scale + blocks * kv.block_size * kv.kv_heads;
  }
  return out;
}

// The fused QKV step's fp32 K and V rows before an 8-bit cache takes them: [T, 2 kv_heads head_dim].
int64_t KvStagingBytes(const compiler::Plan& plan) {
  const compiler::KvGeometry& kv = plan.kv;
  return kv.quantized() ? plan.max_batch_tokens * 2 * kv.kv_heads * kv.head_dim * 4 : 0;
}

}  // namespace

absl::StatusOr<size_t> CudaBackend::OrderScratchBytes(const compiler::Plan& plan) const {
  size_t bytes = 0;
  RETURN_IF_ERROR(ForEachWeightMatrix(plan, [&](const compiler::Program& program, const compiler::PlanStep& step,
                                                int64_t weight) -> absl::Status {
    bool ordered = false;
    int64_t stored_k = 0;  // a padded act-order segment's widened x
    for (const cuda::QuantSegment& s : quant_[weight].segments) {
      ordered = ordered || s.input_order != nullptr;
      stored_k = std::max(stored_k, s.stored_k);
    }
    if (!ordered) return absl::OkStatus();
    const ir::Dim& rows_dim = step.operands[0].type.shape[0];
    ASSIGN_OR_RETURN(int64_t rows, rows_dim.Resolve(program.bounds));
    if (rows_dim.symbol() != "R") rows = std::min(rows, cuda::kQuantLinearMaxRows);  // more take the GEMM
    ASSIGN_OR_RETURN(int64_t k, step.operands[0].type.shape[1].Resolve(program.bounds));
    k = std::max(k, stored_k);
    bytes = std::max(bytes, static_cast<size_t>(rows * k) * 2);
    return absl::OkStatus();
  }));
  return bytes;
}

absl::Status CudaBackend::Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) {
  RETURN_IF_ERROR(compiler::ValidatePlan(plan));
  if (plan.dtype != ir::DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA backend runs bf16 plans; this plan is ",
                                                   ir::DTypeName(plan.dtype), " (compile with --dtype bf16)"));
  }
  if (plan.kv.dtype != ir::DType::kBF16 && !plan.kv.quantized()) {
    return absl::UnimplementedError(absl::StrCat("the CUDA backend keeps a bf16 or 8-bit KV cache, not ",
                                                 ir::DTypeName(plan.kv.dtype)));
  }
  if (kv_blocks <= 0) return absl::InvalidArgumentError("the KV cache needs at least one block");
  ASSIGN_OR_RETURN(rank_, CheckRank(plan, options_.comm));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  // bf16 (or quantized) weights, arena and KV cache; the extra covers the linear scratch, the
  // attention workspace, sized later (at most a few hundred MB at 4096 batch tokens), the
  // prefill path's dequantized weight, and what quantized weights may store beyond their format's
  // bytes (QuantStorageSlack).
  ASSIGN_OR_RETURN(const size_t dequant_bytes, DequantScratchBytes(plan, /*uploaded=*/false));
  // The sampler's penalised or masked rows (SampleRows: a float row each, kSampleRowsPerRound a round)
  // come on top; their masks (a bit an id, ~1.2 MB a round) fit the 256 MB.
  int64_t extra = plan.max_batch_tokens * plan.model.hidden_size * 16 + (int64_t{256} << 20) +
                  static_cast<int64_t>(kSampleRowsPerRound) * plan.model.vocab_size * 4 +
                  static_cast<int64_t>(dequant_bytes) + KvStagingBytes(plan);
  for (const compiler::WeightEntry& w : plan.weights) extra += QuantStorageSlack(w, plan.tp);
  const std::vector<int32_t> on_host =
      options_.embedding_on_host ? compiler::LookupOnlyWeights(plan) : std::vector<int32_t>{};
  RETURN_IF_ERROR(CheckPlanFits(plan, kv_blocks, StorageLayout{2, 2, 1, 1, /*weights_as_stored=*/true,
                                                               /*kv_as_stored=*/true, on_host},
                                extra,
                                static_cast<int64_t>(free_bytes), absl::StrCat("GPU memory on device ", options_.device)));
  if (stream_ == nullptr) CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : input_copied_) {
    if (e == nullptr) CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  DropGraphs();
  plan_ = &plan;
  kv_blocks_ = kv_blocks;
  input_blocks_capacity_ = -1;
  workspace_floats_ = 0;
  ASSIGN_OR_RETURN(arena_, DeviceAlloc(static_cast<size_t>(plan.decoder().arena_bytes), "the activation arena"));
  vision_arena_ = DeviceBuffer();
  vision_inputs_ = DeviceBuffer();
  if (const compiler::Program* vision = plan.FindProgram(compiler::kVisionProgram)) {
    ASSIGN_OR_RETURN(vision_arena_, DeviceAlloc(static_cast<size_t>(vision->arena_bytes), "the vision arena"));
    ASSIGN_OR_RETURN(vision_offsets_, InputLayout(*vision, vision->bounds, &vision_inputs_bytes_));
    ASSIGN_OR_RETURN(vision_inputs_, DeviceAlloc(vision_inputs_bytes_, "the vision inputs"));
    // One pinned buffer stages the inputs up and the output back (stream order keeps them apart).
    vision_staging_bytes_ = vision_inputs_bytes_;
    for (const compiler::PlanTensor& out : vision->outputs) {
      ASSIGN_OR_RETURN(const int64_t elements, out.type.NumElements(vision->bounds));
      vision_staging_bytes_ = std::max(vision_staging_bytes_, static_cast<size_t>(elements) * 2);
    }
    ASSIGN_OR_RETURN(vision_staging_, PinnedAlloc(vision_staging_bytes_));
  }
  const compiler::KvGeometry& kv = plan.kv;
  const size_t kv_bytes = static_cast<size_t>(kv.num_layers * KvLayerBytes(kv, kv_blocks));
  ASSIGN_OR_RETURN(kv_, DeviceAlloc(kv_bytes, "the KV cache"));
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(kv_.get(), 0, kv_bytes, stream_));
  kv_staging_ = DeviceBuffer();
  if (KvStagingBytes(plan) > 0) {
    ASSIGN_OR_RETURN(kv_staging_, DeviceAlloc(static_cast<size_t>(KvStagingBytes(plan)), "the KV staging rows"));
  }
  kv_static_scales_ = DeviceBuffer();
  ASSIGN_OR_RETURN(const std::vector<float> static_scales, ReadStaticKvScales(plan, weights, rank_));
  if (!static_scales.empty()) {
    const size_t bytes = static_scales.size() * sizeof(float);
    ASSIGN_OR_RETURN(kv_static_scales_, DeviceAlloc(bytes, "the static KV scales"));
    CUDA_RETURN_IF_ERROR(cudaMemcpy(kv_static_scales_.get(), static_scales.data(), bytes, cudaMemcpyHostToDevice));
  }

  // Gate/up weights (ir::IsGateUpOp) are stored with their rows interleaved.
  std::vector<bool> interleave(plan.weights.size(), false);
  scratch_k_ = 0;
  int64_t gather_width = 0;
  std::vector<const compiler::PlanStep*> all_steps;
  for (const compiler::Program& program : plan.programs) {
    for (const compiler::PlanStep& step : program.steps) all_steps.push_back(&step);
  }
  for (const compiler::PlanStep* s : all_steps) {
    const compiler::PlanStep& step = *s;
    if (ir::IsGateUpOp(step.kernel)) interleave[step.operands[2].index] = true;
    // The tensor-core paths (M > 1) normalise x into the scratch for the linear ops with a norm prologue.
    const bool norm_prologue = ir::IsGateUpOp(step.kernel) ||
                               step.kernel == ir::OpId::k_norm_qkv_rope_kv_write ||
                               step.kernel == ir::OpId::k_norm_linear;
    // So do W8A8 weights' steps: x rounded through 8-bit codes (normalised first where it has a norm).
    if (norm_prologue || compiler::StepInputQuant(plan, step) != ir::ActQuant::kNone) {
      scratch_k_ = std::max(scratch_k_, step.operands[0].type.shape[1].offset());
    }
    // An all_gather of more than one row lands rank-major in the scratch, then moves into columns.
    if (step.kernel == ir::OpId::k_all_gather) gather_width = std::max(gather_width, step.results[0].type.shape[1].offset());
  }
  for (const compiler::PlanStep* s : all_steps) {
    const compiler::PlanStep& step = *s;
    for (size_t i = 0; i < step.operands.size(); ++i) {
      const compiler::PlanTensor& t = step.operands[i];
      const bool as_gate_up = ir::IsGateUpOp(step.kernel) && i == 2;
      if (t.kind == compiler::TensorKind::kWeight && interleave[t.index] && !as_gate_up) {
        return absl::UnimplementedError(absl::StrCat("weight ", plan.weights[t.index].name,
                                                     " feeds a gate/up projection and another step"));
      }
    }
  }
  weights_.clear();
  quant_.clear();
  host_weights_.clear();
  weight_data_.assign(plan.weights.size(), nullptr);
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const compiler::WeightEntry& entry = plan.weights[i];
    if (absl::c_linear_search(on_host, static_cast<int32_t>(i)) && !entry.quantized()) {
      ASSIGN_OR_RETURN(PinnedBuffer table, MappedHostAlloc(static_cast<size_t>(entry.NumElements()) * 2, entry.name));
      void* mapped = nullptr;
      CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&mapped, table.get(), 0));
      RETURN_IF_ERROR(UploadWeight(entry, weights, interleave[i], mapped));
      weight_data_[i] = mapped;
      host_weights_.push_back(std::move(table));
      weights_.emplace_back();
      quant_.emplace_back();
      continue;
    }
    if (absl::c_linear_search(plan.kv.scale_weights, static_cast<int32_t>(i))) {  // in kv_static_scales_, fp32
      weights_.emplace_back();
      quant_.emplace_back();
      continue;
    }
    if (entry.quantized()) {
      ASSIGN_OR_RETURN(QuantWeight q, UploadQuantWeight(entry, weights, interleave[i]));
      quant_.push_back(std::move(q));
      weights_.emplace_back();
      continue;
    }
    ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceAlloc(static_cast<size_t>(entry.NumElements()) * 2, entry.name.c_str()));
    RETURN_IF_ERROR(UploadWeight(entry, weights, interleave[i], buffer.get()));
    weight_data_[i] = buffer.get();
    weights_.push_back(std::move(buffer));
    quant_.emplace_back();
  }
  dequant_scratch_ = DeviceBuffer();
  ASSIGN_OR_RETURN(dequant_bytes_, DequantScratchBytes(plan, /*uploaded=*/true));
  if (dequant_bytes_ > 0) {
    ASSIGN_OR_RETURN(dequant_scratch_, DeviceAlloc(dequant_bytes_, "the dequantized weight"));
  }
  order_scratch_ = DeviceBuffer();
  ASSIGN_OR_RETURN(order_bytes_, OrderScratchBytes(plan));
  if (order_bytes_ > 0) {
    ASSIGN_OR_RETURN(order_scratch_, DeviceAlloc(order_bytes_, "the act-order inputs"));
  }
  // The norm prologue's scratch holds up to the most rows any program runs (the vision tower's patches).
  int64_t scratch_rows = plan.max_batch_tokens;
  for (const compiler::Program& program : plan.programs) {
    if (program.bounds.contains("P")) scratch_rows = std::max(scratch_rows, program.bounds.at("P"));
  }
  ASSIGN_OR_RETURN(linear_scratch_,
                   DeviceAlloc(static_cast<size_t>(scratch_rows * std::max<int64_t>(scratch_k_, 1)) * 2,
                               "the linear scratch"));
  gather_scratch_ = DeviceBuffer();
  if (gather_width > 0) {
    ASSIGN_OR_RETURN(gather_scratch_, DeviceAlloc(static_cast<size_t>(plan.max_batch_tokens * gather_width) * 2,
                                                  "the all_gather scratch"));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

void CudaBackend::DropGraphs() {
  graphs_.Clear();
  seen_.clear();
}

absl::Status CudaBackend::EnsureCapacity(const StepBatch& batch, int64_t context_bucket) {
  const compiler::Plan& plan = *plan_;
  if (batch.max_blocks > input_blocks_capacity_) {
    // Fixed capacities, so that captured graphs keep valid pointers until a batch outgrows them.
    ir::SymbolBindings bounds = plan.decoder().bounds;
    bounds["MB"] = batch.max_blocks;
    ASSIGN_OR_RETURN(input_offsets_, InputLayout(plan.decoder(), bounds, &inputs_bytes_));
    // Beside the plan's inputs, each row's sequence (StepBatch::RowSequences): attention reads it
    // instead of searching seq_offsets in every block.
    input_offsets_[kRowSequences] = inputs_bytes_;
    inputs_bytes_ += Round256(static_cast<size_t>(plan.max_batch_tokens) * 4);
    DropGraphs();
    ASSIGN_OR_RETURN(inputs_, DeviceAlloc(inputs_bytes_, "the step inputs"));
    for (cudaEvent_t e : input_copied_) CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e));  // old halves idle
    for (PinnedBuffer& half : input_staging_) {
      ASSIGN_OR_RETURN(half, PinnedAlloc(inputs_bytes_));
    }
    staging_bytes_ = static_cast<size_t>(plan.max_batch_tokens * plan.model.vocab_size) * 2;
    ASSIGN_OR_RETURN(output_staging_, PinnedAlloc(staging_bytes_));
    input_blocks_capacity_ = batch.max_blocks;
  }
  // Attention partial results, for the largest head count and width in the plan.
  int64_t floats = 0;
  for (const compiler::PlanStep& step : plan.decoder().steps) {
    if (step.kernel != ir::OpId::k_paged_attention && step.kernel != ir::OpId::k_attention) continue;
    const cuda::AttentionShape shape{plan.max_batch_tokens, *ir::GetInt(step.attrs, "heads"), context_bucket};
    floats = std::max(floats, cuda::PagedAttentionWorkspace(shape, *ir::GetInt(step.attrs, "kv_heads"),
                                                            *ir::GetInt(step.attrs, "head_dim")));
  }
  if (floats > workspace_floats_) {
    DropGraphs();
    ASSIGN_OR_RETURN(attention_workspace_, DeviceAlloc(static_cast<size_t>(floats) * 4, "the attention workspace"));
    workspace_floats_ = floats;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::UploadInputs(const StepBatch& batch) {
  // Only the copy that last read this half (two steps ago) must be done; the stream keeps running.
  const int half = input_half_;
  input_half_ ^= 1;
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(input_copied_[half]));
  auto* host = static_cast<char*>(input_staging_[half].get());
  for (const auto& [name, offset] : input_offsets_) StageInput(batch, name, host + offset);
  const std::vector<int32_t> row_seqs = batch.RowSequences();
  std::memcpy(host + input_offsets_.at(kRowSequences), row_seqs.data(), row_seqs.size() * 4);
  // Stream order puts this copy after the previous step's kernels, which read inputs_.
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(inputs_.get(), host, inputs_bytes_, cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(input_copied_[half], stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::LaunchSteps(const StepBatch& batch, int64_t context_bucket, bool nvtx,
                                      const std::vector<cudaEvent_t>* events) {
  return LaunchProgram(plan_->decoder(), arena_.get(), static_cast<char*>(inputs_.get()), input_offsets_, batch,
                       context_bucket, nvtx, events);
}

absl::Status CudaBackend::LaunchProgram(const compiler::Program& program, void* arena, char* inputs,
                                        const std::map<std::string, size_t>& offsets, const StepBatch& batch,
                                        int64_t context_bucket, bool nvtx, const std::vector<cudaEvent_t>* events) {
  const compiler::Plan& plan = *plan_;
  const ir::SymbolBindings bindings = batch.Bindings(kv_blocks_);
  const compiler::KvGeometry& geo = plan.kv;
  const int64_t layer_bytes = KvLayerBytes(geo, kv_blocks_);
  auto input = [&](const char* name) -> const int32_t* {
    const auto it = offsets.find(name);
    return it == offsets.end() ? nullptr : reinterpret_cast<const int32_t*>(inputs + it->second);
  };
  const cuda::SeqBatch seqs{input("seq_offsets"), input("context_lens"), input("block_tables"), batch.num_seqs,
                            batch.max_blocks, input(kRowSequences)};
  const int64_t decode_seqs = batch.LeadingDecodeSeqs();
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const compiler::PlanStep& step = program.steps[i];
    if (events != nullptr) CUDA_RETURN_IF_ERROR(cudaEventRecord((*events)[i], stream_));
    CudaStepArgs args;
    args.step = &step;
    args.seqs = seqs;
    args.slot_mapping = input("slot_mapping");
    args.max_context = context_bucket;
    args.decode_seqs = decode_seqs;
    args.attention_workspace = static_cast<float*>(attention_workspace_.get());
    args.linear_scratch = linear_scratch_.get();
    args.gather_scratch = gather_scratch_.get();
    args.dequant_scratch = dequant_scratch_.get();
    args.dequant_bytes = dequant_bytes_;
    args.order_scratch = order_scratch_.get();
    args.order_bytes = order_bytes_;
    args.input_quant = compiler::StepInputQuant(plan, step);
    args.comm = options_.comm;
    args.peer = options_.peer;
    args.stream = stream_;
    auto resolve = [&](const compiler::PlanTensor& t) -> absl::StatusOr<CudaTensor> {
      CudaTensor out;
      for (const ir::Dim& d : t.type.shape) {
        ASSIGN_OR_RETURN(int64_t v, d.Resolve(bindings));
        out.dims.push_back(v);
      }
      switch (t.kind) {
        case compiler::TensorKind::kArena:
          out.data = static_cast<char*>(arena) + t.index;
          break;
        case compiler::TensorKind::kWeight:
          out.data = weight_data_[t.index];
          if (!quant_[t.index].segments.empty()) args.quant = &quant_[t.index].segments;
          break;
        case compiler::TensorKind::kInput:
          out.data = inputs + offsets.at(program.inputs[t.index].name);
          break;
        case compiler::TensorKind::kState: {
          char* layer = static_cast<char*>(kv_.get()) + t.index * layer_bytes;
          args.kv = KvOfLayer(geo, kv_blocks_, layer);
          if (geo.static_scales()) args.kv.static_scales = static_cast<const float*>(kv_static_scales_.get()) + 2 * t.index;
          args.kv_staging = static_cast<float*>(kv_staging_.get());
          out.data = layer;
          break;
        }
      }
      return out;
    };
    for (const compiler::PlanTensor& t : step.operands) {
      ASSIGN_OR_RETURN(CudaTensor tensor, resolve(t));
      args.operands.push_back(std::move(tensor));
    }
    for (const compiler::PlanTensor& t : step.results) {
      ASSIGN_OR_RETURN(CudaTensor tensor, resolve(t));
      args.results.push_back(std::move(tensor));
    }
    if (nvtx) nvtxRangePushA(step.name.c_str());
    const absl::Status launched = GetCudaKernel(step.kernel)(args);
    if (nvtx) nvtxRangePop();
    RETURN_IF_ERROR(launched);
  }
  if (events != nullptr) CUDA_RETURN_IF_ERROR(cudaEventRecord(events->back(), stream_));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackend::PrepareStep(const StepBatch& batch) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("Execute before Load");
  const compiler::Plan& plan = *plan_;
  if (batch.num_tokens > plan.max_batch_tokens || batch.num_logit_rows > plan.max_batch_tokens ||
      batch.num_seqs > plan.max_seqs || batch.num_seqs <= 0) {
    return absl::InvalidArgumentError("batch exceeds the plan's limits");
  }
  int64_t longest = 1;
  for (int32_t len : batch.context_lens) longest = std::max<int64_t>(longest, len);
  const int64_t bucket = NextPowerOfTwo(std::max<int64_t>(longest, 256));
  RETURN_IF_ERROR(CheckInputSizes(plan.decoder(), batch, kv_blocks_));
  RETURN_IF_ERROR(EnsureCapacity(batch, bucket));
  RETURN_IF_ERROR(UploadInputs(batch));
  return bucket;
}

absl::Status CudaBackend::RunProgram(absl::string_view name, const StepBatch& batch, absl::string_view output,
                                     UninitializedVector<float>* out) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (plan_ == nullptr) return absl::FailedPreconditionError("run before Load");
  const compiler::Program* program = plan_->FindProgram(name);
  if (program == nullptr || program == &plan_->decoder()) {
    return absl::NotFoundError(absl::StrCat("the plan has no program ", name, " besides its decoder"));
  }
  const ir::SymbolBindings bindings = batch.Bindings(kv_blocks_);
  for (const auto& [symbol, bound] : program->bounds) {
    if (bindings.at(symbol) > bound) return absl::InvalidArgumentError(absl::StrCat(name, ": ", symbol, " over its bound"));
  }
  RETURN_IF_ERROR(CheckInputSizes(*program, batch, kv_blocks_));
  auto* host = static_cast<char*>(vision_staging_.get());
  for (const auto& [input, offset] : vision_offsets_) StageInput(batch, input, host + offset);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(vision_inputs_.get(), host, vision_inputs_bytes_, cudaMemcpyHostToDevice, stream_));
  // Eager: a vision step's shapes change with every image, and its kernels are long next to launches.
  // AUTOGLM_PROFILE_PROGRAMS=1: an event between steps, their times summed by kind onto stderr.
  std::vector<cudaEvent_t> events;
  if (ProfilePrograms()) {
    ASSIGN_OR_RETURN(events, CreateEvents(program->steps.size() + 1));
  }
  RETURN_IF_ERROR(LaunchProgram(*program, vision_arena_.get(), static_cast<char*>(vision_inputs_.get()),
                                vision_offsets_, batch, /*context_bucket=*/0, /*nvtx=*/true,
                                events.empty() ? nullptr : &events));
  if (!events.empty()) {
    ASSIGN_OR_RETURN(const std::vector<double> us, EventIntervals(events));
    PrintStepProfile(*program, us, stderr);
  }
  const int index = program->FindOutput(output);
  if (index < 0) return absl::NotFoundError(absl::StrCat(name, " has no output ", output));
  ASSIGN_OR_RETURN(const int64_t elements, program->outputs[index].type.NumElements(bindings));
  const size_t bytes = static_cast<size_t>(elements) * 2;
  if (bytes > vision_staging_bytes_) return absl::InternalError(absl::StrCat(name, ": output ", output, " over its bound"));
  // Back through pinned memory (a pageable copy runs at a fraction of the link), then widened on
  // every core into `out`, whose pages the widening touches first.
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(vision_staging_.get(), static_cast<char*>(vision_arena_.get()) + program->outputs[index].index,
                                       bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  out->resize(static_cast<size_t>(elements));
  const auto* bits = static_cast<const uint16_t*>(vision_staging_.get());
  float* values = out->data();
  ParallelFor(elements, kMinCopyPerThread,
              [&](int64_t begin, int64_t end) { BF16sToFloats(bits + begin, end - begin, values + begin); });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CudaBackend::ProfileExecute(const StepBatch& batch) {
  // Tensor-parallel ranks call from their own threads: the device is per thread.
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  ASSIGN_OR_RETURN(const int64_t bucket, PrepareStep(batch));
  ASSIGN_OR_RETURN(std::vector<cudaEvent_t> events, CreateEvents(plan_->decoder().steps.size() + 1));
  const absl::Status launched = LaunchSteps(batch, bucket, /*nvtx=*/true, &events);
  absl::StatusOr<std::vector<double>> us = EventIntervals(events);  // destroys the events either way
  RETURN_IF_ERROR(launched);
  return us;
}

absl::Status CudaBackend::Execute(const StepBatch& batch) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  ASSIGN_OR_RETURN(const int64_t bucket, PrepareStep(batch));
  const bool graph = options_.use_graphs && batch.num_tokens <= kGraphMaxTokens;
  if (!graph) return LaunchSteps(batch, bucket, /*nvtx=*/true);
  const GraphKey key{batch.num_tokens, batch.num_seqs, batch.num_logit_rows, bucket, batch.max_blocks,
                     batch.LeadingDecodeSeqs()};
  const std::string key_bytes(reinterpret_cast<const char*>(key.data()), sizeof(key));
  std::optional<GraphExec> exec = graphs_.Find(key_bytes);
  if (!exec) {
    // The first run of a shape is eager (kernel attributes get set outside capture); the second captures it.
    if (seen_.size() > 8 * kMaxGraphs) seen_.clear();
    if (seen_[key]++ == 0) return LaunchSteps(batch, bucket, /*nvtx=*/true);
    cudaGraph_t captured = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const absl::Status launched = LaunchSteps(batch, bucket, /*nvtx=*/false);
    const cudaError_t ended = cudaStreamEndCapture(stream_, &captured);
    cudaGraphExec_t instance = nullptr;
    cudaError_t instantiated = cudaErrorUnknown;
    if (launched.ok() && ended == cudaSuccess) instantiated = cudaGraphInstantiate(&instance, captured, 0);
    if (captured != nullptr) cudaGraphDestroy(captured);  // also when a launch in the capture failed
    RETURN_IF_ERROR(launched);
    CUDA_RETURN_IF_ERROR(ended);
    CUDA_RETURN_IF_ERROR(instantiated);
    exec = graphs_.Put(key_bytes, GraphExec(instance, [](cudaGraphExec_t e) { cudaGraphExecDestroy(e); }));
  }
  nvtxRangePushA("decode step (CUDA graph)");
  const cudaError_t replayed = cudaGraphLaunch(exec->get(), stream_);
  nvtxRangePop();
  CUDA_RETURN_IF_ERROR(replayed);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CudaBackend::TimeExecute(const StepBatch& batch, int warmup, int iterations) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(Execute(batch));
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<double> ms;
  absl::Status status = absl::OkStatus();
  for (int i = 0; i < iterations && status.ok(); ++i) {
    cudaEventRecord(start, stream_);
    status = Execute(batch);
    cudaEventRecord(stop, stream_);
    const cudaError_t e = cudaEventSynchronize(stop);
    if (status.ok() && e != cudaSuccess) status = absl::InternalError(cudaGetErrorString(e));
    float elapsed = 0;
    cudaEventElapsedTime(&elapsed, start, stop);
    ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  RETURN_IF_ERROR(status);
  return ms;
}

}  // namespace internal

bool CudaDeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat("no CUDA device (", cudaGetErrorString(e), ")"));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", options.device, " does not exist"));
  }
  return std::unique_ptr<Backend>(new internal::CudaBackend(options));
}

}  // namespace ag::runtime
