// Every CUDA backend op against the CPU backend (the reference implementation, itself tested
// against the float64 references in kernels/ref) on fresh random inputs: odd lengths, block
// sizes 16 and 32, GQA ratios 1/4/8, head dims 64 and 128, MLA's shapes, f32/bf16/f16 weights
// and f32/bf16 KV caches. Outputs are poisoned with NaN first, so an unwritten value fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "backend/kv_storage.h"
#include "kv/kv_codec.h"
#include "core/dtype.h"
#include "kernels/params/sampling_params.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagoda {
namespace {

using testing::DeviceArena;
using testing::Gpu;
using testing::kF32Tolerance;
using testing::RandomVector;
using testing::RelativeError;

// A weight matrix in `dtype` made from f32 values (kept alive by `bytes`).
WeightMatrix MakeWeight(DType dtype, int64_t rows, int64_t cols, const std::vector<float>& values,
                        std::vector<uint8_t>* bytes) {
  WeightMatrix w;
  w.dtype = dtype;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = DTypeRowBytes(dtype, cols);
  bytes->resize(static_cast<size_t>(rows * w.row_bytes));
  for (int64_t r = 0; r < rows; ++r) QuantizeRow(dtype, values.data() + r * cols, bytes->data() + r * w.row_bytes, cols);
  w.data = bytes->data();
  return w;
}

// A step of sequences given as (tokens already cached, new tokens), with scrambled block ids.
struct StepCase {
  StepBuilder builder;
  std::vector<std::vector<int32_t>> tables;
  int64_t num_blocks = 0;
};

// Block tables for sequences of the given total lengths, block ids shuffled over the pool.
void MakeTables(const std::vector<int64_t>& lengths, int64_t block_size, uint32_t seed, StepCase* c) {
  int64_t total = 0;
  for (int64_t n : lengths) total += (n + block_size - 1) / block_size;
  c->num_blocks = total + 3;  // a few blocks nobody uses
  std::vector<int32_t> ids(c->num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  int64_t next = 0;
  c->tables.clear();
  for (int64_t n : lengths) {
    std::vector<int32_t> t;
    for (int64_t b = 0; b < (n + block_size - 1) / block_size; ++b) t.push_back(ids[next++]);
    c->tables.push_back(t);
  }
}

// One step: sequence s gets tokens [first[s], first[s] + count[s]) of a dummy token list.
const StepDescription& BuildStep(StepCase* c, int64_t block_size, const std::vector<int64_t>& first,
                                 const std::vector<int64_t>& count, int32_t vocab) {
  c->builder.Reset(block_size);
  for (size_t s = 0; s < first.size(); ++s) {
    std::vector<int32_t> tokens(first[s] + count[s]);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + s * 31) % vocab);
    const int64_t index = c->builder.AddSequence(tokens, first[s], count[s], c->tables[s]);
    c->builder.AddLogits(index + count[s] - 1);
  }
  return c->builder.Finish();
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu_ = Gpu();
    ASSERT_NE(gpu_, nullptr) << "no CUDA device (see above)";  // fatal: the body does not run
    arena_ = std::make_unique<DeviceArena>(*gpu_);
  }
  Backend& cpu_ = DefaultCpuBackend();
  CudaBackend* gpu_ = nullptr;
  std::unique_ptr<DeviceArena> arena_;
};

