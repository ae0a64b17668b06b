// The CUDA backend's GEMMs, row ops, step ops and MoE against the CPU backend (the reference
// implementation, itself tested against the float64 references in kernels/ref) on fresh random
// inputs: odd lengths, f32/bf16/f16/q8_0 weights. Outputs are poisoned with NaN first, so an
// unwritten value fails. Attention: cuda_attention_test.cc; the KV cache: cuda_kv_cache_test.cc;
// sampling: cuda_sampling_test.cc.
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
#include "kernels/params/moe_params.h"
#include "tests/cuda/cuda_ops_fixture.h"

namespace pagoda {
namespace {

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

// Model-sized rows (the register-held float4 path, and the strided loop for what it does not
// take: a stride that breaks 16-byte alignment, a row too wide to hold) against a float64
// reference, out of place and in place.
TEST_F(CudaOpsTest, RmsNormWideRowsMatchFloat64) {
  struct Case {
    int64_t rows, cols, stride;
  };
  for (const Case c : {Case{1, 4096, 4096}, Case{7, 5120, 5120}, Case{3, 4096, 4100}, Case{3, 4096, 4098},
                       Case{2, 16384, 16384}, Case{2, 16388, 16388}, Case{5, 12, 12}}) {
    const auto x = RandomVector(c.rows * c.stride, 20 + c.cols), w = RandomVector(c.cols, 21);
    std::vector<float> want(c.rows * c.cols);
    for (int64_t r = 0; r < c.rows; ++r) {
      long double ss = 0.0L;
      for (int64_t i = 0; i < c.cols; ++i) ss += static_cast<long double>(x[r * c.stride + i]) * x[r * c.stride + i];
      const long double inv = 1.0L / std::sqrt(ss / c.cols + 1e-5L);
      for (int64_t i = 0; i < c.cols; ++i) want[r * c.cols + i] = static_cast<float>(x[r * c.stride + i] * inv * w[i]);
    }
    const PreparedVector wg = gpu_->PrepareVector(w);
    TensorView xg = arena_->Make(c.rows, c.stride, x);
    xg.cols = c.cols;
    const TensorView yg = arena_->Make(c.rows, c.cols);
    gpu_->RmsNorm(xg, wg.view, 1e-5, yg);
    EXPECT_LE(RelativeError(arena_->Read(yg), want), 1e-6) << c.rows << "x" << c.cols << " stride " << c.stride;
    gpu_->RmsNorm(xg, wg.view, 1e-5, xg);
    EXPECT_LE(RelativeError(arena_->Read(xg), want), 1e-6) << "in place " << c.rows << "x" << c.cols;
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

}  // namespace
}  // namespace pagoda
