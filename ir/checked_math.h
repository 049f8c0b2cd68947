// Overflow-safe size arithmetic for numbers that come from outside (plan
// files, configs, checkpoints, flags). Every size the runtime allocates or
// indexes with is at most kMaxSize, so sums and products of two checked sizes
// cannot wrap an int64 either.
#ifndef AUTOGLM_IR_CHECKED_MATH_H_
#define AUTOGLM_IR_CHECKED_MATH_H_

#include <cstdint>
#include <optional>

namespace ag::ir {

// 2^48 (256 TiB): beyond any element or byte count a model needs, far below int64's range.
inline constexpr int64_t kMaxSize = int64_t{1} << 48;

// a * b, or nullopt when either is negative or the product exceeds kMaxSize.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > kMaxSize) return std::nullopt;
  return r;
}

// a + b, or nullopt when either is negative or the sum exceeds kMaxSize.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > kMaxSize) return std::nullopt;
  return r;
}

// The product of all factors, or nullopt as for CheckedMul.
template <typename Range>
std::optional<int64_t> CheckedProduct(const Range& factors) {
  std::optional<int64_t> n = 1;
  for (int64_t f : factors) {
    n = CheckedMul(*n, f);
    if (!n) return std::nullopt;
  }
  return n;
}

}  // namespace ag::ir

#endif  // AUTOGLM_IR_CHECKED_MATH_H_
