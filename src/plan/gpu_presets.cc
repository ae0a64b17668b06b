#include "plan/gpu_presets.h"

#include "core/error.h"

namespace pagoda {
namespace {

constexpr int64_t kMiB = 1024 * 1024;
constexpr double kTB = 1e12;
constexpr double kTFlops = 1e12;

// Sources (docs/planning.md): NVIDIA H100, H200, HGX B200, A100, L4 datasheets; the Ada
// Lovelace architecture whitepaper (RTX 4090).
const std::vector<GpuSpec>& Table() {
  static const std::vector<GpuSpec> table = {
      // H100 SXM5 80GB: 3.35 TB/s HBM3, 989 TF bf16, 1979 TF fp8 (dense).
      {"h100", 81559 * kMiB, 3.35 * kTB, 989.4 * kTFlops, 1978.9 * kTFlops},
      // H200 SXM 141GB: 4.8 TB/s HBM3e, same tensor cores as H100 SXM.
      {"h200", 143771 * kMiB, 4.8 * kTB, 989.4 * kTFlops, 1978.9 * kTFlops},
      // B200 (HGX B200, per GPU) 180GB: 8 TB/s HBM3e, 2.25 PF bf16, 4.5 PF fp8 dense.
      {"b200", 183359 * kMiB, 8.0 * kTB, 2250 * kTFlops, 4500 * kTFlops},
      // A100 SXM 80GB: 2.039 TB/s HBM2e, 312 TF bf16, no fp8.
      {"a100-80gb", 81920 * kMiB, 2.039 * kTB, 312 * kTFlops, 0},
      // A100 SXM 40GB: 1.555 TB/s HBM2, 312 TF bf16, no fp8.
      {"a100-40gb", 40960 * kMiB, 1.555 * kTB, 312 * kTFlops, 0},
      // L4 24GB: 300 GB/s GDDR6, 121 TF bf16, 242.5 TF fp8 (dense).
      {"l4", 23034 * kMiB, 0.300 * kTB, 121 * kTFlops, 242.5 * kTFlops},
      // GeForce RTX 4090 24GB: 1008 GB/s GDDR6X, 165.2 TF bf16 / 330.3 TF fp8 with FP32
      // accumulate (dense).
      {"rtx-4090", 24564 * kMiB, 1.008 * kTB, 165.2 * kTFlops, 330.3 * kTFlops},
  };
  return table;
}

}  // namespace

std::vector<std::string> GpuPresetNames() {
  std::vector<std::string> names;
  for (const auto& g : Table()) names.push_back(g.name);
  return names;
}

GpuSpec GetGpuPreset(std::string_view name) {
  for (const auto& g : Table()) {
    if (g.name == name) return g;
  }
  std::string known;
  for (const auto& n : GpuPresetNames()) known += (known.empty() ? "" : ", ") + n;
  ThrowInvalidArgument("--gpu: unknown GPU '" + std::string(name) + "' (known: " + known +
                       "; or give --gpu-memory, --gpu-bandwidth and --gpu-tflops)");
}

}  // namespace pagoda
