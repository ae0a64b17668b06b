#include "backend/workspace.h"

#include "core/error.h"

namespace pagoda {

TensorView Workspace::Get(Backend& backend, int slot, int64_t rows, int64_t cols) {
  PAGODA_CHECK(slot >= 0 && rows >= 0 && cols >= 0) << "Workspace slot " << slot;
  if (slot >= static_cast<int>(buffers_.size())) {
    buffers_.resize(slot + 1);
    sizes_.resize(slot + 1, 0);
  }
  const int64_t floats = rows * cols;
  if (floats > sizes_[slot]) {
    buffers_[slot] = backend.Allocate(floats);
    sizes_[slot] = floats;
    ++num_allocations_;
  }
  return TensorView::F32(buffers_[slot].get(), rows, cols, backend.device());
}

int64_t Workspace::floats() const {
  int64_t total = 0;
  for (int64_t s : sizes_) total += s;
  return total;
}

}  // namespace pagoda
