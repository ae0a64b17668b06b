// Attention on the GPU against the CPU backend: paged attention over a grid (block sizes
// 16/32/64, GQA 1..16, head dims 64/128, f32/bf16/f16 and fp8/int8 caches, windows) on ragged
// steps with scrambled block tables, long contexts cut into splits, FlashAttention's three
// launch shapes giving the same bits, MLA, and the fused attention-inputs kernel against the
// separate ops.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "core/dtype.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/launch_info.h"
#include "kernels/params/rope_params.h"
#include "tests/cuda/cuda_ops_fixture.h"

namespace pagoda {
namespace {

struct AttentionCase {
  int64_t block_size, gqa, head_dim;
  DType kv_dtype;
  int64_t window;
  KVQuant quant = KVQuant::kNone;  // quantized rows (kv_dtype: the wide type, unused here)
  int64_t group = 32;              // int8 values per scale
};

class CudaAttentionTest : public CudaOpsTest, public ::testing::WithParamInterface<AttentionCase> {};

// Two steps over three sequences (prefills of odd lengths, then a decode, a chunk continuing a
// prompt and a one-token sequence), K/V written by WriteKV, attention through scrambled
// block tables; then a copy-on-write CopyBlock read through a fresh table.
TEST_P(CudaAttentionTest, PagedAttentionMatchesCpu) {
  const AttentionCase& a = GetParam();
  const int64_t kv_heads = 2, heads = kv_heads * a.gqa, hd = a.head_dim, bs = a.block_size;
  StepCase c;
  MakeTables({18, 63, 2}, bs, 7, &c);
  // One spare block for the CopyBlock check.
  KVStorageShape shape = CacheShape(2, c.num_blocks + 1, bs, kv_heads, hd, a.kv_dtype);
  shape.quant = a.quant;
  shape.group_size = a.group;
  auto cache_c = cpu_.CreateKVCache(shape);
  auto cache_g = gpu_->CreateKVCache(shape);
  AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), a.window};
  // f32 caches and int8 groups FlashAttention does not take (12 values): f32 arithmetic on the
  // CPU's dequantized values (the same codes); 16-bit caches and the other quantized ones: tensor
  // cores on bf16 tiles (FlashAttention; quantized values dequantized in f32, rounded to bf16).
  const int64_t g = std::min(a.group, hd);
  const bool simt = a.kv_dtype == DType::kF32 || (a.quant == KVQuant::kInt8 && (g % 8 != 0 || hd % g != 0));
  const double tol = simt ? kF32Tolerance : testing::kBf16AttentionTolerance;
  const std::vector<std::vector<int64_t>> firsts = {{0, 0, 0}, {17, 50, 1}};
  const std::vector<std::vector<int64_t>> counts = {{17, 50, 1}, {1, 13, 1}};
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const StepDescription& step = BuildStep(&c, bs, firsts[s], counts[s], 100);
    const int64_t n = step.num_tokens();
    cpu_.BeginStep(step, *cache_c);
    gpu_->BeginStep(step, *cache_g);
    for (int64_t l = 0; l < 2; ++l) {
      const uint32_t seed = 100 + 10 * s + l;
      auto q = RandomVector(n * heads * hd, seed), k = RandomVector(n * kv_heads * hd, seed + 1000),
           v = RandomVector(n * kv_heads * hd, seed + 2000);
      std::vector<float> out(n * heads * hd);
      cpu_.WriteKV(*cache_c, l, TensorView::F32(k.data(), n, kv_heads * hd), TensorView::F32(v.data(), n, kv_heads * hd));
      cpu_.PagedAttention(*cache_c, l, layer, TensorView::F32(q.data(), n, heads * hd),
                          TensorView::F32(out.data(), n, heads * hd));
      const TensorView qg = arena_->Make(n, heads * hd, q), og = arena_->Make(n, heads * hd);
      gpu_->WriteKV(*cache_g, l, arena_->Make(n, kv_heads * hd, k), arena_->Make(n, kv_heads * hd, v));
      gpu_->PagedAttention(*cache_g, l, layer, qg, og);
      const double err = RelativeError(arena_->Read(og), out);
      EXPECT_LE(err, tol) << "layer " << l;
    }
  }
  // CopyBlock: sequence 1's first block copied to the spare block; a one-token query at
  // position 5 through a table that names the copy reads the same keys.
  const int32_t spare = static_cast<int32_t>(shape.num_blocks - 1);
  cpu_.CopyBlock(*cache_c, c.tables[1][0], spare);
  gpu_->CopyBlock(*cache_g, c.tables[1][0], spare);
  StepBuilder b;
  b.Reset(bs);
  std::vector<int32_t> tokens(6, 3);
  const std::vector<int32_t> table = {spare};
  b.AddSequence(tokens, 5, 1, table);
  // A decode whose own K/V would overwrite slot 5 of the copy: write the same values on both.
  const StepDescription& step = b.Finish();
  cpu_.BeginStep(step, *cache_c);
  gpu_->BeginStep(step, *cache_g);
  auto q = RandomVector(heads * hd, 900), k = RandomVector(kv_heads * hd, 901), v = RandomVector(kv_heads * hd, 902);
  std::vector<float> out(heads * hd);
  cpu_.WriteKV(*cache_c, 1, TensorView::F32(k.data(), 1, kv_heads * hd), TensorView::F32(v.data(), 1, kv_heads * hd));
  cpu_.PagedAttention(*cache_c, 1, layer, TensorView::F32(q.data(), 1, heads * hd), TensorView::F32(out.data(), 1, heads * hd));
  const TensorView og = arena_->Make(1, heads * hd);
  gpu_->WriteKV(*cache_g, 1, arena_->Make(1, kv_heads * hd, k), arena_->Make(1, kv_heads * hd, v));
  gpu_->PagedAttention(*cache_g, 1, layer, arena_->Make(1, heads * hd, q), og);
  EXPECT_LE(RelativeError(arena_->Read(og), out), tol) << "after CopyBlock";
}

