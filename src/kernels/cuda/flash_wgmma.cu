// FlashAttention's wide (prefill) shape on Hopper warpgroup products: FlashWgmmaKernel (the
// structure in flash_wgmma.cuh), its launch and mode, and a test kernel of its products.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/flash_kernel_args.cuh"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/flash_wgmma.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_limit.cuh"
#include "kernels/cuda/tensor_map.h"
#include "kernels/cuda/tma.cuh"

namespace pagoda::cuda {
namespace flash {
namespace {

// Keeps the compiler from moving reads or writes of registers that an in-flight wgmma uses
// across this point.
template <int N>
__device__ __forceinline__ void FenceOperands(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// The wide shape on Hopper warpgroup products (flash_wgmma.cuh): bf16/f16 caches, the same
// work items, rows, tiles, segments and roundings as FlashAttentionKernel<T, HD, 4, ...>.
// kTma: K and V tiles by TMA (k_map / v_map: the caches as [slots, kv heads x HD] in boxes of 64
// values x min(block size, 64) rows; blocks outside the tile's key range zero-filled from a
// negative row), else by cp.async.
template <typename T, int HD, int kGroups, bool kTma>
__global__ void __launch_bounds__(WgGeometry<HD, kGroups>::kThreads, kGroups == 1 ? 2 : 1)
    FlashWgmmaKernel(const __grid_constant__ KernelArgs a, const __grid_constant__ CUtensorMap k_map,
                     const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap k_run_map,
                     const __grid_constant__ CUtensorMap v_run_map, int runs) {
  using Geo = Geometry<HD>;
  using WG = WgGeometry<HD, kGroups>;
  constexpr int kChunks = HD * 2 / 16;
  constexpr int kStages = WG::kStages;
  // 16-byte aligned (a 1024-byte alignment here would pad the static shared memory to 1024 bytes
  // and leave two blocks no room); the tiles start at the next 1024-byte boundary.
  extern __shared__ __align__(16) uint8_t wg_dynamic_smem[];
  const uint32_t pad = (1024 - (SmemAddr(wg_dynamic_smem) & 1023)) & 1023;
  uint8_t* smem = wg_dynamic_smem + pad;
  uint8_t* small = pad >= WG::kSmallBytes ? smem - WG::kSmallBytes : smem + WG::kTilesBytes;
  const uint32_t base = SmemAddr(smem);
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3, g = lane >> 2, q = lane & 3;
  const int cw = wg * 4 + warp;  // a consumer warp's index in the block
  auto k_tile = [&](int stage) { return base + WG::kKOffset + stage * WG::kTileBytes; };
  auto v_tile = [&](int stage) { return base + WG::kVOffset + stage * WG::kTileBytes; };
  // Barrier b of stage s: b = 0 K full, 1 V full, 2 K empty, 3 V empty.
  auto bar = [&](int b, int stage) { return SmemAddr(small) + (b * kStages + stage) * 8; };
  const PagedAttentionParams& p = a.p;
  const int kvh = blockIdx.y;
  const FlashWorkItem item = a.items[blockIdx.x];
  const int t_begin = item.first_token, t_end = item.first_token + item.num_tokens;

  // The consumer thread's rows, as the wide kernel's warp `warp` holds them.
  const int w_begin = min(t_end, t_begin + cw * a.tokens_per_warp);
  const int w_end = min(t_end, w_begin + a.tokens_per_warp);
  Rows rows;
  int64_t out_rows[2];
  WarpRows(a, w_begin, w_end, kvh, g, rows, out_rows);
  const WarpKeys keys = WarpKeyRange(rows);
  // The warps' key ranges and the shortest and longest segment of their valid rows.
  int (*range_s)[4 * kGroups] = reinterpret_cast<int (*)[4 * kGroups]>(small + WG::kBarriers * 8);
  unsigned my_seg_lo = UINT_MAX, my_seg_hi = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows.valid[h]) {
      my_seg_lo = min(my_seg_lo, static_cast<unsigned>(rows.seg[h]));
      my_seg_hi = max(my_seg_hi, static_cast<unsigned>(rows.seg[h]));
    }
  }
  const unsigned seg_lo = __reduce_min_sync(0xffffffffu, my_seg_lo), seg_hi = __reduce_max_sync(0xffffffffu, my_seg_hi);
  if (wg < kGroups && lane == 0) {
    range_s[0][cw] = keys.lo;
    range_s[1][cw] = keys.hi;
    range_s[2][cw] = static_cast<int>(seg_lo);  // the bits of UINT_MAX where the warp has no valid row
    range_s[3][cw] = static_cast<int>(seg_hi);
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(bar(0, s), kTma ? 1 : 128);  // the producer's copies of K (TMA: one thread)
      MbarrierInit(bar(1, s), kTma ? 1 : 128);  // and of V
      MbarrierInit(bar(2, s), 4 * kGroups);     // every consumer warp done with K
      MbarrierInit(bar(3, s), 4 * kGroups);     // and with V
    }
  }
  __syncthreads();
  GridDependencyWait();  // as FlashAttentionKernel: every block, before Q and K/V (a no-op without pdl)
  int lo = INT_MAX, hi = -1;
#pragma unroll
  for (int w = 0; w < 4 * kGroups; ++w) {
    lo = min(lo, range_s[0][w]);
    hi = max(hi, range_s[1][w]);
  }
  if (hi < 0) return;
  const int tile_lo = lo / kKeyTile, tile_hi = hi / kKeyTile;

