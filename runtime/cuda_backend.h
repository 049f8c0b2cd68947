// The CUDA backend: runs bf16 plans with the kernels of kernels/cuda.
//
// One cudaMalloc'd activation arena per plan, weights uploaded once in bf16
// (or drawn on the device for RandomWeights), the paged KV pool on the device,
// every step on one stream, every CUDA call checked into absl::Status. Steps
// of up to kGraphMaxTokens tokens (decode) are captured as a CUDA graph per
// (tokens, sequences, logit rows, context bucket) and replayed; others run
// eagerly, each inside an NVTX range named after its plan step.
#ifndef AUTOGLM_RUNTIME_CUDA_BACKEND_H_
#define AUTOGLM_RUNTIME_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/backend.h"

namespace ag::cuda {
struct PeerAllReduce;  // kernels/cuda/allreduce.cuh
}  // namespace ag::cuda

namespace ag::runtime {

// True when a CUDA device is usable (tests skip otherwise).
bool CudaDeviceAvailable();

class Communicator;

struct CudaBackendOptions {
  bool use_graphs = true;
  int device = 0;
  // One rank of a tensor-parallel group (NCCL; runtime/nccl_communicator.h), or null alone.
  Communicator* comm = nullptr;
  // The group's one-shot all-reduce buffers for this rank (NcclGroup::peer), or null: NCCL only.
  const cuda::PeerAllReduce* peer = nullptr;
  // Keep the token-embedding table (a weight only embedding steps read: LookupOnlyWeights) in
  // pinned host memory mapped into the device's address space: a step's embedding kernel reads
  // its tokens' rows over the bus (8 KB a token at GLM-4-9B) instead of the table taking GPU
  // memory (1.24 GB there). A table a linear also reads (tied embeddings) stays on the GPU.
  bool embedding_on_host = false;
};

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options = {});

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CUDA_BACKEND_H_
