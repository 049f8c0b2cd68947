// Splitting a big host loop over the cores: image preprocessing, staging a step's inputs, reading
// back image rows, drawing and quantizing weights. Header-only and dependency-free (std::thread
// only), so that the image room and the runtime share it.
//
// Why threads at all for memory-bound loops: a fresh buffer of tens of megabytes costs more in page
// faults than in arithmetic (measured on the development machine: 63 MB first touched by one thread
// 41 ms, by two 21 ms), and faults on different pages are served in parallel.
#ifndef AUTOGLM_KERNELS_REF_PARALLEL_H_
#define AUTOGLM_KERNELS_REF_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace ag {

// How many threads a loop of `n` items gets when each should have at least `min_items`: one when
// the loop is small (starting a thread costs tens of microseconds), at most the cores.
inline int64_t ThreadsFor(int64_t n, int64_t min_items) {
  const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return std::clamp<int64_t>(n / std::max<int64_t>(min_items, 1), 1, cores);
}

// Calls fn(begin, end, part) over contiguous parts of [0, n), `parts` of them (the calling thread
// runs part 0), and returns when all have: parts see disjoint ranges, so a loop whose items write
// only their own outputs gives the same result whatever the split.
template <typename Fn>
void ParallelParts(int64_t n, int64_t parts, Fn&& fn) {
  parts = std::clamp<int64_t>(parts, 1, std::max<int64_t>(n, 1));
  if (parts == 1) {
    fn(int64_t{0}, n, int64_t{0});
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(parts - 1));
  for (int64_t p = 1; p < parts; ++p) workers.emplace_back([&fn, n, parts, p] { fn(n * p / parts, n * (p + 1) / parts, p); });
  fn(int64_t{0}, n / parts, int64_t{0});
  for (std::thread& w : workers) w.join();
}

// Elements a thread copies or converts at least: a few hundred microseconds of work, next to the
// tens it takes to start the thread.
inline constexpr int64_t kMinCopyPerThread = int64_t{1} << 18;

// Calls fn(begin, end) over [0, n) split so that each thread has at least `min_items` items.
template <typename Fn>
void ParallelFor(int64_t n, int64_t min_items, Fn&& fn) {
  ParallelParts(n, ThreadsFor(n, min_items), [&fn](int64_t begin, int64_t end, int64_t) { fn(begin, end); });
}

// An allocator whose resize leaves trivial values uninitialised (it value-initialises nothing), so that
// the parallel loop that fills a big buffer is the first to touch its pages, on every core at once.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A host buffer of tens of megabytes (an image's patches, its encoded rows): resize does not write it.
template <typename T>
using UninitializedVector = std::vector<T, UninitializedAllocator<T>>;

}  // namespace ag

#endif  // AUTOGLM_KERNELS_REF_PARALLEL_H_
