#include "probe/roofline.h"

// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"

#define PAGODA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PAGODA_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl")))
#define PAGODA_VNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))
#define PAGODA_BF16 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps results alive so the compiler cannot drop the measured loops.
std::atomic<double> g_sink{0.0};

bool HasAvx2() {
  const CpuFeatures& f = GetCpuFeatures();
  return f.avx2 && f.fma;
}
bool HasAvx512() {
  const CpuFeatures& f = GetCpuFeatures();
  return f.avx512f && f.avx512bw && f.avx512vl;
}
// The compute peaks are those of the instructions the MatMul level in use runs
// (PAGODA_MATMUL_ISA=avx2 on an AVX-512 machine measures the AVX2 loops).
bool KernelsAvx512() { return HasAvx512() && matmul_internal::DefaultIsaLevel() == matmul_internal::IsaLevel::kAvx512; }
bool KernelsAvx2() {
  return HasAvx2() && static_cast<int>(matmul_internal::DefaultIsaLevel()) >= static_cast<int>(matmul_internal::IsaLevel::kAvx2);
}

// ---- read bandwidth ----------------------------------------------------------------
//
// Software prefetch 2 KiB ahead, as the GEMV kernels do: the hardware prefetchers stop
// at 4 KiB pages, and without it a single stream per core under-reports what the
// memory system delivers. (Prefetches past the end are harmless: they never fault.)
constexpr int64_t kPrefetchFloats = 512;

PAGODA_AVX512 double SumAvx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats + 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats + 32), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats + 48), _MM_HINT_T0);
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

PAGODA_AVX2 double SumAvx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchFloats + 16), _MM_HINT_T0);
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

double SumScalar(const float* p, int64_t n) {
  float a[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

// Runs fn(thread_index) once on each of NumThreads() threads; returns seconds.
template <typename Fn>
double TimeOnAllThreads(Fn&& fn) {
  const int threads = NumThreads();
  const auto start = Clock::now();
  ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename Fn>
double BestRate(double work, int repeats, Fn&& fn) {
  double best = 0;
  for (int r = 0; r < std::max(1, repeats); ++r) best = std::max(best, work / TimeOnAllThreads(fn));
  return best;
}

// ---- peak dot products -------------------------------------------------------------

constexpr int64_t kIters = 4 << 20;

PAGODA_AVX512 double FmaLoopAvx512() {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(0.001f * j);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kIters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  return _mm512_reduce_add_ps(s);
}

PAGODA_AVX2 double FmaLoopAvx2() {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(0.001f * j);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kIters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float l[8];
  _mm256_store_ps(l, s);
  return l[0] + l[7];
}

double FmaLoopScalar() {
  float a[12];
  for (int j = 0; j < 12; ++j) a[j] = 0.001f * j;
  for (int64_t i = 0; i < kIters / 8; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = a[j] * 0.999999f + 1e-7f;
  return a[0] + a[11];
}

PAGODA_BF16 double Bf16Loop() {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(0.001f * j);
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380);  // ~6e-8
  for (int64_t i = 0; i < kIters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm512_dpbf16_ps(a[j], x, y);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  return _mm512_reduce_add_ps(s);
}

PAGODA_VNNI double VnniLoop() {
  __m512i a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_epi32(j);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < kIters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm512_dpbusd_epi32(a[j], u, s);
  // The sum in 64-bit lanes: 12 accumulators of ~-1e8 per lane overflow an int32 total (signed
  // overflow, which UBSan reports on a machine that runs this loop).
  __m512i t = _mm512_setzero_si512();
  for (int j = 0; j < 12; ++j) {
    t = _mm512_add_epi64(t, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(a[j])));
    t = _mm512_add_epi64(t, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(a[j], 1)));
  }
  return static_cast<double>(_mm512_reduce_add_epi64(t));
}

PAGODA_AVX2 double MaddubsLoop() {
  __m256i a[8];
  for (int j = 0; j < 8; ++j) a[j] = _mm256_set1_epi32(j);
  __m256i u = _mm256_set1_epi8(3);
  const __m256i s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < kIters; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __asm__ volatile("" : "+x"(u));  // an opaque operand: one product per accumulator
      a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    }
  }
  __m256i t = a[0];
  for (int j = 1; j < 8; ++j) t = _mm256_add_epi32(t, a[j]);
  alignas(32) int32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), t);
  return l[0] + l[7];
}

}  // namespace

