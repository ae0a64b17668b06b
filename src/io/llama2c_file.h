// llama2.c checkpoint reader (the "v0" format of Karpathy's run.c): a header of seven
// int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means the classifier is stored separately), then float32 tensors in a fixed
// order. Tensors point into the memory map.
#pragma once

#include <cstdint>
#include <string>

#include "io/mapped_file.h"

namespace pagoda {

struct Llama2cConfig {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t vocab_size = 0;
  int32_t seq_len = 0;
  bool shared_classifier = true;
};

class Llama2cFile {
 public:
  // Throws kCorruptData naming the file when the header is implausible or the file is
  // shorter than its header implies.
  explicit Llama2cFile(const std::string& path);

  const Llama2cConfig& config() const { return config_; }
  const std::string& path() const { return file_.path(); }

  // [vocab, dim]
  const float* token_embedding() const { return token_embedding_; }
  // Per layer, row-major [out, in] like run.c's matmul: [dim], [dim, dim] ...
  const float* rms_att(int layer) const;
  const float* wq(int layer) const;  // [n_heads*head, dim]
  const float* wk(int layer) const;  // [n_kv_heads*head, dim]
  const float* wv(int layer) const;  // [n_kv_heads*head, dim]
  const float* wo(int layer) const;  // [dim, n_heads*head]
  const float* rms_ffn(int layer) const;
  const float* w1(int layer) const;  // gate [hidden, dim]
  const float* w2(int layer) const;  // down [dim, hidden]
  const float* w3(int layer) const;  // up [hidden, dim]
  const float* rms_final() const { return rms_final_; }
  const float* classifier() const { return classifier_; }  // [vocab, dim]

 private:
  MappedFile file_;
  Llama2cConfig config_;
  const float* token_embedding_ = nullptr;
  const float* rms_att_ = nullptr;
  const float* wq_ = nullptr;
  const float* wk_ = nullptr;
  const float* wv_ = nullptr;
  const float* wo_ = nullptr;
  const float* rms_ffn_ = nullptr;
  const float* w1_ = nullptr;
  const float* w2_ = nullptr;
  const float* w3_ = nullptr;
  const float* rms_final_ = nullptr;
  const float* classifier_ = nullptr;
};

}  // namespace pagoda
