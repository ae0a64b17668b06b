// GPU presets for the planner: memory, HBM bandwidth and dense tensor-core throughput
// from the vendors' datasheets (sources in docs/planning.md).
//
// memory_bytes is the capacity the driver reports (nvidia-smi memory.total), which for
// some parts differs from the marketing "GB" (an H100 "80GB" has 81559 MiB). Throughputs
// are dense (no 2:4 sparsity) with FP32 accumulation where the vendor distinguishes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

struct GpuSpec {
  std::string name;
  int64_t memory_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s
  double bf16_flops = 0;        // dense FLOP/s
  double fp8_flops = 0;         // dense FLOP/s; 0 when the GPU has no FP8 tensor cores
  // FLOP/s for matrices stored in one or two bytes: fp8 weights run at fp8 speed where
  // the GPU has it (else they are upcast and run at bf16 speed).
  double FlopsFor(bool fp8_weights) const {
    return fp8_weights && fp8_flops > 0 ? fp8_flops : bf16_flops;
  }
};

// Throws InvalidArgument listing the known names.
GpuSpec GetGpuPreset(std::string_view name);
std::vector<std::string> GpuPresetNames();

}  // namespace pagoda
