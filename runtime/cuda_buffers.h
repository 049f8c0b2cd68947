// The CUDA backend's memory: device buffers, pinned host buffers (staging, and tables mapped into
// the device's address space), each freed by its owner, and allocations that fail as one-line
// errors naming what they were for.
#ifndef AUTOGLM_RUNTIME_CUDA_BUFFERS_H_
#define AUTOGLM_RUNTIME_CUDA_BUFFERS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ag::runtime {

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct HostFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;
using PinnedBuffer = std::unique_ptr<void, HostFree>;

// At least 256 bytes of device memory; `what` names the buffer in the error.
absl::StatusOr<DeviceBuffer> DeviceAlloc(size_t bytes, const char* what);
// Pinned host memory (staging copies).
absl::StatusOr<PinnedBuffer> PinnedAlloc(size_t bytes);
// Pinned host memory mapped into every device's address space (kernels read it over the bus).
absl::StatusOr<PinnedBuffer> MappedHostAlloc(size_t bytes, const std::string& what);

inline size_t Round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CUDA_BUFFERS_H_
