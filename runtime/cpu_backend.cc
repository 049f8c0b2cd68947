#include "runtime/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ref/half.h"
#include "kernels/ref/quant.h"
#include "ir/status_macros.h"
#include "runtime/cpu_kernels.h"
#include "runtime/memory_check.h"
#include "runtime/weights.h"

namespace ag::runtime {
namespace {

void RoundAllToBF16(float* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) data[i] = RoundToBF16(data[i]);
}

}  // namespace

absl::Status CpuBackend::Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) {
  RETURN_IF_ERROR(compiler::ValidatePlan(plan));
  if (plan.dtype != ir::DType::kF32 && plan.dtype != ir::DType::kBF16) {
    return absl::UnimplementedError(absl::StrCat("the CPU backend runs f32 and bf16 plans, not ",
                                                 ir::DTypeName(plan.dtype)));
  }
  if (kv_blocks <= 0) return absl::InvalidArgumentError("the KV cache needs at least one block");
  ASSIGN_OR_RETURN(const RankInfo rank, CheckRank(plan, comm_));
  // Everything is held as float, whatever the plan's dtype.
  const StorageLayout layout{4, 4, 4, ir::DTypeSize(plan.dtype)};
  // The ranks of a tensor-parallel group share this process's host: each may use its share.
  RETURN_IF_ERROR(CheckPlanFits(plan, kv_blocks, layout, 0, HostMemoryAvailable() / rank.tp,
                                rank.tp == 1 ? "host memory" : absl::StrCat("host memory (1/", rank.tp, " per rank)")));
  plan_ = &plan;
  element_bytes_ = ir::DTypeSize(plan.dtype);
  kv_blocks_ = kv_blocks;
  arenas_.clear();
  for (const compiler::Program& program : plan.programs) {
    arenas_.emplace_back(static_cast<size_t>(program.arena_bytes / element_bytes_), 0.0f);
  }
  weights_.clear();
  for (const compiler::WeightEntry& entry : plan.weights) {
    std::vector<float> w(static_cast<size_t>(entry.NumElements()));
    RETURN_IF_ERROR(FillStored(entry, weights, rank, plan.dtype, w.data()));
    weights_.push_back(std::move(w));
  }
  ASSIGN_OR_RETURN(kv_scales_, ReadStaticKvScales(plan, weights, rank));
  const compiler::KvGeometry& kv = plan.kv;
  kv_.assign(static_cast<size_t>(kv.num_layers),
             std::vector<float>(static_cast<size_t>(2 * kv_blocks * kv.block_size * kv.kv_heads * kv.head_dim)));
  return absl::OkStatus();
}

absl::Status CpuBackend::Execute(const StepBatch& batch) { return Run(0, batch, nullptr); }

absl::Status CpuBackend::RunProgram(absl::string_view name, const StepBatch& batch, absl::string_view output,
                                    UninitializedVector<float>* out) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("run before Load");
  for (size_t p = 0; p < plan_->programs.size(); ++p) {
    const compiler::Program& program = plan_->programs[p];
    if (program.name != name) continue;
    RETURN_IF_ERROR(Run(p, batch, nullptr));
    const int index = program.FindOutput(output);
    if (index < 0) return absl::NotFoundError(absl::StrCat(name, " has no output ", output));
    ASSIGN_OR_RETURN(const int64_t elements, program.outputs[index].type.NumElements(bindings_));
    const float* data = static_cast<const float*>(ArenaPointer(p, program.outputs[index].index));
    out->resize(static_cast<size_t>(elements));
    std::copy(data, data + elements, out->data());
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("the plan has no program ", name));
}

absl::StatusOr<std::vector<double>> CpuBackend::ProfileExecute(const StepBatch& batch) {
  std::vector<double> us;
  RETURN_IF_ERROR(Run(0, batch, &us));
  return us;
}

