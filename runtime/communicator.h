// Communicators: the collectives of one tensor-parallel group, behind one
// interface. NCCL for the CUDA backend (runtime/nccl_communicator.h); an
// in-process group for the CPU backend, whose ranks are threads of one
// process, so that sharded plans run everywhere tests run.
//
// Every rank calls the same collectives in the same order (the plan's order).
// A failure anywhere is an absl::Status; Abort() makes every rank waiting in a
// collective, and every later call, return an error instead of hanging.
#ifndef AUTOGLM_RUNTIME_COMMUNICATOR_H_
#define AUTOGLM_RUNTIME_COMMUNICATOR_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "ir/types.h"

namespace ag::runtime {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: `data` [count] becomes the sum of every rank's `data` (f32 or bf16).
  // `stream` is the backend's stream (a cudaStream_t for NCCL, null on the CPU).
  virtual absl::Status AllReduceSum(void* data, int64_t count, ir::DType dtype, void* stream) = 0;
  // `recv` [size * count] gets every rank's `send` [count], rank r's at r * count.
  virtual absl::Status AllGather(const void* send, void* recv, int64_t count, ir::DType dtype, void* stream) = 0;
  virtual absl::Status Barrier() = 0;
  // Wakes every rank blocked in a collective of this group with `why`; later calls fail with it.
  virtual void Abort(const absl::Status& why) = 0;
};

// A tensor-parallel group as a whole: what the multi-rank backend stops when
// one of its ranks fails.
class CommunicatorGroup {
 public:
  virtual ~CommunicatorGroup() = default;
  // Wakes every rank blocked in a collective of the group with `why`; later collectives fail.
  virtual void Abort(const absl::Status& why) = 0;
};

// N ranks as N threads of one process. Sums are taken in rank order in fp32
// (ref::SumParts), so every rank gets the same bits and the result does not
// depend on timing.
class InProcessGroup : public CommunicatorGroup {
 public:
  explicit InProcessGroup(int size);
  ~InProcessGroup() override;
  int size() const { return size_; }
  // Rank r's communicator; owned by the group.
  Communicator& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }
  void Abort(const absl::Status& why) override;

 private:
  friend class InProcessCommunicator;
  struct Slot {
    const void* data = nullptr;
    int64_t count = 0;
    int op = 0;  // which collective, to catch ranks that disagree
    ir::DType dtype = ir::DType::kF32;
  };
  // Publishes `slot`, waits for every rank, checks that they agree.
  absl::Status Gather(int rank, const Slot& slot);
  // Waits for every rank (the second half of a collective: all have read).
  absl::Status Arrive();

  const int size_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<Slot> slots_;
  absl::Status aborted_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_COMMUNICATOR_H_