  if (wg == kGroups) {
    // The producer: K of tile n, then V of tile n - 1, each into its ring as soon as the
    // consumers are done with the stage it replaces. K runs a tile ahead of V because the
    // consumers score tile n + 1 while they multiply tile n's P by its V.
    SetMaxRegistersDec<WG::kProducerRegs>();
    if constexpr (kTma) {
      if (tid != 128 * kGroups) return;  // one thread copies K and V
      const int32_t* table = p.block_tables[t_begin];
      const int bs = static_cast<int>(p.block_size);
      const int box = min(bs, kKeyTile), boxes = kKeyTile / box;  // rows a box, boxes a tile
      const int bs_shift = __ffs(bs) - 1;
      constexpr int kBoxes = kKeyTile / 8;  // at most
      // Tile j's box rows (slot of its first key) from the block table; out of the range: a
      // negative row, zeros. Returns whether the tile's paged blocks are one run of consecutive
      // slots, all inside the range (`runs`): then one box of 64 rows a column block copies it
      // (k_run_map / v_run_map), the same bytes to the same places as the blocks' boxes.
      auto rows_of = [&](int j, int (&row)[kBoxes]) {
        bool run = runs != 0 && boxes > 1;
#pragma unroll
        for (int i = 0; i < kBoxes; ++i) {
          const int key0 = j * kKeyTile + i * box;
          row[i] = i < boxes && key0 + box - 1 >= lo && key0 <= hi ? table[key0 >> bs_shift] * bs + (key0 & (bs - 1))
                                                                 : -box;
          if (i < boxes) run = run && row[i] == row[0] + i * box && row[i] >= 0;
        }
        return run;
      };
      auto load = [&](uint32_t tile, const CUtensorMap& map, const CUtensorMap& run_map, const int (&row)[kBoxes],
                      bool run, uint32_t barrier) {
        MbarrierArriveExpectTx(barrier, WG::kTileBytes);
        if (run) {
#pragma unroll
          for (int h = 0; h < HD / 64; ++h) {
            TmaLoad2D(tile + h * (kKeyTile * 128), run_map, kvh * HD + h * 64, row[0], barrier);
          }
          return;
        }
#pragma unroll
        for (int i = 0; i < kBoxes; ++i) {
          if (i >= boxes) break;
#pragma unroll
          for (int h = 0; h < HD / 64; ++h) {
            TmaLoad2D(tile + h * (kKeyTile * 128) + i * box * 128, map, kvh * HD + h * 64, row[i], barrier);
          }
        }
      };
      // Tile j's rows are read from the table before the wait for its stage, their latency hidden
      // behind it (H100, causal d128 at 4K tokens: 256 TFLOP/s against 221 read after the wait),
      // and serve its V a tile later.
      int k_rows[kBoxes], v_rows[kBoxes];
      bool k_run = rows_of(tile_lo, k_rows), v_run = false;
      for (int j = tile_lo, n = 0; j <= tile_hi + 1; ++j, ++n) {
        if (j <= tile_hi) {
          const int stage = n % kStages;
          if (n >= kStages) MbarrierWait(bar(2, stage), ((n / kStages) - 1) & 1);
          load(k_tile(stage), k_map, k_run_map, k_rows, k_run, bar(0, stage));
        }
        if (n >= 1) {
          const int m = n - 1, stage = m % kStages;
          if (m >= kStages) MbarrierWait(bar(3, stage), ((m / kStages) - 1) & 1);
          load(v_tile(stage), v_map, v_run_map, v_rows, v_run, bar(1, stage));
        }
#pragma unroll
        for (int i = 0; i < kBoxes; ++i) v_rows[i] = k_rows[i];
        v_run = k_run;
        if (j < tile_hi) k_run = rows_of(j + 1, k_rows);
      }
      return;
    }
    constexpr int kRowStep = 128 / kChunks, kPer = kKeyTile / kRowStep;  // a thread's rows a tile
    const int ptid = tid - 128 * kGroups, c = ptid % kChunks, r0 = ptid / kChunks;
    const int32_t* table = p.block_tables[t_begin];
    const int bs_shift = __ffs(static_cast<int>(p.block_size)) - 1;
    const int bs_mask = static_cast<int>(p.block_size) - 1;
    const int64_t slot_bytes = p.num_kv_heads * HD * 2;
    const char* k_base = static_cast<const char*>(p.k_cache) + static_cast<int64_t>(kvh) * HD * 2 + c * 16;
    const char* v_base = static_cast<const char*>(p.v_cache) + static_cast<int64_t>(kvh) * HD * 2 + c * 16;
    static_assert(kRowStep % 8 == 0, "a thread's rows share their swizzle");
    const uint32_t chunk0 = WgChunk(r0, c);
    auto copy = [&](uint32_t tile, const char* src, int j) {
      int slot[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {  // the block table first, so its reads overlap
        const int key = j * kKeyTile + r0 + i * kRowStep;
        slot[i] = key >= lo && key <= hi ? table[key >> bs_shift] * static_cast<int>(p.block_size) + (key & bs_mask) : -1;
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        CpAsync16(tile + chunk0 + i * kRowStep * 128, src + static_cast<int64_t>(max(slot[i], 0)) * slot_bytes,
                  slot[i] >= 0);
      }
    };
    for (int j = tile_lo, n = 0; j <= tile_hi + 1; ++j, ++n) {
      if (j <= tile_hi) {
        const int stage = n % kStages;
        if (n >= kStages) MbarrierWait(bar(2, stage), ((n / kStages) - 1) & 1);
        copy(k_tile(stage), k_base, j);
        CpAsyncArriveOn(bar(0, stage));
      }
      if (n >= 1) {
        const int m = n - 1, stage = m % kStages;
        if (m >= kStages) MbarrierWait(bar(3, stage), ((m / kStages) - 1) & 1);
        copy(v_tile(stage), v_base, j - 1);
        CpAsyncArriveOn(bar(1, stage));
      }
    }
    CpAsyncWait<0>();
    return;
  }

  // The consumers.
  SetMaxRegistersInc<WG::kConsumerRegs>();
  // Q as the scores' A fragments in registers, rounded to T, read from the thread's own rows
  // (mma.sync's A layout: rows g and g + 8 of the warp, columns 2q and 2q + 8 of each k-step),
  // as the mma.sync kernel reads them; padding rows are zeros. Only K is read from shared memory.
  // The reads are issued here and rounded once the first K tile has landed, so their latency
  // hides behind the first copies'.
  float2 qv[HD / 16][4];
  {
    const float* q_rows[2] = {rows.valid[0] ? p.q + out_rows[0] * HD : nullptr,
                              rows.valid[1] ? p.q + out_rows[1] * HD : nullptr};
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e & 1, d = kk * 16 + 2 * q + 8 * (e >> 1);
        qv[kk][e] = q_rows[h] != nullptr ? *reinterpret_cast<const float2*>(q_rows[h] + d) : make_float2(0.0f, 0.0f);
      }
    }
  }
  uint32_t qf[HD / 16][4];

