// CudaBackend's sampling: the step's logits stay on the device (LogitsBuffer) and every row is
// chosen there: plain greedy rows by arg max (kernels/cuda/argmax.h), drawn, penalized and
// logprob rows by kernels/cuda/sampling.h; only ids and logprob records come back. Host rows go
// to the CPU sampler, as do prompt logprobs.
#include "backend/cuda_backend_state.cuh"

#include <algorithm>
#include <cstring>
#include <span>

#include "backend/cpu_backend.h"
#include "kernels/cpu/sampler.h"
#include "kernels/cuda/argmax.h"
#include "kernels/cuda/sampling.h"

namespace pagoda {

// The logits as host rows: `logits` itself when it is host memory, else a copy.
static TensorView HostRows(const TensorView& logits, std::vector<float>* copy) {
  if (!IsDevicePointer(logits.data)) {
    TensorView v = logits;
    v.device = Device::kCpu;  // host memory, whatever the caller's view said
    return v;
  }
  copy->resize(static_cast<size_t>(logits.rows * logits.cols));
  if (!copy->empty()) {
    PAGODA_CUDA_CHECK(cudaMemcpy2D(copy->data(), logits.cols * sizeof(float), logits.data,
                                   logits.row_stride * sizeof(float), logits.cols * sizeof(float), logits.rows,
                                   cudaMemcpyDeviceToHost));
  }
  return TensorView::F32(copy->data(), logits.rows, logits.cols);
}

TensorView CudaBackend::LogitsBuffer(int64_t rows, int64_t vocab) {
  UseDevice(s_->device);
  State& s = *s_;
  // Graphs captured with the old buffer would write there: a larger one drops them.
  if (static_cast<size_t>(std::max<int64_t>(rows * vocab, 1)) * sizeof(float) > s.staging.bytes) s.graphs->Drop();
  return TensorView::F32(s.staging.Get<float>(rows * vocab), rows, vocab, Device::kCuda);
}

namespace {

// A request's sampler: the CPU's (its generator gives the drawn rows' uniforms, and it samples
// rows whose logits are host memory).
struct CudaSamplerState : SamplerState {
  explicit CudaSamplerState(const SamplingParams& p) : sampler(p) {}
  Sampler sampler;
};

Sampler& SamplerOf(const SampleRow& row) { return static_cast<CudaSamplerState*>(row.state)->sampler; }

bool Penalized(const SamplingParams& p) {
  return p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
}

// A row the arg-max kernel chooses: greedy with no penalty and no logprobs (the CPU sampler then
// takes the arg max of the raw logits and draws nothing from its generator).
bool ArgMaxRow(const SampleRow& row) {
  const SamplingParams& p = SamplerOf(row).params();
  return p.greedy() && !Penalized(p) && row.logprobs == nullptr;
}

size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

std::unique_ptr<SamplerState> CudaBackend::CreateSampler(const SamplingParams& params) {
  return std::make_unique<CudaSamplerState>(params);
}

// Device logits: the arg-max rows by ArgMaxRows over the whole buffer; every other row (drawn,
// penalized, logprobs) by cuda::SampleRows in one launch sequence, the drawn rows first. One
// upload (the rows' settings and penalized histories), one download (ids and results); each
// drawn row takes exactly one uniform from its request's generator, as the CPU sampler does.
void CudaBackend::Sample(const TensorView& logits, std::span<SampleRow> rows) {
  PAGODA_CHECK(logits.rows == static_cast<int64_t>(rows.size()))
      << "Sample: " << logits.rows << " rows of logits for " << rows.size() << " requests";
  for (const SampleRow& r : rows) {
    PAGODA_CHECK(dynamic_cast<const CudaSamplerState*>(r.state) != nullptr)
        << "Sample: a sampler state the CUDA backend did not make";
  }
  if (logits.device != Device::kCuda || !IsDevicePointer(logits.data)) {  // host rows: sampled in place
    std::vector<float> copy;
    const TensorView host = HostRows(logits, &copy);
    CheckF32(host, "sampled logits");
    for (size_t i = 0; i < rows.size(); ++i) {
      SampleRow& r = rows[i];
      r.token = SamplerOf(r).Sample(std::span<float>(host.f32() + i * host.row_stride, host.cols), r.prompt, r.output,
                                    r.logprobs);
    }
    return;
  }
  UseDevice(s_->device);
  State& s = *s_;
  const int64_t vocab = logits.cols;
  PAGODA_CHECK(vocab > 0 && vocab < (int64_t{1} << 30)) << "Sample: a vocabulary of " << vocab;

  // The rows SampleRows takes: drawn ones first, then greedy ones with penalties or logprobs.
  bool any_argmax = false;
  std::vector<size_t> order, greedy_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (ArgMaxRow(rows[i])) {
      any_argmax = true;
    } else if (SamplerOf(rows[i]).params().greedy()) {
      greedy_rows.push_back(i);
    } else {
      order.push_back(i);
    }
  }
  const int64_t num_drawn = static_cast<int64_t>(order.size());
  order.insert(order.end(), greedy_rows.begin(), greedy_rows.end());
  const int64_t n = static_cast<int64_t>(order.size());

