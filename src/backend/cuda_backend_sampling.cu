// CudaBackend's sampling: the step's logits stay on the device (LogitsBuffer); greedy rows are
// chosen there (kernels/cuda/argmax.h), other rows and logprobs go to the CPU sampler.
#include "backend/cuda_backend_state.cuh"

#include <span>

#include "backend/cpu_backend.h"
#include "kernels/cuda/argmax.h"

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

// The CPU sampler's state and the parameters, which decide whether a row is greedy.
struct CudaSamplerState : SamplerState {
  std::unique_ptr<SamplerState> cpu;
  SamplingParams params;
};

// A row the device chooses: greedy with no penalty and no logprobs (the CPU sampler then takes
// the arg max of the raw logits and draws nothing from its generator).
bool DeviceGreedy(const SampleRow& row) {
  const SamplingParams& p = static_cast<const CudaSamplerState*>(row.state)->params;
  return p.greedy() && p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 &&
         row.logprobs == nullptr;
}

}  // namespace

std::unique_ptr<SamplerState> CudaBackend::CreateSampler(const SamplingParams& params) {
  auto state = std::make_unique<CudaSamplerState>();
  state->cpu = DefaultCpuBackend().CreateSampler(params);
  state->params = params;
  return state;
}

void CudaBackend::Sample(const TensorView& logits, std::span<SampleRow> rows) {
  PAGODA_CHECK(logits.rows == static_cast<int64_t>(rows.size()))
      << "Sample: " << logits.rows << " rows of logits for " << rows.size() << " requests";
  for (const SampleRow& r : rows) {
    PAGODA_CHECK(dynamic_cast<const CudaSamplerState*>(r.state) != nullptr)
        << "Sample: a sampler state the CUDA backend did not make";
  }
  // The CPU sampler's view of the rows: its own states.
  std::vector<SampleRow> cpu_rows(rows.begin(), rows.end());
  for (SampleRow& r : cpu_rows) r.state = static_cast<CudaSamplerState*>(r.state)->cpu.get();
  std::vector<float> copy;
  if (logits.device != Device::kCuda || !IsDevicePointer(logits.data)) {  // host rows: sampled in place
    DefaultCpuBackend().Sample(HostRows(logits, &copy), cpu_rows);
    for (size_t i = 0; i < rows.size(); ++i) rows[i].token = cpu_rows[i].token;
    return;
  }
  UseDevice(s_->device);
  std::vector<size_t> other;  // rows the CPU sampler takes, in order
  bool any_greedy = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (DeviceGreedy(rows[i])) {
      any_greedy = true;
    } else {
      other.push_back(i);
    }
  }
  if (any_greedy) {
    // Arg max of every row (one launch); only the greedy rows' ids are used.
    int32_t* ids = s_->sampled_ids.Get<int32_t>(logits.rows);
    cuda::ArgMaxRows(logits.f32(), logits.row_stride, logits.rows, logits.cols, ids, nullptr);
    std::vector<int32_t> host(static_cast<size_t>(logits.rows));
    PAGODA_CUDA_CHECK(cudaMemcpy(host.data(), ids, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < rows.size(); ++i) {
      if (DeviceGreedy(rows[i])) rows[i].token = host[i];
    }
  }
  if (other.empty()) return;
  // The other rows to the host in one copy (the span from the first to the last of them).
  const size_t lo = other.front();
  const TensorView span = HostRows(logits.RowRange(static_cast<int64_t>(lo), static_cast<int64_t>(other.back() - lo + 1)), &copy);
  for (size_t i : other) {
    DefaultCpuBackend().Sample(span.RowRange(static_cast<int64_t>(i - lo), 1), std::span<SampleRow>(&cpu_rows[i], 1));
    rows[i].token = cpu_rows[i].token;
  }
}

void CudaBackend::Logprobs(const TensorView& logits, std::span<const int32_t> tokens, int64_t k,
                           std::span<TokenLogprobs> out) {
  std::vector<float> copy;
  DefaultCpuBackend().Logprobs(HostRows(logits, &copy), tokens, k, out);
}

}  // namespace pagoda
