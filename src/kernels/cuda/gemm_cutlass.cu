#include "kernels/cuda/gemm_cutlass.h"

#include <cute/tensor.hpp>
#include <cutlass/bfloat16.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch_info.h"

namespace pagoda::cuda {
namespace {

using namespace cute;

// bf16 A (row-major, k contiguous) times bf16 B stored [n, k] (column-major for CUTLASS, k
// contiguous: the TN layout the TMA loads best), f32 accumulators, f32 C and D row-major.
// The cooperative schedule: a producer warp issues the TMA loads into a ring of stages completing
// on mbarriers, two consumer warpgroups share each tile's wgmma chain (m64n*k16, k in order).
template <class TileShape, class ClusterShape, class Scheduler,
          class KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative,
          class EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative>
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
      LayoutC, kAlignCD, EpilogueSchedule>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  static constexpr bool kSplitK = std::is_same_v<Scheduler, cutlass::gemm::StreamKScheduler>;
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
    if constexpr (kSplitK) {
      // Split-K with the deterministic reduction: the first split stores its sums, each next one
      // waits for its predecessor and adds its own, the last adds the rest to its accumulators
      // and runs the epilogue: ((c0 + c1) + c2) + c3 in k order.
      using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
      args.scheduler.splits = p.splits;
      args.scheduler.decomposition_mode = Mode::SplitK;
      args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
    }
    return args;
  }

  static size_t Workspace(const GemmCutlassParams& p, int sm_count) {
    return Device::get_workspace_size(Arguments(p, sm_count));
  }

  static bool Supported(const GemmCutlassParams& p, int sm_count) {
    return Device::can_implement(Arguments(p, sm_count)) == cutlass::Status::kSuccess &&
           Workspace(p, sm_count) <= p.workspace_bytes;
  }

  static void Run(const GemmCutlassParams& p, int sm_count, cudaStream_t stream) {
    Device gemm;
    const auto args = Arguments(p, sm_count);
    const size_t need = Device::get_workspace_size(args);
    PAGODA_CHECK(need <= p.workspace_bytes)
        << "GemmCutlass: workspace of " << p.workspace_bytes << " bytes, " << need << " needed";
    // The split-K locks are zeroed here (a memset on the stream), the partial sums need not be.
    cutlass::Status status = gemm.initialize(args, p.workspace, stream);
    if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
    PAGODA_CHECK(status == cutlass::Status::kSuccess)
        << "GemmCutlass: " << cutlassGetStatusString(status) << " (m " << p.m << ", n " << p.n << ", k " << p.k << ")";
    PAGODA_CUDA_CHECK_LAUNCH("GemmCutlass");
  }
};

// 128 x 256 tiles in clusters of two along m (each B tile multicast to both blocks) for many
// tiles; 128 x 128 where the large tiles would leave SMs idle (fewer rows, narrow weights).
// Split-K runs the same tiles with the stream-K scheduler in its split-K mode.
using LargeShape = Shape<_128, _256, _64>;
using LargeCluster = Shape<_2, _1, _1>;
using SmallShape = Shape<_128, _128, _64>;
using SmallCluster = Shape<_1, _1, _1>;
using LargeGemm = Sm90Gemm<LargeShape, LargeCluster, void>;
using SmallGemm = Sm90Gemm<SmallShape, SmallCluster, void>;
using LargeSplitGemm = Sm90Gemm<LargeShape, LargeCluster, cutlass::gemm::StreamKScheduler>;
using SmallSplitGemm = Sm90Gemm<SmallShape, SmallCluster, cutlass::gemm::StreamKScheduler>;
// The chained products (one k chunk each, the f32 running sum read as C and written as D): the
// ping-pong schedule, each consumer warpgroup on its own 128 x 128 tile, so that one's epilogue
// (the sum's read and write, heavy against a short k) overlaps the other's mainloop (H200,
// 4096 rows: q|k|v 405 -> 456 TFLOP/s, o 373 -> 411, down 499 -> 531; the unchained gate|up,
// k 4096, stays faster on the cooperative 128 x 256 tiles: 651 against 630).
using ChainGemm = Sm90Gemm<SmallShape, LargeCluster, void, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                           cutlass::epilogue::TmaWarpSpecialized>;

bool UseLarge(const GemmCutlassParams& p) {
  const int64_t large_tiles = (p.m + 127) / 128 * ((p.n + 255) / 256);
  return large_tiles >= SmCount();
}

// Calls f.template operator()<G>() with the kernel type for p.
template <class F>
auto Dispatch(const GemmCutlassParams& p, F&& f) {
  const bool large = UseLarge(p);
  if (p.splits > 1) {
    return large ? f.template operator()<LargeSplitGemm>() : f.template operator()<SmallSplitGemm>();
  }
  if (p.chained) return f.template operator()<ChainGemm>();
  return large ? f.template operator()<LargeGemm>() : f.template operator()<SmallGemm>();
}

}  // namespace

bool GemmCutlassSupported(const GemmCutlassParams& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  if (!Aligned16(p.a) || !Aligned16(p.b) || !Aligned16(p.d) || (p.add_c && !Aligned16(p.c))) return false;
  if (p.lda % 8 != 0 || p.ldb % 8 != 0 || p.ldd % 4 != 0 || (p.add_c && p.ldc % 4 != 0)) return false;
  // Split-K cuts k into equal runs of whole 64-wide k-tiles.
  if (p.splits > 1 && p.k % (p.splits * 64) != 0) return false;
  return Dispatch(p, [&]<class G>() { return G::Supported(p, SmCount()); });
}

size_t GemmCutlassWorkspace(const GemmCutlassParams& p) {
  if (p.splits <= 1) return 0;
  return Dispatch(p, [&]<class G>() { return G::Workspace(p, SmCount()); });
}

void GemmCutlass(const GemmCutlassParams& p, cudaStream_t stream) {
  Dispatch(p, [&]<class G>() { G::Run(p, SmCount(), stream); });
}

}  // namespace pagoda::cuda