  State<HD> st;
  st.Reset(0);
  st.Reset(1);
  float M[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};
  bool merged[2] = {false, false};
  float* o_s = reinterpret_cast<float*>(smem + WG::kOOffset) + wg * 128 * (HD / 2) + (tid & 127);
  // Rows `now` merge their segment (running max m, this thread's part of the sum l, O in the
  // accumulators) into the result; the accumulators are left as they are (the tile loop zeroes
  // them for the rows' next segment).
  auto flush = [&](const bool (&now)[2], const float (&m)[2], const float (&l)[2]) {
    const float l_total[2] = {QuadSum(l[0]), QuadSum(l[1])};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (!now[h]) continue;
      if (rows.valid[h] && m[h] != -INFINITY) {
        if (!merged[h]) {
          M[h] = m[h];
          L[h] = l_total[h];
#pragma unroll
          for (int dt = 0; dt < Geo::kDTiles; ++dt) {
            o_s[(dt * 4 + 2 * h) * 128] = st.acc[dt][2 * h];
            o_s[(dt * 4 + 2 * h + 1) * 128] = st.acc[dt][2 * h + 1];
          }
          merged[h] = true;
        } else {
          const MergeScales sc = ScalesFor(M[h], m[h]);
#pragma unroll
          for (int dt = 0; dt < Geo::kDTiles; ++dt) {
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
              float& o = o_s[(dt * 4 + 2 * h + jj) * 128];
              o = Blend(o, st.acc[dt][2 * h + jj], sc);
            }
          }
          L[h] = Blend(L[h], l_total[h], sc);
          M[h] = sc.m;
        }
      }
    }
  };
  auto mask_of = [&](int j) {
    const int start = j * kKeyTile;
    bool inside = true;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (rows.valid[h]) inside = inside && start >= rows.first[h] && start + kKeyTile - 1 <= rows.pos[h];
    }
    return __any_sync(0xffffffffu, !inside);
  };
  float s[8][4];
  float* s_flat = &s[0][0];
  // The softmax of the scores in s for the tile from key `start`, the mask test only where some
  // row of the warp has keys of the tile outside its window (a warp-uniform branch: the masked
  // form's compares and selects stay off the common path).
  auto softmax = [&](int start, bool mask, float (&corr)[2]) {
    if (mask) {
      TileSoftmax<HD, false, false>(TileK<HD>{nullptr}, start, rows, a.scale_log2, true, st, s, corr);
    } else {
      TileSoftmax<HD, false, false>(TileK<HD>{nullptr}, start, rows, a.scale_log2, false, st, s, corr);
    }
  };
  float* o_flat = &st.acc[0][0];
  // The tiles' descriptors, once: a stage or k-step moves the start address field only.
  const uint64_t k_desc = KMajorAt(k_tile(0), 0);
  const uint64_t v_desc = VAt(v_tile(0), 0);
  constexpr uint64_t kStageStep = WG::kTileBytes >> 4;
  auto issue_scores = [&](int stage) {
    FenceOperands<32>(s_flat);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      WgmmaRS<64, T>(s_flat, qf[kk], k_desc + stage * kStageStep + KMajorStep(kk), kk > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  uint32_t pf[4][4];
  // `fresh`: every row of the group starts a segment with this tile, so its first k-step
  // overwrites O (scale_d 0) instead of O being zeroed first.
  auto issue_values = [&](int stage, bool fresh) {
    FenceOperands<HD / 2>(o_flat);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      WgmmaRSTransB<HD, T>(o_flat, pf[kk], v_desc + stage * kStageStep + VStep(kk), kk > 0 || !fresh ? 1 : 0);
    }
    WgmmaCommit();
  };
  auto release = [&](uint32_t barrier) {
    __syncwarp();
    if (lane == 0) MbarrierArrive(barrier);
  };
  // cp.async's copies are generic-proxy writes that wgmma's operand reads must be fenced from;
  // TMA's land through the async proxy, ordered by the stage's barrier alone.
  auto fence_copies = [] {
    if constexpr (!kTma) FenceProxyAsyncShared();
  };

  // This group's tiles: the union of its own warps' key ranges. The producer copies the block's
  // (both groups'); a tile outside this group's range would be masked for all of its rows (exact
  // zeros, its maxima and sums unchanged, the segment merges the same), so the group only waits
  // for such a tile's copies and releases its stages (causal, two groups: the first group skips
  // the second's diagonal tile).
  int g_lo = INT_MAX, g_hi = -1;
  unsigned g_seg_lo = UINT_MAX, g_seg_hi = 0;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    g_lo = min(g_lo, range_s[0][wg * 4 + w]);
    g_hi = max(g_hi, range_s[1][wg * 4 + w]);
    g_seg_lo = min(g_seg_lo, static_cast<unsigned>(range_s[2][wg * 4 + w]));
    g_seg_hi = max(g_seg_hi, static_cast<unsigned>(range_s[3][wg * 4 + w]));
  }
  // The group's segment length where all its valid rows share one (the usual case: a prefill's
  // rows differ only where they straddle 1024 or 2048 keys), else 0.
  const int g_seg = g_seg_lo == g_seg_hi ? static_cast<int>(g_seg_lo) : 0;
  const int n_lo = g_hi < 0 ? tile_hi - tile_lo + 1 : g_lo / kKeyTile - tile_lo;  // this group's tiles [n_lo, n_hi]
  const int n_hi = g_hi < 0 ? tile_hi - tile_lo : g_hi / kKeyTile - tile_lo;
  auto stage_of = [](int n) { return n % kStages; };
  auto parity_of = [](int n) { return (n / kStages) & 1; };
  auto skip = [&](int n) {
    MbarrierWait(bar(0, stage_of(n)), parity_of(n));
    release(bar(2, stage_of(n)));
    MbarrierWait(bar(1, stage_of(n)), parity_of(n));
    release(bar(3, stage_of(n)));
  };
  for (int n = 0; n < n_lo; ++n) skip(n);

  // What a tile's end leaves for the next tile's P V: the rows whose segment ended there (to merge
  // with their old maxima and sums), whether all of the group's did (`fresh`) and O's rescale
  // factors. At head dim 128 it is applied once the next tile's S = Q K^T is issued, so the merge
  // and the rescale run while the tensor cores score; at 64 that product is too short to hide
  // them (H100: 4K and 16K tokens 1% slower that way) and they run once P V is done.
  constexpr bool kOverlapMerge = HD == 128;
  bool ended[2] = {false, false}, fresh = false;
  float m_end[2] = {0.0f, 0.0f}, l_end[2] = {0.0f, 0.0f}, corr[2] = {1.0f, 1.0f};
  // O for the next tile's P V: zero where a segment ended, else rescaled (x * 1 is x, so a warp
  // whose rows kept their maxima skips it); nothing where the whole group starts a segment (the
  // product overwrites O). The zero comes from a mask on the product, not a conditional write:
  // ptxas would otherwise copy every accumulator out of the product's registers and back each
  // tile.
  auto merge_and_rescale = [&] {
    if (__any_sync(0xffffffffu, ended[0] || ended[1])) flush(ended, m_end, l_end);
    if (!fresh && __any_sync(0xffffffffu, ended[0] || ended[1] || corr[0] != 1.0f || corr[1] != 1.0f)) {
      const uint32_t keep[2] = {ended[0] ? 0u : ~0u, ended[1] ? 0u : ~0u};
#pragma unroll
      for (int dt = 0; dt < Geo::kDTiles; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          st.acc[dt][e] = __uint_as_float(__float_as_uint(__fmul_rn(st.acc[dt][e], corr[h])) & keep[h]);
        }
      }
    }
  };

  int n = n_lo;
  if (n_lo <= n_hi) {
    MbarrierWait(bar(0, stage_of(n_lo)), parity_of(n_lo));
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) qf[kk][e] = PackPair<T>(qv[kk][e].x, qv[kk][e].y);
    }
    fence_copies();
    issue_scores(stage_of(n_lo));
    WgmmaWait<0>();
    FenceOperands<32>(s_flat);
    release(bar(2, stage_of(n_lo)));
    {
      float corr0[2];  // O is still zero
      softmax((tile_lo + n_lo) * kKeyTile, mask_of(tile_lo + n_lo), corr0);
    }
  }
  // P of tile j as the second product's A fragments (16 keys a k-step).
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pf[kk][0] = PackPair<T>(s[2 * kk][0], s[2 * kk][1]);
      pf[kk][1] = PackPair<T>(s[2 * kk][2], s[2 * kk][3]);
      pf[kk][2] = PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pf[kk][3] = PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };
  // Every tile but the last: one straight path, so that ptxas sees which group each wait
  // retires (a path that may or may not have issued S would make it serialize the products).
  for (; n < n_hi; ++n) {
    const int j = tile_lo + n;
    pack_p();
    const int stage = stage_of(n), next = stage_of(n + 1);
    MbarrierWait(bar(0, next), parity_of(n + 1));
    fence_copies();
    issue_scores(next);
    if constexpr (kOverlapMerge) merge_and_rescale();  // what tile j - 1 left, while S of tile j + 1 runs
    MbarrierWait(bar(1, stage), parity_of(n));
    fence_copies();
    issue_values(stage, fresh);
    // Tile j + 1's softmax while tile j's P V runs. A row whose segment ends after tile j
    // starts the next from a fresh state; its old one merges in merge_and_rescale once P V is
    // done, as do the others' rescales.
    WgmmaWait<1>();
    FenceOperands<32>(s_flat);
    release(bar(2, next));
    const int end = (j + 1) * kKeyTile;
    const bool unit = end % kFlashSegmentUnit == 0;  // segments are powers of two
    fresh = g_seg != 0 && unit && (end & (g_seg - 1)) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ended[h] = unit && (end & (rows.seg[h] - 1)) == 0;
      m_end[h] = st.m[h];
      l_end[h] = st.l[h];
      if (ended[h]) {
        st.m[h] = -INFINITY;
        st.l[h] = 0.0f;
      }
    }
    softmax(end, mask_of(j + 1), corr);
    WgmmaWait<0>();
    FenceOperands<HD / 2>(o_flat);
    release(bar(3, stage));
    if constexpr (!kOverlapMerge) merge_and_rescale();
  }
  if (n_lo <= n_hi) {
    pack_p();
    if constexpr (kOverlapMerge) merge_and_rescale();
    MbarrierWait(bar(1, stage_of(n)), parity_of(n));
    fence_copies();
    issue_values(stage_of(n), fresh);
    WgmmaWait<0>();
    FenceOperands<HD / 2>(o_flat);
    release(bar(3, stage_of(n)));
  }
  for (int m = n_hi + 1; m <= tile_hi - tile_lo; ++m) skip(m);
  // The last segment merged as flush would merge it, but straight into the output: a row whose
  // only segment this is normalizes its accumulators, one with earlier segments blends them with
  // this one first (the same values flush would leave in o_s, without the round trip through it).
  const float l_last[2] = {QuadSum(st.l[0]), QuadSum(st.l[1])};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!rows.valid[h]) continue;
    const bool live = st.m[h] != -INFINITY, blend = live && merged[h], alone = live && !merged[h];
    MergeScales sc{1.0f, 1.0f, 0.0f};
    float l_row = L[h];
    if (blend) {
      sc = ScalesFor(M[h], st.m[h]);
      l_row = Blend(L[h], l_last[h], sc);
    } else if (alone) {
      l_row = l_last[h];
    }
    const float inv = Reciprocal(l_row);
    float* out = p.out + out_rows[h] * HD;
    __nv_bfloat16* out_b = a.out_bf16 != nullptr ? a.out_bf16 + out_rows[h] * HD : nullptr;
