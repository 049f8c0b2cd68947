// The one-shot all-reduce's meeting rule (kernels/cuda/allreduce.cu): what a
// rank reads in the flag a peer's block sets, for the call numbered `epoch`.
// Plain C++ (callable on the device too), so that a CPU test checks it.
#ifndef AUTOGLM_KERNELS_CUDA_PEER_FLAGS_H_
#define AUTOGLM_KERNELS_CUDA_PEER_FLAGS_H_

#include <cstdint>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ag::cuda {

// Above this many bytes per rank NCCL's bandwidth-optimal algorithms win (one-shot reads every peer's whole buffer).
inline constexpr int64_t kOneShotMaxBytes = int64_t{512} << 10;

// True when the one-shot kernel takes [rows, n] bf16 (otherwise NCCL does).
inline bool OneShotFits(int64_t rows, int64_t n) {
  return rows > 0 && n > 0 && n % 8 == 0 && n <= 48 * 1024 && rows * n * 2 <= kOneShotMaxBytes;
}

enum class PeerFlag { kWait, kReady, kCorrupt };

// kReady when the peer is at this call or the next one: it can be one ahead
// (it met us, summed, and staged its next call's rows in the other of the two
// buffers, so this call's buffer is intact), never two (that needs our next
// signal). Behind: wait. Two or more ahead: a corrupt flag or a peer out of
// step. Epochs wrap around (the difference is taken modulo 2^32).
AG_HOST_DEVICE inline PeerFlag ClassifyPeerFlag(uint32_t flag, uint32_t epoch) {
  const int32_t ahead = static_cast<int32_t>(flag - epoch);
  if (ahead == 0 || ahead == 1) return PeerFlag::kReady;
  return ahead < 0 ? PeerFlag::kWait : PeerFlag::kCorrupt;
}

}  // namespace ag::cuda

#undef AG_HOST_DEVICE

#endif  // AUTOGLM_KERNELS_CUDA_PEER_FLAGS_H_
