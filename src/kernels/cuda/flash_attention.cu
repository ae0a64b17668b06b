#include "kernels/cuda/flash_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/flash_quant.cuh"
#include "kernels/cuda/flash_tile.cuh"
#include "kernels/cuda/flash_wgmma.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/launch_info.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/smem_limit.cuh"

namespace pagoda::cuda {
namespace {

using namespace flash;  // the tile (flash_tile.cuh) and quantized rows (flash_quant.cuh)

constexpr int kWideWarps = 4;

struct KernelArgs {
  PagedAttentionParams p;
  const FlashWorkItem* items;  // wide shape; null: one token per block
  float* partial;              // split shape: [token][head][segment] rows of HD, then (m, l) pairs
  __nv_bfloat16* out_bf16;     // the output rounded to bf16 too (the o GEMM's input), or null
  float scale_log2;
  int group;
  int tokens_per_warp;
  int k_row_bytes, v_row_bytes;  // a (token, KV head) row of the cache
  int k_scale_group, v_scale_group;  // int8, int4: values per scale
  float v_global;                    // nvfp4: V's tensor scale (1 when the format's is 0)
};

__device__ __forceinline__ int WindowStart(const PagedAttentionParams& p, int pos) {
  return p.sliding_window > 0 && pos - p.sliding_window + 1 > 0 ? static_cast<int>(pos - p.sliding_window + 1) : 0;
}

// The rows of thread (g = lane / 4) in a warp serving tokens [w_begin, w_end): row r = g + 8h is
// head r % group of token w_begin + r / group; out_rows (token * num_heads + head) for valid ones.
__device__ __forceinline__ void WarpRows(const KernelArgs& a, int w_begin, int w_end, int kvh, int g, Rows& rows,
                                         int64_t (&out_rows)[2]) {
  const PagedAttentionParams& p = a.p;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h, i = r / a.group, tok = w_begin + i;
    rows.valid[h] = i < a.tokens_per_warp && tok < w_end;
    if (rows.valid[h]) {
      rows.pos[h] = p.positions[tok];
      rows.first[h] = WindowStart(p, rows.pos[h]);
      rows.seg[h] = static_cast<int>(FlashSegmentKeys(rows.first[h], rows.pos[h]));
      out_rows[h] = static_cast<int64_t>(tok) * p.num_heads + static_cast<int64_t>(kvh) * a.group + r % a.group;
    } else {
      rows.pos[h] = -1;
      rows.first[h] = 0;
      rows.seg[h] = kFlashSegmentUnit;
      out_rows[h] = 0;
    }
  }
}

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

// kRows8: the warp's rows 8-15 are padding (one token a warp, at most 8 query heads a KV head:
// decode), so they are not computed (flash_tile.cuh); the same bits for rows 0-7.
template <typename KV, int HD, int kWarps, bool kSplit, bool kPing, bool kRows8>
__global__ void __launch_bounds__(kWarps * 32) FlashAttentionKernel(KernelArgs a) {
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
  extern __shared__ __align__(16) uint8_t smem[];
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
  int w_lo = INT_MAX, w_hi = -1, w_all_lo = 0, w_all_hi = INT_MAX;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows.valid[h]) {
      w_lo = min(w_lo, rows.first[h]);
      w_hi = max(w_hi, rows.pos[h]);
      w_all_lo = max(w_all_lo, rows.first[h]);
      w_all_hi = min(w_all_hi, rows.pos[h]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    w_lo = min(w_lo, __shfl_xor_sync(0xffffffffu, w_lo, o));
    w_hi = max(w_hi, __shfl_xor_sync(0xffffffffu, w_hi, o));
    w_all_lo = max(w_all_lo, __shfl_xor_sync(0xffffffffu, w_all_lo, o));
    w_all_hi = min(w_all_hi, __shfl_xor_sync(0xffffffffu, w_all_hi, o));
  }

  // Launched as a programmatic dependent (a.pdl): the positions and block tables above are the
  // step's, uploaded before its first kernel; Q and the step's own K/V rows come from the kernel
  // ahead. Every block waits (a block that ends without waiting could let the kernels after
  // this one pass theirs before the kernel ahead is done).
  GridDependencyWait();

  // The block's keys [lo, hi]: a segment of its token (split) or the union of its warps' keys.
  int lo, hi, z = 0, num_segments = 1;
  if constexpr (kSplit) {
    const int pos = p.positions[t_begin], first = WindowStart(p, pos);
    const int seg = static_cast<int>(FlashSegmentKeys(first, pos));
    const int s0 = first / seg;
    num_segments = pos / seg - s0 + 1;
    z = blockIdx.z;
    if (z >= num_segments) return;
    lo = max(first, (s0 + z) * seg);
    hi = min(pos, (s0 + z + 1) * seg - 1);
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
  // Quantized caches: tile j's raw K or V rows (RawGeometry) to `dst`, each row's 16-byte pieces
  // from the one holding its first byte to the one holding its last (a piece never straddles
  // the end of the cache's memory).
  using Raw = RawGeometry<Row, HD>;
  auto load_raw = [&](uint8_t* dst, const char* base, int64_t slot_bytes, int row_bytes, int j) {
    const int key0 = j * kKeyTile;
#pragma unroll 4
    for (int i = tid; i < kKeyTile * Raw::kChunks; i += kThreads) {
      const int r = i / Raw::kChunks, c = i % Raw::kChunks;
      const int key = key0 + r;
      const bool ok = key >= lo && key <= hi;
      const int64_t slot = ok ? static_cast<int64_t>(table[key >> bs_shift]) * p.block_size + (key & bs_mask) : 0;
      const char* row = base + slot * slot_bytes;
      const int off = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 15);
      CpAsync16(SmemAddr(dst + r * Raw::kRowBytes + c * 16), row - off + c * 16, ok && c * 16 < off + row_bytes);
      if (c == 0) dst[kKeyTile * Raw::kRowBytes + r] = static_cast<uint8_t>(off);
    }
  };
  auto load_raw_k = [&](uint8_t* dst, int j) { load_raw(dst, k_base, k_slot_bytes, k_row_bytes, j); };
  auto load_raw_v = [&](uint8_t* dst, int j) { load_raw(dst, v_base, v_slot_bytes, v_row_bytes, j); };
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
  int vexp = 0;  // K and V in registers: the accumulators hold O x 2^vexp (AddRawValues)
  // O's value at accumulator (dt, i).
  auto o_val = [&](int dt, int i) {
    if constexpr (kFp4Row<Row>) {  // V's values without the tensor scale
      return __fmul_rn(st.acc[dt][i], a.v_global);
    } else if constexpr (kKRegs) {
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
  if constexpr (kPing) {
    // One K and one V buffer (quantized caches: raw rows; int8 and int4 also one bf16 tile
    // they are converted into): K of the next tile loads once this one's K is scored (int8,
    // int4: converted), V once this one's V is used (int8, int4: converted).
    uint8_t* kb = smem;
    uint8_t* vb = smem + (kQuant ? Raw::kTileBytes : Geo::kTileBytes);
    uint8_t* tile = smem + 2 * Raw::kTileBytes;
    auto load_kb = [&](int j) {
      if constexpr (kQuant) {
        load_raw_k(kb, j);
      } else {
        load_k(kb, j);
      }
    };
    auto load_vb = [&](int j) {
      if constexpr (kQuant) {
        load_raw_v(vb, j);
      } else {
        load_v(vb, j);
      }
    };
    load_kb(tile_lo);
    CpAsyncCommit();
    load_vb(tile_lo);
    CpAsyncCommit();
    for (int j = tile_lo; j <= tile_hi; ++j) {
      const int tile_start = j * kKeyTile;
      const bool active = tile_start <= w_hi && tile_start + kKeyTile - 1 >= w_lo;
      const bool mask = !(tile_start >= w_all_lo && tile_start + kKeyTile - 1 <= w_all_hi);
      float s[8][4];
      CpAsyncWait<1>();  // K of tile j (V of tile j may still be in flight)
      barrier();
      if constexpr (kKRegs) {
        if (active) ScoreTileFrom<TQ, HD, kRows8>(RawK<Row, HD>{kb, a.k_scale_group}, tile_start, qf, rows, a.scale_log2, mask, st, s);
      } else if constexpr (kQuant) {
        DequantizeTile<Row, HD, kThreads>(kb, tile, a.k_scale_group);
      } else {
        if (active) ScoreTile<T, HD, kRows8>(kb, tile_start, qf, rows, a.scale_log2, mask, st, s);
      }
      barrier();  // K read: the next tile's K may overwrite it
      if (j < tile_hi) load_kb(j + 1);
      CpAsyncCommit();
      if constexpr (kQuant && !kKRegs) {
        if (active) ScoreTile<T, HD, kRows8>(tile, tile_start, qf, rows, a.scale_log2, mask, st, s);
      }
      CpAsyncWait<1>();  // V of tile j
      barrier();         // (and the scores have read the tile)
      if constexpr (kQuant && !kKRegs) {
        DequantizeTile<Row, HD, kThreads>(vb, tile, a.v_scale_group);
        barrier();
        if (j < tile_hi) load_vb(j + 1);
        CpAsyncCommit();
        if (active) AddValues<T, HD, kRows8>(tile, s, st);
        barrier();
      } else {
        if constexpr (kKRegs) {
          if (active) AddRawValues<Row, HD>(vb, s, st, vexp, a.v_scale_group);
        } else {
          if (active) AddValues<T, HD, kRows8>(vb, s, st);
        }
        barrier();
        if (j < tile_hi) load_vb(j + 1);
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
    auto load_stage = [&](int stage, int j) {
      uint8_t* r = smem + stage * kStage;
      if constexpr (kQuant) {
        load_raw_k(r, j);
        load_raw_v(r + Raw::kTileBytes, j);
      } else {
        load_rows.template operator()<true, true>(r, r + Geo::kTileBytes, j);
      }
    };
    load_stage(0, tile_lo);
    CpAsyncCommit();
    for (int j = tile_lo; j <= tile_hi; ++j) {
      if (j < tile_hi) load_stage((j + 1 - tile_lo) & 1, j + 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
      barrier();
      if constexpr (kQuant && !kKRegs) {
        const uint8_t* r = smem + ((j - tile_lo) & 1) * kStage;
        DequantizeTile<Row, HD, kThreads>(r, kt, a.k_scale_group);
        DequantizeTile<Row, HD, kThreads>(r + Raw::kTileBytes, vt, a.v_scale_group);
        barrier();
      } else if constexpr (kFragTiles) {
        const uint8_t* r = smem + ((j - tile_lo) & 1) * kStage;
        BuildFragments<Row, HD, kWarps>(r, r + Raw::kTileBytes, a.k_scale_group, kt, vt);
        barrier();
      }
      const int tile_start = j * kKeyTile;
      if (tile_start <= w_hi && tile_start + kKeyTile - 1 >= w_lo) {
        const uint8_t* ks = smem + ((j - tile_lo) & 1) * kStage;
        const bool mask = !(tile_start >= w_all_lo && tile_start + kKeyTile - 1 <= w_all_hi);
        if constexpr (kFragTiles) {
          float s[8][4];
          ScoreTileFrom<TQ, HD, kRows8>(RawK<Row, HD, true>{ks, a.k_scale_group, kt}, tile_start, qf, rows, a.scale_log2, mask,
                                st, s);
          AddRawValues<Row, HD, true>(ks + Raw::kTileBytes, s, st, vexp, a.v_scale_group, vt);
        } else if constexpr (kKRegs) {
          float s[8][4];
          ScoreTileFrom<TQ, HD, kRows8>(RawK<Row, HD>{ks, a.k_scale_group}, tile_start, qf, rows, a.scale_log2, mask, st, s);
          AddRawValues<Row, HD>(ks + Raw::kTileBytes, s, st, vexp, a.v_scale_group);
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
        store_row(h, [&](int dt, int j) { return __fdiv_rn(o_val(dt, 2 * h + j), l_total[h]); });
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
      store_row(h, [&](int dt, int j) { return __fdiv_rn(o_s[(dt * 4 + 2 * h + j) * kThreads], L[h]); });
    }
  }
}

// Keeps the compiler from moving reads or writes of registers that an in-flight wgmma uses
// across this point.
template <int N>
__device__ __forceinline__ void FenceOperands(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// The wide shape on Hopper warpgroup products (flash_wgmma.cuh): bf16/f16 caches, the same
// work items, rows, tiles, segments and roundings as FlashAttentionKernel<T, HD, 4, ...>.
template <typename T, int HD>
__global__ void __launch_bounds__(256, 2) FlashWgmmaKernel(KernelArgs a) {
  using Geo = Geometry<HD>;
  using WG = WgGeometry<HD>;
  constexpr int kChunks = HD * 2 / 16;
  constexpr int kStages = WG::kStages;
  // 16-byte aligned (a 1024-byte alignment here would pad the static shared memory to 1024 bytes
  // and leave two blocks no room); the tiles start at the next 1024-byte boundary.
  extern __shared__ __align__(16) uint8_t wg_dynamic_smem[];
  const uint32_t pad = (1024 - (SmemAddr(wg_dynamic_smem) & 1023)) & 1023;
  uint8_t* smem = wg_dynamic_smem + pad;
  uint8_t* small = pad >= WG::kSmallBytes ? smem - WG::kSmallBytes : smem + WG::kTilesBytes;
  const uint32_t base = SmemAddr(smem);
  const uint32_t q_tile = base + WG::kQOffset;
  auto k_tile = [&](int stage) { return base + WG::kKOffset + stage * WG::kTileBytes; };
  auto v_tile = [&](int stage) { return base + WG::kVOffset + stage * WG::kTileBytes; };
  // Barrier b of stage s: b = 0 K full, 1 V full, 2 K empty, 3 V empty.
  auto bar = [&](int b, int stage) { return SmemAddr(small) + (b * kStages + stage) * 8; };
  const PagedAttentionParams& p = a.p;
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3, g = lane >> 2, q = lane & 3;
  const int kvh = blockIdx.y;
  const int group = a.group;
  const FlashWorkItem item = a.items[blockIdx.x];
  const int t_begin = item.first_token, t_end = item.first_token + item.num_tokens;

  // The consumer thread's rows, as the wide kernel's warp `warp` holds them.
  const int w_begin = min(t_end, t_begin + warp * a.tokens_per_warp);
  const int w_end = min(t_end, w_begin + a.tokens_per_warp);
  Rows rows;
  int64_t out_rows[2];
  WarpRows(a, w_begin, w_end, kvh, g, rows, out_rows);
  int w_lo = INT_MAX, w_hi = -1;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rows.valid[h]) {
      w_lo = min(w_lo, rows.first[h]);
      w_hi = max(w_hi, rows.pos[h]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    w_lo = min(w_lo, __shfl_xor_sync(0xffffffffu, w_lo, o));
    w_hi = max(w_hi, __shfl_xor_sync(0xffffffffu, w_hi, o));
  }
  int (*range_s)[4] = reinterpret_cast<int (*)[4]>(small + WG::kBarriers * 8);
  if (wg == 0 && lane == 0) {
    range_s[0][warp] = w_lo;
    range_s[1][warp] = w_hi;
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(bar(0, s), 128);  // every producer thread's copies of K
      MbarrierInit(bar(1, s), 128);  // and of V
      MbarrierInit(bar(2, s), 4);    // every consumer warp done with K
      MbarrierInit(bar(3, s), 4);    // and with V
    }
  }
  __syncthreads();
  GridDependencyWait();  // as FlashAttentionKernel: every block, before Q and K/V (a no-op without pdl)
  int lo = INT_MAX, hi = -1;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    lo = min(lo, range_s[0][w]);
    hi = max(hi, range_s[1][w]);
  }
  if (hi < 0) return;
  const int tile_lo = lo / kKeyTile, tile_hi = hi / kKeyTile;

  if (wg == 1) {
    // The producer: K of tile n, then V of tile n - 1, each into its ring as soon as the
    // consumers are done with the stage it replaces. K runs a tile ahead of V because the
    // consumers score tile n + 1 while they multiply tile n's P by its V.
    SetMaxRegistersDec<40>();
    constexpr int kRowStep = 128 / kChunks, kPer = kKeyTile / kRowStep;  // a thread's rows a tile
    const int ptid = tid - 128, c = ptid % kChunks, r0 = ptid / kChunks;
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
  SetMaxRegistersInc<216>();
  {
    // Q rounded to T into its swizzled tile (row R is warp R / 16's row R % 16), every read
    // issued before the first store.
    constexpr int kPer = 64 * (HD / 2) / 128;
    float2 qv[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int i = tid + k * 128, row = i / (HD / 2), d = 2 * (i % (HD / 2));
      const int w = row >> 4, r = row & 15, ti = r / group;
      const int wb = min(t_end, t_begin + w * a.tokens_per_warp), tok = wb + ti;
      qv[k] = make_float2(0.0f, 0.0f);
      if (ti < a.tokens_per_warp && tok < min(t_end, wb + a.tokens_per_warp)) {
        const int64_t out_row = static_cast<int64_t>(tok) * p.num_heads + static_cast<int64_t>(kvh) * group + r % group;
        qv[k] = *reinterpret_cast<const float2*>(p.q + out_row * HD + d);
      }
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int i = tid + k * 128, row = i / (HD / 2), d = 2 * (i % (HD / 2));
      *reinterpret_cast<uint32_t*>(smem + WG::kQOffset + WgChunk(row, d >> 3) + (d & 7) * 2) =
          PackPair<T>(qv[k].x, qv[k].y);
    }
  }
  FenceProxyAsyncShared();
  asm volatile("bar.sync 1, 128;\n" ::: "memory");  // the consumers only

  State<HD> st;
  st.Reset(0);
  st.Reset(1);
  float M[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};
  bool merged[2] = {false, false};
  float* o_s = reinterpret_cast<float*>(smem + WG::kOOffset) + tid;
  // Rows `now` merge their segment (running max m, this thread's part of the sum l, O in the
  // accumulators) into the result and start the next with O = 0.
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
#pragma unroll
      for (int dt = 0; dt < Geo::kDTiles; ++dt) st.acc[dt][2 * h] = st.acc[dt][2 * h + 1] = 0.0f;
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
  float* o_flat = &st.acc[0][0];
  // The tiles' descriptors, once: a stage or k-step moves the start address field only.
  const uint64_t q_desc = KMajorAt(q_tile, 0), k_desc = KMajorAt(k_tile(0), 0);
  const uint64_t v_desc = VAt(v_tile(0), 0);
  constexpr uint64_t kStageStep = WG::kTileBytes >> 4;
  auto issue_scores = [&](int stage) {
    FenceOperands<32>(s_flat);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      WgmmaSS<64, T>(s_flat, q_desc + KMajorStep(kk), k_desc + stage * kStageStep + KMajorStep(kk), kk > 0 ? 1 : 0);
    }
    WgmmaCommit();
  };
  uint32_t pf[4][4];
  auto issue_values = [&](int stage) {
    FenceOperands<HD / 2>(o_flat);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kKeyTile / 16; ++kk) {
      WgmmaRSTransB<HD, T>(o_flat, pf[kk], v_desc + stage * kStageStep + VStep(kk));
    }
    WgmmaCommit();
  };
  auto release = [&](uint32_t barrier) {
    __syncwarp();
    if (lane == 0) MbarrierArrive(barrier);
  };
  const TileK<HD> no_scale{nullptr};  // Scale() is the identity for 16-bit caches

  MbarrierWait(bar(0, 0), 0);
  FenceProxyAsyncShared();
  issue_scores(0);
  WgmmaWait<0>();
  FenceOperands<32>(s_flat);
  release(bar(2, 0));
  {
    float corr[2];
    TileSoftmax<HD>(no_scale, tile_lo * kKeyTile, rows, a.scale_log2, mask_of(tile_lo), st, s, corr);
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
  int n = 0;
  for (int j = tile_lo; j < tile_hi; ++j, ++n) {
    pack_p();
    const int stage = n % kStages, next = (n + 1) % kStages;
    MbarrierWait(bar(0, next), ((n + 1) / kStages) & 1);
    FenceProxyAsyncShared();
    issue_scores(next);
    MbarrierWait(bar(1, stage), (n / kStages) & 1);
    FenceProxyAsyncShared();
    issue_values(stage);
    // Tile j + 1's softmax while tile j's P V runs. A row whose segment ends after tile j
    // starts the next from a fresh state; its old one merges once P V is done. The others'
    // O is rescaled then.
    WgmmaWait<1>();
    FenceOperands<32>(s_flat);
    release(bar(2, next));
    const int end = (j + 1) * kKeyTile;
    const bool unit = end % kFlashSegmentUnit == 0;
    const bool now[2] = {unit && end % rows.seg[0] == 0, unit && end % rows.seg[1] == 0};
    const float m_old[2] = {st.m[0], st.m[1]}, l_old[2] = {st.l[0], st.l[1]};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (now[h]) {
        st.m[h] = -INFINITY;
        st.l[h] = 0.0f;
      }
    }
    float corr[2];
    TileSoftmax<HD, false, false>(no_scale, end, rows, a.scale_log2, mask_of(j + 1), st, s, corr);
    WgmmaWait<0>();
    FenceOperands<HD / 2>(o_flat);
    release(bar(3, stage));
    if (__any_sync(0xffffffffu, now[0] || now[1])) flush(now, m_old, l_old);
#pragma unroll
    for (int h = 0; h < 2; ++h) corr[h] = now[h] ? 1.0f : corr[h];
    // x * 1 is x: the warp skips the products when no row's maximum moved.
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) RescaleO<HD>(st, corr);
  }
  pack_p();
  MbarrierWait(bar(1, n % kStages), (n / kStages) & 1);
  FenceProxyAsyncShared();
  issue_values(n % kStages);
  WgmmaWait<0>();
  FenceOperands<HD / 2>(o_flat);
  const bool all[2] = {true, true};
  flush(all, st.m, st.l);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!rows.valid[h]) continue;
    float* out = p.out + out_rows[h] * HD;
    __nv_bfloat16* out_b = a.out_bf16 != nullptr ? a.out_bf16 + out_rows[h] * HD : nullptr;
#pragma unroll
    for (int dt = 0; dt < Geo::kDTiles; ++dt) {
      const float v0 = __fdiv_rn(o_s[(dt * 4 + 2 * h) * 128], L[h]);
      const float v1 = __fdiv_rn(o_s[(dt * 4 + 2 * h + 1) * 128], L[h]);
      StorePair<false>(out, dt, q, v0, v1);
      StorePairBf16<false>(out_b, dt, q, v0, v1);
    }
  }
}

// For a test of the building blocks: one warpgroup computes S = Q K^T (64 rows x
// 64 keys) by SS-wgmma and O = P V (64 rows x HD) by RS-wgmma from the swizzled tiles
// flash_wgmma.cuh lays out, the inputs rounded to T.
template <typename T, int HD>
__global__ void __launch_bounds__(128) WgmmaTileProductsKernel(const float* q, const float* k, const float* v,
                                                                const float* pm, float* s_out, float* o_out) {
  extern __shared__ __align__(16) uint8_t wg_test_smem[];
  uint8_t* smem = wg_test_smem + ((1024 - (SmemAddr(wg_test_smem) & 1023)) & 1023);
  constexpr int kTile = WgGeometry<HD>::kTileBytes;
  const uint32_t base = SmemAddr(smem), q_tile = base, k_tile = base + kTile, v_tile = base + 2 * kTile;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
  for (int i = tid; i < 64 * (HD / 2); i += 128) {
    const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
    const uint32_t at = WgChunk(r, d >> 3) + (d & 7) * 2;
    *reinterpret_cast<uint32_t*>(smem + at) = PackPair<T>(q[r * HD + d], q[r * HD + d + 1]);
    *reinterpret_cast<uint32_t*>(smem + kTile + at) = PackPair<T>(k[r * HD + d], k[r * HD + d + 1]);
    *reinterpret_cast<uint32_t*>(smem + 2 * kTile + at) = PackPair<T>(v[r * HD + d], v[r * HD + d + 1]);
  }
  FenceProxyAsyncShared();
  __syncthreads();
  float s[32];
  FenceOperands<32>(s);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) WgmmaSS<64, T>(s, KMajorAt(q_tile, kk), KMajorAt(k_tile, kk), kk > 0 ? 1 : 0);
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
  float o[HD / 2];
#pragma unroll
  for (int i = 0; i < HD / 2; ++i) o[i] = 0.0f;
  FenceOperands<HD / 2>(o);
  WgmmaFence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) WgmmaRSTransB<HD, T>(o, pf[kk], VAt(v_tile, kk));
  WgmmaCommit();
  WgmmaWait<0>();
  FenceOperands<HD / 2>(o);
#pragma unroll
  for (int j = 0; j < HD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o_out[(16 * warp + g + 8 * (e >> 1)) * HD + 8 * j + 2 * qd + (e & 1)] = o[4 * j + e];
}

// The split shape's merge: a token's segment states in order, as the walking shapes merge them.
template <int HD>
__global__ void FlashMergeKernel(PagedAttentionParams p, const float* partial, __nv_bfloat16* out_bf16) {
  AllowDependentLaunch();  // the o GEMM after it prefetches its weights meanwhile
  const int t = blockIdx.x, h = blockIdx.y;
  const int pos = p.positions[t], first = WindowStart(p, pos);
  const int seg = static_cast<int>(FlashSegmentKeys(first, pos));
  const int num_segments = pos / seg - first / seg + 1;
  GridDependencyWait();  // the partial states (pdl: every block waits, as FlashAttentionKernel's)
  if (num_segments == 1) return;
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
    const float v = __fdiv_rn(O, L);
    p.out[at_out] = v;
    if (out_bf16 != nullptr) out_bf16[at_out] = __float2bfloat16_rn(v);
  }
}

template <typename KV, int HD, int kWarps, bool kSplit, bool kPing, bool kRows8 = false>
void LaunchKernel(const KernelArgs& a, dim3 grid, cudaStream_t stream, bool pdl) {
  using Geo = Geometry<HD>;
  constexpr int kSmem =
      KVSmemBytes<HD, kWarps, kSplit, kPing, KV>() + (kSplit ? 0 : Geo::kOutFloats * kWarps * 32 * 4);
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
bool UsePing(int64_t blocks) { return blocks > 3 * static_cast<int64_t>(SmCount()); }

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
    if (a.group <= 8) {
      ping ? LaunchKernel<KV, HD, 1, kSplit, true, true>(a, grid, stream, pdl)
           : LaunchKernel<KV, HD, 1, kSplit, false, true>(a, grid, stream, pdl);
      return;
    }
  }
  ping ? LaunchKernel<KV, HD, 1, kSplit, true>(a, grid, stream, pdl)
       : LaunchKernel<KV, HD, 1, kSplit, false>(a, grid, stream, pdl);
}

