// Randomized property tests of KVCacheManager + BlockPool (fixed seeds). Thousands of random
// admit / prefill-chunk / decode / fork / free / preempt / reset operations, checking after
// every one that:
//   - ref counts equal the number of tables holding each block; the free queue holds
//     exactly the unreferenced blocks (CheckInvariants): no leak, no double free;
//   - a block handed out by an allocation had no holder before (never handed out twice);
//   - every slot a request writes belongs to a block only it holds (copy-on-write);
//   - a failed allocation changes nothing;
//   - usage stays in [0, 1];
//   - the simulated K/V storage (one int per slot, written through the slot mapping,
//     copied per BlockCopy) holds, for every request and every computed position, exactly
//     that request's token: prefix hits, eviction and copy-on-write never hand a request
//     someone else's K/V.
// At the end every request is freed and every ref count returns to zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>

#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

struct SimRequest {
  std::vector<int32_t> tokens;
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;
  std::string salt;
};

class Sim {
 public:
  Sim(uint32_t seed, int32_t num_blocks, int32_t block_size, bool caching, PrefixHashAlgo algo)
      : rng_(seed),
        bs_(block_size),
        m_({num_blocks, block_size, caching, algo}),
        storage_(static_cast<size_t>(num_blocks) * block_size, -1) {
    // A few shared "system prompts" so that prefix hits are common.
    for (int f = 0; f < 4; ++f) {
      std::vector<int32_t> p(Uniform(0, 3 * bs_ + 3));
      for (auto& t : p) t = Uniform(0, 50);
      families_.push_back(p);
    }
  }

  void Step() {
    const int op = Uniform(0, 99);
    if (op < 20) {
      Admit();
    } else if (op < 75) {
      Advance();
    } else if (op < 82) {
      ForkOne();
    } else if (op < 97) {
      FreeOne();
    } else {
      const bool idle = m_.num_requests() == 0;
      EXPECT_EQ(m_.ResetPrefixCache(), idle);
    }
    Check();
  }

  void FreeAll() {
    for (auto& [id, r] : requests_) m_.Free(id);
    requests_.clear();
    m_.CheckInvariants();
    for (int32_t b = 0; b < m_.num_blocks(); ++b) ASSERT_EQ(m_.block_pool().ref_cnt(b), 0);
    EXPECT_EQ(m_.num_free_blocks(), m_.num_blocks());
    EXPECT_DOUBLE_EQ(m_.Usage(), 0.0);
  }

  int64_t num_allocations = 0, num_failed = 0, num_copies = 0, num_hit_tokens = 0;

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::vector<int32_t> Refs() const {
    std::vector<int32_t> r;
    for (int32_t b = 0; b < m_.num_blocks(); ++b) r.push_back(m_.block_pool().ref_cnt(b));
    return r;
  }

