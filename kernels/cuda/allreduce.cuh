// The one-shot all-reduce of tensor parallelism on one node, fused with the
// residual add (and glm4's sandwich norm): one launch instead of NCCL's kernel
// plus an epilogue kernel (TensorRT-LLM's fused all-reduce does the same).
//
// The ranks are threads of one process, each with its GPU; every GPU can read
// the others' memory (peer access over NVLink). Each rank owns two staging
// buffers (by call parity) and a flag array; the kernel on rank r
//   1. copies its partial rows into its staging buffer,
//   2. meets its peers block by block: block b stores the call's epoch into
//      every peer's flag [r][b] (a release at system scope) and waits until
//      every peer's block b has stored it into its own (acquire),
//   3. sums every rank's staging rows in rank order in fp32 (the same bits on
//      every rank), adds the residual (after RMSNorm of the sum, for the norm
//      variant) and writes the output.
// Block b handles the same rows on every rank, so meeting block by block is
// enough; the grid is kept within the SMs so every block is resident (no block
// waits for one that cannot start). Two buffers by parity: a rank cannot
// overwrite a buffer a peer still reads, because it passes the next call's
// barrier only once every peer has finished this call (a call's kernel starts
// after the previous kernels of its stream are complete: programmatic launch
// waits before touching anything). The epoch is a call counter on the device,
// so the kernel replays inside CUDA graphs. A peer that
// never arrives ends the kernel with a trap after 10 s: an error, not a hang.
#ifndef AUTOGLM_KERNELS_CUDA_ALLREDUCE_CUH_
#define AUTOGLM_KERNELS_CUDA_ALLREDUCE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/peer_flags.h"  // kOneShotMaxBytes, OneShotFits

namespace ag::cuda {

inline constexpr int kMaxPeerRanks = 8;
inline constexpr int kOneShotMaxBlocks = 64;

// What one rank's kernel needs: every rank's staging buffers and flags (device
// pointers valid on this rank's GPU through peer access) and its own call counter.
struct PeerAllReduce {
  int rank = 0;
  int size = 1;
  __nv_bfloat16* staging[kMaxPeerRanks][2] = {};  // [rank][parity], kOneShotMaxBytes each
  uint32_t* flags[kMaxPeerRanks] = {};            // [rank]: [kMaxPeerRanks writers][kOneShotMaxBlocks]
  uint32_t* calls = nullptr;  // this rank's: [0] calls so far (the last call's epoch), [1] blocks done in this call
};


// out = residual + sum over ranks of x (norm_w null), or residual + rms_norm(sum, norm_w, eps).
// Every rank must launch it with the same rows and n, in the same order as its other one-shot calls.
cudaError_t LaunchOneShotAllReduce(const PeerAllReduce& peers, const __nv_bfloat16* x,
                                   const __nv_bfloat16* residual, const __nv_bfloat16* norm_w, float eps,
                                   int64_t rows, int64_t n, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_ALLREDUCE_CUH_
