#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/online_softmax.h"
#include "kernels/cpu/vec.h"

namespace pagoda {
namespace {

// Where one query's keys come from: the block arrays in their formats, or a block's wide copy.
struct KVReader {
  const PagedAttentionParams& p;
  KVArrayFormat fk, fv;
  int64_t k_block_bytes, v_block_bytes;

  explicit KVReader(const PagedAttentionParams& params) : p(params), fk(params.k_format), fv(params.v_format) {
    for (KVArrayFormat* f : {&fk, &fv}) {
      if (f->quant == KVQuant::kNone) f->dtype = p.kv_dtype;
      f->block_size = p.block_size;
      f->num_heads = p.num_kv_heads;
      f->head_dim = p.head_dim;
    }
    k_block_bytes = KVBlockBytes(fk);
    v_block_bytes = KVBlockBytes(fv);
  }

  bool Wide(int64_t key, int64_t pos, int32_t block) const {
    if (p.wide_index == nullptr || p.wide_index[block] < 0) return false;
    if (key < p.sink_tokens) return true;
    if (key / p.block_size != pos / p.block_size) return false;
    return p.own_block_wide || pos - key < p.recent_tokens;
  }

  // K and V rows of `key` for the KV head kvh of a query at `pos`.
  void Load(int64_t key, int64_t pos, const int32_t* table, int64_t kvh, float* k, float* v) const {
    const int64_t d = p.head_dim;
    const int32_t block = table[key / p.block_size];
    const int64_t offset = key % p.block_size;
    if (Wide(key, pos, block)) {
      const int64_t index = ((int64_t{p.wide_index[block]} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
      cpu::LoadWideRow(p.k_wide, p.wide_dtype, index, d, k);
      cpu::LoadWideRow(p.v_wide, p.wide_dtype, index, d, v);
      return;
    }
    if (fk.quant == KVQuant::kNone && fv.quant == KVQuant::kNone) {
      const int64_t index = ((int64_t{block} * p.block_size + offset) * p.num_kv_heads + kvh) * d;
      cpu::LoadWideRow(p.k_cache, fk.dtype, index, d, k);
      cpu::LoadWideRow(p.v_cache, fv.dtype, index, d, v);
      return;
    }
    DequantizeKVRow(fk, static_cast<const uint8_t*>(p.k_cache) + block * k_block_bytes, offset, kvh, k);
    DequantizeKVRow(fv, static_cast<const uint8_t*>(p.v_cache) + block * v_block_bytes, offset, kvh, v);
  }
};

struct Scratch {
  std::vector<float> k, v, s, acc, m, l;
};

// One work item: the keys [lo, hi) of query token t for KV head kvh (one split of a long
// context, or all of it), leaving per query head the running max m, sum l and the
// unnormalized accumulator in w.
void AttendRange(const PagedAttentionParams& p, const KVReader& reader, int64_t t, int64_t kvh,
                 int64_t lo, int64_t hi, Scratch& w) {
  const int64_t group = p.num_heads / p.num_kv_heads;
  const int64_t d = p.head_dim;
  const int64_t pos = p.positions[t];
  const int32_t* table = p.block_tables[t];
  w.k.resize(kAttentionTile * d);
  w.v.resize(kAttentionTile * d);
  w.s.resize(group * kAttentionTile);
  w.acc.assign(group * d, 0.0f);
  w.m.assign(group, -INFINITY);
  w.l.assign(group, 0.0f);
  const float* q0 = p.q + (t * p.num_heads + kvh * group) * d;

  for (int64_t tile = lo / kAttentionTile * kAttentionTile; tile < hi; tile += kAttentionTile) {
    const int64_t a = std::max(tile, lo);
    const int64_t b = std::min(tile + kAttentionTile, hi);
    const int64_t n = b - a;
    for (int64_t j = 0; j < n; ++j) reader.Load(a + j, pos, table, kvh, &w.k[j * d], &w.v[j * d]);
    for (int64_t g = 0; g < group; ++g) {
      float* s = &w.s[g * kAttentionTile];
      for (int64_t j = 0; j < n; ++j) s[j] = cpu::Dot(q0 + g * d, &w.k[j * d], d) * p.scale;
      cpu::OnlineSoftmaxTile(s, n, w.v.data(), d, &w.m[g], &w.l[g], &w.acc[g * d]);
    }
  }
}

// A (token, KV head, split) work item and where its partial results go.
struct WorkItem {
  int64_t t, kvh, lo, hi;
  int64_t partial;  // index of its first partial row; splits of one (t, kvh) are consecutive
  int64_t num_splits;
  int64_t split;
};

}  // namespace

// Flash-decoding: a query whose keys span several kAttentionSplit-aligned windows is
// computed as one work item per window (so a single long decode uses every thread), and the
// partial (m, l, acc) are merged by their log-sum-exp, always in window order. The windows
// depend only on positions, so the result is the same whatever the batch or thread count.
void PagedAttention(const PagedAttentionParams& p) {
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
  ParallelFor(static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    Scratch w;
    for (int64_t i = begin; i < end; ++i) {
      const WorkItem& it = items[i];
      AttendRange(p, reader, it.t, it.kvh, it.lo, it.hi, w);
      const int64_t row = (it.partial + it.split) * group;
      for (int64_t g = 0; g < group; ++g) {
        part_m[row + g] = w.m[g];
        part_l[row + g] = w.l[g];
        std::copy_n(&w.acc[g * d], d, &part_acc[(row + g) * d]);
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
