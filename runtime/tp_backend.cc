#include "runtime/tp_backend.h"

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"

namespace ag::runtime {

MultiRankBackend::MultiRankBackend(std::vector<std::unique_ptr<Backend>> ranks, std::shared_ptr<CommunicatorGroup> group)
    : group_(std::move(group)), ranks_(std::move(ranks)) {
  name_ = absl::StrCat(ranks_[0]->name(), " x", ranks_.size(), " (tensor parallel)");
  results_.resize(ranks_.size());
  for (int r = 0; r < size(); ++r) threads_.emplace_back([this, r] { Worker(r); });
}

MultiRankBackend::~MultiRankBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void MultiRankBackend::Worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<absl::Status(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    absl::Status status = (*job)(rank);
    if (!status.ok() && !absl::IsAborted(status)) {
      status = absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
      // The other ranks may be waiting for this one in a collective: they wake "aborted".
      group_->Abort(absl::AbortedError(absl::StrCat("stopped because ", status.message())));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_[static_cast<size_t>(rank)] = std::move(status);
      ++finished_;
    }
    done_.notify_all();
  }
}

absl::Status MultiRankBackend::OnAllRanks(const std::function<absl::Status(int)>& job) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &job;
  finished_ = 0;
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [&] { return finished_ == size(); });
  job_ = nullptr;
  // The root cause first: a rank's own error, not another rank's "aborted".
  for (const absl::Status& s : results_) {
    if (!s.ok() && !absl::IsAborted(s)) return s;
  }
  for (const absl::Status& s : results_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status MultiRankBackend::Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) {
  RETURN_IF_ERROR(CheckDegree(plan, size()));
  return OnAllRanks([&](int r) { return ranks_[r]->Load(plan, weights, kv_blocks); });
}

absl::Status MultiRankBackend::Execute(const StepBatch& batch) {
  return OnAllRanks([&](int r) { return ranks_[r]->Execute(batch); });
}

absl::Status MultiRankBackend::RunProgram(absl::string_view program, const StepBatch& batch, absl::string_view output,
                                          UninitializedVector<float>* out) {
  return OnAllRanks([&](int r) { return r == 0 ? ranks_[0]->RunProgram(program, batch, output, out) : absl::OkStatus(); });
}

absl::Status MultiRankBackend::ReadLogits(int64_t rows, std::vector<float>* out) {
  return ranks_[0]->ReadLogits(rows, out);
}

absl::Status MultiRankBackend::ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) {
  return ranks_[0]->ReadLogitRows(rows, wanted, out);
}

absl::Status MultiRankBackend::ReadNextTokens(int64_t rows, std::vector<int32_t>* out) {
  return ranks_[0]->ReadNextTokens(rows, out);
}

absl::Status MultiRankBackend::SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) {
  return ranks_[0]->SampleRows(rows, out);
}

absl::Status MultiRankBackend::RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) {
  return ranks_[0]->RowLogprobs(rows, out);
}

absl::StatusOr<std::vector<double>> MultiRankBackend::Rank0Times(const std::function<Times(Backend&)>& run) {
  std::vector<std::vector<double>> times(ranks_.size());
  RETURN_IF_ERROR(OnAllRanks([&](int r) -> absl::Status {
    ASSIGN_OR_RETURN(times[r], run(*ranks_[r]));
    return absl::OkStatus();
  }));
  return times[0];
}

absl::StatusOr<std::vector<double>> MultiRankBackend::TimeExecute(const StepBatch& batch, int warmup,
                                                                  int iterations) {
  return Rank0Times([&](Backend& b) { return b.TimeExecute(batch, warmup, iterations); });
}

absl::StatusOr<std::vector<double>> MultiRankBackend::ProfileExecute(const StepBatch& batch) {
  return Rank0Times([&](Backend& b) { return b.ProfileExecute(batch); });
}

std::unique_ptr<Backend> CreateCpuTensorParallel(int tp, bool sample_where_logits_are) {
  auto group = std::make_shared<InProcessGroup>(tp);
  std::vector<std::unique_ptr<Backend>> ranks;
  for (int r = 0; r < tp; ++r) ranks.push_back(std::make_unique<CpuBackend>(sample_where_logits_are, &group->rank(r)));
  return std::make_unique<MultiRankBackend>(std::move(ranks), std::move(group));
}

}  // namespace ag::runtime