#pragma unroll
    for (int dt = 0; dt < Geo::kDTiles; ++dt) {
      float v[2];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const float acc = st.acc[dt][2 * h + jj];
        const float o = alone ? acc : blend ? Blend(o_s[(dt * 4 + 2 * h + jj) * 128], acc, sc)
                                            : o_s[(dt * 4 + 2 * h + jj) * 128];
        v[jj] = Normalize(o, inv);
      }
      StorePair<false>(out, dt, q, v[0], v[1]);
      StorePairBf16<false>(out_b, dt, q, v[0], v[1]);
    }
  }
}

// For a test of the building blocks: one warpgroup computes S = Q K^T (64 rows x 64 keys) by
// RS-wgmma (Q's fragments from registers) and O = P V (64 rows x HD) by RS-wgmma, K and V from the
// swizzled tiles flash_wgmma.cuh lays out, the inputs rounded to T.
template <typename T, int HD>
__global__ void __launch_bounds__(128) WgmmaTileProductsKernel(const float* q, const float* k, const float* v,
                                                                const float* pm, float* s_out, float* o_out) {
  extern __shared__ __align__(16) uint8_t wg_test_smem[];
  uint8_t* smem = wg_test_smem + ((1024 - (SmemAddr(wg_test_smem) & 1023)) & 1023);
  constexpr int kTile = WgGeometry<HD>::kTileBytes;
  const uint32_t base = SmemAddr(smem), k_tile = base, v_tile = base + kTile;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
  for (int i = tid; i < 64 * (HD / 2); i += 128) {
    const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
    const uint32_t at = WgChunk(r, d >> 3) + (d & 7) * 2;
    *reinterpret_cast<uint32_t*>(smem + at) = PackPair<T>(k[r * HD + d], k[r * HD + d + 1]);
    *reinterpret_cast<uint32_t*>(smem + kTile + at) = PackPair<T>(v[r * HD + d], v[r * HD + d + 1]);
  }
  FenceProxyAsyncShared();
  __syncthreads();
  // Q's A fragments from registers, as FlashWgmmaKernel holds them: rows 16 warp + g (+ 8),
  // columns 2 qd (+ 8) of each k-step.
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * warp + g + 8 * (e & 1), c = 16 * kk + 2 * qd + 8 * (e >> 1);
      qf[kk][e] = PackPair<T>(q[r * HD + c], q[r * HD + c + 1]);
    }
  }
  float s[32];
  FenceOperands<32>(s);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) WgmmaRS<64, T>(s, qf[kk], KMajorAt(k_tile, kk), kk > 0 ? 1 : 0);
  WgmmaCommit();
  WgmmaWait<0>();
  FenceOperands<32>(s);
  // d[4j + e]: row 16 warp + g + 8 (e / 2), column 8j + 2 qd + e % 2.
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s_out[(16 * warp + g + 8 * (e >> 1)) * 64 + 8 * j + 2 * qd + (e & 1)] = s[4 * j + e];
  uint32_t pf[4][4];
  const int r0 = 16 * warp + g, r1 = r0 + 8;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int c = 16 * kk + 2 * qd;
    pf[kk][0] = PackPair<T>(pm[r0 * 64 + c], pm[r0 * 64 + c + 1]);
    pf[kk][1] = PackPair<T>(pm[r1 * 64 + c], pm[r1 * 64 + c + 1]);
    pf[kk][2] = PackPair<T>(pm[r0 * 64 + c + 8], pm[r0 * 64 + c + 9]);
    pf[kk][3] = PackPair<T>(pm[r1 * 64 + c + 8], pm[r1 * 64 + c + 9]);
  }
  // The accumulators start as garbage: the first k-step's scale_d 0 must ignore them (the kernel's
  // P V of a segment's first tile relies on it).
  float o[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 1.0e30f;
  FenceOperands<HD / 2>(o);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) WgmmaRSTransB<HD, T>(o, pf[kk], VAt(v_tile, kk), kk > 0 ? 1 : 0);
  WgmmaCommit();
  WgmmaWait<0>();
  FenceOperands<HD / 2>(o);