  // Allocates and "runs" n tokens of request id; false if the pool was short.
  bool Schedule(int64_t id, SimRequest& r, int64_t n, const ComputedBlocks* hit) {
    const std::vector<int32_t> refs_before = Refs();
    const int32_t free_before = m_.num_free_blocks();
    const bool existed = m_.HasRequest(id);
    auto a = m_.AllocateSlots({id, r.tokens, r.num_computed_tokens, r.salt}, n, hit);
    ++num_allocations;
    if (!a) {
      ++num_failed;
      EXPECT_EQ(Refs(), refs_before);
      EXPECT_EQ(m_.num_free_blocks(), free_before);
      EXPECT_EQ(m_.HasRequest(id), existed);
      return false;
    }
    for (int32_t b : a->new_block_ids) EXPECT_EQ(refs_before[b], 0) << "block " << b;
    for (const BlockCopy& c : a->copies) {
      EXPECT_EQ(refs_before[c.dst_block_id], 0);
      EXPECT_GE(refs_before[c.src_block_id], 2);
      std::copy_n(storage_.begin() + int64_t{c.src_block_id} * bs_, bs_,
                  storage_.begin() + int64_t{c.dst_block_id} * bs_);
      ++num_copies;
    }
    if (hit != nullptr) {
      r.num_computed_tokens += hit->num_computed_tokens;
      num_hit_tokens += hit->num_computed_tokens;
    }
    std::vector<int64_t> slots;
    m_.AppendSlotMapping(id, r.num_computed_tokens, n, &slots);
    auto table = m_.GetBlockIds(id);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = r.num_computed_tokens + i;
      EXPECT_EQ(m_.block_pool().ref_cnt(table[pos / bs_]), 1) << "writing a shared block";
      storage_[slots[i]] = r.tokens[pos];
    }
    r.num_computed_tokens += n;
    return true;
  }

  void Admit() {
    SimRequest r;
    r.tokens = families_[Uniform(0, families_.size() - 1)];
    r.tokens.resize(Uniform(0, r.tokens.size()));  // a prefix of the family prompt
    const int tail = Uniform(1, 3 * bs_ + 2);
    for (int i = 0; i < tail; ++i) r.tokens.push_back(Uniform(0, 50));
    r.num_prompt_tokens = static_cast<int64_t>(r.tokens.size());
    if (Uniform(0, 9) == 0) r.salt = "tenant-" + std::to_string(Uniform(0, 1));
    const ComputedBlocks hit = m_.GetComputedBlocks(r.tokens, r.salt);
    EXPECT_LT(hit.num_computed_tokens, r.num_prompt_tokens);
    EXPECT_EQ(hit.num_computed_tokens % bs_, 0);
    const int64_t left = r.num_prompt_tokens - hit.num_computed_tokens;
    const int64_t chunk = Uniform(1, static_cast<int>(left));
    const int64_t id = next_id_++;
    if (Schedule(id, r, chunk, &hit)) requests_.emplace(id, std::move(r));
  }

  int64_t PickId() {
    auto it = requests_.begin();
    std::advance(it, Uniform(0, static_cast<int>(requests_.size()) - 1));
    return it->first;
  }

  void Advance() {
    if (requests_.empty()) return;
    const int64_t id = PickId();
    SimRequest& r = requests_[id];
    int64_t n;
    if (r.num_computed_tokens < r.num_prompt_tokens) {  // a prefill chunk
      n = Uniform(1, static_cast<int>(r.num_prompt_tokens - r.num_computed_tokens));
    } else {  // a decode step: the token sampled last step is fed now
      if (r.num_computed_tokens == static_cast<int64_t>(r.tokens.size())) {
        r.tokens.push_back(Uniform(0, 50));
      }
      n = 1;
    }
    if (!Schedule(id, r, n, nullptr)) {  // preempt it: recompute later
      m_.Free(id);
      requests_.erase(id);
    }
  }

  void ForkOne() {
    if (requests_.empty()) return;
    const int64_t parent = PickId();
    if (requests_[parent].num_computed_tokens < requests_[parent].num_prompt_tokens) return;
    const int64_t child = next_id_++;
    m_.Fork(parent, child);
    requests_[child] = requests_[parent];
  }

  void FreeOne() {
    if (requests_.empty()) return;
    const int64_t id = PickId();
    m_.Free(id);
    requests_.erase(id);
  }

  void Check() {
    m_.CheckInvariants();
    ASSERT_GE(m_.Usage(), 0.0);
    ASSERT_LE(m_.Usage(), 1.0);
    for (const auto& [id, r] : requests_) {
      auto table = m_.GetBlockIds(id);
      ASSERT_GE(static_cast<int64_t>(table.size()) * bs_, r.num_computed_tokens);
      for (int64_t pos = 0; pos < r.num_computed_tokens; ++pos) {
        ASSERT_EQ(storage_[int64_t{table[pos / bs_]} * bs_ + pos % bs_], r.tokens[pos])
            << "request " << id << " position " << pos;
      }
    }
  }

  std::mt19937 rng_;
  int32_t bs_;
  KVCacheManager m_;
  std::vector<int32_t> storage_;  // the "K/V": one token id per slot
  std::vector<std::vector<int32_t>> families_;
  std::map<int64_t, SimRequest> requests_;
  int64_t next_id_ = 0;
};

struct PropertyCase {
  int32_t block_size;
  bool caching;
  PrefixHashAlgo algo;
};

class KVCachePropertyTest : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(KVCachePropertyTest, RandomOpsKeepEveryInvariant) {
  const PropertyCase c = GetParam();
  for (uint32_t seed : {1u, 2u, 3u}) {
    // Small pools (6..40 blocks) keep the pool under pressure: evictions and preemptions.
    const int32_t num_blocks = 6 + static_cast<int32_t>(seed * 11 % 35);
    Sim sim(seed * 7919 + c.block_size, num_blocks, c.block_size, c.caching, c.algo);
    const int num_ops = c.block_size >= 64 ? 1500 : 4000;
    for (int i = 0; i < num_ops && !HasFatalFailure(); ++i) sim.Step();
    sim.FreeAll();
    EXPECT_GT(sim.num_allocations, 500);
    EXPECT_GT(sim.num_failed, 0) << "the pool never ran out: the test is too gentle";
    if (c.block_size > 1) {  // with one-token blocks no block is ever partial: nothing to copy
      EXPECT_GT(sim.num_copies, 0) << "copy-on-write never happened";
    }
    if (c.caching) {
      EXPECT_GT(sim.num_hit_tokens, 0) << "no prefix hit ever happened";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    BlockSizes, KVCachePropertyTest,
    ::testing::Values(PropertyCase{1, true, PrefixHashAlgo::kSha256},
                      PropertyCase{2, true, PrefixHashAlgo::kXxh3_128},
                      PropertyCase{4, true, PrefixHashAlgo::kSha256},
                      PropertyCase{8, false, PrefixHashAlgo::kSha256},
                      PropertyCase{16, true, PrefixHashAlgo::kSha256},
                      PropertyCase{16, false, PrefixHashAlgo::kSha256},
                      PropertyCase{32, true, PrefixHashAlgo::kXxh3_128},
                      PropertyCase{64, true, PrefixHashAlgo::kSha256},
                      PropertyCase{128, true, PrefixHashAlgo::kXxh3_128},
                      PropertyCase{256, true, PrefixHashAlgo::kSha256}),
    [](const auto& info) {
      std::ostringstream name;  // (not string +: GCC 12 warns falsely on it)
      name << "B" << info.param.block_size << (info.param.caching ? "_caching_" : "_nocache_")
           << PrefixHashAlgoName(info.param.algo);
      return name.str();
    });

}  // namespace
}  // namespace pagoda
