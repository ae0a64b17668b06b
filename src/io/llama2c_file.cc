#include "io/llama2c_file.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace pagoda {

Llama2cFile::Llama2cFile(const std::string& path) : file_(path) {
  int32_t h[7];
  if (file_.size() < sizeof(h)) {
    ThrowCorrupt(path + ": truncated llama2.c checkpoint (" + std::to_string(file_.size()) +
                 " bytes, the header alone is 28)");
  }
  std::memcpy(h, file_.data(), sizeof(h));
  Llama2cConfig& c = config_;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.num_layers = h[2];
  c.num_heads = h[3];
  c.num_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : (h[5] == INT32_MIN ? 0 : -h[5]);
  c.seq_len = h[6];
  auto bad = [&](const char* field, int64_t v) {
    ThrowCorrupt(path + ": llama2.c header field " + field + " = " + std::to_string(v) +
                 " is not plausible (is this a llama2.c v0 checkpoint?)");
  };
  if (c.dim <= 0 || c.dim > (1 << 16)) bad("dim", c.dim);
  if (c.hidden_dim <= 0 || c.hidden_dim > (1 << 18)) bad("hidden_dim", c.hidden_dim);
  if (c.num_layers <= 0 || c.num_layers > 1024) bad("n_layers", c.num_layers);
  if (c.num_heads <= 0 || c.dim % c.num_heads != 0) bad("n_heads", c.num_heads);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) bad("n_kv_heads", c.num_kv_heads);
  if (c.vocab_size <= 0 || c.vocab_size > (1 << 22)) bad("vocab_size", h[5]);
  if (c.seq_len <= 0 || c.seq_len > (1 << 24)) bad("seq_len", c.seq_len);
  if ((c.dim / c.num_heads) % 2 != 0) bad("head size", c.dim / c.num_heads);

  const int64_t dim = c.dim, hidden = c.hidden_dim, layers = c.num_layers;
  const int64_t head = dim / c.num_heads;
  const int64_t kv_dim = head * c.num_kv_heads;
  const int64_t vocab = c.vocab_size;
  int64_t need = vocab * dim + layers * (dim + dim * dim + 2 * dim * kv_dim + dim * dim + dim +
                                         3 * dim * hidden) +
                 dim + c.seq_len * head;  // freq_cis_real + freq_cis_imag (unused)
  if (!c.shared_classifier) need += vocab * dim;
  const int64_t have = (static_cast<int64_t>(file_.size()) - 28) / 4;
  if (have < need) {
    ThrowCorrupt(path + ": truncated llama2.c checkpoint: the header describes " +
                 std::to_string(28 + need * 4) + " bytes, the file has " +
                 std::to_string(file_.size()));
  }
  const float* p = reinterpret_cast<const float*>(file_.data() + 28);
  auto take = [&](int64_t n) {
    const float* r = p;
    p += n;
    return r;
  };
  token_embedding_ = take(vocab * dim);
  rms_att_ = take(layers * dim);
  wq_ = take(layers * dim * dim);
  wk_ = take(layers * dim * kv_dim);
  wv_ = take(layers * dim * kv_dim);
  wo_ = take(layers * dim * dim);
  rms_ffn_ = take(layers * dim);
  w1_ = take(layers * dim * hidden);
  w2_ = take(layers * hidden * dim);
  w3_ = take(layers * hidden * dim);
  rms_final_ = take(dim);
  take(c.seq_len * head);  // freq_cis_real, freq_cis_imag: RoPE is computed, not read
  classifier_ = c.shared_classifier ? token_embedding_ : take(vocab * dim);
}

namespace {
int64_t KvDim(const Llama2cConfig& c) { return static_cast<int64_t>(c.dim) / c.num_heads * c.num_kv_heads; }
}  // namespace

const float* Llama2cFile::rms_att(int l) const { return rms_att_ + int64_t{l} * config_.dim; }
const float* Llama2cFile::wq(int l) const { return wq_ + int64_t{l} * config_.dim * config_.dim; }
const float* Llama2cFile::wk(int l) const { return wk_ + int64_t{l} * config_.dim * KvDim(config_); }
const float* Llama2cFile::wv(int l) const { return wv_ + int64_t{l} * config_.dim * KvDim(config_); }
const float* Llama2cFile::wo(int l) const { return wo_ + int64_t{l} * config_.dim * config_.dim; }
const float* Llama2cFile::rms_ffn(int l) const { return rms_ffn_ + int64_t{l} * config_.dim; }
const float* Llama2cFile::w1(int l) const { return w1_ + int64_t{l} * config_.dim * config_.hidden_dim; }
const float* Llama2cFile::w2(int l) const { return w2_ + int64_t{l} * config_.dim * config_.hidden_dim; }
const float* Llama2cFile::w3(int l) const { return w3_ + int64_t{l} * config_.dim * config_.hidden_dim; }

}  // namespace pagoda
