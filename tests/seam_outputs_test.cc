// The CPU outputs are bit-identical across the device seam (Model -> Backend -> kernels):
// greedy ids and the bits of their logprobs (and top-5 logprobs) on every golden fixture,
// stories260K, dummy models of every weight dtype, every KV format, and the engine's
// continuous-batching runs (concurrent requests, prefix hits, chunked prefill, preemption),
// compared with digests recorded by the code before the seam (tests/data/seam_digests.json).
//
// The bits depend on the CPU kernels' level (AVX-512, AVX2, portable: the float GEMMs sum in
// different lane orders), so the digests are kept per level (MatMulIsaName()); each level was
// recorded on an AVX-512 machine with PAGODA_MATMUL_ISA / PAGODA_ATTENTION_ISA capped to it.
//
// PAGODA_RECORD_SEAM_DIGESTS=1 rewrites the file instead of comparing (only when a change is
// meant to change the CPU's bits; say so in the commit).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generator.h"
#include "kernels/cpu/matmul.h"
#include "kv/kv_cache_config.h"
#include "model/model.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

constexpr const char* kDigestFile = PAGODA_SOURCE_DIR "/tests/data/seam_digests.json";

// FNV-1a over the bytes of ids and logprob doubles: any changed bit changes the digest.
class Digest {
 public:
  void Add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 1099511628211ull;
  }
  void Add(int32_t v) { Add(&v, sizeof v); }
  void Add(double v) { Add(&v, sizeof v); }
  void Add(const TokenLogprobs& lp) {
    Add(lp.token);
    Add(lp.logprob);
    for (const auto& [id, v] : lp.top) {
      Add(id);
      Add(v);
    }
  }
  std::string Hex() const {
    std::ostringstream s;
    s << std::hex << h_;
    return s.str();
  }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

bool Recording() {
  const char* v = std::getenv("PAGODA_RECORD_SEAM_DIGESTS");
  return v != nullptr && std::string(v) == "1";
}

nlohmann::json& Digests() {
  static nlohmann::json j = [] {
    std::ifstream in(kDigestFile);
    if (!in) return nlohmann::json::object();
    return nlohmann::json::parse(in);
  }();
  return j;
}

void Check(const std::string& case_name, const Digest& d) {
  const std::string name = std::string(MatMulIsaName()) + "/" + case_name;
  if (Recording()) {
    Digests()[name] = d.Hex();
    std::ofstream(kDigestFile) << Digests().dump(2) << "\n";
    return;
  }
  ASSERT_TRUE(Digests().contains(name)) << name << " has no recorded digest in " << kDigestFile;
  EXPECT_EQ(Digests()[name].get<std::string>(), d.Hex()) << name << ": the CPU's bits changed";
}

std::vector<int32_t> Prompt(int64_t vocab, int64_t n) {
  std::vector<int32_t> p{1};
  for (int64_t i = 1; i < n; ++i) p.push_back(static_cast<int32_t>((i * 7919 + 13) % (vocab - 3) + 3));
  return p;
}

// Greedy decoding with top-5 logprobs through the Generator (prefill in chunks of 7).
Digest GreedyDigest(Model& model, std::optional<KVCacheDType> format, int64_t max_tokens = 12,
                    KVQuantOptions quant = {}) {
  GeneratorOptions o;
  o.kv_dtype = DType::kF32;
  o.kv_format = format;
  o.kv_quant = quant;
  o.max_model_len = 256;
  o.prefill_chunk = 7;
  Generator g(model, o);
  GenerateRequest r;
  r.prompt = Prompt(model.spec().vocab_size, 23);
  r.sampling.temperature = 0;
  r.sampling.logprobs = 5;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  const GenerateResult res = g.Generate(r);
  Digest d;
  for (int32_t id : res.output) d.Add(id);
  for (const TokenLogprobs& lp : res.logprobs) d.Add(lp);
  return d;
}

struct ModelCase {
  std::string name;
  std::string path;  // relative to the fixtures, or dummy:...
  std::string dtype = "bf16";
};

std::vector<ModelCase> Models() {
  std::vector<ModelCase> m;
  for (const char* hf : {"llama-gqa", "llama-mha", "llama-mqa", "mistral-swa", "qwen2-bias",
                         "deepseek-v2-mla", "deepseek-v3-moe"}) {
    m.push_back({hf, std::string("models/hf/") + hf});
  }
  m.push_back({"llama-gqa.q8_0.gguf", "models/hf/llama-gqa/llama-gqa.q8_0.gguf"});
  m.push_back({"llama-mqa.f32.gguf", "models/hf/llama-mqa/llama-mqa.f32.gguf"});
  m.push_back({"qwen2-bias.bf16.gguf", "models/hf/qwen2-bias/qwen2-bias.bf16.gguf"});
  m.push_back({"qwen2-bias.q8_0.gguf", "models/hf/qwen2-bias/qwen2-bias.q8_0.gguf"});
  m.push_back({"stories260K.bin", "models/stories260K/stories260K.bin"});
  m.push_back({"stories260K.gguf", "models/stories260K/stories260K.gguf"});
  for (const char* dt : {"f32", "bf16", "f16", "q8_0", "q4_0"}) {
    m.push_back({std::string("dummy-llama-tiny-") + dt, "dummy:llama-tiny", dt});
  }
  return m;
}

