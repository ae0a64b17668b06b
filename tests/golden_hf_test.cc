// Hugging Face models (safetensors + config.json, and the qwen2 GGUFs made from them)
// against the transformers float64 goldens (fixtures/models/hf/*/golden.safetensors; the
// shared README says what each tensor holds). docs/models.md explains the tolerances.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backend/kv_storage.h"
#include "core/error.h"
#include "io/safetensors_file.h"
#include "model/gguf_loader.h"
#include "model/hf_loader.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

constexpr int64_t kBlockSize = 16;
// Safetensors vs GGUF of the same weights in another q/k layout (see below).
constexpr double kSameModelTolerance = 1e-4;

struct HfCase {
  std::string dir;    // under models/hf/
  std::string gguf;   // empty: the safetensors directory itself
  double logit_tol;   // absolute, on logits
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
    const auto logits =
        testing::AllLogits(*model, ids, DType::kF32, kBlockSize, 1 << 30, &rec.observer, &cache);
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

// Tolerances (absolute; docs/models.md has the reasoning):
// * BF16 weights (safetensors, and the bf16 GGUF): logits 1e-3 as the issue asks. pagoda
//   runs in float32 against a float64 reference on the same bf16 values, so the only error
//   is float32 rounding: measured worst 1.8e-6 on logits, 2.9e-6 on hidden states (which
//   reach |x| ~ 4), 3.4e-6 on K/V (2026-11-29). Hidden states and K/V get 1e-4: ~30x the
//   measurement, still far below any real bug (a wrong RoPE, bias or window moves them by
//   O(0.1-1)).
// * Q8_0 weights: rounding every weight to 8 bits (one fp16 scale per 32) is an error of the
//   file, not of pagoda. Measured worst against the bf16-valued float64 reference: top-8
//   logits 0.052, last-position logits 0.063, hidden 0.102, K/V 0.067. Tolerances: logits
//   0.1, hidden 0.2, K/V 0.15 (1.5-2x the measurement, like golden_gguf_test.cc); greedy is
//   not compared (its margins are below the quantization error).
INSTANTIATE_TEST_SUITE_P(
    Fixtures, HfGoldenTest,
    ::testing::Values(HfCase{"llama-gqa", "", 1e-3, 1e-4, 1e-4, true},
                      HfCase{"llama-mha", "", 1e-3, 1e-4, 1e-4, true},
                      HfCase{"llama-mqa", "", 1e-3, 1e-4, 1e-4, true},
                      HfCase{"qwen2-bias", "", 1e-3, 1e-4, 1e-4, true},
                      HfCase{"mistral-swa", "", 1e-3, 1e-4, 1e-4, true},
                      HfCase{"qwen2-bias", "qwen2-bias.bf16.gguf", 1e-3, 1e-4, 1e-4, true},
                      HfCase{"qwen2-bias", "qwen2-bias.q8_0.gguf", 0.1, 0.2, 0.15, false}),
    [](const auto& info) {
      std::string name =
          info.param.dir + (info.param.gguf.empty() ? "_safetensors" : "_" + info.param.gguf);
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return !std::isalnum(ch); }, '_');
      return name;
    });

// ---- the same model from safetensors and from GGUF -------------------------------------

double MaxLogitDiff(const std::string& dir, const std::string& gguf) {
  SafetensorsFile golden(testing::Fixture("models/hf/" + dir + "/golden.safetensors"));
  auto st = LoadHfModel(testing::Fixture("models/hf/" + dir));
  auto gg = LoadGgufModel(testing::Fixture("models/hf/" + dir + "/" + gguf));
  double worst = 0.0;
  for (const char* s : {"a", "b"}) {
    const auto ids = testing::GoldenIds(golden, s);
    worst = std::max(worst, MaxAbsDiff(testing::AllLogits(*st, ids), testing::AllLogits(*gg, ids)));
  }
  std::printf("[measured] %s: safetensors vs %s, all logits: %.3g\n", dir.c_str(), gguf.c_str(),
              worst);
  return worst;
}

