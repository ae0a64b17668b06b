#include "backend/wide_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/kv_storage.h"
#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kv/kv_codec.h"
#include "kv/kv_format.h"

namespace pagoda {
namespace {

// One step's tokens: `count` consecutive positions from `first` of a sequence whose block table
// is `blocks`.
struct Step {
  std::vector<int64_t> slots;
  std::vector<int32_t> positions;
  void Add(const std::vector<int32_t>& blocks, int64_t bs, int32_t first, int32_t count) {
    for (int32_t p = first; p < first + count; ++p) {
      slots.push_back(blocks[p / bs] * bs + p % bs);
      positions.push_back(p);
    }
  }
};

TEST(WidePoolTest, Kivi2KeepsTheTailBlockWideAndQuantizesItsKeysWhenItFills) {
  WidePool pool({.num_blocks = 8, .block_size = 4, .kivi2 = true});
  const std::vector<int32_t> table = {5, 2, 7};
  Step prefill;  // positions 0-5: block 5 fills, block 2 holds two rows
  prefill.Add(table, 4, 0, 6);
  pool.PlanStep(prefill.slots, prefill.positions);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{-1, -1, -1, 5, -1, -1}));
  EXPECT_EQ(pool.index()[5], 0);
  EXPECT_EQ(pool.index()[2], 1);
  EXPECT_EQ(pool.size(), 2);
  EXPECT_EQ(pool.TakeChanged(), (std::pair<int64_t, int64_t>{2, 6}));
  EXPECT_EQ(pool.TakeChanged(), (std::pair<int64_t, int64_t>{0, 0}));

  Step decode;  // position 6: the filled block 5's copy goes back to the pool
  decode.Add(table, 4, 6, 1);
  pool.PlanStep(decode.slots, decode.positions);
  EXPECT_EQ(pool.index()[5], -1);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{1 * 4 + 2}));
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{-1}));
  EXPECT_EQ(pool.in_use(), 1);

  Step fill;  // position 7 fills block 2
  fill.Add(table, 4, 7, 1);
  pool.PlanStep(fill.slots, fill.positions);
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{2}));
  EXPECT_EQ(pool.index()[2], 1);  // still read by this step's query

  Step next;  // position 8 starts block 7 on the free copy
  next.Add(table, 4, 8, 1);
  pool.PlanStep(next.slots, next.positions);
  EXPECT_EQ(pool.index()[2], -1);
  EXPECT_GE(pool.index()[7], 0);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{pool.index()[7] * 4}));
  EXPECT_EQ(pool.size(), 2);  // no copy beyond the two the prefill took
  EXPECT_EQ(pool.in_use(), 1);
}

TEST(WidePoolTest, SinkBlocksKeepTheirCopyAndOtherBlocksGetNone) {
  WidePool pool({.num_blocks = 6, .block_size = 4, .sink_tokens = 2});
  const std::vector<int32_t> table = {3, 1};
  Step prefill;
  prefill.Add(table, 4, 0, 7);
  pool.PlanStep(prefill.slots, prefill.positions);
  // Block 3 (positions 0-3) holds the sink positions: every row of it goes wide; block 1 none.
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{0, 1, 2, 3, -1, -1, -1}));
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{-1, -1, -1, -1, -1, -1, -1}));
  Step decode;
  decode.Add(table, 4, 7, 1);
  pool.PlanStep(decode.slots, decode.positions);
  EXPECT_EQ(pool.index()[3], 0);  // filled, but a sink block
  EXPECT_EQ(pool.index()[1], -1);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{-1}));

  // Block 3 reused by another sequence from position 8: no longer a sink block, its copy goes
  // back once it is full.
  Step reuse;
  reuse.Add({0, 0, 3}, 4, 8, 4);
  pool.PlanStep(reuse.slots, reuse.positions);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{0, 1, 2, 3}));  // the block still has its copy
  pool.PlanStep({}, {});
  EXPECT_EQ(pool.index()[3], -1);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(WidePoolTest, RecentTokensGiveEveryBlockACopyWithoutKeyQuantization) {
  WidePool pool({.num_blocks = 4, .block_size = 2, .recent_tokens = 1});
  Step prefill;
  prefill.Add({0, 1}, 2, 0, 3);
  pool.PlanStep(prefill.slots, prefill.positions);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{0, 1, 2 + 0}));
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{-1, -1, -1}));
}