absl::Status CpuBackend::Run(size_t index, const StepBatch& batch, std::vector<double>* step_us) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("Execute before Load");
  const compiler::Plan& plan = *plan_;
  const compiler::Program& program = plan.programs[index];
  bindings_ = batch.Bindings(kv_blocks_);
  for (const auto& [symbol, bound] : program.bounds) {
    if (bindings_.at(symbol) > bound) {
      return absl::InvalidArgumentError(absl::StrCat("batch exceeds the plan's limits (", symbol, " = ",
                                                     bindings_.at(symbol), " > ", bound, ")"));
    }
  }
  // Float inputs in the plan's storage (bf16 plans round them, as a bf16 device holds them).
  float_inputs_.assign(program.inputs.size(), {});
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    const std::optional<HostInput> in = batch.Input(program.inputs[i].name);
    if (!in || in->dtype != ir::DType::kF32) continue;
    float_inputs_[i].resize(static_cast<size_t>(in->elements));
    in->floats->CopyTo(float_inputs_[i].data());
    if (plan.dtype == ir::DType::kBF16) RoundAllToBF16(float_inputs_[i].data(), in->elements);
  }
  const compiler::KvGeometry& geo = plan.kv;
  const int64_t pool = kv_blocks_ * geo.block_size * geo.kv_heads * geo.head_dim;
  const bool bf16 = plan.dtype == ir::DType::kBF16;
  const ref::SeqBatch seqs{batch.seq_offsets.data(), batch.context_lens.data(), batch.block_tables.data(),
                           batch.num_seqs, batch.max_blocks};

  auto resolve = [&](const compiler::PlanTensor& t) -> absl::StatusOr<CpuTensor> {
    CpuTensor out;
    for (const ir::Dim& d : t.type.shape) {
      ASSIGN_OR_RETURN(int64_t v, d.Resolve(bindings_));
      out.dims.push_back(v);
    }
    switch (t.kind) {
      case compiler::TensorKind::kArena:
        out.data = ArenaPointer(index, t.index);
        break;
      case compiler::TensorKind::kWeight:
        out.data = weights_[t.index].data();
        break;
      case compiler::TensorKind::kInput: {
        const std::string& name = program.inputs[t.index].name;
        const std::optional<HostInput> in = batch.Input(name);
        if (!in || in->elements != out.numel() || (in->dtype == ir::DType::kI32) != (t.type.dtype == ir::DType::kI32)) {
          return absl::InvalidArgumentError(absl::StrCat("runtime input ", name, " has the wrong size"));
        }
        out.data = in->dtype == ir::DType::kI32 ? static_cast<void*>(const_cast<int32_t*>(in->ints))
                                                 : static_cast<void*>(float_inputs_[t.index].data());
        break;
      }
      case compiler::TensorKind::kState:
        out.data = kv_[t.index].data();
        break;
    }
    return out;
  };

  if (step_us != nullptr) step_us->clear();
  for (const compiler::PlanStep& step : program.steps) {
    const auto start = std::chrono::steady_clock::now();
    CpuStepArgs args;
    args.step = &step;
    args.seqs = seqs;
    args.slot_mapping = batch.slot_mapping.data();
    args.comm = comm_;
    args.bf16_storage = bf16;
    switch (compiler::StepInputQuant(*plan_, step)) {
      case ir::ActQuant::kNone:
        break;
      case ir::ActQuant::kFp8:
        args.input_quant = ref::InputQuant::kFp8;
        break;
      case ir::ActQuant::kInt8:
        args.input_quant = ref::InputQuant::kInt8;
        break;
    }
    int state_layer = -1;
    for (const compiler::PlanTensor& t : step.operands) {
      ASSIGN_OR_RETURN(CpuTensor tensor, resolve(t));
      if (t.kind == compiler::TensorKind::kState) {
        state_layer = static_cast<int>(t.index);
        args.kv = {tensor.f(), tensor.f() + pool, kv_blocks_, geo.block_size, geo.kv_heads, geo.head_dim};
      }
      args.operands.push_back(std::move(tensor));
    }
    for (const compiler::PlanTensor& t : step.results) {
      ASSIGN_OR_RETURN(CpuTensor tensor, resolve(t));
      args.results.push_back(std::move(tensor));
    }
    GetCpuKernel(step.kernel)(args);
    if (!args.status.ok()) return args.status;
    if (bf16) {
      // bf16 storage: round what the step stored.
      for (size_t i = 0; i < step.results.size(); ++i) {
        if (ir::IsFloat(step.results[i].type.dtype)) RoundAllToBF16(args.results[i].f(), args.results[i].numel());
      }
    }
    if (state_layer >= 0 && ir::GetOpInfo(step.kernel).Has(ir::kSideEffect) && (bf16 || geo.quantized())) {
      // The cache's storage: what the step wrote comes back rounded to bf16, or
      // through an 8-bit code and its (token, KV head) scale, from the fp32 values.
      const int64_t width = geo.kv_heads * geo.head_dim;
      for (int64_t t = 0; t < batch.num_tokens; ++t) {
        if (batch.slot_mapping[t] < 0) continue;
        for (int which = 0; which < 2; ++which) {
          float* row = (which == 0 ? args.kv.k : args.kv.v) + batch.slot_mapping[t] * width;
          const bool fp8 = geo.dtype == ir::DType::kF8E4M3;
          if (geo.static_scales()) {
            ref::RoundTripKvRowsWithScale(row, geo.kv_heads, geo.head_dim, fp8, kv_scales_[2 * state_layer + which]);
          } else if (geo.quantized()) {
            ref::RoundTripKvRows(row, geo.kv_heads, geo.head_dim, fp8);
          } else {
            RoundAllToBF16(row, width);
          }
        }
      }
    }
    if (step_us != nullptr) {
      step_us->push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CpuBackend::TimeExecute(const StepBatch& batch, int warmup, int iterations) {
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(Execute(batch));
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(Execute(batch));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return ms;
}

absl::Status CpuBackend::ReadOutput(absl::string_view name, int64_t elements, void* out, size_t element_size) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("read before Load");
  const compiler::Program& decoder = plan_->decoder();
  const int index = decoder.FindOutput(name);
  if (index < 0) return absl::NotFoundError(absl::StrCat("plan has no output ", name));
  std::memcpy(out, ArenaPointer(0, decoder.outputs[index].index), static_cast<size_t>(elements) * element_size);
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadLogits(int64_t rows, std::vector<float>* out) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("read before Load");
  out->resize(static_cast<size_t>(rows * plan_->model.vocab_size));
  return ReadOutput("logits", static_cast<int64_t>(out->size()), out->data(), sizeof(float));
}

absl::Status CpuBackend::ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("read before Load");
  const int index = plan_->decoder().FindOutput("logits");
  if (index < 0) return absl::NotFoundError("plan has no output logits");
  const int64_t vocab = plan_->model.vocab_size;
  out->assign(static_cast<size_t>(rows * vocab), std::numeric_limits<float>::quiet_NaN());
  const float* logits = static_cast<const float*>(ArenaPointer(0, plan_->decoder().outputs[index].index));
  for (const int64_t row : wanted) {
    if (row < 0 || row >= rows) return absl::InvalidArgumentError("no such logits row");
    std::memcpy(out->data() + row * vocab, logits + row * vocab, static_cast<size_t>(vocab) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("sample before Load");
  const int64_t vocab = plan_->model.vocab_size;
  int64_t most = 0;
  for (const RowSampling& r : rows) {
    if (r.row < 0) return absl::InvalidArgumentError("no such logits row");
    most = std::max(most, r.row + 1);
  }
  std::vector<float> logits;
  RETURN_IF_ERROR(LogitsUpTo(most, &logits));
  out->clear();
  std::vector<float> penalized;
  for (const RowSampling& r : rows) {
    if (!r.allowed.empty() && r.allowed.size() != AllowedWords(vocab)) {
      return absl::InvalidArgumentError("a row's mask is not a bit an id of the vocabulary");
    }
    const float* row = logits.data() + r.row * vocab;
    if (!r.penalties.empty() || !r.allowed.empty()) {
      penalized.assign(row, row + vocab);
      ref::ApplyPenalties(penalized.data(), vocab, r.penalties);
      for (int64_t i = 0; i < vocab && !r.allowed.empty(); ++i) {
        if (!IsAllowed(r.allowed, i)) penalized[static_cast<size_t>(i)] = -INFINITY;
      }
      row = penalized.data();
    }
    out->push_back(ref::SampleFiltered(row, vocab, r.params));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::LogitsUpTo(int64_t rows, std::vector<float>* logits) {
  const auto bound = bindings_.find("R");
  if (rows > (bound == bindings_.end() ? 0 : bound->second)) return absl::InvalidArgumentError("no such logits row");
  return ReadLogits(rows, logits);
}

absl::Status CpuBackend::RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("logprobs before Load");
  const int64_t vocab = plan_->model.vocab_size;
  int64_t most = 0;
  for (const LogprobRequest& r : rows) {
    if (r.row < 0 || r.top < 0 || r.top > kMaxTopLogprobs) return absl::InvalidArgumentError("bad logprobs request");
    most = std::max(most, r.row + 1);
  }
  std::vector<float> logits;
  RETURN_IF_ERROR(LogitsUpTo(most, &logits));
  out->clear();
  for (const LogprobRequest& r : rows) {
    TokenLogprobs t;
    t.logprob = ref::LogProbs(logits.data() + r.row * vocab, vocab, r.vocab_limit, r.token, r.top, &t.top_ids,
                              &t.top_logprobs);
    out->push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadNextTokens(int64_t rows, std::vector<int32_t>* out) {
  out->resize(static_cast<size_t>(rows));
  return ReadOutput("next_tokens", rows, out->data(), sizeof(int32_t));
}

}  // namespace ag::runtime
