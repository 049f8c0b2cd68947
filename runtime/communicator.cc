#include "runtime/communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/ref/half.h"
#include "kernels/ref/ref.h"

namespace ag::runtime {

enum CollectiveOp { kAllReduce = 1, kAllGather = 2, kBarrier = 3 };

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

  absl::Status AllReduceSum(void* data, int64_t count, ir::DType dtype, void*) override {
    if (dtype != ir::DType::kF32 && dtype != ir::DType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat("all_reduce of ", ir::DTypeName(dtype), " is not supported"));
    }
    absl::Status ok = group_.Gather(rank_, {data, count, kAllReduce, dtype});
    if (!ok.ok()) return ok;
    // Every rank sums all buffers in rank order into its own copy; the buffers
    // are overwritten only after every rank has read them.
    const int n = group_.size();
    const bool bf16 = dtype == ir::DType::kBF16;
    std::vector<float> widened(bf16 ? static_cast<size_t>(count * n) : 0);  // bf16 parts, as float
    std::vector<const float*> parts(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const void* theirs = group_.slots_[r].data;
      if (!bf16) {
        parts[r] = static_cast<const float*>(theirs);
        continue;
      }
      float* w = widened.data() + r * count;
      BF16sToFloats(static_cast<const uint16_t*>(theirs), count, w);
      parts[r] = w;
    }
    std::vector<float> sum(static_cast<size_t>(count));
    ref::SumParts(parts.data(), n, count, sum.data());
    ok = group_.Arrive();
    if (!ok.ok()) return ok;
    if (!bf16 && count > 0) {  // memcpy from an empty vector's null data is undefined even for 0 bytes
      std::memcpy(data, sum.data(), sum.size() * sizeof(float));
    } else {
      auto* h = static_cast<uint16_t*>(data);
      FloatsToBF16(sum.data(), count, h);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(const void* send, void* recv, int64_t count, ir::DType dtype, void*) override {
    absl::Status ok = group_.Gather(rank_, {send, count, kAllGather, dtype});
    if (!ok.ok()) return ok;
    const size_t bytes = static_cast<size_t>(count) * ir::DTypeSize(dtype);
    for (int r = 0; r < group_.size() && bytes > 0; ++r) {  // a step with no rows sends nothing (and null pointers)
      std::memcpy(static_cast<char*>(recv) + r * bytes, group_.slots_[r].data, bytes);
    }
    return group_.Arrive();
  }

  absl::Status Barrier() override {
    absl::Status ok = group_.Gather(rank_, {nullptr, 0, kBarrier, ir::DType::kF32});
    return ok.ok() ? group_.Arrive() : ok;  // nobody publishes again before all have checked
  }
  void Abort(const absl::Status& why) override { group_.Abort(why); }

 private:
  InProcessGroup& group_;
  const int rank_;
};

InProcessGroup::InProcessGroup(int size) : size_(size), slots_(static_cast<size_t>(size)) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<InProcessCommunicator>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

void InProcessGroup::Abort(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = why.ok() ? absl::AbortedError("the tensor-parallel group was aborted") : why;
  cv_.notify_all();
}

absl::Status InProcessGroup::Gather(int rank, const Slot& slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return aborted_;
    slots_[static_cast<size_t>(rank)] = slot;
  }
  absl::Status ok = Arrive();
  if (!ok.ok()) return ok;
  const Slot& first = slots_[0];
  for (int r = 1; r < size_; ++r) {
    const Slot& s = slots_[static_cast<size_t>(r)];
    if (s.op != first.op || s.count != first.count || s.dtype != first.dtype) {
      return absl::InternalError(absl::StrCat("tensor-parallel ranks disagree: rank ", r, " called collective ",
                                              s.op, " with ", s.count, " elements, rank 0 collective ", first.op,
                                              " with ", first.count));
    }
  }
  return absl::OkStatus();
}

absl::Status InProcessGroup::Arrive() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return absl::OkStatus();
  }
  cv_.wait(lock, [&] { return generation_ != generation || !aborted_.ok(); });
  if (generation_ == generation) return aborted_;
  return absl::OkStatus();
}

}  // namespace ag::runtime