#pragma unroll
  for (int j = 0; j < HD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o_out[(16 * warp + g + 8 * (e >> 1)) * HD + 8 * j + 2 * qd + (e & 1)] = o[4 * j + e];
}

// PAGODA_FLASH_WGMMA=1 / 0: the wide shape always / never on this kernel (SetFlashWgmma).
FlashWgmma flash_wgmma_mode = [] {
  const char* e = std::getenv("PAGODA_FLASH_WGMMA");
  const std::string v = e != nullptr ? e : "";
  return v == "1" ? FlashWgmma::kOn : v == "0" ? FlashWgmma::kOff : FlashWgmma::kAuto;
}();

}  // namespace

bool FlashWgmmaOn(int64_t max_keys) {
  return flash_wgmma_mode == FlashWgmma::kOn ||
         (flash_wgmma_mode == FlashWgmma::kAuto && max_keys >= kFlashWgmmaMinKeys);
}

template <typename T, int HD>
void LaunchFlashWgmma(const KernelArgs& a, dim3 grid, cudaStream_t stream, bool pdl) {
  const bool tma = WgmmaTma(a.p.block_size);
  // PAGODA_FLASH_TMA_RUNS=0: every paged block its own boxes, even where a tile's blocks are
  // consecutive slots (a diagnostic: the same bytes land).
  static const int runs = EnvSwitch("PAGODA_FLASH_TMA_RUNS", true) ? 1 : 0;
  CUtensorMap k_map = {}, v_map = {}, k_run_map = {}, v_run_map = {};
  if (tma) {
    const int64_t cols = a.p.num_kv_heads * HD, box = std::min<int64_t>(a.p.block_size, kKeyTile);
    k_map = Bf16TensorMap(a.p.k_cache, INT32_MAX, cols, cols, static_cast<int>(box));
    v_map = Bf16TensorMap(a.p.v_cache, INT32_MAX, cols, cols, static_cast<int>(box));
    k_run_map = box < kKeyTile ? Bf16TensorMap(a.p.k_cache, INT32_MAX, cols, cols, kKeyTile) : k_map;
    v_run_map = box < kKeyTile ? Bf16TensorMap(a.p.v_cache, INT32_MAX, cols, cols, kKeyTile) : v_map;
  }
  auto launch = [&]<bool kTma>() {
    constexpr int kGroups = FlashWgmmaGroups(HD, kTma);
    using WG = WgGeometry<HD, kGroups>;
    auto* kernel = FlashWgmmaKernel<T, HD, kGroups, kTma>;
    static uint32_t devices_done = 0;
    AllowSmem(kernel, WG::kSmemBytes, &devices_done, true);  // two one-group blocks an SM need the whole 228 KB
    LaunchDependent(kernel, grid, dim3(WG::kThreads), WG::kSmemBytes, stream, pdl, a, k_map, v_map, k_run_map,
                    v_run_map, runs);
  };
  tma ? launch.template operator()<true>() : launch.template operator()<false>();
}
template void LaunchFlashWgmma<__nv_bfloat16, 64>(const KernelArgs&, dim3, cudaStream_t, bool);
template void LaunchFlashWgmma<__nv_bfloat16, 128>(const KernelArgs&, dim3, cudaStream_t, bool);
template void LaunchFlashWgmma<__half, 64>(const KernelArgs&, dim3, cudaStream_t, bool);
template void LaunchFlashWgmma<__half, 128>(const KernelArgs&, dim3, cudaStream_t, bool);

}  // namespace flash

