#include "kernels/cuda/gemm_cutlass.h"

#include <cute/tensor.hpp>
#include <cutlass/bfloat16.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

using namespace cute;

// bf16 A (row-major, k contiguous) times bf16 B stored [n, k] (column-major for CUTLASS, k
// contiguous: the TN layout the TMA loads best), f32 accumulators, f32 C and D row-major.
// The cooperative schedule: a producer warp issues the TMA loads into a ring of stages completing
// on mbarriers, two consumer warpgroups share each tile's wgmma chain (m64n*k16, k in order).
template <class TileShape, class ClusterShape>
struct Sm90Gemm {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutC = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 8;  // 16 bytes of bf16
  static constexpr int kAlignCD = 4;  // 16 bytes of f32

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, float, LayoutC, kAlignCD, float,
      LayoutC, kAlignCD, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Device::Arguments Arguments(const GemmCutlassParams& p, int sm_count) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    const StrideA sa = make_stride(p.lda, Int<1>{}, p.lda * p.m);
    const StrideB sb = make_stride(p.ldb, Int<1>{}, p.ldb * p.n);
    const StrideC sc = make_stride(p.ldc, Int<1>{}, p.ldc * p.m);
    const StrideD sd = make_stride(p.ldd, Int<1>{}, p.ldd * p.m);
    cutlass::KernelHardwareInfo hw;
    hw.sm_count = sm_count;
    typename Device::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m, n, k, 1},
        {reinterpret_cast<const ElementA*>(p.a), sa, reinterpret_cast<const ElementB*>(p.b), sb},
        {{1.0f, p.add_c ? 1.0f : 0.0f}, p.add_c ? p.c : p.d, sc, p.d, sd},
        hw};
    return args;
  }

  static bool Supported(const GemmCutlassParams& p, int sm_count) {
    return Device::can_implement(Arguments(p, sm_count)) == cutlass::Status::kSuccess &&
           Device::get_workspace_size(Arguments(p, sm_count)) == 0;
  }

  static void Run(const GemmCutlassParams& p, int sm_count, cudaStream_t stream) {
    Device gemm;
    const auto args = Arguments(p, sm_count);
    cutlass::Status status = gemm.initialize(args, nullptr, stream);
    if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
    PAGODA_CHECK(status == cutlass::Status::kSuccess)
        << "GemmCutlass: " << cutlassGetStatusString(status) << " (m " << p.m << ", n " << p.n << ", k " << p.k << ")";
    PAGODA_CUDA_CHECK_LAUNCH("GemmCutlass");
  }
};

// 128 x 256 tiles in clusters of two along m (each B tile multicast to both blocks) for many
// tiles; 128 x 128 where the large tiles would leave SMs idle (fewer rows, narrow weights).
using LargeGemm = Sm90Gemm<Shape<_128, _256, _64>, Shape<_2, _1, _1>>;
using SmallGemm = Sm90Gemm<Shape<_128, _128, _64>, Shape<_1, _1, _1>>;

int SmCount() {
  static const int count = [] {
    int device = 0, sms = 0;
    PAGODA_CUDA_CHECK(cudaGetDevice(&device));
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

bool UseLarge(const GemmCutlassParams& p) {
  const int64_t large_tiles = (p.m + 127) / 128 * ((p.n + 255) / 256);
  return large_tiles >= SmCount();
}

bool Aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool GemmCutlassSupported(const GemmCutlassParams& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  if (!Aligned(p.a) || !Aligned(p.b) || !Aligned(p.d) || (p.add_c && !Aligned(p.c))) return false;
  if (p.lda % 8 != 0 || p.ldb % 8 != 0 || p.ldd % 4 != 0 || (p.add_c && p.ldc % 4 != 0)) return false;
  return UseLarge(p) ? LargeGemm::Supported(p, SmCount()) : SmallGemm::Supported(p, SmCount());
}

void GemmCutlass(const GemmCutlassParams& p, cudaStream_t stream) {
  if (UseLarge(p)) {
    LargeGemm::Run(p, SmCount(), stream);
  } else {
    SmallGemm::Run(p, SmCount(), stream);
  }
}

}  // namespace pagoda::cuda
