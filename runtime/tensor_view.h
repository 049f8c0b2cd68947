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

// A slice along `axis` seen as a column slice of a 2-D matrix: `rows` rows of
// `cols` elements, keeping [start, start + size) of each.
struct ColumnSlice {
  int64_t rows, cols, start, size;
};
inline ColumnSlice AsColumnSlice(const TensorView& x, int64_t axis, int64_t start, int64_t size) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dims[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < x.dims.size(); ++i) inner *= x.dims[i];
  return {outer, x.dims[static_cast<size_t>(axis)] * inner, start * inner, size * inner};
}

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_TENSOR_VIEW_H_