INSTANTIATE_TEST_SUITE_P(
    Grid, CudaAttentionTest,
    ::testing::Values(AttentionCase{16, 1, 64, DType::kF32, 0}, AttentionCase{16, 4, 128, DType::kBF16, 0},
                      AttentionCase{32, 8, 64, DType::kBF16, 0}, AttentionCase{32, 1, 128, DType::kF32, 0},
                      AttentionCase{16, 8, 128, DType::kF32, 0}, AttentionCase{32, 4, 64, DType::kF32, 0},
                      AttentionCase{16, 4, 64, DType::kBF16, 19}, AttentionCase{32, 1, 128, DType::kF32, 7},
                      AttentionCase{16, 4, 128, DType::kF16, 0}, AttentionCase{32, 16, 128, DType::kBF16, 0},
                      AttentionCase{16, 3, 64, DType::kBF16, 23}, AttentionCase{64, 1, 64, DType::kF16, 5},
                      // Quantized rows: FlashAttention (int8 groups of 8k dividing the head dim)...
                      AttentionCase{16, 4, 128, DType::kBF16, 0, KVQuant::kFp8E4M3},
                      AttentionCase{32, 8, 64, DType::kBF16, 0, KVQuant::kFp8E5M2},
                      AttentionCase{16, 1, 64, DType::kBF16, 19, KVQuant::kInt8, 32},
                      AttentionCase{32, 3, 128, DType::kBF16, 0, KVQuant::kInt8, 16},
                      AttentionCase{16, 2, 128, DType::kBF16, 0, KVQuant::kFp8E4M3},
                      AttentionCase{16, 4, 128, DType::kBF16, 0, KVQuant::kInt4, 32},
                      AttentionCase{32, 8, 64, DType::kBF16, 19, KVQuant::kInt4, 16},
                      AttentionCase{16, 3, 128, DType::kBF16, 0, KVQuant::kInt4, 128},
                      AttentionCase{16, 4, 128, DType::kBF16, 0, KVQuant::kNvfp4},
                      AttentionCase{32, 8, 64, DType::kBF16, 19, KVQuant::kNvfp4},
                      // ... (G 16; 130-byte int8 rows) and the SIMT kernel (int8 groups of 12).
                      AttentionCase{16, 16, 128, DType::kBF16, 0, KVQuant::kFp8E4M3},
                      AttentionCase{32, 4, 128, DType::kBF16, 0, KVQuant::kInt8, 128},
                      AttentionCase{16, 2, 64, DType::kBF16, 7, KVQuant::kInt8, 12}),
    [](const auto& info) {
      const AttentionCase& a = info.param;
      std::string name = "bs" + std::to_string(a.block_size) + "_gqa" + std::to_string(a.gqa) + "_d" +
                         std::to_string(a.head_dim) + "_" + std::string(DTypeName(a.kv_dtype)) + "_w" +
                         std::to_string(a.window);
      if (a.quant != KVQuant::kNone) name += std::string("_") + KVQuantName(a.quant) + "_g" + std::to_string(a.group);
      return name;
    });

// Long contexts: a token's keys are cut into splits merged by log-sum-exp. Prefills of 2600 and
// 5000 tokens (up to 16 splits; one layer with a 1500-key window) against the CPU; a prompt
// token recomputed alone gives the bits it got in the prefill; a decode of the first sequence
// alone and beside the second gives the same bits.
TEST_F(CudaOpsTest, LongContextSplitsMatchCpuAndDoNotDependOnTheBatch) {
  const int64_t kv_heads = 2, heads = 8, hd = 128, bs = 16;
  StepCase c;
  MakeTables({2601, 5001}, bs, 11, &c);
  KVStorageShape shape = CacheShape(2, c.num_blocks, bs, kv_heads, hd, DType::kBF16);
  auto cache_c = cpu_.CreateKVCache(shape);
  auto cache_g = gpu_->CreateKVCache(shape);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  const AttentionLayer layers[2] = {{heads, kv_heads, hd, scale, 0}, {heads, kv_heads, hd, scale, 1500}};
  std::vector<float> q_last, out_last;  // layer 0, sequence 0's last prompt token (position 2599)
  {
    const StepDescription& step = BuildStep(&c, bs, {0, 0}, {2600, 5000}, 100);
    const int64_t n = step.num_tokens();
    cpu_.BeginStep(step, *cache_c);
    gpu_->BeginStep(step, *cache_g);
    for (int64_t l = 0; l < 2; ++l) {
      SCOPED_TRACE("prefill, layer " + std::to_string(l));
      auto q = RandomVector(n * heads * hd, 70 + l), k = RandomVector(n * kv_heads * hd, 80 + l),
           v = RandomVector(n * kv_heads * hd, 90 + l);
      std::vector<float> out(n * heads * hd);
      cpu_.WriteKV(*cache_c, l, TensorView::F32(k.data(), n, kv_heads * hd), TensorView::F32(v.data(), n, kv_heads * hd));
      cpu_.PagedAttention(*cache_c, l, layers[l], TensorView::F32(q.data(), n, heads * hd),
                          TensorView::F32(out.data(), n, heads * hd));
      const TensorView og = arena_->Make(n, heads * hd);
      gpu_->WriteKV(*cache_g, l, arena_->Make(n, kv_heads * hd, k), arena_->Make(n, kv_heads * hd, v));
      gpu_->PagedAttention(*cache_g, l, layers[l], arena_->Make(n, heads * hd, q), og);
      const auto got = arena_->Read(og);
      EXPECT_LE(RelativeError(got, out), testing::kBf16AttentionTolerance);
      if (l == 0) {
        q_last.assign(q.begin() + 2599 * heads * hd, q.begin() + 2600 * heads * hd);
        out_last.assign(got.begin() + 2599 * heads * hd, got.begin() + 2600 * heads * hd);
      }
    }
  }
  // The same token alone (a one-token step: blocks per key split and a merge) gives the bits it
  // got inside the 7600-token step (each block walking its token's splits).
  {
    c.builder.Reset(bs);
    std::vector<int32_t> t0(2600, 3);
    c.builder.AddSequence(t0, 2599, 1, c.tables[0]);
    gpu_->BeginStep(c.builder.Finish(), *cache_g);
    const TensorView og = arena_->Make(1, heads * hd);
    gpu_->PagedAttention(*cache_g, 0, layers[0], arena_->Make(1, heads * hd, q_last), og);
    const auto alone = arena_->Read(og);
    EXPECT_EQ(std::memcmp(alone.data(), out_last.data(), heads * hd * sizeof(float)), 0)
        << "a token's attention alone differs from the same token in a long prefill";
  }
  // The decode of sequence 0 (position 2600), alone and in a batch with sequence 1.
  auto q = RandomVector(2 * heads * hd, 99);
  std::vector<std::vector<float>> alone_and_batched;
  for (const bool batched : {false, true}) {
    c.builder.Reset(bs);
    std::vector<int32_t> t0(2601, 3), t1(5001, 4);
    c.builder.AddSequence(t0, 2600, 1, c.tables[0]);
    if (batched) c.builder.AddSequence(t1, 5000, 1, c.tables[1]);
    const StepDescription& step = c.builder.Finish();
    gpu_->BeginStep(step, *cache_g);
    const int64_t n = step.num_tokens();
    const TensorView og = arena_->Make(n, heads * hd);
    gpu_->PagedAttention(*cache_g, 0, layers[0], arena_->Make(n, heads * hd, std::vector<float>(q.begin(), q.begin() + n * heads * hd)), og);
    auto out = arena_->Read(og);
    out.resize(heads * hd);
    alone_and_batched.push_back(out);
  }
  EXPECT_EQ(std::memcmp(alone_and_batched[0].data(), alone_and_batched[1].data(), heads * hd * sizeof(float)), 0)
      << "a decode's attention changed when another sequence joined the batch";
}