TEST(WidePoolTest, CopyOnWriteCarriesTheCopyAndItsFlags) {
  WidePool pool({.num_blocks = 4, .block_size = 4, .kivi2 = true});
  Step prefill;
  prefill.Add({0}, 4, 0, 2);
  pool.PlanStep(prefill.slots, prefill.positions);
  pool.TakeChanged();
  // A forked sequence writes position 2 into a copy of block 0 (block 3).
  EXPECT_EQ(pool.CopyBlock(0, 3), (std::pair<int32_t, int32_t>{0, 1}));
  EXPECT_EQ(pool.TakeChanged(), (std::pair<int64_t, int64_t>{3, 4}));
  Step write;
  write.Add({3}, 4, 2, 2);
  pool.PlanStep(write.slots, write.positions);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{-1, 3}));
  // A block without a copy copied over one that has one: the destination's goes back.
  EXPECT_EQ(pool.CopyBlock(2, 0), (std::pair<int32_t, int32_t>{-1, -1}));
  EXPECT_EQ(pool.index()[0], -1);
}

TEST(WidePoolTest, ACopyIntoAJustFilledBlockKeepsItAndReleasedBlocksGiveTheirsBack) {
  WidePool pool({.num_blocks = 4, .block_size = 4, .kivi2 = true});
  Step prefill;  // block 0 filled, block 1 holds 2 rows
  prefill.Add({0, 1}, 4, 0, 6);
  pool.PlanStep(prefill.slots, prefill.positions);
  // Block 0 freed and reused as a fork's copy of block 1: it keeps the copy it gets.
  const auto [ws, wd] = pool.CopyBlock(1, 0);
  EXPECT_EQ(ws, 1);
  EXPECT_EQ(wd, 0);
  Step fork;
  fork.Add({0}, 4, 2, 1);
  pool.PlanStep(fork.slots, fork.positions);
  EXPECT_EQ(pool.index()[0], 0);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{2}));
  // Both sequences end; the next two sequences' first blocks take their copies.
  const std::vector<int32_t> freed = {0, 1};
  pool.Release(freed);
  EXPECT_EQ(pool.in_use(), 0);
  Step next;
  next.slots = {8, 12};
  next.positions = {0, 0};
  pool.PlanStep(next.slots, next.positions);
  EXPECT_EQ(pool.size(), 2);
  EXPECT_EQ(pool.in_use(), 2);
}

TEST(WidePoolTest, RowsWithoutASlotWriteNothingAndAMidBlockStartGetsACopy) {
  WidePool pool({.num_blocks = 2, .block_size = 4, .kivi2 = true});
  // The engine's padding rows: slot -1, or the spare block at any offset (results dropped).
  const std::vector<int64_t> slots = {-1, 7, 7};
  const std::vector<int32_t> positions = {0, 3, 3};
  pool.PlanStep(slots, positions);
  EXPECT_EQ(pool.wide_rows(), (std::vector<int32_t>{-1, 3, 3}));
  EXPECT_EQ(pool.fill_blocks(), (std::vector<int32_t>{-1, 1, -1}));  // quantized once
  EXPECT_EQ(pool.size(), 1);
}