FlashWgmma flash_wgmma_mode = [] {
  const char* e = std::getenv("PAGODA_FLASH_WGMMA");
  const std::string v = e != nullptr ? e : "";
  return v == "1" ? FlashWgmma::kOn : v == "0" ? FlashWgmma::kOff : FlashWgmma::kAuto;
}();
bool FlashWgmmaOn(int64_t max_keys) {
  return flash_wgmma_mode == FlashWgmma::kOn ||
         (flash_wgmma_mode == FlashWgmma::kAuto && max_keys >= kFlashWgmmaMinKeys);
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
  a.v_global = p.v_format.tensor_scale > 0.0f ? p.v_format.tensor_scale : 1.0f;
  const unsigned kv = static_cast<unsigned>(p.num_kv_heads);
  switch (shape) {
    case FlashShape::kSplit: {
      const int depth = FlashSplitDepth(max_keys);
      a.tokens_per_warp = 1;
      const dim3 grid(static_cast<unsigned>(p.num_tokens), kv, static_cast<unsigned>(depth));
      const bool ping = UsePing(p.num_tokens * p.num_kv_heads * depth);
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
      LaunchOneWarp<KV, HD, false>(a, grid, ping, stream, pdl);
      return;
    }
    case FlashShape::kWide:
      a.items = items;
      if constexpr (std::is_same_v<KV, __nv_bfloat16> || std::is_same_v<KV, __half>) {
        if (FlashWgmmaOn(max_keys)) {
          constexpr int kSmem = WgGeometry<HD>::kSmemBytes;
          static uint32_t devices_done = 0;
          if (devices_done == 0) {  // two blocks an SM need the whole 228 KB
            PAGODA_CUDA_CHECK(cudaFuncSetAttribute(FlashWgmmaKernel<KV, HD>,
                                                   cudaFuncAttributePreferredSharedMemoryCarveout,
                                                   cudaSharedmemCarveoutMaxShared));
          }
          AllowSmem(FlashWgmmaKernel<KV, HD>, kSmem, &devices_done);
          LaunchDependent(FlashWgmmaKernel<KV, HD>, dim3(static_cast<unsigned>(num_items), kv), dim3(256), kSmem, stream,
                          pdl, a);
          return;
        }
      }
      LaunchKernel<KV, HD, kWideWarps, false, false>(a, dim3(static_cast<unsigned>(num_items), kv), stream, pdl);
      return;
  }
}

