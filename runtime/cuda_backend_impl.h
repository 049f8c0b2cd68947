// The CUDA backend's class, shared by the files that define it: cuda_backend.cc (loading,
// capacity, launching steps and graphs) and cuda_readback.cc (what comes back: outputs, logits
// rows, sampling and logprobs where the logits are). Not for use elsewhere: runtime/cuda_backend.h
// is the interface.
#ifndef AUTOGLM_RUNTIME_CUDA_BACKEND_IMPL_H_
#define AUTOGLM_RUNTIME_CUDA_BACKEND_IMPL_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/plan.h"
#include "kernels/cuda/quant_linear.cuh"
#include "runtime/backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_buffers.h"
#include "runtime/lru_cache.h"

namespace ag::runtime::internal {

// SampleRows takes its rows this many at a time: its workspace holds a float copy of each penalised row.
constexpr size_t kSampleRowsPerRound = 64;

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}
  ~CudaBackend() override {
    graphs_.Clear();
    for (cudaEvent_t e : input_copied_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::string_view name() const override { return "cuda"; }
  absl::Status Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) override;
  absl::Status Execute(const StepBatch& batch) override;
  absl::Status RunProgram(absl::string_view program, const StepBatch& batch, absl::string_view output,
                          UninitializedVector<float>* out) override;
  absl::Status ReadLogits(int64_t rows, std::vector<float>* out) override;
  absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) override;
  absl::Status ReadNextTokens(int64_t rows, std::vector<int32_t>* out) override;
  absl::Status SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) override;
  bool SamplesWhereLogitsAre() const override { return true; }
  absl::Status RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) override;
  absl::StatusOr<std::vector<double>> TimeExecute(const StepBatch& batch, int warmup, int iterations) override;
  absl::StatusOr<std::vector<double>> ProfileExecute(const StepBatch& batch) override;

 private:
  // Tokens, sequences, logit rows, context bucket, block-table width, leading decode sequences
  // (StepBatch::LeadingDecodeSeqs: the attention's split): everything a captured step bakes in.
  using GraphKey = std::array<int64_t, 6>;  // tokens, seqs, logits rows, context bucket, block-table width, leading decodes

  absl::Status UploadWeight(const compiler::WeightEntry& entry, const WeightSource& source, bool interleave,
                            void* dst);
  // A weight stored quantized: its segments' codes, scales and zero points (runtime/quant_storage.h).
  struct QuantWeight {
    std::vector<DeviceBuffer> buffers;
    std::vector<cuda::QuantSegment> segments;
  };
  absl::StatusOr<QuantWeight> UploadQuantWeight(const compiler::WeightEntry& entry, const WeightSource& source,
                                                bool interleave);
  // Bytes of the bf16 weight the prefill path dequantizes into: the largest quantized matrix a
  // step multiplies with more than kQuantLinearMaxRows token rows. Once the weights are uploaded,
  // only those the in-load GEMM cannot take here (not Hopper, act order); before, all of them.
  absl::StatusOr<size_t> DequantScratchBytes(const compiler::Plan& plan, bool uploaded) const;
  // Bytes of x put in an act-order weight's input order for the codes kernel: the most rows it
  // takes there (kQuantLinearMaxRows, or a logit-row step's bound) times the inputs. Needs quant_.
  absl::StatusOr<size_t> OrderScratchBytes(const compiler::Plan& plan) const;
  absl::Status EnsureCapacity(const StepBatch& batch, int64_t context_bucket);
  absl::Status UploadInputs(const StepBatch& batch);
  // Launches the decoder's steps. With `events` (one more than it has steps), records events[i]
  // before step i and the last after all.
  absl::Status LaunchSteps(const StepBatch& batch, int64_t context_bucket, bool nvtx,
                           const std::vector<cudaEvent_t>* events = nullptr);
  // Launches a program's steps over `arena`, its runtime inputs at `inputs` + offsets.
  absl::Status LaunchProgram(const compiler::Program& program, void* arena, char* inputs,
                             const std::map<std::string, size_t>& offsets, const StepBatch& batch,
                             int64_t context_bucket, bool nvtx, const std::vector<cudaEvent_t>* events);
  absl::StatusOr<int64_t> PrepareStep(const StepBatch& batch);  // checks, capacity, inputs; returns the context bucket
  absl::Status ReadOutput(absl::string_view name, size_t bytes, void* out);
  void DropGraphs();

  CudaBackendOptions options_;
  const compiler::Plan* plan_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int64_t kv_blocks_ = 0;
  DeviceBuffer arena_, kv_, inputs_, attention_workspace_, linear_scratch_, gather_scratch_;
  // The vision program (GLM-4.1V): its own arena and inputs, run eagerly.
  DeviceBuffer vision_arena_, vision_inputs_;
  PinnedBuffer vision_staging_;
  std::map<std::string, size_t> vision_offsets_;
  size_t vision_inputs_bytes_ = 0, vision_staging_bytes_ = 0;
  RankInfo rank_;
  DeviceBuffer sample_buffer_;  // SampleRows and RowLogprobs: the rows' parameters, then the results
  size_t sample_buffer_bytes_ = 0;
  DeviceBuffer sample_work_;  // SampleRows: penalised rows as float
  size_t sample_work_bytes_ = 0;
  // The last step's logits, on the device.
  absl::StatusOr<const __nv_bfloat16*> DeviceLogits() const;
  // SampleRows' and RowLogprobs' exchange: the `in_bytes` staged at the start of output_staging_ go
  // to sample_buffer_, `launch` runs on it, and its bytes [out_offset, + out_bytes) come back to the
  // start of output_staging_.
  absl::Status RoundTrip(size_t in_bytes, size_t out_offset, size_t out_bytes,
                         const std::function<cudaError_t(char* device)>& launch);
  std::vector<DeviceBuffer> weights_;  // bf16 weights; empty for quantized ones, stored in quant_
  // Weights kept in mapped pinned host memory (CudaBackendOptions::embedding_on_host), by index;
  // weight_data_[i] is where a kernel reads weight i (device memory, or the mapped host table).
  std::vector<PinnedBuffer> host_weights_;
  std::vector<void*> weight_data_;
  std::vector<QuantWeight> quant_;      // by weight index; no segments for bf16 weights
  DeviceBuffer dequant_scratch_, order_scratch_;
  DeviceBuffer kv_staging_;  // an 8-bit cache: the fused QKV step's fp32 K and V rows (KvStagingBytes)
  DeviceBuffer kv_static_scales_;  // a checkpoint's static KV scales, [layers][K, V] fp32 (ReadStaticKvScales)
  size_t dequant_bytes_ = 0, order_bytes_ = 0;
  // Host side of the inputs, two halves used in turn: a step fills one while
  // the previous step's copy may still read the other, so no step waits for
  // the device. input_copied_[i] marks the end of the last copy out of half i.
  PinnedBuffer input_staging_[2];
  cudaEvent_t input_copied_[2] = {nullptr, nullptr};
  int input_half_ = 0;
  PinnedBuffer output_staging_;  // host side of the outputs
  size_t staging_bytes_ = 0, inputs_bytes_ = 0;
  int64_t input_blocks_capacity_ = -1;  // block-table width the input buffers hold
  int64_t workspace_floats_ = 0;
  std::map<std::string, size_t> input_offsets_;  // byte offset of each runtime input in inputs_
  // The captured graphs of the step shapes run most recently (speculative decoding's verify steps
  // multiply the shapes a server meets); one dropped is destroyed, and captured again if it returns.
  using GraphExec = std::shared_ptr<CUgraphExec_st>;
  static constexpr size_t kMaxGraphs = 512;
  LruCache<GraphExec> graphs_{kMaxGraphs};  // by GraphKey's bytes
  std::map<GraphKey, int> seen_;  // eager runs per key before capture (forgotten past 8 * kMaxGraphs shapes)
  int64_t scratch_k_ = 0;          // widest linear input: sizes the tensor-core paths' scratch
};

}  // namespace ag::runtime::internal

#endif  // AUTOGLM_RUNTIME_CUDA_BACKEND_IMPL_H_