using namespace flash;

void SetFlashWgmma(FlashWgmma mode) { flash::flash_wgmma_mode = mode; }

void WgmmaTileProductsForTest(const float* q, const float* k, const float* v, const float* p, float* s, float* o,
                              int head_dim, bool f16, cudaStream_t stream) {
  auto run = [&]<typename T, int HD>() {
    constexpr int kSmem = 2 * WgGeometry<HD, 1>::kTileBytes + 1024;
    static uint32_t devices_done = 0;
    AllowSmem(WgmmaTileProductsKernel<T, HD>, kSmem, &devices_done);
    WgmmaTileProductsKernel<T, HD><<<1, 128, kSmem, stream>>>(q, k, v, p, s, o);
    PAGODA_CUDA_CHECK_LAUNCH("WgmmaTileProductsKernel");
  };
  PAGODA_CHECK(head_dim == 64 || head_dim == 128) << "WgmmaTileProductsForTest: head dim " << head_dim;
  if (f16) {
    head_dim == 128 ? run.template operator()<__half, 128>() : run.template operator()<__half, 64>();
  } else {
    head_dim == 128 ? run.template operator()<__nv_bfloat16, 128>() : run.template operator()<__nv_bfloat16, 64>();
  }
}

}  // namespace pagoda::cuda