// FlashAttention's three launch shapes (kernels/cuda/flash_attention.h) give a row the same
// bits: 150 sequences of 1..700 tokens prefilled in one step (wide: blocks of 16 tokens), then
// decoded together (150 tokens: narrow), then three of them decoded alone (split: a block per
// segment and a merge); a 200-token chunk recomputed on its own (wide, other block boundaries)
// equals the same tokens inside the full prefill. Against the CPU within the bf16 tolerance. For
// bf16 rows and for fp8, int8, int4 and nvfp4 rows (converted in the kernel).
TEST_F(CudaOpsTest, FlashAttentionShapesGiveTheSameBits) {
  const int64_t kv_heads = 2, heads = 8, hd = 128, bs = 16, num_seqs = 150;
  std::vector<int64_t> lengths, prompt;
  for (int64_t i = 0; i < num_seqs; ++i) {
    prompt.push_back(1 + (i * 37) % 700);
    lengths.push_back(prompt.back() + 1);
  }
  StepCase c;
  MakeTables(lengths, bs, 13, &c);
  for (const KVQuant quant : {KVQuant::kNone, KVQuant::kFp8E4M3, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4}) {
    SCOPED_TRACE(KVQuantName(quant));
    KVStorageShape shape = CacheShape(1, c.num_blocks, bs, kv_heads, hd, DType::kBF16);
    shape.quant = quant;
    shape.group_size = 32;
    auto cache_c = cpu_.CreateKVCache(shape);
    auto cache_g = gpu_->CreateKVCache(shape);
    const AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), 0};
    const int64_t row = heads * hd;
    auto attend = [&](const StepDescription& step, const std::vector<float>& q, const std::vector<float>* k,
                      const std::vector<float>* v, bool cpu_too, double* err) {
      const int64_t n = step.num_tokens();
      gpu_->BeginStep(step, *cache_g);
      if (k != nullptr) gpu_->WriteKV(*cache_g, 0, arena_->Make(n, kv_heads * hd, *k), arena_->Make(n, kv_heads * hd, *v));
      const TensorView og = arena_->Make(n, row);
      gpu_->PagedAttention(*cache_g, 0, layer, arena_->Make(n, row, q), og);
      std::vector<float> got = arena_->Read(og);
      if (cpu_too) {
        std::vector<float> kc = *k, vc = *v, qc = q, want(n * row);
        cpu_.BeginStep(step, *cache_c);
        cpu_.WriteKV(*cache_c, 0, TensorView::F32(kc.data(), n, kv_heads * hd), TensorView::F32(vc.data(), n, kv_heads * hd));
        cpu_.PagedAttention(*cache_c, 0, layer, TensorView::F32(qc.data(), n, row), TensorView::F32(want.data(), n, row));
        *err = RelativeError(got, want);
      }
      return got;
    };
    // The prefill: every prompt in one step.
    std::vector<int64_t> zeros(num_seqs, 0);
    const StepDescription& prefill = BuildStep(&c, bs, zeros, prompt, 100);
    const int64_t n = prefill.num_tokens();
    const auto q = RandomVector(n * row, 31), k = RandomVector(n * kv_heads * hd, 32), v = RandomVector(n * kv_heads * hd, 33);
    double err = 0.0;
    const std::vector<float> full = attend(prefill, q, &k, &v, true, &err);
    EXPECT_LE(err, testing::kBf16AttentionTolerance) << "prefill";
    // Sequence 18 has 667 prompt tokens; its tokens [300, 500) again, as a chunk of their own.
    ASSERT_EQ(prompt[18], 667);
    const int64_t seq18 = prefill.query_start_loc[18];
    {
      c.builder.Reset(bs);
      std::vector<int32_t> tokens(500, 5);
      c.builder.AddSequence(tokens, 300, 200, c.tables[18]);
      const std::vector<float> qc(q.begin() + (seq18 + 300) * row, q.begin() + (seq18 + 500) * row);
      const std::vector<float> chunk = attend(c.builder.Finish(), qc, nullptr, nullptr, false, nullptr);
      EXPECT_EQ(std::memcmp(chunk.data(), full.data() + (seq18 + 300) * row, chunk.size() * sizeof(float)), 0)
          << "a 200-token chunk differs from the same tokens in the whole prefill";
    }
    // Every sequence decodes one token (150 tokens, one per sequence).
    std::vector<int64_t> ones(num_seqs, 1);
    const auto qd = RandomVector(num_seqs * row, 41), kd = RandomVector(num_seqs * kv_heads * hd, 42),
               vd = RandomVector(num_seqs * kv_heads * hd, 43);
    const std::vector<float> together = attend(BuildStep(&c, bs, prompt, ones, 100), qd, &kd, &vd, true, &err);
    EXPECT_LE(err, testing::kBf16AttentionTolerance) << "decode of 150";
    for (const int64_t s : {int64_t{0}, int64_t{18}, num_seqs - 1}) {
      c.builder.Reset(bs);
      std::vector<int32_t> tokens(lengths[s], 5);
      c.builder.AddSequence(tokens, prompt[s], 1, c.tables[s]);
      const std::vector<float> qs(qd.begin() + s * row, qd.begin() + (s + 1) * row);
      const std::vector<float> alone = attend(c.builder.Finish(), qs, nullptr, nullptr, false, nullptr);
      EXPECT_EQ(std::memcmp(alone.data(), together.data() + s * row, row * sizeof(float)), 0)
          << "sequence " << s << " decoded alone differs from the batch of 150";
    }
  }
}