// The CUDA backend's storage, emulated on the host: per-token codes at the slots, the wide rows
// WidePool assigns, kivi2 keys quantized from the wide copy of each block the plan says filled,
// and attention (the CPU kernel) reading wide copies through the pool's index. Against KVStorage
// (which plans per layer inside Write) through chunked prefills, copy-on-write and decode steps
// across block boundaries: the same output bits and the same block bytes.
class EmulatedStorage {
 public:
  explicit EmulatedStorage(const KVStorageShape& s)
      : s_(s),
        pool_({.num_blocks = s.num_blocks,
               .block_size = s.block_size,
               .kivi2 = s.quant == KVQuant::kKivi2,
               .sink_tokens = s.sink_tokens,
               .recent_tokens = s.recent_tokens}),
        f_(LayerKVFormats(s, 0)) {
    k_.assign(s.num_blocks * KVBlockBytes(f_.k), 0);
    v_.assign(s.num_blocks * KVBlockBytes(f_.v), 0);
  }
  void BeginStep(const std::vector<int64_t>& slots, const std::vector<int32_t>& positions) {
    pool_.PlanStep(slots, positions);
    const int64_t rows = static_cast<int64_t>(pool_.size()) * s_.block_size;
    k_wide_.resize(rows * width(), 0);
    v_wide_.resize(rows * width(), 0);
  }
  void CopyBlock(int32_t src, int32_t dst) {
    for (auto* arr : {&k_, &v_}) {
      const int64_t bytes = KVBlockBytes(arr == &k_ ? f_.k : f_.v);
      std::memcpy(arr->data() + dst * bytes, arr->data() + src * bytes, bytes);
    }
    const auto [ws, wd] = pool_.CopyBlock(src, dst);
    k_wide_.resize(static_cast<int64_t>(pool_.size()) * s_.block_size * width(), 0);
    v_wide_.resize(k_wide_.size(), 0);
    if (ws < 0) return;
    const int64_t n = s_.block_size * width();
    std::memcpy(&k_wide_[wd * n], &k_wide_[ws * n], n * sizeof(uint16_t));
    std::memcpy(&v_wide_[wd * n], &v_wide_[ws * n], n * sizeof(uint16_t));
  }
  void Write(const float* k, const float* v, const std::vector<int64_t>& slots) {
    const int64_t bs = s_.block_size, heads = s_.num_kv_heads, d = s_.head_dim;
    for (size_t t = 0; t < slots.size(); ++t) {
      const int64_t block = slots[t] / bs, offset = slots[t] % bs;
      for (int64_t h = 0; h < heads; ++h) {
        if (!f_.k.per_channel) QuantizeKVRow(f_.k, k + (t * heads + h) * d, &k_[block * KVBlockBytes(f_.k)], offset, h);
        QuantizeKVRow(f_.v, v + (t * heads + h) * d, &v_[block * KVBlockBytes(f_.v)], offset, h);
      }
      if (const int32_t row = pool_.wide_rows()[t]; row >= 0) {
        QuantizeRow(DType::kBF16, k + t * width(), &k_wide_[row * width()], width());
        QuantizeRow(DType::kBF16, v + t * width(), &v_wide_[row * width()], width());
      }
    }
    for (const int32_t block : pool_.fill_blocks()) {  // after every row of the step
      if (block < 0) continue;
      std::vector<float> keys(bs * width());
      DequantizeRow(DType::kBF16, &k_wide_[pool_.index()[block] * bs * width()], keys.data(), bs * width());
      QuantizeKVBlock(f_.k, keys.data(), &k_[block * KVBlockBytes(f_.k)]);
    }
  }
  void Fill(PagedAttentionParams* p) const {
    p->k_cache = k_.data();
    p->v_cache = v_.data();
    p->k_format = f_.k;
    p->v_format = f_.v;
    p->k_wide = k_wide_.data();
    p->v_wide = v_wide_.data();
    p->wide_dtype = DType::kBF16;
    p->wide_index = pool_.index().data();
    p->sink_tokens = s_.sink_tokens;
    p->recent_tokens = s_.recent_tokens;
    p->own_block_wide = s_.quant == KVQuant::kKivi2;
  }
  const std::vector<uint8_t>& k() const { return k_; }
  const std::vector<uint8_t>& v() const { return v_; }

 private:
  int64_t width() const { return s_.num_kv_heads * s_.head_dim; }
  KVStorageShape s_;
  WidePool pool_;
  KVLayerFormats f_;
  std::vector<uint8_t> k_, v_;
  std::vector<uint16_t> k_wide_, v_wide_;
};

