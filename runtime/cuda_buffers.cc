#include "runtime/cuda_buffers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/cuda_step.h"

namespace ag::runtime {

absl::StatusOr<DeviceBuffer> DeviceAlloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));
  if (e != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes for ", what, ": ", cudaGetErrorString(e)));
  }
  return DeviceBuffer(p);
}

absl::StatusOr<PinnedBuffer> PinnedAlloc(size_t bytes) {
  void* p = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, std::max<size_t>(bytes, 256)));
  return PinnedBuffer(p);
}

absl::StatusOr<PinnedBuffer> MappedHostAlloc(size_t bytes, const std::string& what) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 256), cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaHostAlloc of ", bytes, " bytes of pinned host memory for ", what, ": ", cudaGetErrorString(e)));
  }
  return PinnedBuffer(p);
}

}  // namespace ag::runtime