TEST(HfAndGgufTest, Qwen2Bf16GivesTheSameLogits) {
  // The same bf16 weights in the same layout (GGUF qwen2 rotates halves too): the same
  // float operations in the same order.
  EXPECT_EQ(MaxLogitDiff("qwen2-bias", "qwen2-bias.bf16.gguf"), 0.0);
}

TEST(HfAndGgufTest, LlamaMqaF32GivesTheSameLogits) {
  // llama.cpp's converter permutes the rows of q/k so that GGUF llama rotates interleaved
  // pairs; the rotated values are the same, but the q.k dot products sum the head's
  // dimensions in another order, so logits agree to float32 rounding, not bit for bit.
  EXPECT_LE(MaxLogitDiff("llama-mqa", "llama-mqa.f32.gguf"), kSameModelTolerance);
}

// ---- loader behaviour: sharded files, dtypes, errors, EOS --------------------------------

namespace fs = std::filesystem;

// A scratch copy of a fixture directory's JSON files, removed at the end of the test.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("pagoda_hf_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& f) const { return (path_ / f).string(); }

 private:
  fs::path path_;
};

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct OutTensor {
  std::string name, dtype;  // "F32" | "F16" | "BF16"
  std::vector<int64_t> shape;
  std::string bytes;
};

// A minimal safetensors writer: header padded to 8 bytes, tensors in order.
void WriteSafetensors(const std::string& path, const std::vector<OutTensor>& tensors) {
  std::ostringstream h;
  h << "{";
  size_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const OutTensor& t = tensors[i];
    h << (i ? "," : "") << "\"" << t.name << "\":{\"dtype\":\"" << t.dtype << "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) h << (d ? "," : "") << t.shape[d];
    h << "],\"data_offsets\":[" << offset << "," << offset + t.bytes.size() << "]}";
    offset += t.bytes.size();
  }
  h << "}";
  std::string header = h.str();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header;
  for (const OutTensor& t : tensors) out << t.bytes;
}

