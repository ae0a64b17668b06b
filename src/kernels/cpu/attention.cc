#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/op_profile.h"
#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kv/kv_codec.h"
#include "kernels/cpu/vec.h"

namespace pagoda {
namespace {

// Where one query's keys come from: the block arrays in their formats, or a block's wide copy.
struct KVReader {
  const PagedAttentionParams& p;
  KVArrayFormat fk, fv;
  int64_t k_block_bytes, v_block_bytes;
  bool quantized;                       // either array: rows are dequantized into buffers
  int64_t k_elem, v_elem, wide_elem;    // bytes per element of the wide arrays
  int64_t row_step;                     // elements from one key's row to the next in a block

  explicit KVReader(const PagedAttentionParams& params) : p(params), fk(params.k_format), fv(params.v_format) {
    for (KVArrayFormat* f : {&fk, &fv}) {
      if (f->quant == KVQuant::kNone) f->dtype = p.kv_dtype;
      f->block_size = p.block_size;
      f->num_heads = p.num_kv_heads;
      f->head_dim = p.head_dim;
    }
    k_block_bytes = KVBlockBytes(fk);
    v_block_bytes = KVBlockBytes(fv);
    quantized = fk.quant != KVQuant::kNone || fv.quant != KVQuant::kNone;
    k_elem = DTypeBlockBytes(fk.dtype);
    v_elem = DTypeBlockBytes(fv.dtype);
    wide_elem = DTypeBlockBytes(p.wide_dtype);
    row_step = p.num_kv_heads * p.head_dim;
  }

  bool Wide(int64_t key, int64_t pos, int32_t block) const {
    if (p.wide_index == nullptr || p.wide_index[block] < 0) return false;
    return SidePoolKeyWide(p, key, pos);
  }

  // The cache lines of the K and V rows of keys [a, b) for KV head kvh, for prefetching: the
  // plain cache only (quantized or wide rows are dequantized or chosen per query), else none.
  void NextLines(int64_t a, int64_t b, const int32_t* table, int64_t kvh, std::vector<const void*>* lines) const {
    lines->clear();
    if (p.wide_index != nullptr || quantized) return;
    const int64_t d = p.head_dim;
    const int64_t k_row = d * k_elem, v_row = d * v_elem;
    lines->resize((b - a) * ((k_row + 63) / 64 + (v_row + 63) / 64));
    const void** out = lines->data();
    // Block by block, as Rows walks them (one division per block, not per key).
    for (int64_t key = a; key < b;) {
      const int64_t bi = key / p.block_size;
      const int64_t end = std::min(b, (bi + 1) * p.block_size);
      const int64_t index = ((int64_t{table[bi]} * p.block_size + key - bi * p.block_size) * p.num_kv_heads + kvh) * d;
      const char* kp = static_cast<const char*>(p.k_cache) + index * k_elem;
      const char* vp = static_cast<const char*>(p.v_cache) + index * v_elem;
      for (; key < end; ++key, kp += row_step * k_elem, vp += row_step * v_elem) {
        for (int64_t o = 0; o < k_row; o += 64) *out++ = kp + o;
        for (int64_t o = 0; o < v_row; o += 64) *out++ = vp + o;
      }
    }
  }

