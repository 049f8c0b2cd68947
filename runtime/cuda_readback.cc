// What comes back from the CUDA backend after a step: an output, the logits (all, or the rows the
// host samples), and the rows sampled or scored where the logits are (SampleRows, RowLogprobs:
// one round trip through the pinned staging buffer each).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "kernels/cuda/vocab.cuh"
#include "kernels/ref/half.h"
#include "runtime/cuda_backend_impl.h"
#include "runtime/cuda_buffers.h"
#include "runtime/cuda_step.h"

namespace ag::runtime::internal {

absl::Status CudaBackend::ReadOutput(absl::string_view name, size_t bytes, void* out) {
  if (plan_ == nullptr) return absl::FailedPreconditionError("read before Load");
  const compiler::Program& decoder = plan_->decoder();
  const int index = decoder.FindOutput(name);
  if (index < 0) return absl::NotFoundError(absl::StrCat("plan has no output ", name));
  if (bytes > staging_bytes_) return absl::InternalError("output larger than the staging buffer");
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(output_staging_.get(),
                                       static_cast<char*>(arena_.get()) + decoder.outputs[index].index, bytes,
                                       cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  std::memcpy(out, output_staging_.get(), bytes);
  return absl::OkStatus();
}

absl::Status CudaBackend::ReadLogits(int64_t rows, std::vector<float>* out) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (plan_ == nullptr) return absl::FailedPreconditionError("read before Load");
  const size_t count = static_cast<size_t>(rows * plan_->model.vocab_size);
  std::vector<uint16_t> bits(count);
  RETURN_IF_ERROR(ReadOutput("logits", count * 2, bits.data()));
  out->resize(count);
  BF16sToFloats(bits.data(), static_cast<int64_t>(count), out->data());
  return absl::OkStatus();
}

// Each run of consecutive wanted rows comes over the bus in one copy, all before one synchronise,
// into the same offsets of the pinned staging buffer; only those rows are widened to float.
absl::Status CudaBackend::ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  ASSIGN_OR_RETURN(const __nv_bfloat16* logits, DeviceLogits());
  const int64_t vocab = plan_->model.vocab_size;
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(__nv_bfloat16);
  if (static_cast<size_t>(rows) * row_bytes > staging_bytes_) return absl::InternalError("output larger than the staging buffer");
  out->resize(static_cast<size_t>(rows * vocab));
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, end)
  for (const int64_t row : wanted) {
    if (row < 0 || row >= rows || (!runs.empty() && row < runs.back().second)) {
      return absl::InvalidArgumentError("logits rows must be ascending and within the step");
    }
    if (!runs.empty() && runs.back().second == row) {
      ++runs.back().second;
    } else {
      runs.emplace_back(row, row + 1);
    }
  }
  char* staging = static_cast<char*>(output_staging_.get());
  for (const auto& [first, end] : runs) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging + first * row_bytes, logits + first * vocab, (end - first) * row_bytes,
                                         cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  for (const auto& [first, end] : runs) {
    BF16sToFloats(reinterpret_cast<const uint16_t*>(staging + first * row_bytes), (end - first) * vocab,
                  out->data() + first * vocab);
  }
  return absl::OkStatus();
}

absl::StatusOr<const __nv_bfloat16*> CudaBackend::DeviceLogits() const {
  if (plan_ == nullptr) return absl::FailedPreconditionError("sampling before Load");
  const int index = plan_->decoder().FindOutput("logits");
  if (index < 0) return absl::NotFoundError("plan has no output logits");
  return reinterpret_cast<const __nv_bfloat16*>(static_cast<const char*>(arena_.get()) +
                                                plan_->decoder().outputs[index].index);
}

