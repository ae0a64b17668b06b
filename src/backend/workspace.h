// Workspace: a model's activation buffers (and any other per-step scratch it owns), allocated
// from its backend once and kept between steps. Model::ReserveWorkspace sizes every slot for
// the largest step the engine will run (--max-num-batched-tokens), so steps within it never
// allocate; a larger step grows a slot, which num_allocations() counts.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace pagoda {

class Workspace {
 public:
  // Slot `slot` as a contiguous f32 [rows, cols] view on backend's device. The contents are
  // whatever the slot held last (every op writes its output before it is read).
  TensorView Get(Backend& backend, int slot, int64_t rows, int64_t cols);
  int64_t num_allocations() const { return num_allocations_; }
  // Floats held in all slots.
  int64_t floats() const;

 private:
  std::vector<std::shared_ptr<float>> buffers_;
  std::vector<int64_t> sizes_;
  int64_t num_allocations_ = 0;
};

}  // namespace pagoda
