// FlashAttention's launches: the mma.sync kernel's shapes (flash_kernel.cuh) and the wgmma
// kernel (flash_wgmma.cu) by KV format and head dim, the one-warp shapes' buffers and copies.
#include "kernels/cuda/flash_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/flash_kernel.cuh"
#include "kernels/cuda/flash_kernel_args.cuh"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_limit.cuh"

namespace pagoda::cuda {
namespace {

using namespace flash;  // the kernels (flash_kernel.cuh), their arguments and geometry

template <typename KV, int HD, int kWarps, bool kSplit, bool kPing, bool kRows8 = false>
void LaunchKernel(const KernelArgs& a, dim3 grid, cudaStream_t stream, bool pdl) {
  using Geo = Geometry<HD>;
  constexpr int kSmem = KVSmemBytes<HD, kWarps, kSplit, kPing, KV>() +
                        (kSplit ? 0 : Geo::kOutFloats * kWarps * 32 * 4) + (kWarps == 1 ? kOneWarpExtraBytes : 0);
  static uint32_t devices_done = 0;
  AllowSmem(FlashAttentionKernel<KV, HD, kWarps, kSplit, kPing, kRows8>, kSmem, &devices_done);
  LaunchDependent(FlashAttentionKernel<KV, HD, kWarps, kSplit, kPing, kRows8>, grid, dim3(kWarps * 32), kSmem, stream,
                  pdl, a);
}

// The one-warp shapes take the K/V ping buffers when the grid has more blocks than the
// two-stage kernel keeps resident (three an SM, by shared memory): then twice the warps an SM
// hide more latency than a second stage does (H200, 32 query / 8 KV heads, dim 128: batch 128,
// context 4096, 2968 -> 3429 GB/s; batch 64, 8192: 3153 -> 3507). Fewer blocks (batch 1) keep the
// second stage (batch 1, context 32768: 2027 GB/s, 1363 with ping buffers). The same bits
// either way.
// PAGODA_FLASH_PING=0 / PAGODA_FLASH_ROWS8=0 (diagnostics): never the ping buffers / never
// kRows8 (the same bits either way).
const bool flash_ping = EnvSwitch("PAGODA_FLASH_PING", true), flash_rows8 = EnvSwitch("PAGODA_FLASH_ROWS8", true);
bool UsePing(int64_t blocks) { return flash_ping && blocks > 3 * static_cast<int64_t>(SmCount()); }

// The one-warp (decode) shapes, one token a warp. Over unquantized caches with head dim 128 a
// warp with at most 8 query rows (G <= 8) skips rows 8-15 (kRows8: 222 -> 168 registers, three
// warps a scheduler instead of two; H200, 32 query / 8 KV heads: batch 128, context 4096, 600 ->
// 582 us). The quantized caches keep all 16: ptxas then holds their register paths at 154-168
// registers and they ran slower (batch 64, context 8192: fp8 452 -> 468 us, int8 784 -> 1008);
// so does head dim 64, where ptxas capped kRows8 kernels at 96 registers with 122 bytes of
// spills.
template <typename KV, int HD, bool kSplit>
void LaunchOneWarp(const KernelArgs& a, dim3 grid, bool ping, cudaStream_t stream, bool pdl) {
  if constexpr (!kQuantKV<KV> && HD == 128) {
    if (a.group <= 8 && flash_rows8) {
      ping ? LaunchKernel<KV, HD, 1, kSplit, true, true>(a, grid, stream, pdl)
           : LaunchKernel<KV, HD, 1, kSplit, false, true>(a, grid, stream, pdl);
      return;
    }
  }
  ping ? LaunchKernel<KV, HD, 1, kSplit, true>(a, grid, stream, pdl)
       : LaunchKernel<KV, HD, 1, kSplit, false>(a, grid, stream, pdl);
}

// Whether the one-warp shapes copy a quantized tile's runs (a paged block's rows of the KV
// head, contiguous: kv/kv_codec.h) by bulk copies, one a run issued by its lane, instead of
// 16-byte cp.async pieces from every lane: paged blocks of at least 8 slots (at most 8 runs a
// tile). PAGODA_FLASH_TMA=0 keeps cp.async (a diagnostic: the same values land).
bool flash_rows_bulk = EnvSwitch("PAGODA_FLASH_TMA", true);
bool FlashRowsBulk(const PagedAttentionParams& p) {
  return flash_rows_bulk && p.k_format.quant != KVQuant::kNone && p.block_size >= 8;
}

template <typename KV, int HD>
void Launch(const PagedAttentionParams& p, FlashShape shape, int64_t max_keys, const FlashWorkItem* items,
            int64_t num_items, float* scratch, uint16_t* out_bf16, cudaStream_t stream, bool pdl) {
  KernelArgs a;
  a.p = p;
  a.items = nullptr;
  a.partial = scratch;
  a.out_bf16 = reinterpret_cast<__nv_bfloat16*>(out_bf16);
  // nvfp4 read in registers: K's tensor scale folded into the softmax scale (one rounding).
  const double k_tensor =
      p.k_format.quant == KVQuant::kNvfp4 && p.k_format.tensor_scale > 0.0f ? p.k_format.tensor_scale : 1.0;
  a.scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634 * k_tensor);
  a.group = static_cast<int>(p.num_heads / p.num_kv_heads);
  a.tokens_per_warp = 16 / a.group;
  a.k_row_bytes = static_cast<int>(DeviceKVRowBytes(p.k_format));
  a.v_row_bytes = static_cast<int>(DeviceKVRowBytes(p.v_format));
  a.k_scale_group = static_cast<int>(std::min<int64_t>(p.k_format.group, HD));
  a.v_scale_group = static_cast<int>(std::min<int64_t>(p.v_format.group, HD));
  a.k_group_shift = std::countr_zero(static_cast<unsigned>(a.k_scale_group));  // exact where IntRegsServe
  a.v_group_shift = std::countr_zero(static_cast<unsigned>(a.v_scale_group));
  a.v_global = p.v_format.tensor_scale > 0.0f ? p.v_format.tensor_scale : 1.0f;
  a.bulk = 0;
  constexpr bool kKivi2 = kKivi2Row<typename KVKind<KV>::Row>;
  if constexpr (kKivi2) {  // K's runs: a paged block's keys (RawKivi2K)
    a.k_group_shift = std::countr_zero(static_cast<unsigned>(std::min<int64_t>(p.block_size, kKeyTile)));
  }
  const unsigned kv = static_cast<unsigned>(p.num_kv_heads);
  switch (shape) {
    case FlashShape::kSplit: {
      const int depth = FlashSplitDepth(max_keys);
      a.tokens_per_warp = 1;
      const dim3 grid(static_cast<unsigned>(p.num_tokens), kv, static_cast<unsigned>(depth));
      const bool ping = UsePing(p.num_tokens * p.num_kv_heads * depth);
      a.bulk = FlashRowsBulk(p) ? 1 : 0;
      LaunchOneWarp<KV, HD, true>(a, grid, ping, stream, pdl);
      if (depth > 1) {
        LaunchDependent(FlashMergeKernel<HD>, dim3(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads)),
                        dim3(HD), 0, stream, pdl, p, scratch, a.out_bf16);
      }
      return;
    }
    case FlashShape::kNarrow: {
      a.tokens_per_warp = 1;
      const bool ping = UsePing(p.num_tokens * p.num_kv_heads);
      const dim3 grid(static_cast<unsigned>(p.num_tokens), kv);
      a.bulk = FlashRowsBulk(p) ? 1 : 0;
      LaunchOneWarp<KV, HD, false>(a, grid, ping, stream, pdl);
      return;
    }
    case FlashShape::kWide:
      a.items = items;
      if constexpr (kKivi2) {
        // One warp a work item of 16 / G tokens (FlashTokensPerItem): the one-warp kernel's
        // copies and registers, all 16 rows of its products.
        LaunchOneWarp<KV, HD, false>(a, dim3(static_cast<unsigned>(num_items), kv), UsePing(num_items * p.num_kv_heads),
                                     stream, pdl);
      } else {
        if constexpr (std::is_same_v<KV, __nv_bfloat16> || std::is_same_v<KV, __half>) {
          if (WideOnWgmma(p, max_keys)) {
            LaunchFlashWgmma<KV, HD>(a, dim3(static_cast<unsigned>(num_items), kv), stream, pdl);
            return;
          }
        }
        LaunchKernel<KV, HD, kWideWarps, false, false>(a, dim3(static_cast<unsigned>(num_items), kv), stream, pdl);
      }
      return;
  }
}

