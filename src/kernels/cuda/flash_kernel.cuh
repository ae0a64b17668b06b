// FlashAttention's mma.sync kernel (the split, narrow and wide shapes; docs/cuda.md) and the
// split shape's merge kernel. Included by flash_attention.cu, which chooses and launches them;
// the wide shape's Hopper kernel is flash_wgmma.cu, the host-side planning flash_plan.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/flash_kernel_args.cuh"
#include "kernels/cuda/flash_quant.cuh"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace pagoda::cuda::flash {

// kWarps warps serve tokens of one sequence for one KV head (blockIdx.y). kSplit: one token,
// segment blockIdx.z of it, the state written to `partial` (or the output when the token has
// one segment); otherwise every segment, merged as the walk goes.
// kPing: one K and one V buffer instead of two stages of both (half the shared memory, twice
// the blocks an SM): K of the next tile loads while P V runs, V while the next scores do.
// KV: the cache's element type (bf16, f16), Int8Row / Int4Row (dequantized into one bf16 tile,
// kPing: K then V, or two), or Fp8KRegs<fp8 row> / IntRegs<int row> / Fp4Regs<Nvfp4Row> (read
// from the raw rows into registers): quantized rows land raw (RawGeometry) in K and V buffers (kPing) or two
// stages of both.
template <int HD, int kWarps, bool kSplit, bool kPing, typename KV>
__host__ __device__ constexpr int KVSmemBytes() {
  using Geo = Geometry<HD>;
  if constexpr (kQuantKV<KV>) {
    // Raw K and V (two stages unless kPing); dequantized int8 and int4: one bf16 tile (kPing) or
    // two; read in registers: the wide shape's K and V fragment tiles (BuildFragments).
    constexpr bool kKRegs = KVKind<KV>::kKRegs;
    constexpr int raw = RawGeometry<typename KVKind<KV>::Row, HD>::kTileBytes;
    return (kPing ? 2 * raw : 4 * raw) + (kKRegs ? (kWarps > 1 ? 2 : 0) : kPing ? 1 : 2) * Geo::kTileBytes;
  } else {
    return kPing ? Geo::kStageBytes : Geo::kPipelineBytes;
  }
}

// The one-warp shapes' shared memory past their tiles (and merged O): up to 127 bytes to put
// the tiles on a 128-byte boundary, then the bulk copies' barriers (K and V, or two stages).
constexpr int kOneWarpExtraBytes = 128 + 2 * 8;

