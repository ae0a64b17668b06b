// Helpers for the CUDA tests: the GPU backend (a test fails, never skips, without a device),
// device buffers filled from host vectors, and the error metrics with their tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda_backend.h"
#include "core/error.h"

namespace pagoda::testing {

// The process's CUDA backend, or null after ADD_FAILURE naming why (no device).
inline CudaBackend* Gpu() {
  try {
    return &DefaultCudaBackend();
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    return nullptr;
  }
}

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Device buffers kept alive for a test.
class DeviceArena {
 public:
  explicit DeviceArena(CudaBackend& gpu) : gpu_(gpu) {}
  // A device view [rows, cols] holding `host` (row-major, contiguous), or NaN when host is empty.
  TensorView Make(int64_t rows, int64_t cols, const std::vector<float>& host = {}) {
    buffers_.push_back(gpu_.Allocate(rows * cols));
    const TensorView v = TensorView::F32(buffers_.back().get(), rows, cols, Device::kCuda);
    if (host.empty()) {
      gpu_.Fill(v, std::nanf(""));
    } else {
      gpu_.Upload(host.data(), v);
    }
    return v;
  }
  std::vector<float> Read(const TensorView& v) {
    std::vector<float> out(static_cast<size_t>(v.rows * v.cols));
    gpu_.CopyToHost(v, out.data());
    return out;
  }

 private:
  CudaBackend& gpu_;
  std::vector<std::shared_ptr<float>> buffers_;
};

// ||got - want|| / ||want|| (L2), infinity when a value is NaN or the sizes differ.
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    const double d = double{got[i]} - want[i];
    num += d * d;
    den += double{want[i]} * want[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Tolerances on ||gpu - cpu|| / ||cpu|| (docs/cuda.md):
//  - f32 arithmetic on both sides (any KV element type: both round the cache to the same
//    bf16/f16 values), differing only in summation order and exp: 2e-5 (seen ~1e-7).
//  - GEMMs with bf16/f16/quantized weights: the GPU multiplies on tensor cores with the
//    activations rounded to bf16 (relative step 2^-9) and f16/quantized weights rounded to bf16;
//    the CPU multiplies f32 activations (its q8_0 kernels may round them to 8 bits): 2e-2
//    (bf16 weights: ~1e-3 seen on random signs).
//  - attention over a bf16/f16 cache on tensor cores (kernels/cuda/flash_attention.h): Q and
//    the probabilities P are rounded to the cache's type (relative step 2^-9 for bf16) before
//    the two products, the CPU keeps them in f32: 1e-2 (~3e-3 expected on random inputs).
constexpr double kF32Tolerance = 2e-5;
constexpr double kBf16GemmTolerance = 2e-2;
constexpr double kBf16AttentionTolerance = 1e-2;

}  // namespace pagoda::testing
