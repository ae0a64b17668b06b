// Hugging Face models (safetensors + config.json, and the qwen2 GGUFs made from them)
// against the transformers float64 goldens (fixtures/models/hf/*/golden.safetensors; the
// shared README says what each tensor holds). docs/models.md explains the tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "io/safetensors_file.h"
#include "model/gguf_loader.h"
#include "model/hf_loader.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

constexpr int64_t kBlockSize = 16;

struct HfCase {
  std::string dir;   // under models/hf/
  std::string gguf;  // empty: the safetensors directory itself
  double logit_tol;  // absolute, on logits
  double hidden_tol;  // absolute, on every hidden state (all layers, both sequences)
  double kv_tol;      // absolute, on the cached K and V after sequence a
  bool check_greedy;
};

std::unique_ptr<Model> Load(const HfCase& c) {
  const std::string dir = testing::Fixture("models/hf/" + c.dir);
  return c.gguf.empty() ? LoadHfModel(dir) : LoadGgufModel(dir + "/" + c.gguf);
}

// Hidden states entering each layer and the final normed output, [num_layers + 1][n * dim].
struct HiddenRecorder {
  std::vector<std::vector<float>> layers;
  ForwardObserver observer;
  HiddenRecorder() {
    observer.on_hidden = [this](int64_t layer, const float* x, int64_t n, int64_t dim) {
      if (static_cast<int64_t>(layers.size()) <= layer) layers.resize(layer + 1);
      layers[layer].assign(x, x + n * dim);
    };
  }
};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  return worst;
}

// hidden.s.L for every L, within tol; returns the worst error.
double CheckHidden(const HiddenRecorder& rec, const SafetensorsFile& golden, const std::string& s,
                   int64_t num_layers, double tol) {
  double worst = 0.0;
  EXPECT_EQ(static_cast<int64_t>(rec.layers.size()), num_layers + 1);
  for (int64_t l = 0; l <= num_layers && l < static_cast<int64_t>(rec.layers.size()); ++l) {
    const auto want = golden.ReadF32("hidden." + s + "." + std::to_string(l));
    EXPECT_EQ(want.size(), rec.layers[l].size()) << "layer " << l;
    if (want.size() != rec.layers[l].size()) continue;
    const double err = MaxAbsDiff(rec.layers[l], want);
    EXPECT_LE(err, tol) << "hidden." << s << "." << l;
    worst = std::max(worst, err);
  }
  return worst;
}

// k.a.L / v.a.L [kv_heads, T, head_dim] hold the last T positions of sequence a (T < n for
// a sliding window); we read the same positions back through the block table AllLogits used.
double CheckKv(const KVStorage& cache, const SafetensorsFile& golden, int64_t n, double tol) {
  const KVStorageShape& shape = cache.shape();
  const int64_t heads = shape.num_kv_heads, hd = shape.head_dim;
  const int64_t num_blocks = shape.num_blocks;
  double worst = 0.0;
  std::vector<float> slot(heads * hd);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    for (const bool value : {false, true}) {
      const std::string name = std::string(value ? "v" : "k") + ".a." + std::to_string(l);
      const SafetensorsTensor& t = golden.Get(name);
      EXPECT_EQ(t.shape.size(), 3u);
      if (t.shape.size() != 3 || t.shape[0] != heads || t.shape[2] != hd || t.shape[1] > n) {
        ADD_FAILURE() << name << " has an unexpected shape";
        continue;
      }
      const int64_t T = t.shape[1];
      const auto want = golden.ReadF32(name);
      double err = 0.0;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t pos = n - T + i;
        // AllLogits's block table: block j of the sequence is block num_blocks - 1 - j.
        const int64_t block = num_blocks - 1 - pos / kBlockSize;
        cache.ReadSlot(l, value, block * kBlockSize + pos % kBlockSize, slot.data());
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t d = 0; d < hd; ++d) {
            err = std::max(err, std::fabs(double{slot[h * hd + d]} - want[(h * T + i) * hd + d]));
          }
        }
      }
      EXPECT_LE(err, tol) << name;
      worst = std::max(worst, err);
    }
  }
  return worst;
}

class HfGoldenTest : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfGoldenTest, MatchesTransformersFloat64) {
  const HfCase& c = GetParam();
  auto model = Load(c);
  SafetensorsFile golden(testing::Fixture("models/hf/" + c.dir + "/golden.safetensors"));
  const ModelSpec& spec = model->spec();
  for (const std::string s : {"a", "b"}) {
    SCOPED_TRACE("sequence " + s);
    const auto ids = testing::GoldenIds(golden, s);
    const int64_t n = static_cast<int64_t>(ids.size());
    HiddenRecorder rec;
    KVStorage cache(model->KVShapeFor((n + kBlockSize - 1) / kBlockSize, kBlockSize, DType::kF32));
    const auto logits = testing::AllLogits(*model, ids, DType::kF32, kBlockSize, 1 << 30,
                                           &rec.observer, &cache);
    const auto e = testing::CheckGoldenLogits(logits, spec.vocab_size, golden, s, c.logit_tol);
    const double hidden = CheckHidden(rec, golden, s, spec.num_layers, c.hidden_tol);
    RecordProperty("max_hidden_error_" + s, std::to_string(hidden));
    std::printf("[measured] %s%s seq %s: top8 logits %.3g, last logits %.3g, hidden %.3g",
                c.dir.c_str(), c.gguf.empty() ? "" : (" " + c.gguf).c_str(), s.c_str(), e.topk,
                e.last, hidden);
    if (s == "a") {
      const double kv = CheckKv(cache, golden, n, c.kv_tol);
      RecordProperty("max_kv_error", std::to_string(kv));
      std::printf(", kv %.3g", kv);
    }
    std::printf("\n");
    if (c.check_greedy) testing::CheckGoldenGreedy(*model, golden, s);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, HfGoldenTest,
    ::testing::Values(HfCase{"llama-gqa", "", 1e-3, 1e-3, 1e-3, true},
                      HfCase{"llama-mha", "", 1e-3, 1e-3, 1e-3, true},
                      HfCase{"llama-mqa", "", 1e-3, 1e-3, 1e-3, true},
                      HfCase{"qwen2-bias", "", 1e-3, 1e-3, 1e-3, true},
                      HfCase{"mistral-swa", "", 1e-3, 1e-3, 1e-3, true},
                      HfCase{"qwen2-bias", "qwen2-bias.bf16.gguf", 1e-3, 1e-3, 1e-3, true},
                      HfCase{"qwen2-bias", "qwen2-bias.q8_0.gguf", 1.0, 1.0, 1.0, false}),
    [](const auto& info) {
      std::string name = info.param.dir + (info.param.gguf.empty() ? "_safetensors" : "_" + info.param.gguf);
      std::replace_if(name.begin(), name.end(), [](char ch) { return !std::isalnum(ch); }, '_');
      return name;
    });

}  // namespace
}  // namespace pagoda