TEST_F(CudaOpsTest, MatMulMatchesCpuForEveryWeightDtypeAndEpilogue) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0}) {
    for (int64_t n : {1, 7, 33}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " n=" + std::to_string(n));
      const int64_t rows = 45, cols = 96;
      std::vector<uint8_t> bytes;
      const WeightMatrix wm = MakeWeight(dtype, rows, cols, RandomVector(rows * cols, 1 + n), &bytes);
      const Weight wc = cpu_.PrepareWeight(wm), wg = gpu_->PrepareWeight(wm);
      const auto x = RandomVector(n * cols, 2 + n), base = RandomVector(n * rows, 3 + n);
      const double tol = dtype == DType::kF32 ? kF32Tolerance : testing::kBf16GemmTolerance;
      // y = x W^T, on the device and into host memory (the logits path).
      std::vector<float> y_cpu(n * rows), y_host(n * rows, std::nanf(""));
      std::vector<float> xc = x;
      cpu_.MatMul(wc, TensorView::F32(xc.data(), n, cols), TensorView::F32(y_cpu.data(), n, rows));
      const TensorView xg = arena_->Make(n, cols, x), yg = arena_->Make(n, rows);
      gpu_->MatMul(wg, xg, yg);
      EXPECT_LE(RelativeError(arena_->Read(yg), y_cpu), tol);
      gpu_->MatMul(wg, xg, TensorView::F32(y_host.data(), n, rows, Device::kCuda));
      EXPECT_LE(RelativeError(y_host, y_cpu), tol);
      // kAddTo: out += x W^T.
      std::vector<float> out_cpu = base, scratch(n * rows);
      cpu_.MatMul(wc, TensorView::F32(xc.data(), n, cols), TensorView::F32(scratch.data(), n, rows),
                  {Epilogue::Kind::kAddTo, TensorView::F32(out_cpu.data(), n, rows)});
      const TensorView out_g = arena_->Make(n, rows, base), scratch_g = arena_->Make(n, rows);
      gpu_->MatMul(wg, xg, scratch_g, {Epilogue::Kind::kAddTo, out_g});
      EXPECT_LE(RelativeError(arena_->Read(out_g), out_cpu), tol);
    }
  }
}

TEST_F(CudaOpsTest, RowOpsMatchCpu) {
  const int64_t n = 13, dim = 75;
  const auto x = RandomVector(n * dim, 10), y = RandomVector(n * dim, 11), w = RandomVector(dim, 12);
  // RmsNorm (out of place and in place).
  {
    std::vector<float> xc = x, yc(n * dim);
    const PreparedVector wc = cpu_.PrepareVector(w), wg = gpu_->PrepareVector(w);
    cpu_.RmsNorm(TensorView::F32(xc.data(), n, dim), wc.view, 1e-5, TensorView::F32(yc.data(), n, dim));
    const TensorView xg = arena_->Make(n, dim, x), yg = arena_->Make(n, dim);
    gpu_->RmsNorm(xg, wg.view, 1e-5, yg);
    EXPECT_LE(RelativeError(arena_->Read(yg), yc), kF32Tolerance) << "RmsNorm";
    gpu_->RmsNorm(xg, wg.view, 1e-5, xg);
    EXPECT_LE(RelativeError(arena_->Read(xg), yc), kF32Tolerance) << "RmsNorm in place";
  }
  // AddBias, Add, SiluMul.
  {
    std::vector<float> xc = x, yc = y, gc(n * dim);
    const PreparedVector bc = cpu_.PrepareVector(w), bg = gpu_->PrepareVector(w);
    const TensorView xg = arena_->Make(n, dim, x), yg = arena_->Make(n, dim, y), og = arena_->Make(n, dim);
    cpu_.AddBias(bc.view, TensorView::F32(xc.data(), n, dim));
    gpu_->AddBias(bg.view, xg);
    EXPECT_LE(RelativeError(arena_->Read(xg), xc), kF32Tolerance) << "AddBias";
    cpu_.Add(TensorView::F32(yc.data(), n, dim), TensorView::F32(xc.data(), n, dim));
    gpu_->Add(yg, xg);
    EXPECT_LE(RelativeError(arena_->Read(xg), xc), kF32Tolerance) << "Add";
    cpu_.SiluMul(TensorView::F32(xc.data(), n, dim), TensorView::F32(yc.data(), n, dim),
                 TensorView::F32(gc.data(), n, dim));
    gpu_->SiluMul(xg, yg, og);
    EXPECT_LE(RelativeError(arena_->Read(og), gc), kF32Tolerance) << "SiluMul";
  }
  // Copy of a column range of a wider array.
  {
    std::vector<float> want(n * 20);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x.data() + r * dim + 30, 20, want.data() + r * 20);
    const TensorView xg = arena_->Make(n, dim, x), dg = arena_->Make(n, 20);
    gpu_->Copy(xg.ColRange(30, 20), dg);
    EXPECT_EQ(arena_->Read(dg), want) << "Copy";
  }
}