absl::Status CudaBackend::RoundTrip(size_t in_bytes, size_t out_offset, size_t out_bytes,
                                    const std::function<cudaError_t(char* device)>& launch) {
  if (out_offset + out_bytes > staging_bytes_) return absl::InternalError("too many rows for the staging buffer");
  if (out_offset + out_bytes > sample_buffer_bytes_) {
    ASSIGN_OR_RETURN(sample_buffer_, DeviceAlloc(out_offset + out_bytes, "the sampler's rows"));
    sample_buffer_bytes_ = out_offset + out_bytes;
  }
  char* device = static_cast<char*>(sample_buffer_.get());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, output_staging_.get(), in_bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(launch(device));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(output_staging_.get(), device + out_offset, out_bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  out->clear();
  if (rows.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const __nv_bfloat16* logits, DeviceLogits());
  const int64_t vocab = plan_->model.vocab_size;
  const size_t words = AllowedWords(vocab);
  for (const RowSampling& row : rows) {
    if (!row.allowed.empty() && row.allowed.size() != words) {
      return absl::InvalidArgumentError("a row's mask is not a bit an id of the vocabulary");
    }
  }
  // Groups of rows whose parameters, penalties, masks and picks fit the staging buffer, one round
  // trip each: on the device, the rows' parameters, their penalty entries, their masks, then the picks.
  size_t first = 0;
  while (first < rows.size()) {
    size_t end = first, penalties = 0, masked = 0;
    auto bytes = [&](size_t n, size_t p, size_t m) {
      return Round256(n * sizeof(cuda::SampleRow)) + Round256(p * sizeof(cuda::SamplePenalty)) +
             Round256(m * words * sizeof(uint64_t)) + n * 4;
    };
    // At most kSampleRowsPerRound rows a round: penalised rows take a float copy each in a workspace
    // that Load's memory check leaves room for (64 x 151,552 x 4 = 39 MB at GLM-4's vocabulary; speculative
    // verify steps bring up to 1 + drafts rows a sequence).
    while (end < rows.size() && end - first < kSampleRowsPerRound &&
           bytes(end + 1 - first, penalties + rows[end].penalties.size(), masked + !rows[end].allowed.empty()) <=
               staging_bytes_) {
      penalties += rows[end].penalties.size();
      masked += !rows[end].allowed.empty();
      ++end;
    }
    if (end == first) return absl::InternalError("a row's penalties do not fit the staging buffer");
    const size_t n = end - first, params = Round256(n * sizeof(cuda::SampleRow));
    const size_t penalty_bytes = Round256(penalties * sizeof(cuda::SamplePenalty));
    const size_t mask_bytes = Round256(masked * words * sizeof(uint64_t));
    char* staging = static_cast<char*>(output_staging_.get());
    auto* staged = reinterpret_cast<cuda::SampleRow*>(staging);
    auto* staged_penalties = reinterpret_cast<cuda::SamplePenalty*>(staging + params);
    auto* staged_masks = reinterpret_cast<uint64_t*>(staging + params + penalty_bytes);
    int32_t next_penalty = 0;
    int64_t next_mask = 0;
    bool rewritten = false;
    for (size_t i = 0; i < n; ++i) {
      const RowSampling& row = rows[first + i];
      const ref::SampleParams& p = row.params;
      if (row.row < 0 || row.row >= plan_->max_batch_tokens) return absl::InvalidArgumentError("no such logits row");
      staged[i] = {static_cast<int32_t>(row.row), p.top_k, p.vocab_limit, p.temperature, p.top_p, p.uniform,
                   next_penalty, static_cast<int32_t>(row.penalties.size()), p.min_p,
                   row.allowed.empty() ? -1 : next_mask};
      for (const ref::Penalty& e : row.penalties) staged_penalties[next_penalty++] = {e.id, e.delta, e.scale, e.bias};
      if (!row.allowed.empty()) {
        std::memcpy(staged_masks + next_mask, row.allowed.data(), words * sizeof(uint64_t));
        next_mask += static_cast<int64_t>(words);
      }
      rewritten = rewritten || staged[i].Rewritten();
    }
    // Penalised or masked rows are copied to a float workspace row each (the logits stay for logprobs).
    const size_t work_bytes = rewritten ? n * static_cast<size_t>(vocab) * sizeof(float) : 0;
    if (work_bytes > sample_work_bytes_) {
      ASSIGN_OR_RETURN(sample_work_, DeviceAlloc(work_bytes, "the sampler's penalised rows"));
      sample_work_bytes_ = work_bytes;
    }
    const size_t in_bytes = params + penalty_bytes + mask_bytes;
    RETURN_IF_ERROR(RoundTrip(in_bytes, in_bytes, n * 4, [&](char* device) {
      return cuda::LaunchSampleRows(logits, vocab, reinterpret_cast<const cuda::SampleRow*>(device),
                                    static_cast<int64_t>(n), reinterpret_cast<const cuda::SamplePenalty*>(device + params),
                                    reinterpret_cast<const uint64_t*>(device + params + penalty_bytes),
                                    rewritten ? static_cast<float*>(sample_work_.get()) : nullptr,
                                    reinterpret_cast<int32_t*>(device + in_bytes), stream_);
    }));
    const size_t before = out->size();
    out->resize(before + n);
    std::memcpy(out->data() + before, output_staging_.get(), n * 4);
    first = end;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  out->clear();
  if (rows.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const __nv_bfloat16* logits, DeviceLogits());
  const size_t n = rows.size(), k = cuda::kMaxTopLogprobs;
  // On the device: the rows' parameters, then logprob [n], top ids [n, k], top logprobs [n, k].
  const size_t params = Round256(n * sizeof(cuda::LogprobRow)), lp = Round256(n * 4), ids = Round256(n * k * 4);
  if (params > staging_bytes_) return absl::InternalError("too many rows for the staging buffer");
  auto* staged = static_cast<cuda::LogprobRow*>(output_staging_.get());
  for (size_t i = 0; i < n; ++i) {
    const LogprobRequest& r = rows[i];
    if (r.row < 0 || r.row >= plan_->max_batch_tokens || r.top < 0 || r.top > kMaxTopLogprobs) {
      return absl::InvalidArgumentError("bad logprobs request");
    }
    staged[i] = {static_cast<int32_t>(r.row), r.token, r.top, r.vocab_limit};
  }
  RETURN_IF_ERROR(RoundTrip(n * sizeof(cuda::LogprobRow), params, lp + ids + n * k * 4, [&](char* device) {
    return cuda::LaunchLogprobs(logits, plan_->model.vocab_size, reinterpret_cast<const cuda::LogprobRow*>(device),
                                static_cast<int64_t>(n), reinterpret_cast<float*>(device + params),
                                reinterpret_cast<int32_t*>(device + params + lp),
                                reinterpret_cast<float*>(device + params + lp + ids), stream_);
  }));
  const char* host = static_cast<const char*>(output_staging_.get());
  const auto* logprob = reinterpret_cast<const float*>(host);
  const auto* top_ids = reinterpret_cast<const int32_t*>(host + lp);
  const auto* top_lp = reinterpret_cast<const float*>(host + lp + ids);
  const int64_t vocab = plan_->model.vocab_size;
  for (size_t i = 0; i < n; ++i) {
    TokenLogprobs t;
    t.logprob = logprob[i];
    const int64_t kept = rows[i].vocab_limit > 0 ? std::min<int64_t>(rows[i].vocab_limit, vocab) : vocab;
    for (int j = 0; j < std::min<int64_t>(rows[i].top, kept); ++j) {
      t.top_ids.push_back(top_ids[i * k + j]);
      t.top_logprobs.push_back(top_lp[i * k + j]);
    }
    out->push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ReadNextTokens(int64_t rows, std::vector<int32_t>* out) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  out->resize(static_cast<size_t>(rows));
  return ReadOutput("next_tokens", out->size() * 4, out->data());
}

}  // namespace ag::runtime::internal
