// The online-softmax state of one query row, shared by the CUDA attention kernels: running
// max m, running sum l and the output accumulator, rescaled when a tile raises the max.
// A thread block of kThreads processes a tile of up to kThreads keys: scores[j] holds the
// tile's scaled scores on entry; AddTile turns them into probabilities in shared memory and
// adds p_j * v_j to each thread's accumulator values (dimensions d = threadIdx.x + i * kThreads).
#pragma once

#include <cfloat>

namespace pagoda::cuda {

template <int kThreads, int kMaxPerThread>
struct OnlineSoftmax {
  float m = -FLT_MAX;
  float l = 0.0f;
  float acc[kMaxPerThread] = {};

  // REQUIRES: scores[0, n) written and a barrier since; all threads call it. value(j, d)
  // returns V[key j][dimension d] as f32.
  template <typename ValueFn>
  __device__ void AddTile(float* scores, int n, int dim_v, ValueFn value) {
    float tile_max = -FLT_MAX;
    for (int j = 0; j < n; ++j) tile_max = fmaxf(tile_max, scores[j]);
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);
    __syncthreads();  // everyone has read the scores before they become probabilities
    for (int j = threadIdx.x; j < n; j += kThreads) scores[j] = expf(scores[j] - m_new);
    __syncthreads();
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += scores[j];
    l = l * correction + sum;
#pragma unroll
    for (int i = 0; i < kMaxPerThread; ++i) {
      const int d = threadIdx.x + i * kThreads;
      float a = acc[i] * correction;
      if (d < dim_v) {
        for (int j = 0; j < n; ++j) a += scores[j] * value(j, d);
      }
      acc[i] = a;
    }
    m = m_new;
    __syncthreads();  // the probabilities are read before the next tile's scores overwrite them
  }

  __device__ void Store(float* out, int dim_v) const {
#pragma unroll
    for (int i = 0; i < kMaxPerThread; ++i) {
      const int d = threadIdx.x + i * kThreads;
      if (d < dim_v) out[d] = acc[i] / l;
    }
  }
};

}  // namespace pagoda::cuda