TEST_F(CudaOpsTest, StepOpsMatchCpu) {
  // Embedding, GatherLogitRows and RoPE (interleaved and halves, offset, head stride > dim).
  const int64_t block_size = 16, vocab = 101, dim = 40;
  StepCase c;
  MakeTables({23, 5, 40}, block_size, 5, &c);
  const StepDescription& step = BuildStep(&c, block_size, {0, 4, 31}, {23, 1, 9}, vocab);
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = c.num_blocks;
  shape.block_size = block_size;
  shape.num_kv_heads = 1;
  shape.head_dim = 8;
  auto cache_c = cpu_.CreateKVCache(shape);
  auto cache_g = gpu_->CreateKVCache(shape);
  cpu_.BeginStep(step, *cache_c);
  gpu_->BeginStep(step, *cache_g);
  const int64_t n = step.num_tokens();

  std::vector<uint8_t> bytes;
  const WeightMatrix table = MakeWeight(DType::kBF16, vocab, dim, RandomVector(vocab * dim, 20), &bytes);
  const Weight tc = cpu_.PrepareWeight(table, WeightLayout::kRowMajor);
  const Weight tg = gpu_->PrepareWeight(table, WeightLayout::kRowMajor);
  std::vector<float> emb(n * dim);
  cpu_.Embedding(tc, TensorView::F32(emb.data(), n, dim));
  const TensorView eg = arena_->Make(n, dim);
  gpu_->Embedding(tg, eg);
  EXPECT_EQ(arena_->Read(eg), emb) << "Embedding";

  std::vector<float> rows_c(step.num_logits() * dim);
  cpu_.GatherLogitRows(TensorView::F32(emb.data(), n, dim), TensorView::F32(rows_c.data(), step.num_logits(), dim));
  const TensorView rg = arena_->Make(step.num_logits(), dim);
  gpu_->GatherLogitRows(eg, rg);
  EXPECT_EQ(arena_->Read(rg), rows_c) << "GatherLogitRows";

  // Two RopeParams alive at once: within a step the CPU backend keys its cos/sin table by the
  // params' address (the model owns them for its lifetime), so a second object reusing the
  // first one's stack slot would be served the first one's table.
  std::vector<RopeParams> ropes(2);
  for (const bool interleaved : {true, false}) {
    RopeParams& rope = ropes[interleaved ? 0 : 1];
    rope.dim = 16;
    rope.interleaved = interleaved;
    rope.magnitude = interleaved ? 1.0 : 1.1;
    for (int64_t i = 0; i < rope.dim / 2; ++i) rope.inv_freq.push_back(std::pow(10000.0, -2.0 * i / rope.dim));
    const int64_t heads = 3, head_stride = 24, offset = 5;
    const auto x = RandomVector(n * heads * head_stride, 21 + interleaved);
    std::vector<float> xc = x;
    cpu_.Rope(rope, TensorView::F32(xc.data(), n, heads * head_stride), heads, head_stride, offset);
    const TensorView xg = arena_->Make(n, heads * head_stride, x);
    gpu_->Rope(rope, xg, heads, head_stride, offset);
    EXPECT_LE(RelativeError(arena_->Read(xg), xc), 1e-6) << "Rope interleaved=" << interleaved;
  }
}

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
  KVStorageShape shape;
  shape.num_layers = 2;
  shape.num_blocks = c.num_blocks + 1;  // one spare block for the CopyBlock check
  shape.block_size = bs;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = hd;
  shape.dtype = a.kv_dtype;
  shape.quant = a.quant;
  shape.group_size = a.group;
  auto cache_c = cpu_.CreateKVCache(shape);
  auto cache_g = gpu_->CreateKVCache(shape);
  AttentionLayer layer{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), a.window};
  // f32 and quantized caches: f32 arithmetic on the CPU's dequantized values (the same codes);
  // 16-bit caches: tensor cores (FlashAttention).
  const double tol =
      a.kv_dtype == DType::kF32 || a.quant != KVQuant::kNone ? kF32Tolerance : testing::kBf16AttentionTolerance;
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
                      // Quantized rows: the grouped kernel (4-byte rows, int8 groups of 8k)...
                      AttentionCase{16, 4, 128, DType::kBF16, 0, KVQuant::kFp8E4M3},
                      AttentionCase{32, 8, 64, DType::kBF16, 0, KVQuant::kFp8E5M2},
                      AttentionCase{16, 1, 64, DType::kBF16, 19, KVQuant::kInt8, 32},
                      AttentionCase{32, 3, 128, DType::kBF16, 0, KVQuant::kInt8, 16},
                      AttentionCase{16, 2, 128, DType::kBF16, 0, KVQuant::kFp8E4M3},
                      // ... and the plain kernel (G > 8; 130-byte int8 rows; groups of 12).
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