// kRows8: the warp's rows 8-15 are padding (one token a warp, at most 8 query heads a KV head:
// decode), so they are not computed (flash_tile.cuh); the same bits for rows 0-7.
// Quantized caches: a tile's rows of the KV head are runs, one a paged block (at most 64 rows),
// contiguous in the cache (head-major blocks, kv/kv_codec.h) and in the raw tile. The one-warp
// shapes with a.bulk copy each run by one bulk copy (lane e issuing run e), completing on the
// buffer's mbarrier; runs outside the keys [lo, hi] are not copied (the buffers start zeroed and
// then hold other rows of the cache, masked like them). Else every thread copies 16-byte pieces
// by cp.async, zeros for the runs outside [lo, hi]. Rows of a copied run outside [lo, hi] are
// read and masked (P = 0, and AddRawValues takes no scale from them); the caches are zeroed at
// allocation, so they are finite.
template <typename KV, int HD, int kWarps, bool kSplit, bool kPing, bool kRows8>
__global__ void __launch_bounds__(kWarps * 32)
    FlashAttentionKernel(const __grid_constant__ KernelArgs a) {
  using Geo = Geometry<HD>;
  using Row = typename KVKind<KV>::Row;
  constexpr bool kKRegs = KVKind<KV>::kKRegs;
  constexpr bool kFragTiles = kKRegs && kWarps > 1;  // the wide shape builds a tile's fragments once
  using T = MmaType<KV>;                                      // P V (and Q K^T)
  using TQ = std::conditional_t<kKRegs, __half, T>;           // Q K^T
  constexpr bool kQuant = kQuantKV<KV>;
  constexpr int kH = kRows8 ? 1 : 2;  // the thread's rows computed: g, and g + 8 unless kRows8
  constexpr int kKVBytes = KVSmemBytes<HD, kWarps, kSplit, kPing, KV>();
  constexpr int kThreads = kWarps * 32;
  constexpr bool kOneWarp = kWarps == 1;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // The one-warp shapes' tiles from a 128-byte boundary (their bulk copies' destinations).
  uint8_t* smem = kOneWarp ? smem_raw + ((128 - (SmemAddr(smem_raw) & 127)) & 127) : smem_raw;
  // kivi2 (one-warp shapes only, paged blocks of 16+ slots) always copies by bulk copies.
  constexpr bool kKivi2 = kKivi2Row<Row>;
  static_assert(!kKivi2 || kOneWarp, "kivi2 runs the one-warp shapes only");
  const bool bulk = kKivi2 || (kOneWarp && kQuant && a.bulk != 0);  // FlashRowsBulk's formats and blocks
  AllowDependentLaunch();  // the merge (or the o GEMM) after it waits for its end
  const PagedAttentionParams& p = a.p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int kvh = blockIdx.y;

  int t_begin = blockIdx.x, t_end = blockIdx.x + 1;
  if (!kSplit && a.items != nullptr) {
    const FlashWorkItem it = a.items[blockIdx.x];
    t_begin = it.first_token;
    t_end = it.first_token + it.num_tokens;
  }
  const int w_begin = min(t_end, t_begin + warp * a.tokens_per_warp);
  const int w_end = min(t_end, w_begin + a.tokens_per_warp);

  Rows rows;
  int64_t out_rows[2];
  WarpRows(a, w_begin, w_end, kvh, g, rows, out_rows);
  const float* q_rows[2] = {rows.valid[0] ? p.q + out_rows[0] * HD : nullptr,
                            rows.valid[1] ? p.q + out_rows[1] * HD : nullptr};
  // The warp's keys [w_lo, w_hi] and the keys every row of it sees [w_all_lo, w_all_hi].
  const WarpKeys keys = WarpKeyRange(rows);
  const int w_lo = keys.lo, w_hi = keys.hi, w_all_lo = keys.all_lo, w_all_hi = keys.all_hi;

  // Launched as a programmatic dependent (a.pdl): the positions and block tables above are the
  // step's, uploaded before its first kernel; Q and the step's own K/V rows come from the kernel
  // ahead. Every block waits (a block that ends without waiting could let the kernels after
  // this one pass theirs before the kernel ahead is done).
  GridDependencyWait();

  // The block's keys [lo, hi]: a segment of its token (split) or the union of its warps' keys.
  int lo, hi, z = 0, num_segments = 1;
  if constexpr (kSplit) {
    const RowSpan span = RowKeys(p, p.positions[t_begin]);
    if (span.last < span.first) return;
    const int seg = static_cast<int>(FlashSegmentKeys(span.first, span.last));
    const int s0 = span.first / seg;
    num_segments = span.last / seg - s0 + 1;
    z = blockIdx.z;
    if (z >= num_segments) return;
    lo = max(span.first, (s0 + z) * seg);
    hi = min(span.last, (s0 + z + 1) * seg - 1);
  } else {
    __shared__ int range_s[2][kWarps];
    if (lane == 0) {
      range_s[0][warp] = w_lo;
      range_s[1][warp] = w_hi;
    }
    __syncthreads();
    lo = INT_MAX;
    hi = -1;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      lo = min(lo, range_s[0][w]);
      hi = max(hi, range_s[1][w]);
    }
    if (hi < 0) return;
  }

  // Q as A fragments, rounded to TQ (padding rows: zeros); K read in registers: QKColumn's order.
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // columns 2q (+0) and 2q + 8
      const int d = kKRegs ? QKColumn(kk, q, 2 * half) : kk * 16 + 2 * q + 8 * half;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 v = make_float2(0.0f, 0.0f);
        if (q_rows[h] != nullptr) v = *reinterpret_cast<const float2*>(q_rows[h] + d);
        qf[kk][2 * half + h] = PackPair<TQ>(v.x, v.y);
      }
    }
  }

  const int32_t* table = p.block_tables[t_begin];
  const int bs_shift = __ffs(static_cast<int>(p.block_size)) - 1;
  const int bs_mask = static_cast<int>(p.block_size) - 1;
  // Row bytes: 16-bit elements, or the quantized format's codes and scales.
  const int k_row_bytes = kQuant ? a.k_row_bytes : HD * 2, v_row_bytes = kQuant ? a.v_row_bytes : HD * 2;
  const int64_t k_slot_bytes = p.num_kv_heads * k_row_bytes, v_slot_bytes = p.num_kv_heads * v_row_bytes;
  const char* k_base = static_cast<const char*>(p.k_cache) + static_cast<int64_t>(kvh) * k_row_bytes;
  const char* v_base = static_cast<const char*>(p.v_cache) + static_cast<int64_t>(kvh) * v_row_bytes;
  constexpr int kChunks = HD * 2 / 16;  // 16-byte pieces of a row
  // Tile j's K rows to `ks` (kK) and V rows to `vs` (kV); keys outside [lo, hi] are zeros
  // (never read from the cache).
  auto load_rows = [&]<bool kK, bool kV>(uint8_t* ks, uint8_t* vs, int j) {
    const int key0 = j * kKeyTile;
#pragma unroll 4
    for (int i = tid; i < kKeyTile * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const int key = key0 + r;
      const bool ok = key >= lo && key <= hi;
      const int64_t slot = ok ? static_cast<int64_t>(table[key >> bs_shift]) * p.block_size + (key & bs_mask) : 0;
      if constexpr (kK) CpAsync16(SmemAddr(ks + r * Geo::kRowBytes + c * 16), k_base + slot * k_slot_bytes + c * 16, ok);
      if constexpr (kV) CpAsync16(SmemAddr(vs + r * Geo::kRowBytes + c * 16), v_base + slot * v_slot_bytes + c * 16, ok);
    }
  };
  // Quantized caches: tile j's raw K or V rows (RawGeometry) to `dst`, rows of `row_bytes`.
  // Lane e < boxes of a warp holds run e's first row in the cache's rows (tile_rows, read a tile
  // ahead of the copies; -1: outside [lo, hi]).
  using Raw = RawGeometry<Row, HD>;
  const int box = min(static_cast<int>(p.block_size), kKeyTile), boxes = kKeyTile / box;
  auto tile_rows = [&](int j) {
    const int key0 = j * kKeyTile + lane * box;
    return lane < boxes && key0 + box - 1 >= lo && key0 <= hi
               ? (table[key0 >> bs_shift] * static_cast<int>(p.num_kv_heads) + kvh) * static_cast<int>(p.block_size) +
                     (key0 & bs_mask)
               : -1;
  };
  // Every thread: the runs' 16-byte pieces by cp.async (a warp-uniform trip count: the lanes
  // take each run's first row from its lane).
  auto load_raw = [&](uint8_t* dst, const void* cache, int row_bytes, int at) {
    const int pieces = box * row_bytes / 16, total = boxes * pieces;
    int e = tid / pieces, c = tid % pieces;
    for (int i0 = 0; i0 < total; i0 += kThreads) {
      const int run = __shfl_sync(0xffffffffu, at, min(e, boxes - 1));
      const char* src = static_cast<const char*>(cache) + (run >= 0 ? static_cast<int64_t>(run) * row_bytes + c * 16 : 0);
      if (i0 + tid < total) CpAsync16(SmemAddr(dst + e * box * row_bytes + c * 16), src, run >= 0);
      c += kThreads;
      while (c >= pieces) c -= pieces, ++e;
    }
  };
  // A tile's K and V runs at `at` by bulk copies, lane e issuing run e, on barrier `bar` (lane
  // 0 arms it with the bytes of the runs copied).
  const uint32_t tma_bars = SmemAddr(smem + kKVBytes + (kSplit ? 0 : Geo::kOutFloats * kThreads * 4));
  auto bulk_tile = [&](uint8_t* k_dst, uint8_t* v_dst, int at, uint32_t bar) {
    if constexpr (kKivi2) {
      // K: the run's codes (after its block's per-channel words, heads x HD x 4 bytes = 16 x heads
      // rows of HD / 4) to row lane x box, and its KV head's HD x 4 bytes of words after the
      // tile's 64 rows of codes; V as for per-token formats. A K block is (16 + bs) x heads rows.
      const int heads = static_cast<int>(p.num_kv_heads), bs = static_cast<int>(p.block_size);
      const int k_run = box * a.k_row_bytes, meta = HD * 4, v_run = box * a.v_row_bytes;
      const int copied = __popc(__ballot_sync(0xffffffffu, at >= 0));
      if (lane == 0) MbarrierArriveExpectTx(bar, copied * ((k_dst ? k_run + meta : 0) + (v_dst ? v_run : 0)));
      __syncwarp();
      if (at >= 0) {
        const int64_t block = at / (heads * bs);
        const char* k_cache = static_cast<const char*>(p.k_cache);
        if (k_dst) {
          BulkLoad(SmemAddr(k_dst + lane * k_run), k_cache + (at + 16 * heads * (block + 1)) * a.k_row_bytes, k_run, bar);
          BulkLoad(SmemAddr(k_dst + kKeyTile * a.k_row_bytes + lane * meta),
                   k_cache + (block * (16 + bs) * heads + 16 * kvh) * a.k_row_bytes, meta, bar);
        }
        if (v_dst) BulkLoad(SmemAddr(v_dst + lane * v_run), static_cast<const char*>(p.v_cache) + static_cast<int64_t>(at) * a.v_row_bytes, v_run, bar);
      }
      return;
    }
    const int k_run = box * a.k_row_bytes, v_run = box * a.v_row_bytes;
    const int copied = __popc(__ballot_sync(0xffffffffu, at >= 0));
    if (lane == 0) MbarrierArriveExpectTx(bar, copied * ((k_dst ? k_run : 0) + (v_dst ? v_run : 0)));
    __syncwarp();
    if (at >= 0) {
      if (k_dst) BulkLoad(SmemAddr(k_dst + lane * k_run), static_cast<const char*>(p.k_cache) + static_cast<int64_t>(at) * a.k_row_bytes, k_run, bar);
      if (v_dst) BulkLoad(SmemAddr(v_dst + lane * v_run), static_cast<const char*>(p.v_cache) + static_cast<int64_t>(at) * a.v_row_bytes, v_run, bar);
    }
  };
  auto load_raw_k = [&](uint8_t* dst, int at) { load_raw(dst, p.k_cache, a.k_row_bytes, at); };
  auto load_raw_v = [&](uint8_t* dst, int at) { load_raw(dst, p.v_cache, a.v_row_bytes, at); };
  // Tile j's K or V alone (the ping buffers).
  auto load_k = [&](uint8_t* ks, int j) { load_rows.template operator()<true, false>(ks, nullptr, j); };
  auto load_v = [&](uint8_t* vs, int j) { load_rows.template operator()<false, true>(nullptr, vs, j); };
  auto barrier = [] {
    if constexpr (kWarps == 1) {
      __syncwarp();
    } else {
      __syncthreads();
    }
  };

  State<HD> st;
  st.Reset(0);
  st.Reset(1);
  int vexp = 0;  // fp8 in registers: the accumulators hold O x 2^vexp (AddRawValues)
  // O's value at accumulator (dt, i).
  auto o_val = [&](int dt, int i) {
    if constexpr (kFp4Row<Row>) {  // V's values without the tensor scale
      return __fmul_rn(st.acc[dt][i], a.v_global);
    } else if constexpr (kFp8Row<Row>) {  // the accumulators hold O x 2^vexp (AddRawValues)
      return __fmul_rn(st.acc[dt][i], OScale(vexp));
    } else {
      return st.acc[dt][i];
    }
  };
  // The walking shapes' merged result: (M, L) per row in registers, O in shared memory at
  // this thread's own slots ([value][thread], conflict-free).
  float M[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};
  bool merged[2] = {false, false};
  float* o_s = reinterpret_cast<float*>(smem + kKVBytes) + tid;
  auto flush = [&](const bool (&now)[2]) {  // every lane calls it (the quad sums)
    const float l_total[2] = {QuadSum(st.l[0]), kRows8 ? 0.0f : QuadSum(st.l[1])};
#pragma unroll
    for (int h = 0; h < kH; ++h) {
      if (!now[h]) continue;
      if (rows.valid[h] && st.m[h] != -INFINITY) {
        if (!merged[h]) {
          M[h] = st.m[h];
          L[h] = l_total[h];
#pragma unroll
          for (int dt = 0; dt < Geo::kDTiles; ++dt) {
            o_s[(dt * 4 + 2 * h) * kThreads] = o_val(dt, 2 * h);
            o_s[(dt * 4 + 2 * h + 1) * kThreads] = o_val(dt, 2 * h + 1);
          }
          merged[h] = true;
        } else {
          const MergeScales sc = ScalesFor(M[h], st.m[h]);
#pragma unroll
          for (int dt = 0; dt < Geo::kDTiles; ++dt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              float& o = o_s[(dt * 4 + 2 * h + j) * kThreads];
              o = Blend(o, o_val(dt, 2 * h + j), sc);
            }
          }
          L[h] = Blend(L[h], l_total[h], sc);
          M[h] = sc.m;
        }
      }
      st.Reset(h);
    }
  };

  const int tile_lo = lo / kKeyTile, tile_hi = hi / kKeyTile;
  // After tile j, the walking shapes merge a segment that ends there.
  auto end_tile = [&](int j) {
    if constexpr (!kSplit) {
      const int end = (j + 1) * kKeyTile;
      if (end % kFlashSegmentUnit == 0 && j < tile_hi) {
        const bool now[2] = {end % rows.seg[0] == 0, end % rows.seg[1] == 0};
        flush(now);
      }
    }
  };
  // Bulk copies: the raw tiles zeroed (rows no copy reaches are read and masked: they must be
  // finite), ordered before the copies' writes, and lane 0 initializes the barriers.
  auto init_bulk = [&](uint8_t* tiles, int bytes) {
    for (int i = lane; i < bytes / 16; i += 32) reinterpret_cast<uint4*>(tiles)[i] = make_uint4(0, 0, 0, 0);
    FenceProxyAsyncShared();
    if (lane == 0) {
      MbarrierInit(tma_bars, 1);
      MbarrierInit(tma_bars + 8, 1);
      FenceProxyAsyncShared();
    }
    __syncwarp();
  };
  if constexpr (kPing) {
    // One K and one V buffer (quantized caches: raw rows; int8 and int4 also one bf16 tile
    // they are converted into): K of the next tile loads once this one's K is scored (int8,
    // int4: converted), V once this one's V is used (int8, int4: converted).
    uint8_t* kb = smem;
    uint8_t* vb = smem + (kQuant ? Raw::kTileBytes : Geo::kTileBytes);
    uint8_t* tile = smem + 2 * Raw::kTileBytes;
    if (bulk) init_bulk(kb, 2 * Raw::kTileBytes);
    uint32_t k_phase = 0, v_phase = 0;
    // Quantized caches: at (tile_rows) for the tile being loaded.
    auto load_kb = [&](int j, int at) {
      if (bulk) {
        bulk_tile(kb, nullptr, at, tma_bars);
      } else if constexpr (kQuant) {
        load_raw_k(kb, at);
      } else {
        load_k(kb, j);
      }
    };
    auto load_vb = [&](int j, int at) {
      if (bulk) {
        bulk_tile(nullptr, vb, at, tma_bars + 8);
      } else if constexpr (kQuant) {
        load_raw_v(vb, at);
      } else {
        load_v(vb, j);
      }
    };
    // K (V) of tile j landed (cp.async: V of tile j, K of tile j + 1 may still be in flight).
    auto wait_kb = [&] {
      if (bulk) {
        MbarrierWait(tma_bars, k_phase);
        k_phase ^= 1;
      } else {
        CpAsyncWait<1>();
      }
    };
    auto wait_vb = [&] {
      if (bulk) {
        MbarrierWait(tma_bars + 8, v_phase);
        v_phase ^= 1;
      } else {
        CpAsyncWait<1>();
      }
    };
    int boxes_at = kQuant ? tile_rows(tile_lo) : 0;
    load_kb(tile_lo, boxes_at);
    CpAsyncCommit();
    load_vb(tile_lo, boxes_at);
    CpAsyncCommit();
    for (int j = tile_lo; j <= tile_hi; ++j) {
      if (kQuant && j < tile_hi) boxes_at = tile_rows(j + 1);
      const int tile_start = j * kKeyTile;
      const bool active = tile_start <= w_hi && tile_start + kKeyTile - 1 >= w_lo;
      const bool mask = !(tile_start >= w_all_lo && tile_start + kKeyTile - 1 <= w_all_hi);
      float s[8][4];
      wait_kb();  // K of tile j (V of tile j may still be in flight)
      barrier();
      if constexpr (kKRegs) {
        if (active) {
          ScoreTileFrom<TQ, HD, kRows8>(RawK<Row, HD>{kb, a.k_group_shift, nullptr, a.k_row_bytes}, tile_start, qf, rows,
                                        a.scale_log2, mask, st, s);
        }
      } else if constexpr (kQuant) {
        DequantizeTile<Row, HD, kThreads>(kb, a.k_row_bytes, tile, a.k_scale_group);
      } else {
        if (active) ScoreTile<T, HD, kRows8>(kb, tile_start, qf, rows, a.scale_log2, mask, st, s);
      }
      barrier();  // K read: the next tile's K may overwrite it
      if (j < tile_hi) load_kb(j + 1, boxes_at);
      CpAsyncCommit();
      if constexpr (kQuant && !kKRegs) {
        if (active) ScoreTile<T, HD, kRows8>(tile, tile_start, qf, rows, a.scale_log2, mask, st, s);
      }
      wait_vb();  // V of tile j
      barrier();  // (and the scores have read the tile)
      if constexpr (kQuant && !kKRegs) {
        DequantizeTile<Row, HD, kThreads>(vb, a.v_row_bytes, tile, a.v_scale_group);
        barrier();
        if (j < tile_hi) load_vb(j + 1, boxes_at);
        CpAsyncCommit();
        if (active) AddValues<T, HD, kRows8>(tile, s, st);
        barrier();
      } else {
        if constexpr (kKRegs) {
          if (active) AddRawValues<Row, HD>(vb, a.v_row_bytes, lo - tile_start, hi - tile_start, s, st, vexp, a.v_group_shift);
        } else {
          if (active) AddValues<T, HD, kRows8>(vb, s, st);
        }
        barrier();
        if (j < tile_hi) load_vb(j + 1, boxes_at);
        CpAsyncCommit();
      }
      end_tile(j);
    }
  } else {
    // Two stages of K and V (quantized caches: raw rows; dequantized int8 and int4 then the bf16
    // K and V tiles they are converted into; the wide shape's rows read in registers, their K and V
    // fragment tiles).
    constexpr int kStage = kQuant ? 2 * Raw::kTileBytes : Geo::kStageBytes;
    uint8_t* kt = smem + 2 * kStage;
    uint8_t* vt = kt + Geo::kTileBytes;
    constexpr int kVOffset = kQuant ? Raw::kTileBytes : Geo::kTileBytes;
    if (bulk) init_bulk(smem, 2 * kStage);
    // Quantized caches: at (tile_rows) for tile j.
    auto load_stage = [&](int stage, int j, int at) {
      uint8_t* r = smem + stage * kStage;
      if (bulk) {
        bulk_tile(r, r + kVOffset, at, tma_bars + 8 * stage);
      } else if constexpr (kQuant) {
        load_raw_k(r, at);
        load_raw_v(r + Raw::kTileBytes, at);
      } else {
        load_rows.template operator()<true, true>(r, r + Geo::kTileBytes, j);
      }
    };
    load_stage(0, tile_lo, kQuant ? tile_rows(tile_lo) : 0);
    CpAsyncCommit();
    int boxes_at = kQuant && tile_lo < tile_hi ? tile_rows(tile_lo + 1) : 0;
    for (int j = tile_lo; j <= tile_hi; ++j) {
      if (j < tile_hi) load_stage((j + 1 - tile_lo) & 1, j + 1, boxes_at);
      if (kQuant && j + 1 < tile_hi) boxes_at = tile_rows(j + 2);
      CpAsyncCommit();
      if (bulk) {
        MbarrierWait(tma_bars + 8 * ((j - tile_lo) & 1), ((j - tile_lo) >> 1) & 1);
      } else {
        CpAsyncWait<1>();
      }
      barrier();
      if constexpr (kQuant && !kKRegs) {
        const uint8_t* r = smem + ((j - tile_lo) & 1) * kStage;
        DequantizeTile<Row, HD, kThreads>(r, a.k_row_bytes, kt, a.k_scale_group);
        DequantizeTile<Row, HD, kThreads>(r + Raw::kTileBytes, a.v_row_bytes, vt, a.v_scale_group);
        barrier();
      } else if constexpr (kFragTiles) {
        const uint8_t* r = smem + ((j - tile_lo) & 1) * kStage;
        BuildFragments<Row, HD, kWarps>(r, r + Raw::kTileBytes, a.k_group_shift, a.v_group_shift, a.k_row_bytes,
                                         a.v_row_bytes, kt, vt);
        barrier();
      }
      const int tile_start = j * kKeyTile;
      if (tile_start <= w_hi && tile_start + kKeyTile - 1 >= w_lo) {
        const uint8_t* ks = smem + ((j - tile_lo) & 1) * kStage;
        const bool mask = !(tile_start >= w_all_lo && tile_start + kKeyTile - 1 <= w_all_hi);
        if constexpr (kFragTiles) {
          float s[8][4];
          ScoreTileFrom<TQ, HD, kRows8>(RawK<Row, HD, true>{ks, a.k_group_shift, kt, a.k_row_bytes}, tile_start, qf, rows,
                                        a.scale_log2, mask, st, s);
          AddRawValues<Row, HD, true>(ks + Raw::kTileBytes, a.v_row_bytes, lo - tile_start, hi - tile_start, s, st, vexp,
                                      a.v_group_shift, vt);
        } else if constexpr (kKRegs) {
          float s[8][4];
          ScoreTileFrom<TQ, HD, kRows8>(RawK<Row, HD>{ks, a.k_group_shift, nullptr, a.k_row_bytes}, tile_start, qf, rows,
                                        a.scale_log2, mask, st, s);
          AddRawValues<Row, HD>(ks + Raw::kTileBytes, a.v_row_bytes, lo - tile_start, hi - tile_start, s, st, vexp,
                                a.v_group_shift);
        } else if constexpr (kQuant) {
          float s[8][4];
          ScoreTile<T, HD, kRows8>(kt, tile_start, qf, rows, a.scale_log2, mask, st, s);
          AddValues<T, HD, kRows8>(vt, s, st);
        } else {
          AttendTile<T, HD, kRows8>(ks, ks + Geo::kTileBytes, tile_start, qf, rows, a.scale_log2, mask, st);
        }
      }
      barrier();  // the stage (and tiles) are read before the tile after next overwrites them
      end_tile(j);
    }
  }

  // Row h's output, value(dt, j) at accumulator (dt, 2h + j), and its bf16 copy for the o GEMM
  // when asked for.
  auto store_row = [&](int h, auto value) {
    float* out = p.out + out_rows[h] * HD;
    __nv_bfloat16* out_b = a.out_bf16 != nullptr ? a.out_bf16 + out_rows[h] * HD : nullptr;
#pragma unroll
    for (int dt = 0; dt < Geo::kDTiles; ++dt) {
      const float v0 = value(dt, 0), v1 = value(dt, 1);
      StorePair<kKRegs>(out, dt, q, v0, v1);
      StorePairBf16<kKRegs>(out_b, dt, q, v0, v1);
    }
  };
  if constexpr (kSplit) {
    const float l_total[2] = {QuadSum(st.l[0]), kRows8 ? 0.0f : QuadSum(st.l[1])};
#pragma unroll
    for (int h = 0; h < kH; ++h) {
      if (!rows.valid[h]) continue;
      if (num_segments == 1) {
        const float inv = Reciprocal(l_total[h]);
        store_row(h, [&](int dt, int j) { return Normalize(o_val(dt, 2 * h + j), inv); });
        if (p.lse != nullptr && q == 0) p.lse[out_rows[h]] = RowLse(st.m[h], l_total[h]);
      } else {
        const int64_t at = out_rows[h] * kFlashMaxSegments + z;
        float* part = a.partial + at * HD;
#pragma unroll
        for (int dt = 0; dt < Geo::kDTiles; ++dt) {
          StorePair<kKRegs>(part, dt, q, o_val(dt, 2 * h), o_val(dt, 2 * h + 1));
        }
        if (q == 0) {
          float* ml = a.partial + p.num_tokens * p.num_heads * kFlashMaxSegments * HD + at * 2;
          ml[0] = st.m[h];
          ml[1] = l_total[h];
        }
      }
    }
  } else {
    const bool all[2] = {true, true};
    flush(all);
#pragma unroll
    for (int h = 0; h < kH; ++h) {
      if (!rows.valid[h]) continue;
      const float inv = Reciprocal(L[h]);
      store_row(h, [&](int dt, int j) { return Normalize(o_s[(dt * 4 + 2 * h + j) * kThreads], inv); });
      if (p.lse != nullptr && q == 0) p.lse[out_rows[h]] = RowLse(M[h], L[h]);
    }
  }
}

