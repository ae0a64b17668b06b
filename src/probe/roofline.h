// Bounds of this machine, measured at run time, for roofline reports beside measured
// kernel speed (`pagoda bench latency`, bench/matmul_bench.cc):
//   decode is bounded by memory bandwidth (bytes read per token / GB/s),
//   prefill by the dot-product peak of the instructions its kernels use.
// Each measure runs on pagoda::NumThreads() threads (one item per thread via
// ParallelFor), takes the best of a few repeats, and lasts roughly 0.1-0.5 s.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

// STREAM-style read bandwidth in GB/s (1e9 bytes/s): every thread sums its share of a
// buffer of `bytes` with vector loads. bytes = 0: ReadProbeBytes(), far larger than the
// last-level cache, so the figure is memory's, not the cache's.
double MeasureReadBandwidthGBs(int64_t bytes = 0, int repeats = 5);

// The same read, as an object that keeps its buffer (allocated and first touched once by the
// threads that read it), for a bound sampled many times within one run: `pagoda bench
// latency` reads it between decode steps, so the bound sees the machine the decode saw.
class ReadProbe {
 public:
  explicit ReadProbe(int64_t bytes = 0);  // 0: ReadProbeBytes()
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;
  int64_t bytes() const { return 4 * n_; }
  // One pass: every thread sums its share once; returns the pass's seconds.
  double PassSeconds();
  // The best of `repeats` passes, in GB/s (MeasureReadBandwidthGBs).
  double BestGBs(int repeats);

 private:
  float* buf_ = nullptr;
  int64_t n_ = 0;  // floats
};

// The last-level cache size from sysfs (else sysconf), 0 if unknown.
int64_t LastLevelCacheBytes();
// max(1 GiB, 4 x the last-level cache), at most a quarter of physical memory.
int64_t ReadProbeBytes();

// Peak f32 FMA throughput in GFLOP/s (2 flops per multiply-add), with the vectors of the
// MatMul level in use (AVX-512, AVX2+FMA, else scalar; PAGODA_MATMUL_ISA or the best the
// CPU has). The bf16 and int8 peaks below follow the same level. `repeats`: the best of that
// many passes (one pass: ~10 ms; `pagoda bench latency` samples single passes between a
// prefill's layers).
double MeasurePeakFmaGflops(int repeats = 3);

// Peak vdpbf16ps throughput in GFLOP/s (2 flops per bf16 multiply-add); 0 when the
// CPU lacks AVX512_BF16.
double MeasurePeakBf16Gflops();

// Peak int8 dot-product throughput in GOP/s (2 ops per u8 x s8 multiply-add) with the
// instructions the quantized MatMul uses: vpdpbusd (AVX-512 VNNI), else
// vpmaddubsw + vpmaddwd + vpaddd (AVX2); 0 without AVX2.
double MeasurePeakInt8Gops(int repeats = 3);

struct RooflineBounds {
  double read_gbs = 0;
  double fma_gflops = 0;
  double bf16_gflops = 0;
  double int8_gops = 0;
  std::string isa;  // MatMulIsaName()
};
RooflineBounds MeasureRoofline();
// The compute peaks only (fma, bf16, int8; read_gbs = 0): a fraction of a second.
RooflineBounds MeasureComputePeaks();

}  // namespace pagoda