// The device quantizes K/V rows to the CPU codec's bytes exactly (kv/kv_codec.h): fp8 e4m3 and
// e5m2 with per-token scales and with a checkpoint scale (values beyond it saturate), int8 with
// groups of 32 and 12; rows of ordinary values, zeros, one huge outlier and tiny values; a
// skipped layer stays bf16.
TEST_F(CudaOpsTest, QuantizedKVWritesTheCpuBytes) {
  const int64_t bs = 16, kv_heads = 2, hd = 64, n = 2 * bs;
  struct Case {
    KVQuant quant;
    int64_t group;
    float tensor_scale;
  };
  for (const Case& q : {Case{KVQuant::kFp8E4M3, 32, 0.0f}, Case{KVQuant::kFp8E5M2, 32, 0.0f},
                        Case{KVQuant::kFp8E4M3, 32, 0.01f}, Case{KVQuant::kInt8, 32, 0.0f},
                        Case{KVQuant::kInt8, 12, 0.0f}}) {
    SCOPED_TRACE(std::string(KVQuantName(q.quant)) + " group " + std::to_string(q.group) + " scale " +
                 std::to_string(q.tensor_scale));
    KVStorageShape shape;
    shape.num_layers = 2;
    shape.num_blocks = 3;
    shape.block_size = bs;
    shape.num_kv_heads = kv_heads;
    shape.head_dim = hd;
    shape.dtype = DType::kBF16;
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
            around += " " + std::to_string(cpu[i]) + "/" + std::to_string(gpu[i]);
          }
          EXPECT_EQ(first_diff, -1) << "layer " << l << (value ? " V" : " K") << " block " << block << ": byte "
                                    << first_diff << " of " << bytes << " (row bytes " << KVRowBytes(f)
                                    << "); cpu/gpu bytes from " << std::max<int64_t>(0, first_diff - 4) << ":" << around;
        }
      }
    }
  }
}