// The narrow shape over 16-bit caches with ping buffers (8 KV heads: more blocks than the three
// an SM that the two-stage kernel keeps resident). 64 sequences decoded together with the split
// shape turned off, as pagoda_cuda_bench --shapes-only runs it (at most kPdlMaxRows rows: launched
// as programmatic dependents, back to back), and 140 (a decode step past the split shape's 128
// tokens, launched plainly). The same bits twice in a row, as the split shape over the 64 and as
// sequences decoded alone, and the CPU's values within the bf16 tolerance; bf16 and f16, head
// dims 64 and 128, 4 query heads a KV head (rows 8-15 skipped at d128) and 16.
TEST_F(CudaOpsTest, NarrowDecodeOverPingBuffersGivesTheSplitBits) {
  struct SplitLimit {  // the split shape's limit back to its default whatever happens
    ~SplitLimit() { cuda::SetFlashSplitMaxTokens(cuda::kFlashSplitMaxTokens); }
  } restore;
  const int64_t kv_heads = 8, bs = 16;
  struct Case {
    DType dtype;
    int64_t hd, group;
  };
  for (const int64_t num_seqs : {int64_t{64}, int64_t{140}}) {
    ASSERT_GT(num_seqs * kv_heads, 3 * cuda::SmCount()) << "the narrow grid would keep two stages";
    std::vector<int64_t> prompt, lengths;
    for (int64_t i = 0; i < num_seqs; ++i) {
      prompt.push_back(1 + (i * 53 + 7) % 900);
      lengths.push_back(prompt.back() + 1);
    }
    prompt[5] = 575;  // the benchmark's context (576 keys with the decoded token)
    lengths[5] = 576;
    StepCase c;
    MakeTables(lengths, bs, 29, &c);
    const std::vector<int64_t> zeros(num_seqs, 0), ones(num_seqs, 1);
    for (const Case& cs : {Case{DType::kBF16, 128, 4}, Case{DType::kBF16, 128, 16}, Case{DType::kF16, 128, 4},
                           Case{DType::kBF16, 64, 4}, Case{DType::kF16, 64, 16}}) {
      SCOPED_TRACE(std::to_string(num_seqs) + " sequences, " + std::string(DTypeName(cs.dtype)) + " d" +
                   std::to_string(cs.hd) + ", " + std::to_string(cs.group) + " query heads a KV head");
      const int64_t hd = cs.hd, heads = kv_heads * cs.group, row = heads * hd, kv_row = kv_heads * hd;
      const AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), 0};
      const KVStorageShape shape = CacheShape(1, c.num_blocks, bs, kv_heads, hd, cs.dtype);
      auto cache_c = cpu_.CreateKVCache(shape);
      auto cache_g = gpu_->CreateKVCache(shape);
      // The prompts' K/V on both backends, then the decode step's own rows.
      for (int s = 0; s < 2; ++s) {
        const StepDescription& step =
            s == 0 ? BuildStep(&c, bs, zeros, prompt, 100) : BuildStep(&c, bs, prompt, ones, 100);
        const int64_t n = step.num_tokens();
        std::vector<float> k = RandomVector(n * kv_row, 71 + 2 * s), v = RandomVector(n * kv_row, 72 + 2 * s);
        gpu_->BeginStep(step, *cache_g);
        gpu_->WriteKV(*cache_g, 0, arena_->Make(n, kv_row, k), arena_->Make(n, kv_row, v));
        cpu_.BeginStep(step, *cache_c);
        cpu_.WriteKV(*cache_c, 0, TensorView::F32(k.data(), n, kv_row), TensorView::F32(v.data(), n, kv_row));
      }
      std::vector<float> q = RandomVector(num_seqs * row, 75), want(num_seqs * row);
      cpu_.PagedAttention(*cache_c, 0, layer, TensorView::F32(q.data(), num_seqs, row),
                          TensorView::F32(want.data(), num_seqs, row));
      const TensorView qg = arena_->Make(num_seqs, row, q);
      auto attend = [&](int64_t split_max) {
        cuda::SetFlashSplitMaxTokens(split_max);
        const TensorView out = arena_->Make(num_seqs, row);
        gpu_->PagedAttention(*cache_g, 0, layer, qg, out);
        return arena_->Read(out);
      };
      std::vector<float> split;
      if (num_seqs <= cuda::kFlashSplitMaxTokens) {
        split = attend(cuda::kFlashSplitMaxTokens);
        EXPECT_EQ(cuda::ChooseFlashShape(num_seqs, num_seqs), cuda::FlashShape::kSplit);
      }
      const std::vector<float> narrow = attend(0), again = attend(0);
      EXPECT_EQ(cuda::ChooseFlashShape(num_seqs, num_seqs), cuda::FlashShape::kNarrow);
      cuda::SetFlashSplitMaxTokens(cuda::kFlashSplitMaxTokens);
      EXPECT_LE(RelativeError(narrow, want), testing::kBf16AttentionTolerance) << "narrow against the CPU";
      EXPECT_EQ(std::memcmp(narrow.data(), again.data(), narrow.size() * sizeof(float)), 0)
          << "the narrow shape's second launch differs from its first";
      if (!split.empty()) {
        EXPECT_EQ(std::memcmp(narrow.data(), split.data(), narrow.size() * sizeof(float)), 0)
            << "the narrow shape over ping buffers gives other bits than the split shape";
      }
      for (const int64_t s : {int64_t{0}, int64_t{5}, num_seqs - 1}) {  // alone: the split shape
        c.builder.Reset(bs);
        std::vector<int32_t> tokens(lengths[s], 5);
        c.builder.AddSequence(tokens, prompt[s], 1, c.tables[s]);
        gpu_->BeginStep(c.builder.Finish(), *cache_g);
        const TensorView out = arena_->Make(1, row);
        gpu_->PagedAttention(*cache_g, 0, layer,
                             arena_->Make(1, row, std::vector<float>(q.begin() + s * row, q.begin() + (s + 1) * row)), out);
        const std::vector<float> alone = arena_->Read(out);
        EXPECT_EQ(std::memcmp(alone.data(), narrow.data() + s * row, row * sizeof(float)), 0)
            << "sequence " << s << " decoded alone differs from the narrow shape's row";
      }
    }
  }
}

