// Threading for kernels: a fixed worker count and a static ParallelFor over
// independent items (OpenMP underneath).
//
// Determinism contract: ParallelFor only splits work into items that are computed
// independently (output rows, heads); it never splits a reduction. Every result is
// therefore bit-identical whatever the thread count.
#pragma once

#include <cstdint>

#include "core/function_ref.h"

namespace pagoda {

// Number of worker threads kernels use (>= 1). Default: the hardware's core count.
int NumThreads();
void SetNumThreads(int n);

// Calls fn(begin, end) on disjoint ranges covering [0, n), in parallel.
// `grain` is the smallest range worth giving one thread.
void ParallelFor(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

// Calls fn(i) once for every i in [0, n), balancing the threads as they run: [0, n) is split
// into one contiguous range per thread, each thread takes the items of its own range in
// increasing order (so consecutive items of one thread are neighbours in memory: a streaming
// kernel keeps one stream), and a thread whose range is done takes the remaining items of the
// others from their ends. For items of unequal or unpredictable cost: on a shared machine one
// core may run slower than the other for a while, and a static split then leaves the faster
// one waiting at the end. Which thread computes an item must not change its result (the
// same contract as ParallelFor).
// `max_threads` > 0 caps the threads (small work: waking a thread costs more than it saves).
void ParallelForDynamic(int64_t n, FunctionRef<void(int64_t)> fn, int max_threads = 0);

// Calls fn(i) once for every i in [0, n), the items handed out one at a time in increasing
// order to whichever thread is free (one shared queue). Give the items longest first and the
// threads end together (longest-processing-time first). Same contract as ParallelFor.
void ParallelForQueue(int64_t n, FunctionRef<void(int64_t)> fn, int max_threads = 0);

}  // namespace pagoda
