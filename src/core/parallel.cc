#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace pagoda {
namespace {
std::atomic<int>& ThreadCount() {
  static std::atomic<int> n{std::max(1, static_cast<int>(std::thread::hardware_concurrency()))};
  return n;
}
}  // namespace

int NumThreads() { return ThreadCount().load(); }
void SetNumThreads(int n) { ThreadCount().store(std::max(1, n)); }

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
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

}  // namespace pagoda