// The one-warp (decode) shapes copy a quantized tile's runs (a paged block's rows of the KV head,
// head-major blocks; or 64 slots of a larger block) by bulk copies or by cp.async: the same bits,
// for every format (fp8 rows of 132 bytes, int8 of 136 and 144, int4 and nvfp4 of 72), in the
// split shape (5 and 100 tokens: two stages, then ping buffers) and the narrow one (140 tokens,
// ping buffers). And the same bits over a cache whose blocks hold an earlier owner's rows past
// each sequence's last token, 16 times larger (a reused block: those rows are copied with the
// run and must change nothing, not even the tile's scale exponent).
TEST_F(CudaOpsTest, FlashOneWarpCopiesGiveTheSameBits) {
  const int64_t kv_heads = 4, heads = 16, hd = 128, row = heads * hd;
  const std::pair<KVQuant, int64_t> formats[] = {{KVQuant::kFp8E4M3, 0}, {KVQuant::kInt8, 32}, {KVQuant::kInt8, 16},
                                                 {KVQuant::kInt4, 32},   {KVQuant::kNvfp4, 0}};
  const AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), 0};
  for (const int64_t bs : {int64_t{16}, int64_t{64}}) {
    for (const int64_t num_seqs : {int64_t{5}, int64_t{100}, int64_t{140}}) {
      std::vector<int64_t> prompt, full;
      for (int64_t i = 0; i < num_seqs; ++i) {
        prompt.push_back(1 + (i * 37 + 11) % 520);
        full.push_back((prompt.back() + 1 + 63) / 64 * 64);  // the last tile's slots all written in `stale`
      }
      StepCase c;
      MakeTables(full, bs, 17, &c);
      std::vector<int64_t> zeros(num_seqs, 0), ones(num_seqs, 1);
      for (const auto& [quant, group] : formats) {
        SCOPED_TRACE(std::string(KVQuantName(quant)) + " group " +
                     std::to_string(group) + ", block " + std::to_string(bs) + ", " + std::to_string(num_seqs) +
                     " sequences");
        KVStorageShape shape = CacheShape(1, c.num_blocks, bs, kv_heads, hd, DType::kBF16);
        shape.quant = quant;
        shape.group_size = group;
        const TensorView q = arena_->Make(num_seqs, row, RandomVector(num_seqs * row, 55));
        std::vector<float> got[4];
        for (const bool stale : {false, true}) {
          auto cache = gpu_->CreateKVCache(shape);
          if (stale) {  // every slot of the tables, 16 times larger than the rows written after
            const StepDescription& earlier = BuildStep(&c, bs, zeros, full, 100);
            const int64_t n = earlier.num_tokens();
            std::vector<float> k = RandomVector(n * kv_heads * hd, 61), v = RandomVector(n * kv_heads * hd, 62);
            for (float& x : k) x *= 16.0f;
            for (float& x : v) x *= 16.0f;
            gpu_->BeginStep(earlier, *cache);
            gpu_->WriteKV(*cache, 0, arena_->Make(n, kv_heads * hd, k), arena_->Make(n, kv_heads * hd, v));
          }
          const StepDescription& prefill = BuildStep(&c, bs, zeros, prompt, 100);
          const int64_t n = prefill.num_tokens();
          gpu_->BeginStep(prefill, *cache);
          gpu_->WriteKV(*cache, 0, arena_->Make(n, kv_heads * hd, RandomVector(n * kv_heads * hd, 51)),
                        arena_->Make(n, kv_heads * hd, RandomVector(n * kv_heads * hd, 52)));
          gpu_->BeginStep(BuildStep(&c, bs, prompt, ones, 100), *cache);
          gpu_->WriteKV(*cache, 0, arena_->Make(num_seqs, kv_heads * hd, RandomVector(num_seqs * kv_heads * hd, 53)),
                        arena_->Make(num_seqs, kv_heads * hd, RandomVector(num_seqs * kv_heads * hd, 54)));
          for (const bool bulk : {true, false}) {
            cuda::SetFlashRowsBulk(bulk);
            const TensorView out = arena_->Make(num_seqs, row);
            gpu_->PagedAttention(*cache, 0, layer, q, out);
            got[2 * stale + (bulk ? 0 : 1)] = arena_->Read(out);
          }
          cuda::SetFlashRowsBulk(true);
        }
        EXPECT_TRUE(std::all_of(got[0].begin(), got[0].end(), [](float x) { return std::isfinite(x); }));
        const char* what[4] = {"bulk copies", "cp.async", "bulk copies over stale rows", "cp.async over stale rows"};
        for (int i = 1; i < 4; ++i) {
          ASSERT_EQ(got[0].size(), got[i].size());
          EXPECT_EQ(std::memcmp(got[0].data(), got[i].data(), got[0].size() * sizeof(float)), 0)
              << what[i] << " give other bits than " << what[0];
        }
      }
    }
  }
}

