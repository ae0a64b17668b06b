#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/kv_quant.h"
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
    if (key < p.sink_tokens) return true;
    if (key / p.block_size != pos / p.block_size) return false;
    return p.own_block_wide || pos - key < p.recent_tokens;
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
  std::vector<float> kq, vq, acc, m, l;  // dequantized rows of a tile; per head m, l, acc
  cpu::TileRow k[cpu::kTileKeys], v[cpu::kTileKeys];
  cpu::TileScratch tile;
};

// One work item: the keys [lo, hi) of query token t for KV head kvh (one split of a long
// context, or all of it), leaving per query head the running max m, sum l and the
// unnormalized accumulator in w.acc (rows of cpu::TileAccStride(head_dim) floats).
void AttendRange(const PagedAttentionParams& p, const KVReader& reader, const cpu::AttentionTileKernels& kernels,
                 int64_t t, int64_t kvh, int64_t lo, int64_t hi, Scratch& w) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  w.kq.resize(kAttentionTile * d);  // used by quantized rows only
  w.vq.resize(kAttentionTile * d);
  const int64_t stride = cpu::TileAccStride(d);
  w.acc.assign(group * stride, 0.0f);
  w.m.assign(group, -INFINITY);
  w.l.assign(group, 0.0f);
  cpu::AttentionTileArgs a;
  a.heads = group;
  a.q = p.q + (t * p.num_heads + kvh * group) * d;
  a.q_stride = d;
  a.dk0 = d;
  a.dv = d;
  a.scale = p.scale;
  a.k0 = w.k;
  a.v = w.v;
  const cpu::AttentionTileState st{w.m.data(), w.l.data(), w.acc.data(), stride};
  float* scratch = w.tile.Get(cpu::TileScratchFloats(group, d));

  for (int64_t tile = lo / kAttentionTile * kAttentionTile; tile < hi; tile += kAttentionTile) {
    const int64_t b = std::min(tile + kAttentionTile, hi);
    const int64_t first = std::max(tile, lo);
    a.n = b - first;
    reader.Rows(first, b, pos, table, kvh, w.kq.data(), w.vq.data(), w.k, w.v);
    kernels.step(a, st, scratch);
  }
}

// A (token, KV head, split) work item and where its partial results go.
struct WorkItem {
  int64_t t, kvh, lo, hi;
  int64_t partial;  // index of its first partial row; splits of one (t, kvh) are consecutive
  int64_t num_splits;
  int64_t split;
};

// The items dealt to `bins` bins of about equal work (longest first, each to the least loaded
// bin): a causal prefill's items grow with the position, so a plain split of the list would
// give the last thread most of the work. Which bin computes an item never changes its result.
std::vector<std::vector<int32_t>> BalanceItems(const std::vector<WorkItem>& items, int bins) {
  bins = std::max(1, std::min<int>(bins, static_cast<int>(items.size())));
  auto cost = [](const WorkItem& it) { return it.hi - it.lo + 16; };  // keys + a fixed overhead
  std::vector<int32_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return cost(items[a]) > cost(items[b]); });
  std::vector<std::vector<int32_t>> out(bins);
  std::vector<int64_t> load(bins, 0);
  for (const int32_t i : order) {
    const int b = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    out[b].push_back(i);
    load[b] += cost(items[i]);
  }
  return out;
}

}  // namespace

// Flash-decoding: a query whose keys span several kAttentionSplit-aligned windows is
// computed as one work item per window (so a single long decode uses every thread), and the
// partial (m, l, acc) are merged by their log-sum-exp, always in window order. The windows
// depend only on positions, so the result is the same whatever the batch or thread count.
void PagedAttention(const PagedAttentionParams& p) { PagedAttentionAt(cpu::DefaultAttentionIsa(), p); }

void PagedAttentionAt(matmul_internal::IsaLevel level, const PagedAttentionParams& p) {
  const cpu::AttentionTileKernels kernels = cpu::AttentionTileAt(level);
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  std::vector<WorkItem> items;
  items.reserve(p.num_tokens * p.num_kv_heads);
  int64_t num_partials = 0;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t pos = p.positions[t];
    const int64_t lo = AttentionWindowStart(pos, p.sliding_window);
    const int64_t first = lo / kAttentionSplit, last = pos / kAttentionSplit;
    for (int64_t kvh = 0; kvh < p.num_kv_heads; ++kvh) {
      const int64_t n = last - first + 1;
      for (int64_t s = first; s <= last; ++s) {
        items.push_back({t, kvh, std::max(lo, s * kAttentionSplit), std::min(pos + 1, (s + 1) * kAttentionSplit),
                         num_partials, n, s - first});
      }
      num_partials += n;
    }
  }
  // Partial results of split queries: [num_partials, group] x (m, l) and x d accumulators.
  std::vector<float> part_m(num_partials * group), part_l(num_partials * group), part_acc(num_partials * group * d);
  const KVReader reader(p);
  const std::vector<std::vector<int32_t>> bins = BalanceItems(items, NumThreads());
  ParallelFor(static_cast<int64_t>(bins.size()), 1, [&](int64_t begin, int64_t end) {
    Scratch w;
    for (int64_t b = begin; b < end; ++b) {
      for (const int32_t i : bins[b]) {
        const WorkItem& it = items[i];
        AttendRange(p, reader, kernels, it.t, it.kvh, it.lo, it.hi, w);
        const int64_t row = (it.partial + it.split) * group;
        for (int64_t g = 0; g < group; ++g) {
          part_m[row + g] = w.m[g];
          part_l[row + g] = w.l[g];
          std::copy_n(&w.acc[g * cpu::TileAccStride(d)], d, &part_acc[(row + g) * d]);
        }
      }
    }
  });
  // Merge each (token, KV head)'s splits in order; one split reduces to acc / l.
  ParallelFor(static_cast<int64_t>(items.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const WorkItem& it = items[i];
      if (it.split != 0) continue;
      for (int64_t g = 0; g < group; ++g) {
        float m = -INFINITY;
        for (int64_t s = 0; s < it.num_splits; ++s) m = std::max(m, part_m[(it.partial + s) * group + g]);
        float l = 0.0f;
        float* o = p.out + (it.t * p.num_heads + it.kvh * group + g) * d;
        std::fill_n(o, d, 0.0f);
        for (int64_t s = 0; s < it.num_splits; ++s) {
          const int64_t row = (it.partial + s) * group + g;
          const float c = it.num_splits == 1 ? 1.0f : std::exp(part_m[row] - m);
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
