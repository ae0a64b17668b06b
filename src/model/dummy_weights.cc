#include "model/dummy_weights.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "core/parallel.h"
#include "model/arch/llama.h"

namespace pagoda {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills a [rows, cols] matrix with uniform values in [-a, a], a = 1/sqrt(cols) (keeps
// activations in range), each row from its own stream so threads do not change bytes.
WeightMatrix RandomMatrix(DType dtype, int64_t rows, int64_t cols, uint64_t seed,
                          std::vector<std::shared_ptr<const void>>& keep_alive) {
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  auto buf = std::make_shared<std::vector<uint8_t>>(rows * row_bytes);
  const float a = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
  ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(cols);
    for (int64_t r = r0; r < r1; ++r) {
      uint64_t state = seed * 0x100000001b3ull + static_cast<uint64_t>(r);
      for (int64_t i = 0; i < cols; ++i) {
        const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
        row[i] = static_cast<float>((2.0 * u - 1.0) * a);
      }
      QuantizeRow(dtype, row.data(), buf->data() + r * row_bytes, cols);
    }
  });
  WeightMatrix m{dtype, buf->data(), rows, cols, row_bytes};
  keep_alive.push_back(buf);
  return m;
}

}  // namespace

std::unique_ptr<Model> MakeDummyModel(const ModelSpec& preset, const std::string& dtype_name, uint64_t seed,
                                      Backend& backend) {
  const DType dtype = ParseDType(dtype_name, "--dtype");
  ModelSpec spec = preset;
  spec.weight_dtype = dtype;
  spec.Validate();
  if (spec.is_mla() || spec.moe.num_experts > 0) {
    ThrowUnsupported("dummy:" + spec.name + ": MLA/MoE presets have no dummy weights yet");
  }
  PAGODA_LOG(kInfo) << "dummy weights: " << spec.name << " (" << DTypeName(dtype) << ", "
                    << spec.NumParameters() / 1e6 << "M parameters, seed " << seed << ")";
  const int64_t dim = spec.dim, hd = spec.head_dim, ffn = spec.ffn_dim;
  LlamaWeights w;
  uint64_t stream = seed * 1000003ull + 1;
  auto next = [&] { return stream++; };
  w.embedding = RandomMatrix(dtype, spec.vocab_size, dim, next(), w.keep_alive);
  w.output = spec.tied_embeddings ? w.embedding : RandomMatrix(dtype, spec.vocab_size, dim, next(), w.keep_alive);
  w.final_norm.assign(dim, 1.0f);
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    LlamaLayerWeights L;
    L.attn_norm.assign(dim, 1.0f);
    L.ffn_norm.assign(dim, 1.0f);
    L.wq = RandomMatrix(dtype, spec.num_heads * hd, dim, next(), w.keep_alive);
    L.wk = RandomMatrix(dtype, spec.num_kv_heads * hd, dim, next(), w.keep_alive);
    L.wv = RandomMatrix(dtype, spec.num_kv_heads * hd, dim, next(), w.keep_alive);
    L.wo = RandomMatrix(dtype, dim, spec.num_heads * hd, next(), w.keep_alive);
    L.w_gate = RandomMatrix(dtype, ffn, dim, next(), w.keep_alive);
    L.w_up = RandomMatrix(dtype, ffn, dim, next(), w.keep_alive);
    L.w_down = RandomMatrix(dtype, dim, ffn, next(), w.keep_alive);
    w.layers.push_back(std::move(L));
  }
  auto model = std::make_unique<LlamaModel>(std::move(spec), std::move(w), std::vector<int32_t>{});
  model->Prepare(backend);
  return model;
}

}  // namespace pagoda
