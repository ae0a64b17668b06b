// Threading for kernels: a fixed worker count and a static ParallelFor over
// independent items (OpenMP underneath).
//
// Determinism contract: ParallelFor only splits work into items that are computed
// independently (output rows, heads); it never splits a reduction. Every result is
// therefore bit-identical whatever the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace pagoda {

// Number of worker threads kernels use (>= 1). Default: the hardware's core count.
int NumThreads();
void SetNumThreads(int n);

// Calls fn(begin, end) on disjoint ranges covering [0, n), in parallel.
// `grain` is the smallest range worth giving one thread.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace pagoda