// int8 and int4 rows are read in registers (IntRegs) when K's and V's scale groups are 32k
// columns (a group's columns are whole 32-column blocks in QKColumn's and OutColumn's orders) and
// a power of two (a column's group is a shift), and int8 rows are 4-byte aligned (an even number
// of groups); other groups are dequantized into bf16 tiles.
bool IntRegsServe(const PagedAttentionParams& p) {
  for (const KVArrayFormat* f : {&p.k_format, &p.v_format}) {
    const int64_t g = std::min(f->group, p.head_dim);
    if (g % 32 != 0 || (g & (g - 1)) != 0) return false;
    if (f->quant == KVQuant::kInt8 && (p.head_dim / g) % 2 != 0) return false;
  }
  return true;
}

}  // namespace

void SetFlashRowsBulk(bool on) { flash_rows_bulk = on; }
bool FlashRowsBulkOn() { return flash_rows_bulk; }

void FlashAttention(const PagedAttentionParams& p, FlashShape shape, int64_t max_keys, const FlashWorkItem* items,
                    int64_t num_items, float* scratch, cudaStream_t stream, uint16_t* out_bf16, bool pdl) {
  if (p.num_tokens <= 0) return;
  PAGODA_CHECK(FlashAttentionSupports(p)) << "FlashAttention: unsupported shape";
  PAGODA_CHECK(shape != FlashShape::kSplit || p.num_tokens <= kFlashSplitMaxTokens)
      << "FlashAttention: " << p.num_tokens << " tokens for the split shape";
  PAGODA_CHECK(shape != FlashShape::kWide || (items != nullptr && num_items > 0)) << "FlashAttention: no work items";
  auto run = [&]<typename KV>() {
    if (p.head_dim == 128) {
      Launch<KV, 128>(p, shape, max_keys, items, num_items, scratch, out_bf16, stream, pdl);
    } else {
      Launch<KV, 64>(p, shape, max_keys, items, num_items, scratch, out_bf16, stream, pdl);
    }
  };
  switch (p.k_format.quant) {
    case KVQuant::kFp8E4M3: return run.template operator()<Fp8KRegs<Fp8E4M3Row>>();
    case KVQuant::kFp8E5M2: return run.template operator()<Fp8KRegs<Fp8E5M2Row>>();
    case KVQuant::kInt8:
      return IntRegsServe(p) ? run.template operator()<IntRegs<Int8Row>>() : run.template operator()<Int8Row>();
    case KVQuant::kInt4:
      return IntRegsServe(p) ? run.template operator()<IntRegs<Int4Row>>() : run.template operator()<Int4Row>();
    case KVQuant::kNvfp4: return run.template operator()<Fp4Regs<Nvfp4Row>>();
    case KVQuant::kKivi2:
      PAGODA_CHECK(p.codes_only && flash_rows_bulk)
          << "FlashAttention: kivi2 reads codes spans (p.codes_only) in one-warp blocks, by bulk copies";
      return run.template operator()<Kivi2Regs<Kivi2Row>>();
    default:
      if (p.kv_dtype == DType::kBF16) return run.template operator()<__nv_bfloat16>();
      return run.template operator()<__half>();
  }
}

}  // namespace pagoda::cuda
