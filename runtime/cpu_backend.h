// The CPU backend: runs plans with the reference kernels.
//
// Everything is stored as fp32 (int32 for indices). For a bf16 plan the
// backend emulates bf16 storage: weights, every step's results and every KV
// entry written are rounded to bf16, so it computes what a bf16 device does
// up to accumulation order. Arena offsets are the plan's byte offsets divided
// by the plan's element size; a 4-byte element then occupies the scaled
// range of its 2-byte original, so buffers stay disjoint.
#ifndef AUTOGLM_RUNTIME_CPU_BACKEND_H_
#define AUTOGLM_RUNTIME_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace ag::runtime {

class CpuBackend : public Backend {
 public:
  // `sample_where_logits_are`: the engine samples through SampleRows (the CUDA
  // backend's path, with the reference rule) instead of its host sampler.
  // `comm`: this backend is one rank of a tensor-parallel group (a plan with tp > 1 needs one).
  explicit CpuBackend(bool sample_where_logits_are = false, Communicator* comm = nullptr)
      : sample_where_logits_are_(sample_where_logits_are), comm_(comm) {}
  absl::string_view name() const override { return "cpu"; }
  absl::Status Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) override;
  absl::Status Execute(const StepBatch& batch) override;
  absl::Status RunProgram(absl::string_view program, const StepBatch& batch, absl::string_view output,
                          UninitializedVector<float>* out) override;
  absl::Status ReadLogits(int64_t rows, std::vector<float>* out) override;
  // The rows not wanted are NaN: an engine that reads one it did not ask for shows it.
  absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) override;
  absl::Status ReadNextTokens(int64_t rows, std::vector<int32_t>* out) override;
  absl::Status SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) override;
  bool SamplesWhereLogitsAre() const override { return sample_where_logits_are_; }
  absl::Status RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) override;
  absl::StatusOr<std::vector<double>> TimeExecute(const StepBatch& batch, int warmup, int iterations) override;
  absl::StatusOr<std::vector<double>> ProfileExecute(const StepBatch& batch) override;

 private:
  // Runs program `program` (0: the decoder); with `step_us`, also the time of each step.
  absl::Status Run(size_t program, const StepBatch& batch, std::vector<double>* step_us);
  void* ArenaPointer(size_t program, int64_t byte_offset) {
    return arenas_[program].data() + byte_offset / element_bytes_;
  }
  absl::Status ReadOutput(absl::string_view name, int64_t elements, void* out, size_t element_size);
  // The last step's logits rows 0 .. `rows` - 1 (each below the step's row count).
  absl::Status LogitsUpTo(int64_t rows, std::vector<float>* logits);

  bool sample_where_logits_are_ = false;
  Communicator* comm_ = nullptr;
  const compiler::Plan* plan_ = nullptr;
  int64_t element_bytes_ = 4;  // the plan dtype's size: the divisor of arena offsets
  int64_t kv_blocks_ = 0;
  std::vector<std::vector<float>> arenas_;  // one per program
  std::vector<std::vector<float>> float_inputs_;  // the last run's float inputs, in the plan's storage
  std::vector<std::vector<float>> weights_;
  std::vector<std::vector<float>> kv_;  // per layer: K pool then V pool
  std::vector<float> kv_scales_;        // static KV scales (ReadStaticKvScales); empty: per token
  ir::SymbolBindings bindings_;         // of the last executed step
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CPU_BACKEND_H_