  // The K and V rows of keys [a, b) for the KV head kvh of a query at `pos`: wide rows in
  // place, quantized ones dequantized into k_buf / v_buf (head_dim floats per key).
  void Rows(int64_t a, int64_t b, int64_t pos, const int32_t* table, int64_t kvh, float* k_buf,
            float* v_buf, cpu::TileRow* k, cpu::TileRow* v) const {
    const int64_t d = p.head_dim;
    for (int64_t key = a; key < b;) {
      const int64_t bi = key / p.block_size;
      const int64_t end = std::min(b, (bi + 1) * p.block_size);
      const int32_t block = table[bi];
      const int64_t offset0 = key - bi * p.block_size;
      if (p.wide_index == nullptr && !quantized) {  // the plain cache: consecutive rows
        const int64_t index = ((int64_t{block} * p.block_size + offset0) * p.num_kv_heads + kvh) * d;
        const uint8_t* kp = static_cast<const uint8_t*>(p.k_cache) + index * k_elem;
        const uint8_t* vp = static_cast<const uint8_t*>(p.v_cache) + index * v_elem;
        for (int64_t j = key - a; key < end; ++key, ++j, kp += row_step * k_elem, vp += row_step * v_elem) {
          k[j] = {kp, fk.dtype};
          v[j] = {vp, fv.dtype};
        }
        continue;
      }
      for (int64_t j = key - a; key < end; ++key, ++j) {
        const int64_t offset = key - bi * p.block_size;
        if (Wide(key, pos, block)) {
          const int64_t index = ((int64_t{p.wide_index[block]} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
          k[j] = {static_cast<const uint8_t*>(p.k_wide) + index * wide_elem, p.wide_dtype};
          v[j] = {static_cast<const uint8_t*>(p.v_wide) + index * wide_elem, p.wide_dtype};
        } else if (!quantized) {
          const int64_t index = ((int64_t{block} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
          k[j] = {static_cast<const uint8_t*>(p.k_cache) + index * k_elem, fk.dtype};
          v[j] = {static_cast<const uint8_t*>(p.v_cache) + index * v_elem, fv.dtype};
        } else {
          float* kb = k_buf + j * d;
          float* vb = v_buf + j * d;
          DequantizeKVRow(fk, static_cast<const uint8_t*>(p.k_cache) + block * k_block_bytes, offset, kvh, kb);
          DequantizeKVRow(fv, static_cast<const uint8_t*>(p.v_cache) + block * v_block_bytes, offset, kvh, vb);
          k[j] = {kb, DType::kF32};
          v[j] = {vb, DType::kF32};
        }
      }
    }
  }
};

static_assert(kAttentionTile <= cpu::kTileKeys);

struct Scratch {
  std::vector<float> kq, vq, q;  // dequantized rows of a tile; the query rows side by side
  std::vector<int32_t> row_n;    // keys per query row in a diagonal tile
  cpu::TileStateBuffers state;   // per query row m, l, acc
  cpu::TileRow k[cpu::kTileKeys], v[cpu::kTileKeys];
  cpu::TileScratch tile;
  std::vector<const void*> prefetch;
};

// Query rows (tokens x group heads) one step serves at most; a prefill groups this many
// rows of consecutive tokens so each K/V tile is converted once for all of them.
constexpr int64_t kMaxQueryRows = 32;

// One work item: window `window` (kAttentionSplit positions, or the whole context when it
// fits in one) of the queries of tokens [t, t + nt) for KV head kvh. Several tokens only
// when they are one sequence's consecutive positions in the same last window, without a
// sliding window or wide rows (the keys they read are then the same rows).
using WorkItem = PagedAttentionPlan::WorkItem;

// Keys [lo, hi) of query token t in window s.
std::pair<int64_t, int64_t> WindowKeys(const PagedAttentionParams& p, int64_t t, int64_t s) {
  const int64_t pos = p.positions[t];
  const int64_t lo = std::max(AttentionWindowStart(pos, p.sliding_window), s * kAttentionSplit);
  return {lo, std::min(pos + 1, (s + 1) * kAttentionSplit)};
}

// Runs the item; returns per query row (token i, head g at row i * group + g) the running
// max m, sum l and the unnormalized accumulator (in w.state).
// Each token's keys go through the same tiles (aligned to kAttentionTile) as when it is
// alone, every tile stepped once for all the item's rows (on the causal diagonal each row
// limited to its own keys); a step's arithmetic per (row, key) does not depend on the other
// rows (attention_tile.h), so the bits are those of the token alone.
cpu::AttentionTileState AttendItem(const PagedAttentionParams& p, const KVReader& reader,
                                   const cpu::AttentionTileKernels& kernels, const WorkItem& it, Scratch& w) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const int64_t rows = it.nt * group;
  const int32_t* table = p.block_tables[it.t];
  w.kq.resize(kAttentionTile * d);  // used by quantized rows only
  w.vq.resize(kAttentionTile * d);
  const cpu::AttentionTileState st = w.state.Reset(rows, d);
  cpu::AttentionTileArgs a;
  if (it.nt == 1) {
    a.q = p.q + (it.t * p.num_heads + it.kvh * group) * d;
  } else {  // the tokens' query rows side by side
    w.q.resize(rows * d);
    for (int64_t i = 0; i < it.nt; ++i) {
      std::copy_n(p.q + ((it.t + i) * p.num_heads + it.kvh * group) * d, group * d, &w.q[i * group * d]);
    }
    a.q = w.q.data();
  }
  a.q_stride = d;
  a.dk0 = d;
  a.dv = d;
  a.scale = p.scale;
  a.k0 = w.k;
  a.v = w.v;
  float* scratch = w.tile.Get(cpu::TileScratchFloats(rows, d));
  a.heads = rows;
  const auto [lo, common_hi] = WindowKeys(p, it.t, it.window);  // the first token reads the fewest keys
  const int64_t first_tile = lo / kAttentionTile * kAttentionTile;
  // Tiles every token reads whole (all of them for one token): one step each for all rows.
  const int64_t shared_end =
      it.nt == 1 ? common_hi : std::max(first_tile, common_hi / kAttentionTile * kAttentionTile);
  for (int64_t tile = first_tile; tile < shared_end; tile += kAttentionTile) {
    const int64_t b = std::min(tile + kAttentionTile, shared_end);
    const int64_t first = std::max(tile, lo);
    a.n = b - first;
    reader.Rows(first, b, p.positions[it.t], table, it.kvh, w.kq.data(), w.vq.data(), w.k, w.v);
    // A decode reads its K/V from memory (they were last touched a whole step ago): the next
    // tile's rows are requested while this one computes. (A prefill's rows were just written.)
    if (it.nt == 1) {
      reader.NextLines(b, std::min(b + kAttentionTile, shared_end), table, it.kvh, &w.prefetch);
      a.prefetch = w.prefetch.data();
      a.num_prefetch = static_cast<int64_t>(w.prefetch.size());
    }
    kernels.step(a, st, scratch);
  }
  a.num_prefetch = 0;
  if (it.nt == 1) return st;
  // The causal diagonal: still one step per tile for all rows, token i's rows limited to its
  // own keys (row_n; a row past its last key is left unchanged), as when it is alone.
  const int64_t last_hi = WindowKeys(p, it.t + it.nt - 1, it.window).second;
  w.row_n.resize(rows);
  a.row_n = w.row_n.data();
  for (int64_t tile = shared_end; tile < last_hi; tile += kAttentionTile) {
    const int64_t b = std::min(tile + kAttentionTile, last_hi);
    const int64_t first = std::max(tile, lo);
    a.n = b - first;
    for (int64_t i = 0; i < it.nt; ++i) {
      const int64_t hi_i = WindowKeys(p, it.t + i, it.window).second;
      const auto keys = static_cast<int32_t>(std::clamp<int64_t>(std::min(b, hi_i) - first, 0, a.n));
      std::fill_n(w.row_n.begin() + i * group, group, keys);
    }
    reader.Rows(first, b, p.positions[it.t + it.nt - 1], table, it.kvh, w.kq.data(), w.vq.data(), w.k, w.v);
    kernels.step(a, st, scratch);
  }
  return st;
}

}  // namespace

// Flash-decoding: a query whose keys span several kAttentionSplit-aligned windows is
// computed as one work item per window (so a single long decode uses every thread), and the
// partial (m, l, acc) are merged by their log-sum-exp, always in window order. The windows
// depend only on positions, so the result is the same whatever the batch or thread count.
void PagedAttention(const PagedAttentionParams& p) {
  double flops = 0;  // QK^T and PV: 4 * head_dim per (query head, key)
  if (OpProfileEnabled()) {
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      flops += 4.0 * p.num_heads * p.head_dim *
               static_cast<double>(p.positions[t] + 1 - AttentionWindowStart(p.positions[t], p.sliding_window));
    }
  }
  const ScopedOpTimer timer(OpKind::kAttention, flops);
  PagedAttentionAt(cpu::DefaultAttentionIsa(), p);
}

void PagedAttention(const PagedAttentionParams& p, const PagedAttentionPlan& plan) {
  double flops = 0;
  if (OpProfileEnabled()) {
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      flops += 4.0 * p.num_heads * p.head_dim *
               static_cast<double>(p.positions[t] + 1 - AttentionWindowStart(p.positions[t], p.sliding_window));
    }
  }
  const ScopedOpTimer timer(OpKind::kAttention, flops);
  PagedAttentionAt(cpu::DefaultAttentionIsa(), p, plan);
}

bool PagedAttentionPlan::Fits(const PagedAttentionParams& p) const {
  return planned && num_tokens == p.num_tokens && num_heads == p.num_heads && num_kv_heads == p.num_kv_heads &&
         head_dim == p.head_dim && sliding_window == p.sliding_window && grouped == CanGroup(p);
}

bool PagedAttentionPlan::CanGroup(const PagedAttentionParams& p) {
  return p.sliding_window <= 0 && p.wide_index == nullptr;
}

void PlanPagedAttention(const PagedAttentionParams& p, PagedAttentionPlan* plan) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  // Per token: its first window and the number of windows; partial rows of (token, KV head)
  // at partial_base[t * num_kv_heads + kvh], one per window, in order. The vectors are reused
  // (resize, clear): no allocation once a plan has seen a batch this large.
  std::vector<int64_t>& first_window = plan->first_window;
  std::vector<int64_t>& num_windows = plan->num_windows;
  std::vector<int64_t>& partial_base = plan->partial_base;
  first_window.resize(p.num_tokens);
  num_windows.resize(p.num_tokens);
  partial_base.resize(p.num_tokens * p.num_kv_heads);
  int64_t num_partials = 0;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t pos = p.positions[t];
    first_window[t] = AttentionWindowStart(pos, p.sliding_window) / kAttentionSplit;
    num_windows[t] = pos / kAttentionSplit - first_window[t] + 1;
    for (int64_t kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      partial_base[t * p.num_kv_heads + kvh] = num_partials;
      num_partials += num_windows[t];
    }
  }
  // Tokens grouped into runs that can share steps (WorkItem), then one item per run, KV head
  // and window.
  const bool can_group = PagedAttentionPlan::CanGroup(p);
  const int64_t max_run = std::max<int64_t>(1, kMaxQueryRows / group);
  std::vector<WorkItem>& items = plan->items;
  items.clear();
  for (int64_t t = 0; t < p.num_tokens;) {
    int64_t nt = 1;
    while (can_group && nt < max_run && t + nt < p.num_tokens && p.block_tables[t + nt] == p.block_tables[t] &&
           p.positions[t + nt] == p.positions[t] + nt &&
           p.positions[t + nt] / kAttentionSplit == p.positions[t] / kAttentionSplit) {
      ++nt;
    }
    for (int64_t kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      for (int64_t s = first_window[t]; s < first_window[t] + num_windows[t]; ++s) {
        const auto [lo, hi] = WindowKeys(p, t + nt - 1, s);
        items.push_back({t, nt, kvh, s, nt * (hi - lo + 16)});
      }
    }
    t += nt;
  }
  std::vector<int32_t>& order = plan->order;
  order.resize(items.size());
  std::iota(order.begin(), order.end(), 0);
  // Costliest first, ties in item order (stable_sort's order without its temporary buffer).
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return items[a].cost != items[b].cost ? items[a].cost > items[b].cost : a < b;
  });
  double work = 0;
  for (const WorkItem& it : items) work += static_cast<double>(it.cost) * group * std::max<int64_t>(d, 64) * 2;
  plan->threads = static_cast<int>(std::clamp<double>(work / (1 << 15), 1, NumThreads()));
  plan->num_partials = num_partials;
  plan->any_split = false;
  for (int64_t t = 0; t < p.num_tokens && !plan->any_split; ++t) plan->any_split = num_windows[t] > 1;
  plan->num_tokens = p.num_tokens;
  plan->num_heads = p.num_heads;
  plan->num_kv_heads = p.num_kv_heads;
  plan->head_dim = p.head_dim;
  plan->sliding_window = p.sliding_window;
  plan->grouped = can_group;
  plan->planned = true;
}

