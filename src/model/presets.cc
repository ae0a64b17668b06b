#include "model/presets.h"

#include <functional>
#include <utility>

#include "core/error.h"

namespace pagoda {
namespace {

ModelSpec Llama(std::string name, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                int64_t ffn, int64_t vocab, bool tied, double theta, int64_t max_pos) {
  ModelSpec s;
  s.name = std::move(name);
  s.architecture = "llama";
  s.dim = dim;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = dim / heads;
  s.ffn_dim = ffn;
  s.vocab_size = vocab;
  s.tied_embeddings = tied;
  s.rope.theta = theta;
  s.rope.dim = s.head_dim;
  s.max_position = max_pos;
  return s;
}

ModelSpec Llama3Scaled(ModelSpec s) {
  s.rope.scaling = RopeScaling::kLlama3;
  s.rope.factor = 8.0;
  s.rope.low_freq_factor = 1.0;
  s.rope.high_freq_factor = 4.0;
  s.rope.original_max_position = 8192;
  return s;
}

const std::vector<std::pair<std::string, std::function<ModelSpec()>>>& Table() {
  static const std::vector<std::pair<std::string, std::function<ModelSpec()>>> table = {
      {"llama-tiny", [] { return Llama("llama-tiny", 256, 4, 4, 2, 704, 32000, true, 10000, 2048); }},
      {"llama-110m", [] { return Llama("llama-110m", 768, 12, 12, 12, 2048, 32000, true, 10000, 1024); }},
      {"llama-1b", [] { return Llama("llama-1b", 2048, 16, 32, 8, 5632, 32000, false, 10000, 2048); }},
      {"llama-3-8b", [] {
         return Llama3Scaled(Llama("llama-3-8b", 4096, 32, 32, 8, 14336, 128256, false, 500000, 131072));
       }},
  };
  return table;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, make] : Table()) names.push_back(name);
  return names;
}

bool HasPreset(std::string_view name) {
  for (const auto& [n, make] : Table()) {
    if (n == name) return true;
  }
  return false;
}

ModelSpec GetPreset(std::string_view name) {
  for (const auto& [n, make] : Table()) {
    if (n == name) return make();
  }
  std::string known;
  for (const auto& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
  ThrowInvalidArgument("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace pagoda
