#include "backend/cuda_step_graphs.cuh"

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"

namespace pagoda {

StepGraphs::StepGraphs() {
  PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PAGODA_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
}

StepGraphs::~StepGraphs() {
  for (Graph& g : graphs_) {
    if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
  }
  if (uploaded_ != nullptr) (void)cudaEventDestroy(uploaded_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void StepGraphs::Enable(bool on) {
  enabled_ = on;
  if (!on) Drop();
}

void StepGraphs::Drop() {
  PAGODA_CHECK(phase_ == Phase::kEager) << "CudaBackend: memory allocated in the middle of a graphed step";
  // Sizes seen once have no graph yet: destroying a null one would leave cudaErrorInvalidValue
  // as the runtime's last error, reported by the next launch's check.
  for (Graph& g : graphs_) {
    if (g.exec != nullptr) PAGODA_CUDA_CHECK(cudaGraphExecDestroy(g.exec));
  }
  graphs_.clear();
  current_ = nullptr;
}

void StepGraphs::AbandonStaleCapture() {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PAGODA_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    cudaGraph_t orphan = nullptr;
    (void)cudaStreamEndCapture(stream_, &orphan);
    if (orphan != nullptr) (void)cudaGraphDestroy(orphan);
    (void)cudaGetLastError();
    phase_ = Phase::kEager;
    Drop();
    PAGODA_LOG(kWarning) << "CudaBackend: a step ended while being captured; its graphs were dropped";
  }
  phase_ = Phase::kEager;  // a replay that threw before its logits ends here too
}

cudaStream_t StepGraphs::Begin(int64_t batch, const KVCache* cache, bool graphable, int64_t shape) {
  phase_ = Phase::kEager;
  current_ = nullptr;
  if (!enabled_ || !graphable) return nullptr;
  for (Graph& g : graphs_) {
    if (g.batch == batch && g.cache == cache && g.shape == shape) current_ = &g;
  }
  if (current_ == nullptr) {  // first step of this size: eager, sizing the scratch
    graphs_.push_back({batch, cache, shape, nullptr});
    return nullptr;
  }
  // The uploads went through the legacy stream; the graph stream waits for them.
  PAGODA_CUDA_CHECK(cudaEventRecord(uploaded_, nullptr));
  PAGODA_CUDA_CHECK(cudaStreamWaitEvent(stream_, uploaded_, 0));
  if (current_->exec != nullptr) {
    phase_ = Phase::kReplaying;
    return nullptr;
  }
  phase_ = Phase::kCapturing;
  PAGODA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  return stream_;
}

void StepGraphs::Finish(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) {
  if (phase_ == Phase::kEager) {
    if (dst != nullptr) {
      PAGODA_CUDA_CHECK(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToHost));
    }
    return;
  }
  if (phase_ == Phase::kCapturing) {
    cudaGraph_t graph = nullptr;
    PAGODA_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    const cudaError_t e = cudaGraphInstantiate(&current_->exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    PAGODA_CUDA_CHECK(e);
  }
  PAGODA_CUDA_CHECK(cudaGraphLaunch(current_->exec, stream_));
  if (dst != nullptr) {
    PAGODA_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToHost, stream_));
  }
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  phase_ = Phase::kEager;
}

}  // namespace pagoda
