// NCCL communicators for the CUDA backend: one rank per GPU.
//
// On one node all ranks live in this process (ncclCommInitAll over the
// devices). Across nodes every process holds its node's ranks and joins with
// ncclCommInitRank, the unique id handed out by rank 0's process over TCP
// (--nnodes N --node-rank R --master ADDR:PORT). Collectives run on the
// backend's step stream, so they are captured into its CUDA graphs like any
// kernel. Every NCCL call is checked into absl::Status; Abort() aborts every
// communicator of the group (ncclCommAbort), which wakes ranks stuck in one.
// On one node whose GPUs reach each other's memory the group also sets up the
// one-shot all-reduce that the fused all-reduce + residual (+ norm) steps use
// for small messages (decode): one kernel instead of NCCL's plus an epilogue.
#ifndef AUTOGLM_RUNTIME_NCCL_COMMUNICATOR_H_
#define AUTOGLM_RUNTIME_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/allreduce.cuh"
#include "runtime/communicator.h"

namespace ag::runtime {

struct NcclGroupOptions {
  std::vector<int> devices;  // this process's GPUs, one rank each
  int nnodes = 1;
  int node_rank = 0;
  std::string master;  // "ADDR:PORT" of node 0, when nnodes > 1
  int rendezvous_timeout_s = 300;
};

class NcclGroup : public CommunicatorGroup {
 public:
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(const NcclGroupOptions& options);
  ~NcclGroup() override;
  int local_size() const { return static_cast<int>(ranks_.size()); }
  // The communicator of this process's i-th rank (device options.devices[i]).
  Communicator& local(int i) { return *ranks_[static_cast<size_t>(i)]; }
  int device(int i) const { return devices_[static_cast<size_t>(i)]; }
  // The one-shot all-reduce's buffers for local rank i (kernels/cuda/allreduce.cuh), or null:
  // only on one node, with peer access between every pair of GPUs and at most 8 ranks.
  const cuda::PeerAllReduce* peer(int i) const {
    return peers_.empty() ? nullptr : &peers_[static_cast<size_t>(i)];
  }
  void Abort(const absl::Status& why) override;

 private:
  NcclGroup() = default;
  // Enables peer access and allocates every rank's staging buffers, flags and call counters.
  absl::Status SetUpPeers();

  std::vector<int> devices_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
  std::vector<cuda::PeerAllReduce> peers_;
  std::vector<std::pair<int, void*>> allocations_;  // (device, pointer), freed with the group
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_NCCL_COMMUNICATOR_H_
