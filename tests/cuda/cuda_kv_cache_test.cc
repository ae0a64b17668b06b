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
#include "kv/kv_codec.h"
#include "tests/cuda/cuda_ops_fixture.h"

namespace pagoda {
namespace {

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
          int64_t first_diff = -1;
          for (int64_t i = 0; i < bytes && first_diff < 0; ++i) {
            if (gpu[i] != cpu[i]) first_diff = i;
          }
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
  KVStorageShape kivi2 = shape;
  kivi2.quant = KVQuant::kKivi2;
  EXPECT_NE(refused(kivi2).find("kivi2"), std::string::npos);
  KVStorageShape nvfp4_d96 = shape;  // nvfp4 head dims FlashAttention does not take
  nvfp4_d96.quant = KVQuant::kNvfp4;
  nvfp4_d96.head_dim = 96;
  EXPECT_NE(refused(nvfp4_d96).find("nvfp4"), std::string::npos);
  KVStorageShape int4_g12 = shape;  // int4 groups FlashAttention does not take
  int4_g12.quant = KVQuant::kInt4;
  int4_g12.group_size = 12;
  EXPECT_NE(refused(int4_g12).find("int4"), std::string::npos);
  KVStorageShape sink = shape;
  sink.sink_tokens = 4;
  EXPECT_NE(refused(sink).find("--kv-sink-tokens"), std::string::npos);
  KVStorageShape heavy = shape;
  heavy.heavy_tokens = 2;
  EXPECT_NE(refused(heavy).find("--kv-heavy-tokens"), std::string::npos);
  EXPECT_NO_THROW(gpu_->CreateKVCache(shape));
  for (const KVQuant q : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8, KVQuant::kInt4, KVQuant::kNvfp4}) {
    KVStorageShape s = shape;
    s.quant = q;
    s.wide_layers = {0};
    EXPECT_NO_THROW(gpu_->CreateKVCache(s)) << KVQuantName(q);
  }
}

}  // namespace
}  // namespace pagoda
