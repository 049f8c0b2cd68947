#include "runtime/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "runtime/rendezvous.h"

namespace ag::runtime {
namespace {

absl::Status NcclCheck(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

#define NCCL_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(NcclCheck((expr), #expr))

absl::StatusOr<ncclDataType_t> NcclType(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32:
      return ncclFloat32;
    case ir::DType::kBF16:
      return ncclBfloat16;
    default:
      return absl::InvalidArgumentError(absl::StrCat("NCCL collectives of ", ir::DTypeName(dtype), " are not supported"));
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override {
    if (ncclComm_t c = comm_.exchange(nullptr)) ncclCommDestroy(c);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceSum(void* data, int64_t count, ir::DType dtype, void* stream) override {
    ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    ASSIGN_OR_RETURN(ncclComm_t comm, Live());
    NCCL_RETURN_IF_ERROR(ncclAllReduce(data, data, static_cast<size_t>(count), type, ncclSum, comm,
                                       static_cast<cudaStream_t>(stream)));
    return AsyncError(comm);
  }
  absl::Status AllGather(const void* send, void* recv, int64_t count, ir::DType dtype, void* stream) override {
    ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    ASSIGN_OR_RETURN(ncclComm_t comm, Live());
    NCCL_RETURN_IF_ERROR(
        ncclAllGather(send, recv, static_cast<size_t>(count), type, comm, static_cast<cudaStream_t>(stream)));
    return AsyncError(comm);
  }
  absl::Status Barrier() override {
    // A one-element all-reduce on a private stream, waited for.
    ASSIGN_OR_RETURN(ncclComm_t comm, Live());
    cudaStream_t stream;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      return absl::InternalError("barrier: cudaStreamCreate failed");
    }
    float* one = nullptr;
    absl::Status ok = cudaMalloc(&one, sizeof(float)) == cudaSuccess ? absl::OkStatus()
                                                                      : absl::InternalError("barrier: cudaMalloc failed");
    if (ok.ok()) ok = NcclCheck(ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
    if (ok.ok() && cudaStreamSynchronize(stream) != cudaSuccess) ok = absl::InternalError("barrier: sync failed");
    cudaFree(one);
    cudaStreamDestroy(stream);
    return ok.ok() ? AsyncError(comm) : ok;
  }
  // ncclCommAbort is meant to be called while another thread is inside a
  // collective of the communicator: that call then returns an error.
  void Abort(const absl::Status&) override {
    if (ncclComm_t c = comm_.exchange(nullptr)) ncclCommAbort(c);
  }

 private:
  absl::StatusOr<ncclComm_t> Live() const {
    ncclComm_t c = comm_.load();
    if (c == nullptr) return absl::AbortedError("the NCCL communicator was aborted");
    return c;
  }
  static absl::Status AsyncError(ncclComm_t comm) {
    ncclResult_t async = ncclSuccess;
    NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &async));
    return NcclCheck(async, "NCCL (asynchronous error)");
  }

  std::atomic<ncclComm_t> comm_;
  const int rank_, size_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(const NcclGroupOptions& o) {
  const int local = static_cast<int>(o.devices.size());
  if (local < 1) return absl::InvalidArgumentError("--devices: at least one GPU is needed");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--node-rank must be in [0, ", o.nnodes, ")"));
  }
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) return absl::UnavailableError("no CUDA device is usable");
  for (int d : o.devices) {
    if (d < 0 || d >= visible) {
      return absl::InvalidArgumentError(absl::StrCat("--devices: GPU ", d, " does not exist (", visible, " visible)"));
    }
  }
  std::unique_ptr<NcclGroup> group(new NcclGroup());
  group->devices_ = o.devices;
  std::vector<ncclComm_t> comms(static_cast<size_t>(local), nullptr);
  const int nranks = local * o.nnodes;
  if (o.nnodes == 1) {
    NCCL_RETURN_IF_ERROR(ncclCommInitAll(comms.data(), local, o.devices.data()));
  } else {
    ASSIGN_OR_RETURN(const MasterAddress master, ParseMasterAddress(o.master));
    ncclUniqueId id;
    static_assert(sizeof(id) == kRendezvousBlobBytes);
    std::string blob;
    if (o.node_rank == 0) {
      NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
      blob.assign(reinterpret_cast<const char*>(&id), sizeof(id));
      RETURN_IF_ERROR(ServeRendezvous(master.port, o.nnodes - 1, local, blob, o.rendezvous_timeout_s));
    } else {
      ASSIGN_OR_RETURN(blob, JoinRendezvous(master, local, o.rendezvous_timeout_s));
      std::memcpy(&id, blob.data(), sizeof(id));
    }
    NCCL_RETURN_IF_ERROR(ncclGroupStart());
    absl::Status ok;
    for (int i = 0; i < local && ok.ok(); ++i) {
      if (cudaSetDevice(o.devices[i]) != cudaSuccess) ok = absl::InternalError("cudaSetDevice failed");
      if (ok.ok()) ok = NcclCheck(ncclCommInitRank(&comms[i], nranks, id, o.node_rank * local + i), "ncclCommInitRank");
    }
    const absl::Status ended = NcclCheck(ncclGroupEnd(), "ncclGroupEnd");
    RETURN_IF_ERROR(ok);
    RETURN_IF_ERROR(ended);
  }
  for (int i = 0; i < local; ++i) {
    group->ranks_.push_back(std::make_unique<NcclCommunicator>(comms[i], o.node_rank * local + i, nranks));
  }
  if (o.nnodes == 1 && local <= cuda::kMaxPeerRanks) RETURN_IF_ERROR(group->SetUpPeers());
  return group;
}

absl::Status NcclGroup::SetUpPeers() {
  const int n = local_size();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      int can = 0;
      if (i != j && (cudaDeviceCanAccessPeer(&can, devices_[i], devices_[j]) != cudaSuccess || !can)) {
        return absl::OkStatus();  // no peer access (PCIe without P2P): NCCL does every all-reduce
      }
    }
  }
  auto alloc = [&](int device, size_t bytes) -> absl::StatusOr<void*> {
    void* p = nullptr;
    if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess ||
        cudaMemset(p, 0, bytes) != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("one-shot all-reduce buffers on GPU ", device));
    }
    allocations_.push_back({device, p});
    return p;
  };
  std::vector<cuda::PeerAllReduce> peers(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int d = devices_[i];
    if (cudaSetDevice(d) != cudaSuccess) return absl::InternalError("cudaSetDevice failed");
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(devices_[j], 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        return absl::InternalError(absl::StrCat("cudaDeviceEnablePeerAccess(", d, " -> ", devices_[j],
                                                "): ", cudaGetErrorString(e)));
      }
      (void)cudaGetLastError();  // clear "already enabled"
    }
    for (int parity = 0; parity < 2; ++parity) {
      ASSIGN_OR_RETURN(void* staging, alloc(d, static_cast<size_t>(cuda::kOneShotMaxBytes)));
      for (cuda::PeerAllReduce& p : peers) p.staging[i][parity] = static_cast<__nv_bfloat16*>(staging);
    }
    ASSIGN_OR_RETURN(void* flags, alloc(d, sizeof(uint32_t) * cuda::kMaxPeerRanks * cuda::kOneShotMaxBlocks));
    for (cuda::PeerAllReduce& p : peers) p.flags[i] = static_cast<uint32_t*>(flags);
    ASSIGN_OR_RETURN(void* calls, alloc(d, 2 * sizeof(uint32_t)));
    peers[i].calls = static_cast<uint32_t*>(calls);
  }
  for (int i = 0; i < n; ++i) {
    peers[i].rank = i;
    peers[i].size = n;
  }
  peers_ = std::move(peers);
  return absl::OkStatus();
}

NcclGroup::~NcclGroup() {
  ranks_.clear();  // the communicators first
  for (const auto& [device, p] : allocations_) {
    if (cudaSetDevice(device) == cudaSuccess) cudaFree(p);
  }
}

void NcclGroup::Abort(const absl::Status& why) {
  for (auto& r : ranks_) r->Abort(why);
}

}  // namespace ag::runtime
