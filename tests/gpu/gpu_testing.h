// Helpers for the gpu suite: device arrays, bf16 data, comparisons.
#ifndef AUTOGLM_TESTS_GPU_GPU_TESTING_H_
#define AUTOGLM_TESTS_GPU_GPU_TESTING_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ref/half.h"
#include "runtime/cuda_backend.h"
#include "tests/testing/golden.h"  // RelativeError

namespace ag::testing {

// Skips without a device, unless AUTOGLM_REQUIRE_GPU is set (tools/gpu-check): then it fails.
#define SKIP_WITHOUT_GPU()                                                        \
  if (!runtime::CudaDeviceAvailable()) {                                          \
    if (std::getenv("AUTOGLM_REQUIRE_GPU") != nullptr) FAIL() << "no CUDA device"; \
    GTEST_SKIP() << "no CUDA device";                                             \
  }

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// Random values already rounded to bf16 (so host and device see the same numbers).
inline std::vector<float> RandomBf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = RoundToBF16(dist(rng));
  return v;
}

// A device array holding T (bf16 from float, or int32 / float as is).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    // Poison: a kernel that fails to write an element shows up as NaN / garbage.
    EXPECT_EQ(cudaMemset(p_, 0xFF, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  template <typename U>
  explicit DeviceArray(const std::vector<U>& host) : DeviceArray(host.size()) {
    Upload(host);
  }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;

  template <typename U>
  void Upload(const std::vector<U>& host) {
    std::vector<T> converted(host.size());
    for (size_t i = 0; i < host.size(); ++i) converted[i] = Convert(host[i]);
    EXPECT_EQ(cudaMemcpy(p_, converted.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // As float (bf16 widened) or int.
  auto Download() const {
    std::vector<T> raw(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(raw.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      std::vector<float> out(n_);
      for (size_t i = 0; i < n_; ++i) out[i] = BF16ToFloat(static_cast<__nv_bfloat16_raw>(raw[i]).x);
      return out;
    } else {
      return raw;
    }
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  template <typename U>
  static T Convert(U v) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      __nv_bfloat16_raw raw;
      raw.x = FloatToBF16(static_cast<float>(v));
      return T(raw);
    } else {
      return static_cast<T>(v);
    }
  }
  T* p_ = nullptr;
  size_t n_;
};

using Bf16Array = DeviceArray<__nv_bfloat16>;

// Every element within atol + rtol * |want|, and no NaN.
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isfinite(got[i]) && std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok && reported++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
  }
}

// Rounds every element to bf16 (what a bf16 output holds).
inline std::vector<float> Bf16(std::vector<float> v) {
  for (float& x : v) x = RoundToBF16(x);
  return v;
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_GPU_GPU_TESTING_H_