template <int HD>
__global__ void FlashMergeKernel(PagedAttentionParams p, const float* partial, __nv_bfloat16* out_bf16) {
  AllowDependentLaunch();  // the o GEMM after it prefetches its weights meanwhile
  const int t = blockIdx.x, h = blockIdx.y;
  const RowSpan span = RowKeys(p, p.positions[t]);
  const int seg = static_cast<int>(FlashSegmentKeys(span.first, span.last));
  const int num_segments = span.last < span.first ? 0 : span.last / seg - span.first / seg + 1;
  GridDependencyWait();  // the partial states (pdl: every block waits, as FlashAttentionKernel's)
  if (num_segments <= 1) return;
  const int64_t at = (static_cast<int64_t>(t) * p.num_heads + h) * kFlashMaxSegments;
  const float* ml = partial + p.num_tokens * p.num_heads * kFlashMaxSegments * HD + at * 2;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float M = ml[0], L = ml[1], O = partial[at * HD + d];
    for (int s = 1; s < num_segments; ++s) {
      const MergeScales sc = ScalesFor(M, ml[2 * s]);
      O = Blend(O, partial[(at + s) * HD + d], sc);
      L = Blend(L, ml[2 * s + 1], sc);
      M = sc.m;
    }
    const int64_t at_out = (static_cast<int64_t>(t) * p.num_heads + h) * HD + d;
    if (p.lse != nullptr && d == 0) p.lse[static_cast<int64_t>(t) * p.num_heads + h] = RowLse(M, L);
    const float v = Normalize(O, Reciprocal(L));
    p.out[at_out] = v;
    if (out_bf16 != nullptr) out_bf16[at_out] = __float2bfloat16_rn(v);
  }
}

}  // namespace pagoda::cuda::flash
