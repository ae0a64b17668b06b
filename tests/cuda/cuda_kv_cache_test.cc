// The CUDA backend's KV cache: quantized rows written on the device byte for byte equal to the
// CPU's blocks, and the formats and policies it refuses by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "core/dtype.h"
#include "backend/kv_storage.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/paged_attention.h"
#include "kv/kv_codec.h"
#include "tests/cuda/cuda_ops_fixture.h"

namespace pagoda {
namespace {

// The first byte where the GPU's block differs from the CPU's (gpu.size() bytes), or -1.
int64_t FirstDifference(const uint8_t* cpu, const std::vector<uint8_t>& gpu) {
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i] != cpu[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

// The device quantizes K/V rows to the CPU codec's bytes exactly (kv/kv_codec.h): fp8 e4m3 and
// e5m2 with per-token scales and with a checkpoint scale (values beyond it saturate), int8 with
// groups of 32 and 12, int4 with groups of 32 and 8, nvfp4 without and with a tensor scale; rows
// of ordinary values, zeros, one huge outlier and tiny values; a skipped layer stays bf16.
TEST_F(CudaOpsTest, QuantizedKVWritesTheCpuBytes) {
  const int64_t bs = 16, kv_heads = 2, hd = 64, n = 2 * bs;
  struct Case {
    KVQuant quant;
    int64_t group;
    float tensor_scale;
  };
  for (const Case& q : {Case{KVQuant::kFp8E4M3, 32, 0.0f}, Case{KVQuant::kFp8E5M2, 32, 0.0f},
                        Case{KVQuant::kFp8E4M3, 32, 0.01f}, Case{KVQuant::kInt8, 32, 0.0f},
                        Case{KVQuant::kInt8, 12, 0.0f}, Case{KVQuant::kInt4, 32, 0.0f},
                        Case{KVQuant::kInt4, 8, 0.0f}, Case{KVQuant::kNvfp4, 16, 0.0f},
                        Case{KVQuant::kNvfp4, 16, 0.37f}}) {
    SCOPED_TRACE(std::string(KVQuantName(q.quant)) + " group " + std::to_string(q.group) + " scale " +
                 std::to_string(q.tensor_scale));
    KVStorageShape shape = CacheShape(2, 3, bs, kv_heads, hd, DType::kBF16);
    shape.quant = q.quant;
    shape.group_size = q.group;
    shape.wide_layers = {1};
    auto cache_c = cpu_.CreateKVCache(shape);
    auto cache_g = gpu_->CreateKVCache(shape);
    cache_c->SetTensorScales(0, q.tensor_scale, q.tensor_scale);
    cache_g->SetTensorScales(0, q.tensor_scale, q.tensor_scale);
    StepBuilder b;
    b.Reset(bs);
    const std::vector<int32_t> tokens(n, 5), table = {2, 0};
    b.AddSequence(tokens, 0, n, table);
    const StepDescription& step = b.Finish();
    cpu_.BeginStep(step, *cache_c);
    gpu_->BeginStep(step, *cache_g);
    for (int64_t l = 0; l < 2; ++l) {
      auto k = RandomVector(n * kv_heads * hd, 40 + l), v = RandomVector(n * kv_heads * hd, 50 + l, -3.0f, 3.0f);
      for (int64_t r = 0; r < n * kv_heads; ++r) {  // rows of very different magnitudes
        const float m = std::pow(10.0f, static_cast<float>(r % 7) - 3.0f);
        for (int64_t i = 0; i < hd; ++i) k[r * hd + i] *= m;
      }
      std::fill(k.begin() + 3 * hd, k.begin() + 4 * hd, 0.0f);  // an all-zero row
      k[5 * hd + 7] = 3.0e5f;                                      // an outlier beyond fp8 e4m3's range
      cpu_.WriteKV(*cache_c, l, TensorView::F32(k.data(), n, kv_heads * hd), TensorView::F32(v.data(), n, kv_heads * hd));
      gpu_->WriteKV(*cache_g, l, arena_->Make(n, kv_heads * hd, k), arena_->Make(n, kv_heads * hd, v));
      gpu_->Synchronize();
      const auto& storage = dynamic_cast<const KVStorage&>(*cache_c);
      for (const bool value : {false, true}) {
        const KVArrayFormat& f = value ? storage.v_format(l) : storage.k_format(l);
        EXPECT_EQ(f.quant, l == 1 ? KVQuant::kNone : q.quant);
        const int64_t bytes = KVBlockBytes(f);
        for (const int32_t block : table) {
          const auto* cpu = static_cast<const uint8_t*>(value ? storage.v(l) : storage.k(l)) + block * bytes;
          const std::vector<uint8_t> gpu = gpu_->ReadKVBlock(*cache_g, l, value, block);
          ASSERT_EQ(static_cast<int64_t>(gpu.size()), bytes);
          const int64_t first_diff = FirstDifference(cpu, gpu);
          std::string around;
          for (int64_t i = std::max<int64_t>(0, first_diff - 4); first_diff >= 0 && i < std::min(bytes, first_diff + 8); ++i) {
            around.append(" ").append(std::to_string(cpu[i])).append("/").append(std::to_string(gpu[i]));
          }
          EXPECT_EQ(first_diff, -1) << "layer " << l << (value ? " V" : " K") << " block " << block << ": byte "
                                    << first_diff << " of " << bytes << " (row bytes " << KVRowBytes(f)
                                    << "); cpu/gpu bytes from " << std::max<int64_t>(0, first_diff - 4) << ":" << around;
        }
      }
    }
  }
}

// The side pool on the GPU (kivi2's residual, sink and recent tokens: backend/wide_pool.h,
// kernels/cuda/kv_wide.h, paged_attention_wide.cu) against the CPU's KVStorage: two sequences
// prefilled in two chunks, one of them forked (copy-on-write of its partial tail block), then
// decoded step by step across block boundaries. Every step's attention output within the f32
// tolerance of the CPU's on the SIMT kernel alone (both read the same values: dequantized codes
// or the same bf16 wide rows), within the bf16 tolerance with FlashAttention taking each
// query's codes span (the split PagedAttentionWideRest merges), and at the end every block's bytes equal the CPU's (kivi2 keys quantized per channel
// from the wide copy once the block filled, kivi2 values per token). A skipped layer stays bf16.
TEST_F(CudaOpsTest, SidePoolMatchesTheCpu) {
  const int64_t kv_heads = 2, heads = 8, layers = 2;
  struct Case {
    KVQuant quant;
    int64_t group, block_size, sink, recent;
    bool skip_layer;
    int64_t hd = 64;
  };
  // kivi2 with blocks of 16+ slots and groups of 32k values runs its codes spans on FlashAttention
  // (head dims 64 and 128, a sink); the other kivi2 cases on the SIMT kernel alone.
  for (const Case& cs : {Case{KVQuant::kKivi2, 32, 8, 0, 0, false}, Case{KVQuant::kKivi2, 16, 16, 0, 0, true},
                         Case{KVQuant::kKivi2, 32, 8, 5, 0, false}, Case{KVQuant::kKivi2, 32, 16, 0, 0, false},
                         Case{KVQuant::kKivi2, 32, 32, 5, 0, false, 128}, Case{KVQuant::kInt4, 32, 8, 5, 0, false},
                         Case{KVQuant::kFp8E4M3, 32, 8, 0, 3, false}, Case{KVQuant::kInt8, 32, 16, 20, 4, false},
                         Case{KVQuant::kNvfp4, 16, 8, 9, 2, true}}) {
    const int64_t hd = cs.hd;
    for (const bool flash : {false, true}) {
      cuda::SetSidePoolFlash(flash);
      const int64_t bs = cs.block_size;
      SCOPED_TRACE(std::string(KVQuantName(cs.quant)) + " group " + std::to_string(cs.group) + ", block " +
                   std::to_string(bs) + ", sink " + std::to_string(cs.sink) + ", recent " + std::to_string(cs.recent) +
                   ", head dim " + std::to_string(hd) +
                   (flash ? ", codes spans on FlashAttention" : ", SIMT only"));
      // FlashAttention's part (the keys each query surely reads from codes, where it serves the
      // format) rounds Q and P to 16 bits: the bf16 attention tolerance.
      const double quant_tol = flash ? testing::kBf16AttentionTolerance : kF32Tolerance;
      // Sequence 0: 13 + 9 prompt tokens; sequence 1: 150 + 6 (a step of more than 64 tokens: blocks
      // walking their splits; keys past 128: two splits); sequence 2: sequence 0 forked after its
      // prompt (its partial tail block copied). Then 12 decode steps of all three (a block a split
      // and a merge).
      const int64_t decode_steps = 12, len0 = 22, len1 = 156;
      const int64_t blocks0 = (len0 + decode_steps + bs - 1) / bs, blocks1 = (len1 + decode_steps + bs - 1) / bs;
      std::vector<std::vector<int32_t>> tables(3);
      int32_t next = 0;
      for (int64_t b = 0; b < blocks0; ++b) tables[0].push_back(next++);
      for (int64_t b = 0; b < blocks1; ++b) tables[1].push_back(next++);
      std::reverse(tables[1].begin(), tables[1].end());  // not in order
      tables[2] = tables[0];
      for (int64_t b = len0 / bs; b < blocks0; ++b) tables[2][b] = next++;  // from its first partial block on
      KVStorageShape shape = CacheShape(layers, next, bs, kv_heads, hd, DType::kBF16);
      shape.quant = cs.quant;
      shape.group_size = cs.group;
      shape.sink_tokens = cs.sink;
      shape.recent_tokens = cs.recent;
      if (cs.skip_layer) shape.wide_layers = {1};
      auto cache_c = cpu_.CreateKVCache(shape);
      auto cache_g = gpu_->CreateKVCache(shape);
      const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
      const AttentionLayer layer{heads, kv_heads, hd, scale, 0};
      uint32_t seed = 1000;
      // Runs one step on both backends and compares the attention outputs, layer by layer.
      auto run = [&](const std::vector<int>& seqs, const std::vector<int64_t>& first, const std::vector<int64_t>& count,
                     const std::string& what) {
        StepBuilder b;
        b.Reset(bs);
        for (size_t i = 0; i < seqs.size(); ++i) {
          const std::vector<int32_t> tokens(first[i] + count[i], 7);
          b.AddSequence(tokens, first[i], count[i], tables[seqs[i]]);
        }
        const StepDescription& step = b.Finish();
        const int64_t n = step.num_tokens();
        cpu_.BeginStep(step, *cache_c);
        gpu_->BeginStep(step, *cache_g);
        for (int64_t l = 0; l < layers; ++l) {
          SCOPED_TRACE(what + ", layer " + std::to_string(l));
          const auto q = RandomVector(n * heads * hd, seed++), k = RandomVector(n * kv_heads * hd, seed++),
                     v = RandomVector(n * kv_heads * hd, seed++, -2.0f, 2.0f);
          std::vector<float> out(n * heads * hd);
          cpu_.WriteKV(*cache_c, l, TensorView::F32(k.data(), n, kv_heads * hd), TensorView::F32(v.data(), n, kv_heads * hd));
          cpu_.PagedAttention(*cache_c, l, layer, TensorView::F32(q.data(), n, heads * hd),
                              TensorView::F32(out.data(), n, heads * hd));
          const TensorView og = arena_->Make(n, heads * hd);
          gpu_->WriteKV(*cache_g, l, arena_->Make(n, kv_heads * hd, k), arena_->Make(n, kv_heads * hd, v));
          gpu_->PagedAttention(*cache_g, l, layer, arena_->Make(n, heads * hd, q), og);
          // A skipped (bf16) layer runs on the tensor-core kernel: the bf16 tolerance.
          EXPECT_LE(RelativeError(arena_->Read(og), out),
                    cs.skip_layer && l == 1 ? testing::kBf16AttentionTolerance : quant_tol);
        }
      };
      run({0, 1}, {0, 0}, {13, 150}, "first chunks");
      run({0, 1}, {13, 150}, {9, 6}, "second chunks");
      const int32_t src = tables[0][len0 / bs], dst = tables[2][len0 / bs];
      cpu_.CopyBlock(*cache_c, src, dst);
      gpu_->CopyBlock(*cache_g, src, dst);
      for (int64_t i = 0; i < decode_steps; ++i) {
        run({0, 1, 2}, {len0 + i, len1 + i, len0 + i}, {1, 1, 1}, "decode step " + std::to_string(i));
      }
      gpu_->Synchronize();
      const auto& storage = dynamic_cast<const KVStorage&>(*cache_c);
      for (int64_t l = 0; l < layers; ++l) {
        for (const bool value : {false, true}) {
          const KVArrayFormat& f = value ? storage.v_format(l) : storage.k_format(l);
          const int64_t bytes = KVBlockBytes(f);
          for (int32_t block = 0; block < next; ++block) {
            const auto* cpu = static_cast<const uint8_t*>(value ? storage.v(l) : storage.k(l)) + block * bytes;
            const std::vector<uint8_t> gpu = gpu_->ReadKVBlock(*cache_g, l, value, block);
            ASSERT_EQ(static_cast<int64_t>(gpu.size()), bytes);
            const int64_t first_diff = FirstDifference(cpu, gpu);
            EXPECT_EQ(first_diff, -1) << "layer " << l << (value ? " V" : " K") << " block " << block << ": byte "
                                      << first_diff << " of " << bytes;
          }
        }
      }
      EXPECT_GT(cache_g->side_bytes(), 0);
    }
  }
  cuda::SetSidePoolFlash(true);
}

// kivi2's prefill steps on one-warp work items (SetFlashKivi2Items: 16 / G tokens a warp) give
// every row the narrow shape's bits (a warp a token), and the CPU's values within the bf16
// tolerance: sequences of 1..300 prompt tokens prefilled in one step over kivi2 blocks of 16 and
// 32 slots, without and with 5 sink tokens, 4 and 8 query heads a KV head, head dims 64 and 128.
TEST_F(CudaOpsTest, Kivi2PrefillItemsGiveTheNarrowBits) {
  struct Items {  // back to the default whatever happens
    ~Items() { cuda::SetFlashKivi2Items(false); }
  } restore;
  const int64_t kv_heads = 2, num_seqs = 9;
  struct Case {
    int64_t block_size, sink, group, hd;
  };
  for (const Case& cs : {Case{16, 0, 4, 128}, Case{32, 5, 8, 64}, Case{16, 5, 8, 128}, Case{32, 0, 4, 64}}) {
    SCOPED_TRACE("block " + std::to_string(cs.block_size) + ", sink " + std::to_string(cs.sink) + ", " +
                 std::to_string(cs.group) + " query heads a KV head, head dim " + std::to_string(cs.hd));
    const int64_t bs = cs.block_size, hd = cs.hd, heads = kv_heads * cs.group, row = heads * hd, kv_row = kv_heads * hd;
    std::vector<int64_t> prompt, zeros(num_seqs, 0);
    for (int64_t i = 0; i < num_seqs; ++i) prompt.push_back(1 + (i * 71 + 13) % 300);
    StepCase c;
    MakeTables(prompt, bs, 37, &c);
    KVStorageShape shape = CacheShape(1, c.num_blocks, bs, kv_heads, hd, DType::kBF16);
    shape.quant = KVQuant::kKivi2;
    shape.group_size = 32;
    shape.sink_tokens = cs.sink;
    auto cache_c = cpu_.CreateKVCache(shape);
    auto cache_g = gpu_->CreateKVCache(shape);
    const AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), 0};
    const StepDescription& step = BuildStep(&c, bs, zeros, prompt, 100);
    const int64_t n = step.num_tokens();
    ASSERT_GT(n, cuda::kFlashSplitMaxTokens);  // past the split shape: narrow or items
    std::vector<float> q = RandomVector(n * row, 81), k = RandomVector(n * kv_row, 82),
                       v = RandomVector(n * kv_row, 83, -2.0f, 2.0f), want(n * row);
    cpu_.BeginStep(step, *cache_c);
    cpu_.WriteKV(*cache_c, 0, TensorView::F32(k.data(), n, kv_row), TensorView::F32(v.data(), n, kv_row));
    cpu_.PagedAttention(*cache_c, 0, layer, TensorView::F32(q.data(), n, row), TensorView::F32(want.data(), n, row));
    gpu_->BeginStep(step, *cache_g);
    gpu_->WriteKV(*cache_g, 0, arena_->Make(n, kv_row, k), arena_->Make(n, kv_row, v));
    const TensorView qg = arena_->Make(n, row, q);
    std::vector<float> got[2];
    for (const bool items : {false, true}) {
      cuda::SetFlashKivi2Items(items);
      EXPECT_EQ(cuda::ChooseFlashShape(n, num_seqs, KVQuant::kKivi2),
                items ? cuda::FlashShape::kWide : cuda::FlashShape::kNarrow);
      const TensorView out = arena_->Make(n, row);
      gpu_->PagedAttention(*cache_g, 0, layer, qg, out);
      got[items] = arena_->Read(out);
      EXPECT_LE(RelativeError(got[items], want), testing::kBf16AttentionTolerance)
          << (items ? "work items" : "narrow") << " against the CPU";
    }
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0)
        << "kivi2's work items give other bits than the narrow shape";
  }
}

