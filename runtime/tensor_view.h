// A step operand as a backend's kernel adapter sees it: a pointer and the
// dims resolved for this step (T, S, R, ... bound to the batch's values).
#ifndef AUTOGLM_RUNTIME_TENSOR_VIEW_H_
#define AUTOGLM_RUNTIME_TENSOR_VIEW_H_

#include <cstdint>
#include <vector>

namespace ag::runtime {

struct TensorView {
  void* data = nullptr;
  std::vector<int64_t> dims;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  float* f() const { return as<float>(); }
  int32_t* i() const { return as<int32_t>(); }
  int64_t dim(int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_TENSOR_VIEW_H_
