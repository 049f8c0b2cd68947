// Something done once per device and remembered (a kernel attribute, which
// CUDA keeps per device): plain C++, so that a CPU test checks the logic.
#ifndef AUTOGLM_KERNELS_CUDA_PER_DEVICE_H_
#define AUTOGLM_KERNELS_CUDA_PER_DEVICE_H_

#include <array>
#include <mutex>

namespace ag::cuda {

// Get(device, set) runs `set` the first time it is asked for `device` and
// returns its result then and after; a failed `set` is tried again next time.
// Thread-safe (ranks on their own threads ask for their own devices).
template <typename Result, Result kOk>
class PerDeviceOnce {
 public:
  static constexpr int kMaxDevices = 64;

  template <typename Set>
  Result Get(int device, Set&& set) {
    if (device < 0 || device >= kMaxDevices) return set();
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_[device]) {
      const Result r = set();
      if (r != kOk) return r;
      done_[device] = true;
    }
    return kOk;
  }

 private:
  std::mutex mu_;
  std::array<bool, kMaxDevices> done_{};
};

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_PER_DEVICE_H_