TEST_F(CudaOpsTest, RefusesUnsupportedKVFormatsAndPoliciesByName) {
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = 4;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  shape.dtype = DType::kBF16;
  auto refused = [&](const KVStorageShape& s) -> std::string {
    try {
      gpu_->CreateKVCache(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      return e.what();
    }
    return "";
  };
  KVStorageShape mla_fp8 = shape;  // a quantized latent with a wide k_pe (MLA)
  mla_fp8.quant = KVQuant::kFp8E4M3;
  mla_fp8.quantize_v = false;
  EXPECT_NE(refused(mla_fp8).find("MLA"), std::string::npos);
  KVStorageShape kivi2_d68 = shape;  // kivi2 quantizes rows of a multiple of 8 values
  kivi2_d68.quant = KVQuant::kKivi2;
  kivi2_d68.head_dim = 68;
  const std::string d68 = refused(kivi2_d68);
  EXPECT_NE(d68.find("multiples of 8"), std::string::npos) << d68;
  KVStorageShape nvfp4_d96 = shape;  // nvfp4 head dims FlashAttention does not take
  nvfp4_d96.quant = KVQuant::kNvfp4;
  nvfp4_d96.head_dim = 96;
  EXPECT_NE(refused(nvfp4_d96).find("nvfp4"), std::string::npos);
  KVStorageShape int4_g12 = shape;  // int4 groups FlashAttention does not take
  int4_g12.quant = KVQuant::kInt4;
  int4_g12.group_size = 12;
  EXPECT_NE(refused(int4_g12).find("int4"), std::string::npos);
  KVStorageShape heavy = shape;  // the query-aware policy is CPU-only
  heavy.quant = KVQuant::kInt4;
  heavy.heavy_tokens = 2;
  EXPECT_NE(refused(heavy).find("--kv-heavy-tokens"), std::string::npos);
  EXPECT_NO_THROW(gpu_->CreateKVCache(shape));
  for (const KVQuant q : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4,
                          KVQuant::kKivi2}) {
    KVStorageShape s = shape;
    s.quant = q;
    s.wide_layers = {0};
    EXPECT_NO_THROW(gpu_->CreateKVCache(s)) << KVQuantName(q);
    s.sink_tokens = 4;  // the side pool's policies
    s.recent_tokens = 3;
    EXPECT_NO_THROW(gpu_->CreateKVCache(s)) << KVQuantName(q) << " with sink and recent tokens";
  }
}

}  // namespace
}  // namespace pagoda