// The wgmma shape's building blocks (flash_wgmma.cuh's swizzled tiles and descriptors, the SS and
// RS products) against a float64 reference of the same rounded inputs: S = Q K^T and O = P V for
// one tile (P V's first k-step with scale-d off over garbage accumulators), bf16 and f16, head
// dims 64 and 128.
TEST_F(CudaOpsTest, WgmmaTileProductsMatchTheReference) {
  for (const bool f16 : {false, true}) {
    for (const int hd : {64, 128}) {
      SCOPED_TRACE(std::string(f16 ? "f16" : "bf16") + " hd " + std::to_string(hd));
      auto round = [&](float x) {
        return f16 ? static_cast<double>(static_cast<float>(static_cast<__half>(x)))
                   : static_cast<double>(static_cast<float>(static_cast<__nv_bfloat16>(x)));
      };
      const auto q = RandomVector(64 * hd, 61), k = RandomVector(64 * hd, 62), v = RandomVector(64 * hd, 63),
                 pm = RandomVector(64 * 64, 64);
      const TensorView s = arena_->Make(64, 64), o = arena_->Make(64, hd);
      cuda::WgmmaTileProductsForTest(arena_->Make(64, hd, q).f32(), arena_->Make(64, hd, k).f32(),
                                     arena_->Make(64, hd, v).f32(), arena_->Make(64, 64, pm).f32(), s.f32(), o.f32(), hd,
                                     f16, nullptr);
      const auto gs = arena_->Read(s), go = arena_->Read(o);
      double worst_s = 0.0, worst_o = 0.0;
      for (int r = 0; r < 64; ++r) {
        for (int c = 0; c < 64; ++c) {
          double want = 0.0, mag = 0.0;
          for (int d = 0; d < hd; ++d) {
            want += round(q[r * hd + d]) * round(k[c * hd + d]);
            mag += std::fabs(round(q[r * hd + d]) * round(k[c * hd + d]));
          }
          worst_s = std::max(worst_s, std::fabs(gs[r * 64 + c] - want) / (mag + 1e-30));
        }
        for (int d = 0; d < hd; ++d) {
          double want = 0.0, mag = 0.0;
          for (int c = 0; c < 64; ++c) {
            want += round(pm[r * 64 + c]) * round(v[c * hd + d]);
            mag += std::fabs(round(pm[r * 64 + c]) * round(v[c * hd + d]));
          }
          worst_o = std::max(worst_o, std::fabs(go[r * hd + d] - want) / (mag + 1e-30));
        }
      }
      // f32 accumulation of exact products: a few ulps of the sum of magnitudes.
      EXPECT_LE(worst_s, 1e-5) << "S = Q K^T";
      EXPECT_LE(worst_o, 1e-5) << "O = P V";
    }
  }
}

// The wide shape on wgmma (kernels/cuda/flash_wgmma.cuh) gives the mma.sync wide kernel's bits:
// prefills of sequences of 1..2600 tokens (segments of 128, 256 and 512 keys, blocks whose rows
// straddle 1024 and 2048 keys), GQA groups 1, 4 and 8, head dims 64 and 128, with and without a
// sliding window, with K/V by TMA (blocks of 16 and 32 slots, shuffled or mostly consecutive, so
// that tiles copied as one run of blocks meet tiles copied block by block) and by cp.async (4);
// and a chunk at an offset (a prefix hit).
TEST_F(CudaOpsTest, FlashWgmmaGivesTheMmaBits) {
  for (const auto& [hd, group, window, bs, runs] : std::vector<std::array<int64_t, 5>>{
       {64, 1, 0, 16, 0}, {64, 4, 700, 16, 0}, {64, 8, 0, 16, 0}, {64, 4, 0, 4, 0}, {128, 1, 0, 16, 0},
       {128, 1, 700, 16, 0}, {128, 4, 0, 16, 0}, {128, 4, 700, 16, 0}, {128, 8, 0, 16, 0}, {128, 8, 700, 4, 0},
       {128, 1, 0, 4, 0}, {128, 1, 0, 16, 1}, {128, 8, 700, 16, 1}, {64, 4, 0, 16, 1}, {128, 4, 0, 32, 1}}) {
    SCOPED_TRACE("hd " + std::to_string(hd) + " group " + std::to_string(group) + " window " +
                 std::to_string(window) + " block size " + std::to_string(bs) + (runs ? " runs" : " shuffled"));
    const int64_t kv_heads = 2, heads = kv_heads * group;
    const std::vector<int64_t> prompt = {1, 37, 1000, 1030, 2060, 2600};
    StepCase c;
    MakeTables(prompt, bs, 7, &c, runs != 0);
    const KVStorageShape shape = CacheShape(1, c.num_blocks, bs, kv_heads, hd, DType::kBF16);
    auto cache = gpu_->CreateKVCache(shape);
    const AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), window};
    const int64_t row = heads * hd;
    std::vector<int64_t> zeros(prompt.size(), 0);
    const StepDescription& step = BuildStep(&c, bs, zeros, prompt, 100);
    const int64_t n = step.num_tokens();
    const auto q = RandomVector(n * row, 51), k = RandomVector(n * kv_heads * hd, 52),
               v = RandomVector(n * kv_heads * hd, 53);
    gpu_->BeginStep(step, *cache);
    gpu_->WriteKV(*cache, 0, arena_->Make(n, kv_heads * hd, k), arena_->Make(n, kv_heads * hd, v));
    std::vector<std::vector<float>> outs;
    for (const bool wgmma : {false, true}) {
      cuda::SetFlashWgmma(wgmma ? cuda::FlashWgmma::kOn : cuda::FlashWgmma::kOff);
      const TensorView og = arena_->Make(n, row);
      gpu_->PagedAttention(*cache, 0, layer, arena_->Make(n, row, q), og);
      outs.push_back(arena_->Read(og));
    }
    cuda::SetFlashWgmma(cuda::FlashWgmma::kAuto);
    for (int64_t t = 0; t < n; ++t) {
      ASSERT_EQ(std::memcmp(outs[0].data() + t * row, outs[1].data() + t * row, row * sizeof(float)), 0)
          << "token " << t << " of " << n;
    }
    // Sequence 4's tokens [1500, 2060) as a chunk of their own (queries at an offset).
    const int64_t at = step.query_start_loc[4] + 1500;  // before the builder is reset
    c.builder.Reset(bs);
    std::vector<int32_t> tokens(2060, 5);
    c.builder.AddSequence(tokens, 1500, 560, c.tables[4]);
    const StepDescription& chunk = c.builder.Finish();
    const std::vector<float> qc(q.begin() + at * row, q.begin() + (at + 560) * row);
    gpu_->BeginStep(chunk, *cache);
    std::vector<std::vector<float>> chunks;
    for (const bool wgmma : {false, true}) {
      cuda::SetFlashWgmma(wgmma ? cuda::FlashWgmma::kOn : cuda::FlashWgmma::kOff);
      const TensorView og = arena_->Make(560, row);
      gpu_->PagedAttention(*cache, 0, layer, arena_->Make(560, row, qc), og);
      chunks.push_back(arena_->Read(og));
    }
    cuda::SetFlashWgmma(cuda::FlashWgmma::kAuto);
    EXPECT_EQ(std::memcmp(chunks[0].data(), chunks[1].data(), chunks[0].size() * sizeof(float)), 0) << "the chunk";
    EXPECT_EQ(std::memcmp(chunks[0].data(), outs[0].data() + at * row, chunks[0].size() * sizeof(float)), 0)
        << "the chunk against the same tokens in the whole prefill";
  }
}

