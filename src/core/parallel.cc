#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace pagoda {
namespace {
std::atomic<int>& ThreadCount() {
  static std::atomic<int> n{std::max(1, static_cast<int>(std::thread::hardware_concurrency()))};
  return n;
}
}  // namespace

int NumThreads() { return ThreadCount().load(); }
void SetNumThreads(int n) { ThreadCount().store(std::max(1, n)); }

void ParallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(NumThreads(), max_chunks));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t begin = n * t / nt;
    const int64_t end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

namespace {

// Threads for n items under a cap (0: NumThreads()); 0 when there is nothing to do.
int TeamFor(int64_t n, int max_threads) {
  if (n <= 0) return 0;
  const int cap = max_threads > 0 ? std::min(max_threads, NumThreads()) : NumThreads();
  return static_cast<int>(std::min<int64_t>(cap, n));
}

void SharedQueue(int64_t n, int threads, FunctionRef<void(int64_t)> fn) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace

void ParallelForDynamic(int64_t n, FunctionRef<void(int64_t)> fn, int max_threads) {
  const int threads = TeamFor(n, max_threads);
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (n > 0x7fffffff) {  // beyond the packed bounds: one shared queue
    SharedQueue(n, threads, fn);
    return;
  }
  // Range r is [front, back) packed in one word (front in the high half): its owner takes the
  // front item, another thread the back one, each with one compare-and-swap.
  struct alignas(64) Range {
    std::atomic<uint64_t> bounds;
  };
  // On the stack for the usual team sizes: a kernel's parallel loop allocates nothing.
  constexpr int kStackRanges = 64;
  Range stack_ranges[kStackRanges];
  std::unique_ptr<Range[]> heap_ranges;
  Range* ranges = stack_ranges;
  if (threads > kStackRanges) {
    heap_ranges.reset(new Range[threads]);
    ranges = heap_ranges.get();
  }
  for (int r = 0; r < threads; ++r) {
    const uint64_t lo = static_cast<uint64_t>(n * r / threads), hi = static_cast<uint64_t>(n * (r + 1) / threads);
    ranges[r].bounds.store(lo << 32 | hi, std::memory_order_relaxed);
  }
  auto take = [&](int r, bool front) -> int64_t {
    uint64_t b = ranges[r].bounds.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t lo = b >> 32, hi = b & 0xffffffffu;
      if (lo >= hi) return -1;
      const uint64_t next = front ? (lo + 1) << 32 | hi : lo << 32 | (hi - 1);
      if (ranges[r].bounds.compare_exchange_weak(b, next, std::memory_order_acq_rel)) {
        return static_cast<int64_t>(front ? lo : hi - 1);
      }
    }
  };
#pragma omp parallel num_threads(threads)
  {
    const int me = omp_get_thread_num();
    for (int64_t i; (i = take(me, true)) >= 0;) fn(i);
    for (int k = 1; k < threads; ++k) {
      const int other = (me + k) % threads;
      for (int64_t i; (i = take(other, false)) >= 0;) fn(i);
    }
  }
}

void ParallelForQueue(int64_t n, FunctionRef<void(int64_t)> fn, int max_threads) {
  const int threads = TeamFor(n, max_threads);
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  SharedQueue(n, threads, fn);
}

}  // namespace pagoda