std::unique_ptr<Model> Load(const ModelCase& c) {
  LoadOptions o;
  o.dtype = c.dtype;
  const bool dummy = c.path.rfind("dummy:", 0) == 0;
  return LoadModel(dummy ? c.path : testing::Fixture(c.path), o);
}

TEST(SeamOutputsTest, GreedyIdsAndLogprobsOfEveryModelAreTheRecordedBits) {
  for (const ModelCase& c : Models()) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Model> model = Load(c);
    Check(c.name + "/f32-kv", GreedyDigest(*model, std::nullopt));
    Check(c.name + "/bf16-kv", GreedyDigest(*model, KVCacheDType::kBF16));
  }
}

TEST(SeamOutputsTest, EveryKVFormatGivesTheRecordedBits) {
  std::unique_ptr<Model> llama = LoadModel(testing::Fixture("models/hf/llama-gqa"));
  for (KVCacheDType t : {KVCacheDType::kF16, KVCacheDType::kFp8E4M3, KVCacheDType::kFp8E5M2,
                         KVCacheDType::kInt8, KVCacheDType::kInt4, KVCacheDType::kNvfp4,
                         KVCacheDType::kKivi2}) {
    const std::string name = "llama-gqa/" + std::string(KVCacheDTypeName(t));
    SCOPED_TRACE(name);
    Check(name, GreedyDigest(*llama, t, 24));
  }
  KVQuantOptions policy;
  policy.skip_layers = {0};
  policy.sink_tokens = 4;
  policy.recent_tokens = 8;
  policy.heavy_tokens = 2;
  Check("llama-gqa/int4-policies", GreedyDigest(*llama, KVCacheDType::kInt4, 24, policy));
  std::unique_ptr<Model> mla = LoadModel(testing::Fixture("models/hf/deepseek-v2-mla"));
  for (KVCacheDType t : {KVCacheDType::kFp8E4M3, KVCacheDType::kInt8, KVCacheDType::kInt4,
                         KVCacheDType::kNvfp4}) {
    const std::string name = "deepseek-v2-mla/" + std::string(KVCacheDTypeName(t));
    SCOPED_TRACE(name);
    Check(name, GreedyDigest(*mla, t, 24));
  }
}

// The engine's continuous batching: many requests with a shared prefix, prefix caching,
// a token budget that chunks prefills, and a cache small enough to preempt.
Digest EngineDigest(Model& model, int64_t num_blocks, int64_t budget, bool prefix_caching,
                    KVCacheDType dtype) {
  EngineConfig c;
  c.kv.num_blocks = num_blocks;
  c.kv.block_size = 16;
  c.kv.dtype = dtype;
  c.scheduler.max_model_len = 256;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = 64;
  c.enable_prefix_caching = prefix_caching;
  Engine e(model, nullptr, c);
  const int64_t vocab = model.spec().vocab_size;
  for (int i = 0; i < 12; ++i) {
    RequestSpec s;
    s.prompt = Prompt(vocab, 40);
    for (int j = 0; j < 5 + i; ++j) s.prompt.push_back(static_cast<int32_t>((i * 31 + j * 17) % (vocab - 3) + 3));
    s.sampling.temperature = i % 3 == 0 ? 0.0 : 0.8;
    s.sampling.seed = 1000 + i;
    s.sampling.logprobs = 3;
    s.max_tokens = 10 + i % 4;
    s.ignore_eos = true;
    e.AddRequest(s);
  }
  std::map<int64_t, std::vector<RequestOutput>> outs;
  int guard = 0;
  while (e.HasUnfinished() && ++guard < 100000) {
    for (RequestOutput& o : e.Step()) outs[o.request_id].push_back(std::move(o));
  }
  Digest d;
  for (const auto& [id, list] : outs) {
    for (const RequestOutput& o : list) {
      for (int32_t t : o.new_token_ids) d.Add(t);
      for (const TokenLogprobs& lp : o.new_logprobs) d.Add(lp);
    }
  }
  return d;
}

TEST(SeamOutputsTest, EngineRunsGiveTheRecordedBits) {
  for (const char* path : {"models/stories260K/stories260K.bin", "models/hf/deepseek-v3-moe",
                           "models/hf/qwen2-bias"}) {
    SCOPED_TRACE(path);
    std::unique_ptr<Model> model = LoadModel(testing::Fixture(path));
    const std::string n(path);
    Check(n + "/engine-prefix-chunked", EngineDigest(*model, 256, 64, true, KVCacheDType::kF32));
    Check(n + "/engine-no-prefix", EngineDigest(*model, 256, 2048, false, KVCacheDType::kF32));
    Check(n + "/engine-preempt", EngineDigest(*model, 12, 2048, true, KVCacheDType::kBF16));
    Check(n + "/engine-fp8", EngineDigest(*model, 256, 96, true, KVCacheDType::kFp8E4M3));
  }
}

}  // namespace
}  // namespace pagoda
