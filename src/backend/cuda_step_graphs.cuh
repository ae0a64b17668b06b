// StepGraphs: the CUDA backend's decode steps as CUDA graphs, one per (batch size, KV cache,
// attention split depth).
// The first decode step of a size runs eagerly (it sizes every scratch buffer), the second is
// captured on graph_stream and launched, later ones replay it. Every kernel reads the step
// from the same device buffers, so a replay sees the new step once BeginStep has uploaded it;
// when BeginStep has to move one of those buffers (a longer step, a wider block table), it
// drops every graph.
// While replaying, the backend's ops launch nothing; the step's logits copy (Finish) launches
// the graph. Graphs are dropped when workspace or KV memory is allocated (a new address could
// reuse one a graph was captured with). Included by the backend's .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>

#include "backend/kv_cache.h"

namespace pagoda {

class StepGraphs {
 public:
  enum class Phase { kEager, kCapturing, kReplaying };

  StepGraphs();
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  void Enable(bool on);  // off drops every graph
  bool enabled() const { return enabled_; }
  // Destroys every graph. REQUIRES: no step being captured or replayed.
  void Drop();
  int64_t size() const { return static_cast<int64_t>(graphs_.size()); }

  // BeginStep, before anything is launched: a capture that an exception cut short (a step that
  // never reached its logits) is ended and thrown away with every graph.
  void AbandonStaleCapture();
  // BeginStep, after the uploads on the legacy stream: this step's phase. `graphable`: a decode
  // step whose ops never wait on the host; `shape`: what else decides the launches' grids (the
  // attention's split depth), a graph per value. Returns the stream the step's ops launch on.
  cudaStream_t Begin(int64_t batch, const KVCache* cache, bool graphable, int64_t shape = 0);
  Phase phase() const { return phase_; }
  bool replaying() const { return phase_ == Phase::kReplaying; }
  bool capturing() const { return phase_ == Phase::kCapturing; }
  // The step's end: logits rows [rows, width bytes] from device `src` (pitch src_pitch) to host
  // `dst` (pitch dst_pitch). Eager: a plain copy; captured: the graph is instantiated first;
  // captured or replayed: the graph is launched, then the copy, on graph_stream. Back to eager.
  // dst null: no copy (the logits stay on the device); a graph's launch is still waited for.
  void Finish(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows);

 private:
  struct Graph {
    int64_t batch = 0;
    const KVCache* cache = nullptr;  // a cache belongs to one model: its workspace, its weights
    int64_t shape = 0;
    cudaGraphExec_t exec = nullptr;
  };
  bool enabled_ = false;
  Phase phase_ = Phase::kEager;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t uploaded_ = nullptr;
  std::deque<Graph> graphs_;  // stable addresses
  Graph* current_ = nullptr;
};

}  // namespace pagoda