void PagedAttentionAt(matmul_internal::IsaLevel level, const PagedAttentionParams& p) {
  thread_local PagedAttentionPlan plan;
  PlanPagedAttention(p, &plan);
  PagedAttentionAt(level, p, plan);
}

void PagedAttentionAt(matmul_internal::IsaLevel level, const PagedAttentionParams& p, const PagedAttentionPlan& plan) {
  PAGODA_CHECK(plan.Fits(p)) << "PagedAttention: the plan was made for another batch or head layout";
  const cpu::AttentionTileKernels kernels = cpu::AttentionTileAt(level);
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const std::vector<int64_t>& first_window = plan.first_window;
  const std::vector<int64_t>& num_windows = plan.num_windows;
  const std::vector<int64_t>& partial_base = plan.partial_base;
  const std::vector<WorkItem>& items = plan.items;
  const std::vector<int32_t>& order = plan.order;
  const int64_t num_partials = plan.num_partials;
  const int threads = plan.threads;
  // Partial results per (token, KV head, window): [num_partials, group] x (m, l) and x d.
  // Kept between calls (a prefill's partials are megabytes: fresh pages every layer cost more
  // than the merge). Every entry is written by exactly one item before the merge reads it.
  thread_local std::vector<float> kept_m, kept_l, kept_acc;
  if (kept_m.size() < static_cast<size_t>(num_partials * group)) kept_m.resize(num_partials * group);
  if (kept_l.size() < static_cast<size_t>(num_partials * group)) kept_l.resize(num_partials * group);
  if (kept_acc.size() < static_cast<size_t>(num_partials * group * d)) kept_acc.resize(num_partials * group * d);
  float* const part_m = kept_m.data();
  float* const part_l = kept_l.data();
  float* const part_acc = kept_acc.data();
  const KVReader reader(p);
  // Items longest first (the plan's order), each taken by whichever thread is free (the
  // longest-processing-time rule: the threads end together, also when one runs slower).
  ParallelForQueue(static_cast<int64_t>(order.size()), [&](int64_t k) {
    thread_local Scratch w;  // kept per thread between calls: no allocation per layer and step
    const WorkItem& it = items[order[k]];
    const cpu::AttentionTileState st = AttendItem(p, reader, kernels, it, w);
    for (int64_t j = 0; j < it.nt; ++j) {
      const int64_t t = it.t + j;
      if (num_windows[t] == 1) {
        // The token's only window: its output directly, as the merge below computes it for one
        // window (0 + acc, then times 1 / l: the same bits).
        for (int64_t g = 0; g < group; ++g) {
          const float inv = 1.0f / (0.0f + st.l[j * group + g]);
          const float* acc = st.acc + (j * group + g) * st.acc_stride;
          float* o = p.out + (t * p.num_heads + it.kvh * group + g) * d;
          for (int64_t x = 0; x < d; ++x) o[x] = (0.0f + acc[x]) * inv;
        }
        continue;
      }
      const int64_t row = (partial_base[t * p.num_kv_heads + it.kvh] + it.window - first_window[t]) * group;
      for (int64_t g = 0; g < group; ++g) {
        part_m[row + g] = st.m[j * group + g];
        part_l[row + g] = st.l[j * group + g];
        std::copy_n(st.acc + (j * group + g) * st.acc_stride, d, &part_acc[(row + g) * d]);
      }
    }
  }, threads);
  if (!plan.any_split) return;
  // Merge each (token, KV head)'s windows in order (tokens of one window were written above).
  ParallelFor(p.num_tokens * p.num_kv_heads, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / p.num_kv_heads, kvh = i % p.num_kv_heads;
      const int64_t base = partial_base[i], splits = num_windows[t];
      if (splits == 1) continue;
      for (int64_t g = 0; g < group; ++g) {
        float m = -INFINITY;
        for (int64_t s = 0; s < splits; ++s) m = std::max(m, part_m[(base + s) * group + g]);
        float l = 0.0f;
        float* o = p.out + (t * p.num_heads + kvh * group + g) * d;
        std::fill_n(o, d, 0.0f);
        for (int64_t s = 0; s < splits; ++s) {
          const int64_t row = (base + s) * group + g;
          const float c = splits == 1 ? 1.0f : std::exp(part_m[row] - m);
          l += part_l[row] * c;
          cpu::Axpy(c, &part_acc[row * d], o, d);
        }
        const float inv = 1.0f / l;
        for (int64_t k = 0; k < d; ++k) o[k] *= inv;
      }
    }
  });
}

}  // namespace pagoda