int64_t LastLevelCacheBytes() {
  int64_t best = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string sz;
    if (!(level >> lv) || !(size >> sz) || sz.empty()) continue;
    int64_t v = std::atoll(sz.c_str());
    const char unit = sz.back();
    if (unit == 'K') v <<= 10;
    if (unit == 'M') v <<= 20;
    if (unit == 'G') v <<= 30;
    if (lv >= 2) best = std::max(best, v);
  }
  if (best == 0) best = std::max<long>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
  return best;
}

int64_t ReadProbeBytes() {
  int64_t bytes = std::max<int64_t>(int64_t{1} << 30, 4 * LastLevelCacheBytes());
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) bytes = std::min<int64_t>(bytes, int64_t{pages} * page / 4);
  return std::max<int64_t>(bytes, int64_t{64} << 20);
}

ReadProbe::ReadProbe(int64_t bytes) {
  if (bytes <= 0) bytes = ReadProbeBytes();
  n_ = std::max<int64_t>(bytes / 4 / 64 * 64, 64);
  buf_ = static_cast<float*>(std::aligned_alloc(64, n_ * 4));
  if (buf_ == nullptr) {
    ThrowError(ErrorCode::kResourceExhausted, "read probe: cannot allocate " + std::to_string(n_ * 4) + " bytes");
  }
  const int threads = NumThreads();
  // First touch by the threads that read, so pages are placed near them.
  ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t lo = n_ * i / threads / 64 * 64, hi = n_ * (i + 1) / threads / 64 * 64;
      std::memset(buf_ + lo, 0, (hi - lo) * 4);
    }
  });
}

ReadProbe::~ReadProbe() { std::free(buf_); }

double ReadProbe::PassSeconds() {
  double (*sum)(const float*, int64_t) = HasAvx512() ? &SumAvx512 : HasAvx2() ? &SumAvx2 : &SumScalar;
  const int threads = NumThreads();
  return TimeOnAllThreads([&](int64_t i) {
    const int64_t lo = n_ * i / threads / 64 * 64, hi = n_ * (i + 1) / threads / 64 * 64;
    g_sink = g_sink + sum(buf_ + lo, hi - lo);
  });
}

double ReadProbe::BestGBs(int repeats) {
  double best = 0;
  for (int r = 0; r < std::max(1, repeats); ++r) best = std::max(best, bytes() / 1e9 / PassSeconds());
  return best;
}

double MeasureReadBandwidthGBs(int64_t bytes, int repeats) { return ReadProbe(bytes).BestGBs(repeats); }

double MeasurePeakFmaGflops(int repeats) {
  const int threads = NumThreads();
  if (KernelsAvx512()) {
    return BestRate(threads * 2.0 * kIters * 12 * 16 / 1e9, repeats, [](int64_t) { g_sink = g_sink + FmaLoopAvx512(); });
  }
  if (KernelsAvx2()) {
    return BestRate(threads * 2.0 * kIters * 12 * 8 / 1e9, repeats, [](int64_t) { g_sink = g_sink + FmaLoopAvx2(); });
  }
  return BestRate(threads * 2.0 * (kIters / 8) * 12 / 1e9, repeats, [](int64_t) { g_sink = g_sink + FmaLoopScalar(); });
}

double MeasurePeakBf16Gflops() {
  if (!KernelsAvx512() || !GetCpuFeatures().avx512_bf16) return 0;
  return BestRate(NumThreads() * 2.0 * kIters * 12 * 32 / 1e9, 3, [](int64_t) { g_sink = g_sink + Bf16Loop(); });
}

double MeasurePeakInt8Gops(int repeats) {
  const int threads = NumThreads();
  if (KernelsAvx512() && GetCpuFeatures().avx512_vnni) {
    return BestRate(threads * 2.0 * kIters * 12 * 64 / 1e9, repeats, [](int64_t) { g_sink = g_sink + VnniLoop(); });
  }
  if (KernelsAvx2()) {
    return BestRate(threads * 2.0 * kIters * 8 * 32 / 1e9, repeats, [](int64_t) { g_sink = g_sink + MaddubsLoop(); });
  }
  return 0;
}

RooflineBounds MeasureRoofline() {
  RooflineBounds b = MeasureComputePeaks();
  b.read_gbs = MeasureReadBandwidthGBs();
  return b;
}

RooflineBounds MeasureComputePeaks() {
  RooflineBounds b;
  b.fma_gflops = MeasurePeakFmaGflops();
  b.bf16_gflops = MeasurePeakBf16Gflops();
  b.int8_gops = MeasurePeakInt8Gops();
  b.isa = std::string(MatMulIsaName());
  return b;
}

}  // namespace pagoda
