#include "model/spec_loader.h"

#include <sys/stat.h>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/llama2c_file.h"
#include "io/mapped_file.h"
#include "model/presets.h"

namespace pagoda {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ModelSpec SpecFromGguf(const GgufFile& f) {
  const std::string arch = f.GetString("general.architecture");
  if (arch != "llama" && arch != "qwen2") {
    ThrowUnsupported(f.path() + ": architecture '" + arch +
                     "' is not supported (supported GGUF architectures: llama, qwen2)");
  }
  auto key = [&](const std::string& k) { return arch + "." + k; };
  ModelSpec s;
  s.name = f.GetString("general.name", f.path());
  s.architecture = arch;
  s.dim = f.GetInt(key("embedding_length"));
  s.num_layers = f.GetInt(key("block_count"));
  s.ffn_dim = f.GetInt(key("feed_forward_length"));
  s.num_heads = f.GetInt(key("attention.head_count"));
  s.num_kv_heads = f.GetInt(key("attention.head_count_kv"), s.num_heads);
  PAGODA_ENSURE(s.num_heads > 0, ErrorCode::kCorruptData, f.path() << ": " << key("attention.head_count") << " is 0");
  s.head_dim = f.GetInt(key("attention.key_length"), s.dim / s.num_heads);
  s.norm_eps = f.GetFloat(key("attention.layer_norm_rms_epsilon"), 1e-5);
  s.max_position = f.GetInt(key("context_length"), 2048);
  s.rope.theta = f.GetFloat(key("rope.freq_base"), 10000.0);
  s.rope.dim = f.GetInt(key("rope.dimension_count"), s.head_dim);
  s.rope.interleaved = arch == "llama";  // llama.cpp: LLAMA_ROPE_TYPE_NORM; qwen2: NEOX
  const std::string scaling = f.GetString(key("rope.scaling.type"), "none");
  if (scaling == "linear") {
    s.rope.scaling = RopeScaling::kLinear;
    s.rope.factor = f.GetFloat(key("rope.scaling.factor"), 1.0);
  } else if (scaling == "yarn") {
    s.rope.scaling = RopeScaling::kYarn;
    s.rope.factor = f.GetFloat(key("rope.scaling.factor"), 1.0);
    s.rope.original_max_position = f.GetInt(key("rope.scaling.original_context_length"), s.max_position);
  } else if (scaling != "none") {
    ThrowUnsupported(f.path() + ": rope scaling '" + scaling + "' is not supported");
  }
  if (const GgufTensor* ff = f.FindTensor("rope_freqs.weight")) {
    PAGODA_ENSURE(ff->num_elements == s.rope.dim / 2, ErrorCode::kCorruptData,
                  f.path() << ": rope_freqs.weight has " << ff->num_elements << " values, expected "
                           << s.rope.dim / 2);
    s.rope.freq_factors.resize(ff->num_elements);
    DequantizeRow(ff->dtype, ff->data, s.rope.freq_factors.data(), ff->num_elements);
  }
  const GgufTensor& embd = f.GetTensor("token_embd.weight");
  PAGODA_ENSURE(embd.shape.size() == 2, ErrorCode::kCorruptData, f.path() << ": token_embd.weight is not 2-D");
  s.vocab_size = f.GetInt(key("vocab_size"), embd.shape[1]);
  s.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  s.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
  s.weight_dtype = f.GetTensor("blk.0.attn_q.weight").dtype;
  s.Validate();
  return s;
}

ModelSpec LoadModelSpec(const std::string& arg) {
  if (arg.rfind("dummy:", 0) == 0) return GetPreset(arg.substr(6));
  if (HasPreset(arg)) return GetPreset(arg);
  if (IsDirectory(arg)) {
    const std::string config = arg + "/config.json";
    return SpecFromHfConfig(ReadTextFile(config), config);
  }
  if (EndsWith(arg, ".json")) return SpecFromHfConfig(ReadTextFile(arg), arg);
  if (!FileExists(arg)) ThrowNotFound(arg + ": no such file, directory or model preset");
  if (EndsWith(arg, ".gguf")) return SpecFromGguf(GgufFile(arg));
  const Llama2cFile f(arg);
  const Llama2cConfig& c = f.config();
  ModelSpec s;
  s.name = arg;
  s.architecture = "llama";
  s.dim = c.dim;
  s.num_layers = c.num_layers;
  s.num_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.dim / c.num_heads;
  s.ffn_dim = c.hidden_dim;
  s.vocab_size = c.vocab_size;
  s.max_position = c.seq_len;
  s.tied_embeddings = c.shared_classifier;
  s.rope.dim = s.head_dim;
  s.rope.interleaved = true;
  s.weight_dtype = DType::kF32;
  s.Validate();
  return s;
}

}  // namespace pagoda