// The tensor re-encoded as F32 or F16 (from its stored values), or kept as stored.
OutTensor Reencode(const SafetensorsFile& f, const SafetensorsTensor& t, const std::string& dtype) {
  OutTensor o{t.name, dtype, t.shape, {}};
  if (dtype == t.dtype_name) {
    o.bytes.assign(reinterpret_cast<const char*>(t.data), t.num_bytes);
    return o;
  }
  const auto v = f.ReadF32(t.name);
  if (dtype == "F32") {
    o.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  } else {
    for (float x : v) {
      const uint16_t h = F32ToF16(x);
      o.bytes.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return o;
}

// Splits llama-mha into two shards plus an index, the first shard's matrices in F32 and
// the second's in F16 (norms stay BF16), leaving out the tensors named in `drop`.
void WriteShardedCopy(const ScratchDir& dir, const std::vector<std::string>& drop = {}) {
  const std::string src = testing::Fixture("models/hf/llama-mha");
  for (const char* f : {"config.json", "generation_config.json"}) {
    WriteText(dir / f, ReadText(src + "/" + f));
  }
  SafetensorsFile st(src + "/model.safetensors");
  std::vector<OutTensor> shards[2];
  std::ostringstream index;
  index << "{\"metadata\":{},\"weight_map\":{";
  int i = 0;
  for (const auto& [name, t] : st.tensors()) {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    const int shard = i % 2;
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    const std::string dtype = t.shape.size() == 2 ? (shard == 0 ? "F32" : "F16") : t.dtype_name;
    shards[shard].push_back(Reencode(st, t, dtype));
    index << (i++ ? "," : "") << "\"" << name << "\":\"" << file << "\"";
  }
  index << "}}";
  WriteSafetensors(dir / "model-00001-of-00002.safetensors", shards[0]);
  WriteSafetensors(dir / "model-00002-of-00002.safetensors", shards[1]);
  WriteText(dir / "model.safetensors.index.json", index.str());
}

TEST(HfLoaderTest, ShardedF32AndF16WeightsMatchGolden) {
  ScratchDir dir("sharded");
  WriteShardedCopy(dir);
  auto model = LoadHfModel(dir.str());
  SafetensorsFile golden(testing::Fixture("models/hf/llama-mha/golden.safetensors"));
  // The bf16 values are exact in F32 and (at these magnitudes) in F16.
  for (const char* s : {"a", "b"}) testing::CheckSequence(*model, golden, s, 1e-3, false);
}

// Runs fn, expecting a pagoda::Error of `code` whose message contains every one of `parts`.
template <typename Fn>
void ExpectError(Fn fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(HfLoaderTest, MissingTensorNamesTheTensor) {
  ScratchDir dir("missing");
  WriteShardedCopy(dir, {"model.layers.1.mlp.up_proj.weight"});
  ExpectError([&] { LoadHfModel(dir.str()); }, ErrorCode::kNotFound,
              {"model.layers.1.mlp.up_proj.weight", "model.safetensors.index.json"});
}

TEST(HfLoaderTest, ShapeMismatchNamesFileAndTensor) {
  ScratchDir dir("shape");
  const std::string src = testing::Fixture("models/hf/llama-mha");
  std::string config = ReadText(src + "/config.json");
  const std::string key = "\"intermediate_size\": 688";
  ASSERT_NE(config.find(key), std::string::npos);
  config.replace(config.find(key), key.size(), "\"intermediate_size\": 512");
  WriteText(dir / "config.json", config);
  fs::create_symlink(src + "/model.safetensors", dir / "model.safetensors");
  ExpectError(
      [&] { LoadHfModel(dir.str()); }, ErrorCode::kCorruptData,
      {"model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[688, 256]", "[512, 256]"});
}

TEST(HfLoaderTest, NoWeightsIsNotFound) {
  ScratchDir dir("noweights");
  WriteText(dir / "config.json", ReadText(testing::Fixture("models/hf/llama-mha/config.json")));
  ExpectError([&] { LoadHfModel(dir.str()); }, ErrorCode::kNotFound, {"model.safetensors"});
}

TEST(HfLoaderTest, OtherArchitecturesAreUnsupported) {
  ScratchDir dir("gpt2");
  WriteText(dir / "config.json", R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 8})");
  ExpectError([&] { LoadHfModel(dir.str()); }, ErrorCode::kUnsupported,
              {"GPT2LMHeadModel", "config.json"});
}

TEST(HfLoaderTest, DeepseekDirectoriesGoToTheDeepseekLoader) {
  auto model = LoadHfModel(testing::Fixture("models/hf/deepseek-v2-mla"));
  EXPECT_EQ(model->spec().architecture, "deepseek_v2");
}

TEST(HfLoaderTest, EosIdsFromGenerationConfig) {
  auto model = LoadHfModel(testing::Fixture("models/hf/qwen2-bias"));
  EXPECT_EQ(model->eos_ids(), std::vector<int32_t>{2047});

  ScratchDir dir("eos");
  WriteText(dir / "generation_config.json", R"({"eos_token_id": [7, 2047, 7]})");
  EXPECT_EQ(ReadHfEosIds(dir.str()), (std::vector<int32_t>{7, 2047}));
  WriteText(dir / "generation_config.json", R"({"bos_token_id": 1})");
  WriteText(dir / "config.json", R"({"eos_token_id": 3})");
  EXPECT_EQ(ReadHfEosIds(dir.str()), std::vector<int32_t>{3});
  WriteText(dir / "generation_config.json", R"({"eos_token_id": "x"})");
  ExpectError([&] { ReadHfEosIds(dir.str()); }, ErrorCode::kCorruptData,
              {"generation_config.json", "eos_token_id"});
}

}  // namespace
}  // namespace pagoda