// int8 and int4 rows are read in registers (IntRegs) when K's and V's scale groups are 32k
// columns (a group's columns are whole 32-column blocks in QKColumn's and OutColumn's orders) and
// int8 rows are 4-byte aligned (an even number of groups); other groups are dequantized into
// bf16 tiles.
bool IntRegsServe(const PagedAttentionParams& p) {
  for (const KVArrayFormat* f : {&p.k_format, &p.v_format}) {
    const int64_t g = std::min(f->group, p.head_dim);
    if (g % 32 != 0) return false;
    if (f->quant == KVQuant::kInt8 && (p.head_dim / g) % 2 != 0) return false;
  }
  return true;
}

}  // namespace

void SetFlashWgmma(FlashWgmma mode) { flash_wgmma_mode = mode; }

void WgmmaTileProductsForTest(const float* q, const float* k, const float* v, const float* p, float* s, float* o,
                              int head_dim, bool f16, cudaStream_t stream) {
  auto run = [&]<typename T, int HD>() {
    constexpr int kSmem = 3 * WgGeometry<HD>::kTileBytes + 1024;
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

bool FlashAttentionSupports(const PagedAttentionParams& p) {
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (!(p.scale > 0.0f)) return false;  // the tile takes each row's maximum before scaling
  const KVQuant quant = p.k_format.quant;
  if (p.v_format.quant != quant || p.k_format.head_dim != p.head_dim || p.v_format.head_dim != p.head_dim) return false;
  switch (quant) {
    case KVQuant::kNone:
      if (p.kv_dtype != DType::kBF16 && p.kv_dtype != DType::kF16) return false;
      break;
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2:
    case KVQuant::kNvfp4:
      break;
    case KVQuant::kInt8:  // scale groups of 8k values that divide the head dim
    case KVQuant::kInt4:
      for (const KVArrayFormat* f : {&p.k_format, &p.v_format}) {
        const int64_t g = std::min(f->group, p.head_dim);
        if (g <= 0 || g % 8 != 0 || p.head_dim % g != 0) return false;
      }
      break;
    default:
      return false;
  }
  if (p.k_format.heavy_rows != 0 || p.v_format.heavy_rows != 0) return false;
  if (quant != KVQuant::kNone && (!Aligned16(p.k_cache) || !Aligned16(p.v_cache))) return false;
  if (p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 || p.num_heads / p.num_kv_heads > 16) return false;
  if (p.block_size <= 0 || (p.block_size & (p.block_size - 1)) != 0) return false;
  return p.num_tokens <= 2147483647 && p.num_kv_heads <= 65535;
}

int64_t FlashAttentionScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim) {
  return std::min(num_tokens, kFlashSplitMaxTokens) * num_heads * kFlashMaxSegments * (head_dim + 2);
}

int FlashSplitDepth(int64_t max_keys) {
  // Every row of at most max_keys keys: segments of 128 keys for rows up to kFlashTinyRowKeys,
  // 256 up to kFlashShortRowKeys, 512 above (+1: a window may straddle one more), rounded up to
  // a power of two.
  const int64_t k = std::max<int64_t>(max_keys - 1, 0);
  int64_t need = std::min(k, kFlashTinyRowKeys - 1) / kFlashSegmentUnit + 2;
  if (max_keys > kFlashTinyRowKeys) need = std::max(need, std::min(k, kFlashShortRowKeys - 1) / (2 * kFlashSegmentUnit) + 2);
  if (max_keys > kFlashShortRowKeys) need = std::max(need, k / (4 * kFlashSegmentUnit) + 2);
  need = std::min<int64_t>(kFlashMaxSegments, need);
  int depth = 1;
  while (depth < need) depth *= 2;
  return std::min(depth, kFlashMaxSegments);
}

int64_t FlashTokensPerItem(int64_t group) { return kWideWarps * (16 / std::max<int64_t>(group, 1)); }

std::vector<FlashWorkItem> FlashWorkItems(std::span<const int32_t> query_start_loc, int64_t tokens_per_item) {
  std::vector<FlashWorkItem> items;
  for (size_t s = 0; s + 1 < query_start_loc.size(); ++s) {
    const int32_t begin = query_start_loc[s], end = query_start_loc[s + 1];
    // The sequence's last run (the most keys) first: long blocks start early.
    for (int64_t stop = end; stop > begin; stop -= tokens_per_item) {
      const int64_t start = std::max<int64_t>(begin, stop - tokens_per_item);
      items.push_back({static_cast<int32_t>(start), static_cast<int32_t>(stop - start)});
    }
  }
  return items;
}

FlashShape ChooseFlashShape(int64_t num_tokens, int64_t num_seqs) {
  if (num_tokens <= kFlashSplitMaxTokens) return FlashShape::kSplit;
  return num_tokens == num_seqs ? FlashShape::kNarrow : FlashShape::kWide;
}

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
    default:
      if (p.kv_dtype == DType::kBF16) return run.template operator()<__nv_bfloat16>();
      return run.template operator()<__half>();
  }
}

}  // namespace pagoda::cuda