TEST(WidePoolTest, PlansWhatKVStorageDoes) {
  const int64_t kv_heads = 2, heads = 4, hd = 32;
  struct Case {
    KVQuant quant;
    int64_t block_size, sink, recent;
  };
  for (const Case& cs : {Case{KVQuant::kKivi2, 8, 0, 0}, Case{KVQuant::kKivi2, 4, 6, 0}, Case{KVQuant::kInt4, 8, 5, 0},
                         Case{KVQuant::kFp8E4M3, 8, 0, 3}, Case{KVQuant::kInt8, 16, 20, 4},
                         Case{KVQuant::kKivi2, 16, 3, 2}}) {
    const int64_t bs = cs.block_size;
    SCOPED_TRACE(std::string(KVQuantName(cs.quant)) + ", block " + std::to_string(bs) + ", sink " +
                 std::to_string(cs.sink) + ", recent " + std::to_string(cs.recent));
    const int64_t decode_steps = 12, len0 = 22, len1 = 26;
    const int64_t blocks0 = (len0 + decode_steps + bs - 1) / bs, blocks1 = (len1 + decode_steps + bs - 1) / bs;
    std::vector<std::vector<int32_t>> tables(3);
    int32_t next = 0;
    for (int64_t b = 0; b < blocks0; ++b) tables[0].push_back(next++);
    for (int64_t b = 0; b < blocks1; ++b) tables[1].push_back(next++);
    std::reverse(tables[1].begin(), tables[1].end());
    tables[2] = tables[0];
    for (int64_t b = len0 / bs; b < blocks0; ++b) tables[2][b] = next++;
    KVStorageShape shape;
    shape.num_layers = 1;
    shape.num_blocks = next;
    shape.block_size = bs;
    shape.num_kv_heads = kv_heads;
    shape.head_dim = hd;
    shape.dtype = DType::kBF16;
    shape.quant = cs.quant;
    shape.group_size = 16;
    shape.sink_tokens = cs.sink;
    shape.recent_tokens = cs.recent;
    KVStorage storage(shape);
    EmulatedStorage emulated(shape);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto random = [&](int64_t n) {
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      return x;
    };
    auto run = [&](const std::vector<int>& seqs, const std::vector<int32_t>& first, const std::vector<int32_t>& count,
                   const std::string& what) {
      std::vector<int64_t> slots;
      std::vector<int32_t> positions;
      std::vector<const int32_t*> token_tables;
      for (size_t i = 0; i < seqs.size(); ++i) {
        for (int32_t p = first[i]; p < first[i] + count[i]; ++p) {
          slots.push_back(tables[seqs[i]][p / bs] * bs + p % bs);
          positions.push_back(p);
          token_tables.push_back(tables[seqs[i]].data());
        }
      }
      const int64_t n = static_cast<int64_t>(slots.size());
      const auto q = random(n * heads * hd), k = random(n * kv_heads * hd), v = random(n * kv_heads * hd);
      storage.Write(0, k.data(), v.data(), slots.data(), n, positions.data());
      emulated.BeginStep(slots, positions);
      emulated.Write(k.data(), v.data(), slots);
      std::vector<float> want(n * heads * hd), got(n * heads * hd);
      PagedAttentionParams p;
      p.q = q.data();
      p.num_tokens = n;
      p.num_heads = heads;
      p.num_kv_heads = kv_heads;
      p.head_dim = hd;
      p.block_size = bs;
      p.positions = positions.data();
      p.block_tables = token_tables.data();
      p.scale = 0.25f;
      storage.FillAttentionParams(0, &p);
      p.out = want.data();
      PagedAttention(p);
      emulated.Fill(&p);
      p.out = got.data();
      PagedAttention(p);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << what;
    };
    run({0, 1}, {0, 0}, {13, 20}, "first chunks");
    run({0, 1}, {13, 20}, {9, 6}, "second chunks");
    storage.CopyBlock(tables[0][len0 / bs], tables[2][len0 / bs]);
    emulated.CopyBlock(tables[0][len0 / bs], tables[2][len0 / bs]);
    for (int32_t i = 0; i < decode_steps; ++i) {
      run({0, 1, 2}, {static_cast<int32_t>(len0) + i, static_cast<int32_t>(len1) + i, static_cast<int32_t>(len0) + i},
          {1, 1, 1}, "decode step " + std::to_string(i));
    }
    const auto* k = static_cast<const uint8_t*>(storage.k(0));
    const auto* v = static_cast<const uint8_t*>(storage.v(0));
    EXPECT_EQ(std::memcmp(k, emulated.k().data(), emulated.k().size()), 0) << "K blocks";
    EXPECT_EQ(std::memcmp(v, emulated.v().data(), emulated.v().size()), 0) << "V blocks";
  }
}

}  // namespace
}  // namespace pagoda