// MLA in its absorbed form against the CPU: f32 caches and ranks without the tensor-core kernel
// (the SIMT kernel, f32 arithmetic) within the f32 tolerance; bf16 caches with DeepSeek's RoPE
// width (rank 64 or 512 + RoPE 64: the tensor-core kernel, Q and P rounded to bf16) within the
// bf16 attention tolerance, with 5 heads (one head tile a block, segments of 128 keys) and 20
// (64-head blocks, padded); and tokens computed alone (a decode step: split blocks and their merge
// at 5 heads) are the same bits as inside the prefill (303 tokens: the blocks walk the segments).
TEST_F(CudaOpsTest, MlaAttentionMatchesCpu) {
  for (const int64_t bs : {16, 32}) {
    for (const int64_t rank : {64, 512}) {
      for (const DType dtype : {DType::kF32, DType::kBF16}) {
        for (const int64_t heads : {5, 20}) {
          SCOPED_TRACE("bs " + std::to_string(bs) + " rank " + std::to_string(rank) + " " +
                       std::string(DTypeName(dtype)) + " heads " + std::to_string(heads));
          const int64_t rope = 64;
          StepCase c;
          MakeTables({300, 3}, bs, 9, &c);
          KVStorageShape shape = CacheShape(1, c.num_blocks, bs, 1, rank, dtype);
          shape.head_dim_v = rope;
          auto cache_c = cpu_.CreateKVCache(shape);
          auto cache_g = gpu_->CreateKVCache(shape);
          const StepDescription& step = BuildStep(&c, bs, {0, 0}, {300, 3}, 100);
          const int64_t n = step.num_tokens();
          cpu_.BeginStep(step, *cache_c);
          gpu_->BeginStep(step, *cache_g);
          auto q = RandomVector(n * heads * (rank + rope), 30), lat = RandomVector(n * rank, 31),
               pe = RandomVector(n * rope, 32);
          const float scale = 0.1f;
          std::vector<float> out(n * heads * rank);
          cpu_.WriteKV(*cache_c, 0, TensorView::F32(lat.data(), n, rank), TensorView::F32(pe.data(), n, rope));
          cpu_.MlaAttention(*cache_c, 0, heads, scale, TensorView::F32(q.data(), n, heads * (rank + rope)),
                            TensorView::F32(out.data(), n, heads * rank));
          const TensorView og = arena_->Make(n, heads * rank);
          gpu_->WriteKV(*cache_g, 0, arena_->Make(n, rank, lat), arena_->Make(n, rope, pe));
          gpu_->MlaAttention(*cache_g, 0, heads, scale, arena_->Make(n, heads * (rank + rope), q), og);
          const std::vector<float> got = arena_->Read(og);
          const double tol = dtype == DType::kF32 ? kF32Tolerance : testing::kBf16AttentionTolerance;
          EXPECT_LE(RelativeError(got, out), tol);
          // Tokens 36 (one segment) and 299 (three) of sequence 0 (rows of the step) alone.
          for (const int64_t row : {36, 299}) {
            const StepDescription& alone = BuildStep(&c, bs, {row}, {1}, 100);
            gpu_->BeginStep(alone, *cache_g);
            const std::vector<float> qr(q.begin() + row * heads * (rank + rope),
                                        q.begin() + (row + 1) * heads * (rank + rope));
            const TensorView o1 = arena_->Make(1, heads * rank);
            gpu_->MlaAttention(*cache_g, 0, heads, scale, arena_->Make(1, heads * (rank + rope), qr), o1);
            const std::vector<float> one = arena_->Read(o1);
            EXPECT_EQ(std::memcmp(one.data(), got.data() + row * heads * rank, one.size() * sizeof(float)), 0)
                << "token " << row << " alone differs from the prefill";
          }
        }
      }
    }
  }
}

