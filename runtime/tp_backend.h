// Tensor parallelism at run time: one plan, N rank backends in lockstep.
//
// The engine (one scheduler) sees one Backend. Every step goes to every rank
// at once, one thread per rank, and returns when all are done; the ranks meet
// in the plan's collectives. Outputs come from rank 0, which holds the whole
// logits after the plan's all_gather. A failure on any rank aborts the group
// (every rank waiting in a collective wakes with an error instead of hanging)
// and the call returns that rank's error, prefixed "rank R: "; the group stays
// aborted.
#ifndef AUTOGLM_RUNTIME_TP_BACKEND_H_
#define AUTOGLM_RUNTIME_TP_BACKEND_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend.h"
#include "runtime/communicator.h"

namespace ag::runtime {

class MultiRankBackend : public Backend {
 public:
  // `ranks[r]` runs rank r over `group`'s communicators; the group is aborted
  // when a rank fails, and kept alive until the ranks are gone.
  MultiRankBackend(std::vector<std::unique_ptr<Backend>> ranks, std::shared_ptr<CommunicatorGroup> group);
  ~MultiRankBackend() override;

  absl::string_view name() const override { return name_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  absl::Status Load(const compiler::Plan& plan, const WeightSource& weights, int64_t kv_blocks) override;
  absl::Status Execute(const StepBatch& batch) override;
  // On rank 0 alone: the vision program has no collectives and every rank gets its rows from the host.
  absl::Status RunProgram(absl::string_view program, const StepBatch& batch, absl::string_view output,
                          UninitializedVector<float>* out) override;
  absl::Status ReadLogits(int64_t rows, std::vector<float>* out) override;
  absl::Status ReadLogitRows(int64_t rows, const std::vector<int64_t>& wanted, std::vector<float>* out) override;
  absl::Status ReadNextTokens(int64_t rows, std::vector<int32_t>* out) override;
  absl::Status SampleRows(const std::vector<RowSampling>& rows, std::vector<int32_t>* out) override;
  bool SamplesWhereLogitsAre() const override { return ranks_[0]->SamplesWhereLogitsAre(); }
  absl::Status RowLogprobs(const std::vector<LogprobRequest>& rows, std::vector<TokenLogprobs>* out) override;
  absl::StatusOr<std::vector<double>> TimeExecute(const StepBatch& batch, int warmup, int iterations) override;
  absl::StatusOr<std::vector<double>> ProfileExecute(const StepBatch& batch) override;

 private:
  // Runs `job(rank)` on every rank's thread; the first failure (by rank) or OK.
  absl::Status OnAllRanks(const std::function<absl::Status(int)>& job);
  // Runs a timing call on every rank (they meet in the collectives); rank 0's times.
  using Times = absl::StatusOr<std::vector<double>>;
  Times Rank0Times(const std::function<Times(Backend&)>& run);
  void Worker(int rank);

  std::shared_ptr<CommunicatorGroup> group_;  // destroyed after the ranks (declared first)
  std::vector<std::unique_ptr<Backend>> ranks_;
  std::string name_;

  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<absl::Status(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int finished_ = 0;
  bool stop_ = false;
  std::vector<absl::Status> results_;
  std::vector<std::thread> threads_;
};

// `tp` CPU backends over an in-process group (ranks are threads of this process).
std::unique_ptr<Backend> CreateCpuTensorParallel(int tp, bool sample_where_logits_are = false);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_TP_BACKEND_H_
