#include "kernels/cuda/elementwise.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/silu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

// One 2-D grid over (rows, column chunks): blockIdx.y is the row (rows up to 65535 per
// launch slice), blockIdx.x the chunk of kThreads columns.
struct Grid {
  dim3 blocks;
  explicit Grid(int64_t rows, int64_t cols)
      : blocks(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows)) {}
};

template <typename F>
__global__ void RowKernel(int64_t row0, int64_t cols, F f) {
  const int64_t r = row0 + blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < cols) f(r, c);
}

template <typename F>
void LaunchRows(int64_t rows, int64_t cols, cudaStream_t stream, F f, const char* name) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int64_t kMaxRows = 65535;
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
    const int64_t n = rows - r0 < kMaxRows ? rows - r0 : kMaxRows;
    RowKernel<<<Grid(n, cols).blocks, kThreads, 0, stream>>>(r0, cols, f);
    ::pagoda::cuda::Check(cudaGetLastError(), name, __FILE__, __LINE__);
  }
}

}  // namespace

void AddRows(const float* y, int64_t ys, float* x, int64_t xs, int64_t rows, int64_t cols, cudaStream_t stream) {
  LaunchRows(rows, cols, stream, [=] __device__(int64_t r, int64_t c) { x[r * xs + c] += y[r * ys + c]; }, "AddRows");
}

void AddBiasRows(const float* bias, float* x, int64_t xs, int64_t rows, int64_t cols, cudaStream_t stream) {
  LaunchRows(rows, cols, stream, [=] __device__(int64_t r, int64_t c) { x[r * xs + c] += bias[c]; }, "AddBiasRows");
}

void SiluMulRows(const float* gate, int64_t gs, const float* up, int64_t us, float* out, int64_t os, int64_t rows,
                 int64_t cols, cudaStream_t stream) {
  LaunchRows(rows, cols, stream,
             [=] __device__(int64_t r, int64_t c) { out[r * os + c] = Silu(gate[r * gs + c]) * up[r * us + c]; },
             "SiluMulRows");
}

namespace {
// Four outputs a thread (16-byte loads of gate and up, one 16-byte store), the same Silu(g) * u.
__global__ void SiluMulPairs16x4Kernel(const float* gu, int64_t gus, float* out, int64_t os, int64_t row0,
                                       int64_t cols) {
  AllowDependentLaunch();  // the down GEMM after it prefetches its weights meanwhile
  GridDependencyWait();    // gate|up from the GEMM ahead
  const int64_t r = row0 + blockIdx.y;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (c >= cols) return;
  const int64_t i = c / 16, j = c % 16;
  const float4 g = *reinterpret_cast<const float4*>(gu + r * gus + 32 * i + j);
  const float4 u = *reinterpret_cast<const float4*>(gu + r * gus + 32 * i + 16 + j);
  *reinterpret_cast<float4*>(out + r * os + c) =
      make_float4(Silu(g.x) * u.x, Silu(g.y) * u.y, Silu(g.z) * u.z, Silu(g.w) * u.w);
}
}  // namespace

void SiluMulPairs16(const float* gu, int64_t gus, float* out, int64_t os, int64_t rows, int64_t cols,
                    cudaStream_t stream, bool pdl) {
  if (rows > 0 && cols > 0 && cols % 4 == 0 && gus % 4 == 0 && os % 4 == 0 && Aligned16(gu) && Aligned16(out)) {
    constexpr int64_t kMaxRows = 65535;
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
      const int64_t n = rows - r0 < kMaxRows ? rows - r0 : kMaxRows;
      const dim3 grid(static_cast<unsigned>((cols / 4 + kThreads - 1) / kThreads), static_cast<unsigned>(n));
      LaunchDependent(SiluMulPairs16x4Kernel, grid, dim3(kThreads), 0, stream, pdl && r0 == 0, gu, gus, out, os, r0,
                      cols);
    }
    return;
  }
  LaunchRows(rows, cols, stream,
             [=] __device__(int64_t r, int64_t c) {
               const int64_t i = c / 16, j = c % 16;
               const float g = gu[r * gus + 32 * i + j], u = gu[r * gus + 32 * i + 16 + j];
               out[r * os + c] = Silu(g) * u;
             },
             "SiluMulPairs16");
}

void CopyRows(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  PAGODA_CUDA_CHECK(cudaMemcpy2DAsync(dst, ds * sizeof(float), src, ss * sizeof(float), cols * sizeof(float), rows,
                                      cudaMemcpyDeviceToDevice, stream));
}

void GatherRows(const float* x, int64_t xs, const int32_t* index, int64_t n, int64_t cols, float* out, int64_t os,
                cudaStream_t stream) {
  LaunchRows(n, cols, stream,
             [=] __device__(int64_t r, int64_t c) { out[r * os + c] = x[static_cast<int64_t>(index[r]) * xs + c]; },
             "GatherRows");
}

void GatherRowsBf16(const uint16_t* x, int64_t xs, const int32_t* index, int64_t n, int64_t cols, float* out,
                    int64_t os, cudaStream_t stream) {
  LaunchRows(n, cols, stream,
             [=] __device__(int64_t r, int64_t c) {
               const uint32_t bits = x[static_cast<int64_t>(index[r]) * xs + c];
               out[r * os + c] = __uint_as_float(bits << 16);
             },
             "GatherRowsBf16");
}

void ScatterRows(const float* x, int64_t xs, const int32_t* index, int64_t n, int64_t cols, float* out, int64_t os,
                 cudaStream_t stream) {
  LaunchRows(n, cols, stream,
             [=] __device__(int64_t r, int64_t c) { out[static_cast<int64_t>(index[r]) * os + c] = x[r * xs + c]; },
             "ScatterRows");
}

void MoeCombine(const float* routed, const float* weights, int64_t n, int64_t k, int64_t cols, float* y, int64_t ys,
                cudaStream_t stream) {
  LaunchRows(n, cols, stream,
             [=] __device__(int64_t t, int64_t c) {
               float r = 0.0f;
               for (int64_t j = 0; j < k; ++j) r += weights[t * k + j] * routed[(t * k + j) * cols + c];
               y[t * ys + c] += r;
             },
             "MoeCombine");
}

void FillRows(float* x, int64_t xs, int64_t rows, int64_t cols, float value, cudaStream_t stream) {
  LaunchRows(rows, cols, stream, [=] __device__(int64_t r, int64_t c) { x[r * xs + c] = value; }, "FillRows");
}

}  // namespace pagoda::cuda