// WriteAttentionInputs' one kernel against the separate ops it replaces (Backend's default:
// Copy, AddBias, Rope, WriteKV) on the GPU: the same query bits and the same cache bytes, for
// plain and quantized caches, q|k|v as column ranges of a stacked product, with and without
// biases, RoPE interleaved over the whole head or in halves over part of it (YaRN magnitude).
// A decode-sized step (31 tokens: one row a block) and a prefill-sized one (310 tokens: 8 rows a
// block; with 6 query and 2 KV heads the first block holds queries and keys, the second only
// values, without RoPE).
TEST_F(CudaOpsTest, FusedAttentionInputsGiveTheSeparateOpsBits) {
  const int64_t bs = 16, heads = 6, kv_heads = 2, hd = 64, qw = heads * hd, kw = kv_heads * hd;
  for (const int64_t first_len : {int64_t{21}, int64_t{300}}) {
    SCOPED_TRACE("a step of " + std::to_string(first_len + 10) + " tokens");
    StepCase c;
    MakeTables({first_len, 40}, bs, 9, &c);
    const StepDescription& step = BuildStep(&c, bs, {0, 30}, {first_len, 10}, 100);
    const int64_t n = step.num_tokens();
    struct Case {
      DType dtype;
      KVQuant quant;
      bool bias, interleaved;
    };
    const Case cases[] = {Case{DType::kF32, KVQuant::kNone, true, true},
                          Case{DType::kBF16, KVQuant::kNone, false, false},
                          Case{DType::kF16, KVQuant::kNone, true, false},
                          Case{DType::kBF16, KVQuant::kFp8E4M3, true, true},
                          Case{DType::kBF16, KVQuant::kInt8, false, false}};
    for (const Case& k : cases) {
      SCOPED_TRACE(std::string(DTypeName(k.dtype)) + " " + KVQuantName(k.quant) + (k.bias ? " bias" : "") +
                   (k.interleaved ? " interleaved" : " halves"));
      KVStorageShape shape = CacheShape(1, c.num_blocks, bs, kv_heads, hd, k.dtype);
      shape.quant = k.quant;
      auto separate = gpu_->CreateKVCache(shape), fused = gpu_->CreateKVCache(shape);
      auto on_cpu = cpu_.CreateKVCache(shape);
      RopeParams rope;
      rope.dim = k.interleaved ? hd : hd / 2;
      rope.interleaved = k.interleaved;
      rope.magnitude = k.interleaved ? 1.0 : 1.07;
      for (int64_t i = 0; i < rope.dim / 2; ++i) rope.inv_freq.push_back(std::pow(10000.0, -2.0 * i / rope.dim));
      const auto qkv = RandomVector(n * (qw + 2 * kw), 70, -3.0f, 3.0f);
      const auto bq = RandomVector(qw, 71), bk = RandomVector(kw, 72), bv = RandomVector(kw, 73);
      const TensorView bqg = arena_->Make(1, qw, bq), bkg = arena_->Make(1, kw, bk), bvg = arena_->Make(1, kw, bv);
      AttentionLayer layer{heads, kv_heads, hd, 0.125f, 0};
      auto run = [&](Backend& b, KVCache& cache, bool fused_op, const TensorView& src, const TensorView& q,
                     const TensorView& kk, const TensorView& vv, const TensorView* biases) {
        b.BeginStep(step, cache);
        AttentionInputs in;
        in.src_q = src.ColRange(0, qw);
        in.src_k = src.ColRange(qw, kw);
        in.src_v = src.ColRange(qw + kw, kw);
        in.q = q;
        in.k = kk;
        in.v = vv;
        if (k.bias) {
          in.bq = &biases[0];
          in.bk = &biases[1];
          in.bv = &biases[2];
        }
        in.rope = &rope;
        in.layer = layer;
        if (fused_op) {
          b.WriteAttentionInputs(cache, 0, in);
        } else {
          b.Backend::WriteAttentionInputs(cache, 0, in);  // the separate ops
        }
      };
      const TensorView gbias[3] = {bqg, bkg, bvg};
      const TensorView src_a = arena_->Make(n, qw + 2 * kw, qkv), src_b = arena_->Make(n, qw + 2 * kw, qkv);
      const TensorView qa = arena_->Make(n, qw), qb = arena_->Make(n, qw);
      run(*gpu_, *separate, false, src_a, qa, arena_->Make(n, kw), arena_->Make(n, kw), gbias);
      run(*gpu_, *fused, true, src_b, qb, arena_->Make(n, kw), arena_->Make(n, kw), gbias);
      const auto want_q = arena_->Read(qa), got_q = arena_->Read(qb);
      EXPECT_EQ(std::memcmp(want_q.data(), got_q.data(), want_q.size() * sizeof(float)), 0) << "rotated queries";
      // The blocks the step wrote, whole (both caches start zeroed; quantized blocks are head-major,
      // so a token's rows are not one run of bytes).
      for (const bool value : {false, true}) {
        for (int64_t t = 0; t < n; ++t) {
          const int64_t slot = step.slot_mapping[t];
          const auto a = gpu_->ReadKVBlock(*separate, 0, value, static_cast<int32_t>(slot / bs));
          const auto b = gpu_->ReadKVBlock(*fused, 0, value, static_cast<int32_t>(slot / bs));
          ASSERT_EQ(a.size(), b.size());
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << (value ? "V" : "K") << " of token " << t << "'s block";
        }
      }
      // And the CPU's default: the same queries within the RoPE tolerance.
      std::vector<float> src_c = qkv, q_c(n * qw), k_c(n * kw), v_c(n * kw);
      const TensorView cbias[3] = {TensorView::F32(bq.data(), 1, qw), TensorView::F32(bk.data(), 1, kw),
                                   TensorView::F32(bv.data(), 1, kw)};
      run(cpu_, *on_cpu, true, TensorView::F32(src_c.data(), n, qw + 2 * kw), TensorView::F32(q_c.data(), n, qw),
          TensorView::F32(k_c.data(), n, kw), TensorView::F32(v_c.data(), n, kw), cbias);
      EXPECT_LE(RelativeError(got_q, q_c), 1e-6);
    }
  }
}

}  // namespace
}  // namespace pagoda