  std::vector<cuda::SampleRowParams> params(static_cast<size_t>(n));
  std::vector<cuda::PenaltyEntry> entries;
  if (s.sample_seen.size() < static_cast<size_t>(vocab)) s.sample_seen.resize(static_cast<size_t>(vocab), -1);
  for (int64_t j = 0; j < n; ++j) {
    SampleRow& r = rows[order[j]];
    Sampler& sampler = SamplerOf(r);
    const SamplingParams& sp = sampler.params();
    cuda::SampleRowParams& p = params[j];
    p.logits_row = static_cast<int64_t>(order[j]);
    p.greedy = sp.greedy() ? 1 : 0;
    p.penalized = Penalized(sp) ? 1 : 0;
    p.logprobs = r.logprobs == nullptr ? -1 : static_cast<int32_t>(std::clamp<int64_t>(sp.logprobs, 0, cuda::kMaxTopLogprobs));
    p.top_k = sp.top_k;
    p.top_p = sp.top_p;
    p.min_p = sp.min_p;
    p.repetition_penalty = sp.repetition_penalty;
    p.presence_penalty = sp.presence_penalty;
    p.frequency_penalty = sp.frequency_penalty;
    if (!p.greedy) {
      p.inv_temperature = 1.0 / sp.temperature;
      p.uniform = sampler.NextUniform();  // the one draw of this sample, as the CPU's
    }
    if (p.penalized) {
      // The distinct tokens of prompt + output (the repetition penalty's), with their counts
      // in the output (frequency and presence), as the CPU sampler finds them.
      const size_t first = entries.size();
      auto add = [&](int32_t id) -> cuda::PenaltyEntry* {
        if (id < 0 || id >= vocab) return nullptr;
        int32_t& at = s.sample_seen[static_cast<size_t>(id)];
        if (at < 0) {
          at = static_cast<int32_t>(entries.size());
          entries.push_back(cuda::PenaltyEntry{static_cast<int32_t>(j), id, 0});
        }
        return &entries[static_cast<size_t>(at)];
      };
      for (int32_t id : r.prompt) add(id);
      for (int32_t id : r.output) {
        if (cuda::PenaltyEntry* e = add(id)) ++e->output_count;
      }
      for (size_t e = first; e < entries.size(); ++e) s.sample_seen[static_cast<size_t>(entries[e].token)] = -1;
    }
  }

  // One device buffer: [row settings | penalty entries | arg-max ids | results]; the first two
  // go up in one copy, the last two come back in one.
  const size_t params_at = 0;
  const size_t entries_at = Align(params.size() * sizeof(cuda::SampleRowParams));
  const size_t ids_at = entries_at + Align(entries.size() * sizeof(cuda::PenaltyEntry));
  const size_t results_at = ids_at + Align(rows.size() * sizeof(int32_t));
  const size_t end = results_at + static_cast<size_t>(n) * sizeof(cuda::SampleResult);
  char* io = s.sample_io.Get<char>(static_cast<int64_t>(end));
  s.sample_io.retired.clear();  // never read by a captured graph
  if (ids_at > 0) {
    std::vector<char> up(ids_at);
    std::memcpy(up.data() + params_at, params.data(), params.size() * sizeof(cuda::SampleRowParams));
    if (!entries.empty()) std::memcpy(up.data() + entries_at, entries.data(), entries.size() * sizeof(cuda::PenaltyEntry));
    PAGODA_CUDA_CHECK(cudaMemcpy(io, up.data(), up.size(), cudaMemcpyHostToDevice));
  }
  if (any_argmax) {
    // Arg max of every row (one launch); only the arg-max rows' ids are used.
    cuda::ArgMaxRows(logits.f32(), logits.row_stride, logits.rows, vocab, reinterpret_cast<int32_t*>(io + ids_at),
                     nullptr);
  }
  if (n > 0) {
    cuda::SampleRowsParams p;
    p.logits = logits.f32();
    p.row_stride = logits.row_stride;
    p.vocab = vocab;
    p.rows = reinterpret_cast<const cuda::SampleRowParams*>(io + params_at);
    p.num_rows = n;
    p.num_drawn = num_drawn;
    p.penalties = reinterpret_cast<const cuda::PenaltyEntry*>(io + entries_at);
    p.num_penalties = static_cast<int64_t>(entries.size());
    p.results = reinterpret_cast<cuda::SampleResult*>(io + results_at);
    p.scratch_bytes = cuda::SampleScratchBytes(n, vocab);
    p.scratch = s.sample_scratch.Get<char>(static_cast<int64_t>(p.scratch_bytes));
    s.sample_scratch.retired.clear();
    cuda::SampleRows(p, nullptr);
  }
  const size_t down_at = any_argmax ? ids_at : results_at;
  std::vector<char> down(end - down_at);
  PAGODA_CUDA_CHECK(cudaMemcpy(down.data(), io + down_at, down.size(), cudaMemcpyDeviceToHost));
  if (any_argmax) {
    const int32_t* ids = reinterpret_cast<const int32_t*>(down.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      if (ArgMaxRow(rows[i])) rows[i].token = ids[i];
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    cuda::SampleResult res;
    std::memcpy(&res, down.data() + (results_at - down_at) + static_cast<size_t>(j) * sizeof(res), sizeof(res));
    SampleRow& r = rows[order[j]];
    r.token = res.token;
    if (r.logprobs != nullptr) {
      TokenLogprobs& lp = *r.logprobs;
      lp.token = res.token;
      lp.logprob = res.logprob;
      lp.rank = res.rank;
      lp.top.clear();
      for (int32_t t = 0; t < res.num_top; ++t) lp.top.emplace_back(res.top_ids[t], res.top_logprobs[t]);
    }
  }
}

void CudaBackend::Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                           std::span<TokenLogprobs> out) {
  std::vector<float> copy;
  DefaultCpuBackend().Logprobs(HostRows(logits, &copy), tokens, k, out);
}

}  // namespace pagoda