// Long contexts: a token's keys are cut into splits merged by log-sum-exp. Prefills of 2600 and
// 5000 tokens (up to 16 splits; one layer with a 1500-key window) against the CPU; a prompt
// token recomputed alone gives the bits it got in the prefill; a decode of the first sequence
// alone and beside the second gives the same bits.
TEST_F(CudaOpsTest, LongContextSplitsMatchCpuAndDoNotDependOnTheBatch) {
  const int64_t kv_heads = 2, heads = 8, hd = 128, bs = 16;
  StepCase c;
  MakeTables({2601, 5001}, bs, 11, &c);
  KVStorageShape shape;
  shape.num_layers = 2;
  shape.num_blocks = c.num_blocks;
  shape.block_size = bs;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = hd;
  shape.dtype = DType::kBF16;
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
// equals the same tokens inside the full prefill. Against the CPU within the bf16 tolerance.
TEST_F(CudaOpsTest, FlashAttentionShapesGiveTheSameBits) {
  const int64_t kv_heads = 2, heads = 8, hd = 128, bs = 16, num_seqs = 150;
  std::vector<int64_t> lengths, prompt;
  for (int64_t i = 0; i < num_seqs; ++i) {
    prompt.push_back(1 + (i * 37) % 700);
    lengths.push_back(prompt.back() + 1);
  }
  StepCase c;
  MakeTables(lengths, bs, 13, &c);
  KVStorageShape shape;
  shape.num_layers = 1;
  shape.num_blocks = c.num_blocks;
  shape.block_size = bs;
  shape.num_kv_heads = kv_heads;
  shape.head_dim = hd;
  shape.dtype = DType::kBF16;
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

// Sampling from device logits (LogitsBuffer): greedy rows are chosen on the device and give the
// CPU sampler's tokens (ties to the lowest id, a row starting with NaN, NaN elsewhere skipped);
// drawn, penalized and logprob rows go through the CPU sampler and match it too.
TEST_F(CudaOpsTest, DeviceSamplingMatchesTheCpuSampler) {
  const int64_t vocab = 5000, n = 7;
  std::vector<float> logits = RandomVector(n * vocab, 77);
  logits[1 * vocab + 17] = logits[1 * vocab + 4000] = 50.0f;
  logits[2 * vocab + 0] = NAN;
  logits[3 * vocab + 9] = NAN;
  logits[3 * vocab + 10] = 40.0f;
  SamplingParams greedy;
  greedy.temperature = 0.0;
  SamplingParams drawn;
  drawn.temperature = 0.8;
  drawn.top_p = 0.9;
  drawn.seed = 5;
  SamplingParams penalized = greedy;
  penalized.repetition_penalty = 1.5;
  SamplingParams with_logprobs = greedy;
  with_logprobs.logprobs = 3;
  const std::vector<SamplingParams> params = {greedy, greedy, greedy, greedy, drawn, penalized, with_logprobs};
  // Row 5's history holds its arg max, which the penalty may push down.
  const int32_t top5 = static_cast<int32_t>(
      std::max_element(logits.begin() + 5 * vocab, logits.begin() + 6 * vocab) - (logits.begin() + 5 * vocab));
  const std::vector<int32_t> prompt = {top5, 3, 8};
  std::vector<std::unique_ptr<SamplerState>> gs, cs;
  std::vector<SampleRow> grow(n), crow(n);
  std::vector<TokenLogprobs> glp(n), clp(n);
  for (int64_t i = 0; i < n; ++i) {
    gs.push_back(gpu_->CreateSampler(params[i]));
    cs.push_back(cpu_.CreateSampler(params[i]));
    for (auto* r : {&grow[i], &crow[i]}) r->prompt = prompt;
    grow[i].state = gs.back().get();
    crow[i].state = cs.back().get();
    if (params[i].logprobs >= 0) {
      grow[i].logprobs = &glp[i];
      crow[i].logprobs = &clp[i];
    }
  }
  const TensorView buffer = gpu_->LogitsBuffer(n, vocab);
  ASSERT_NE(buffer.data, nullptr);
  gpu_->Upload(logits.data(), buffer);
  gpu_->Sample(buffer, grow);
  std::vector<float> host = logits;
  cpu_.Sample(TensorView::F32(host.data(), n, vocab), crow);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(grow[i].token, crow[i].token) << "row " << i;
  EXPECT_EQ(grow[1].token, 17);
  EXPECT_EQ(grow[2].token, 0);
  EXPECT_EQ(grow[3].token, 10);
  EXPECT_EQ(glp[6].logprob, clp[6].logprob);
  EXPECT_EQ(glp[6].top, clp[6].top);
  // The device rows were only read: sampling again gives the same greedy choices.
  gpu_->Sample(buffer, grow);
  EXPECT_EQ(grow[3].token, 10);
}

TEST_F(CudaOpsTest, MlaAttentionMatchesCpu) {
  for (const int64_t bs : {16, 32}) {
    for (const int64_t rank : {64, 512}) {
      for (const DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE("bs " + std::to_string(bs) + " rank " + std::to_string(rank) + " " + std::string(DTypeName(dtype)));
        const int64_t rope = 64, heads = 5;
        StepCase c;
        MakeTables({37, 3}, bs, 9, &c);
        KVStorageShape shape;
        shape.num_layers = 1;
        shape.num_blocks = c.num_blocks;
        shape.block_size = bs;
        shape.num_kv_heads = 1;
        shape.head_dim = rank;
        shape.head_dim_v = rope;
        shape.dtype = dtype;
        auto cache_c = cpu_.CreateKVCache(shape);
        auto cache_g = gpu_->CreateKVCache(shape);
        const StepDescription& step = BuildStep(&c, bs, {0, 0}, {37, 3}, 100);
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
        EXPECT_LE(RelativeError(arena_->Read(og), out), kF32Tolerance);
      }
    }
  }
}

TEST_F(CudaOpsTest, MoeMatchesCpu) {
  const int64_t dim = 64, ffn = 48, ne = 8, n = 11;
  for (const bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "sigmoid noaux_tc" : "softmax greedy");
    MoeSpec spec;
    spec.num_experts = ne;
    spec.num_experts_per_tok = 3;
    spec.num_shared_experts = 1;
    spec.expert_ffn_dim = ffn;
    spec.norm_topk_prob = v3;
    spec.routed_scaling_factor = v3 ? 2.5 : 1.0;
    spec.scoring_func = v3 ? "sigmoid" : "softmax";
    spec.topk_method = v3 ? "noaux_tc" : "greedy";
    spec.n_group = v3 ? 4 : 1;
    spec.topk_group = v3 ? 2 : 1;
    std::vector<std::vector<uint8_t>> bytes;
    uint32_t seed = 50;
    auto matrix = [&](int64_t rows, int64_t cols) {
      bytes.emplace_back();
      return MakeWeight(DType::kBF16, rows, cols, RandomVector(rows * cols, seed++, -0.3f, 0.3f), &bytes.back());
    };
    const WeightMatrix router = matrix(ne, dim);
    std::vector<WeightMatrix> gate, up, down;
    for (int64_t e = 0; e < ne; ++e) {
      gate.push_back(matrix(ffn, dim));
      up.push_back(matrix(ffn, dim));
      down.push_back(matrix(dim, ffn));
    }
    const WeightMatrix sg = matrix(ffn, dim), su = matrix(ffn, dim), sd = matrix(dim, ffn);
    const auto bias = RandomVector(ne, 77, -0.1f, 0.1f);
    auto prepare = [&](Backend& b) {
      MoeLayer m;
      m.router = b.PrepareWeight(router);
      if (v3) m.score_bias = b.PrepareVector(bias);
      for (int64_t e = 0; e < ne; ++e) {
        m.gate.push_back(b.PrepareWeight(gate[e]));
        m.up.push_back(b.PrepareWeight(up[e]));
        m.down.push_back(b.PrepareWeight(down[e]));
      }
      m.shared_gate = b.PrepareWeight(sg);
      m.shared_up = b.PrepareWeight(su);
      m.shared_down = b.PrepareWeight(sd);
      b.PrepareMoe(&m);
      return m;
    };
    const MoeLayer mc = prepare(cpu_), mg = prepare(*gpu_);
    auto x = RandomVector(n * dim, 60);
    std::vector<float> y(n * dim);
    cpu_.Moe(spec, mc, TensorView::F32(x.data(), n, dim), TensorView::F32(y.data(), n, dim));
    const TensorView yg = arena_->Make(n, dim);
    gpu_->Moe(spec, mg, arena_->Make(n, dim, x), yg);
    // The router runs in f32 on both sides (the same experts); the experts' GEMMs in bf16.
    EXPECT_LE(RelativeError(arena_->Read(yg), y), testing::kBf16GemmTolerance);
  }
}

// WriteAttentionInputs' one kernel against the separate ops it replaces (Backend's default:
// Copy, AddBias, Rope, WriteKV) on the GPU: the same query bits and the same cache bytes, for
// plain and quantized caches, q|k|v as column ranges of a stacked product, with and without
// biases, RoPE interleaved over the whole head or in halves over part of it (YaRN magnitude).
TEST_F(CudaOpsTest, FusedAttentionInputsGiveTheSeparateOpsBits) {
  const int64_t bs = 16, heads = 8, kv_heads = 2, hd = 64, qw = heads * hd, kw = kv_heads * hd;
  StepCase c;
  MakeTables({21, 40}, bs, 9, &c);
  const StepDescription& step = BuildStep(&c, bs, {0, 30}, {21, 10}, 100);
  const int64_t n = step.num_tokens();
  struct Case {
    DType dtype;
    KVQuant quant;
    bool bias, interleaved;
  };
  for (const Case& k : {Case{DType::kF32, KVQuant::kNone, true, true}, Case{DType::kBF16, KVQuant::kNone, false, false},
                        Case{DType::kF16, KVQuant::kNone, true, false}, Case{DType::kBF16, KVQuant::kFp8E4M3, true, true},
                        Case{DType::kBF16, KVQuant::kInt8, false, false}}) {
    SCOPED_TRACE(std::string(DTypeName(k.dtype)) + " " + KVQuantName(k.quant) + (k.bias ? " bias" : "") +
                 (k.interleaved ? " interleaved" : " halves"));
    KVStorageShape shape;
    shape.num_layers = 1;
    shape.num_blocks = c.num_blocks;
    shape.block_size = bs;
    shape.num_kv_heads = kv_heads;
    shape.head_dim = hd;
    shape.dtype = k.dtype;
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
    // The slots the step wrote (the rest of the blocks was never written).
    for (const bool value : {false, true}) {
      for (int64_t t = 0; t < n; ++t) {
        const int64_t slot = step.slot_mapping[t];
        const auto a = gpu_->ReadKVBlock(*separate, 0, value, static_cast<int32_t>(slot / bs));
        const auto b = gpu_->ReadKVBlock(*fused, 0, value, static_cast<int32_t>(slot / bs));
        const size_t per_token = a.size() / bs, at = (slot % bs) * per_token;  // [block_size] token rows
        EXPECT_EQ(std::memcmp(a.data() + at, b.data() + at, per_token), 0) << (value ? "V" : "K") << " of token " << t;
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
  KVStorageShape int4 = shape;
  int4.quant = KVQuant::kInt4;
  EXPECT_NE(refused(int4).find("int4"), std::string::npos);
  KVStorageShape sink = shape;
  sink.sink_tokens = 4;
  EXPECT_NE(refused(sink).find("--kv-sink-tokens"), std::string::npos);
  KVStorageShape heavy = shape;
  heavy.heavy_tokens = 2;
  EXPECT_NE(refused(heavy).find("--kv-heavy-tokens"), std::string::npos);
  EXPECT_NO_THROW(gpu_->CreateKVCache(shape));
  for (const KVQuant q : {KVQuant::kFp8E4M3, KVQuant::kFp8E5M2, KVQuant::kInt8}) {
    KVStorageShape s = shape;
    s.quant = q;
    s.wide_layers = {0};
    EXPECT_NO_THROW(gpu_->CreateKVCache(s)) << KVQuantName(q);
  }
}

}  // namespace
}  // namespace pagoda
