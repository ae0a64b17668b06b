#include "kernels/cuda/rope.h"

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

// One thread per (token, head, pair). The angle and its cos/sin in float64, rounded to f32
// after the magnitude, as kernels/cpu/rope.cc's table; then the same f32 rotation.
__global__ void RopeKernel(RopeApplyParams p) {
  const int64_t half = p.dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.num_heads * half) return;
  const int64_t t = blockIdx.y;
  const int64_t h = i / half, j = i % half;
  const double angle = static_cast<double>(p.positions[t]) * p.inv_freq[j];
  const float c = static_cast<float>(cos(angle) * p.magnitude);
  const float s = static_cast<float>(sin(angle) * p.magnitude);
  float* v = p.x + t * p.row_stride + h * p.head_stride + p.offset;
  const int64_t i0 = p.interleaved ? 2 * j : j;
  const int64_t i1 = p.interleaved ? 2 * j + 1 : j + half;
  const float a = v[i0], b = v[i1];
  v[i0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  v[i1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

}  // namespace

void ApplyRope(const RopeApplyParams& p, cudaStream_t stream) {
  const int64_t work = p.num_heads * (p.dim / 2);
  if (p.num_tokens <= 0 || work <= 0) return;
  PAGODA_CHECK(p.num_tokens <= 65535) << "ApplyRope: more than 65535 tokens in one launch";
  const dim3 grid(static_cast<unsigned>((work + 127) / 128), static_cast<unsigned>(p.num_tokens));
  RopeKernel<<<grid, 128, 0, stream>>>(p);
  PAGODA_CUDA_CHECK_LAUNCH("RopeKernel");
}

}  // namespace pagoda::cuda
