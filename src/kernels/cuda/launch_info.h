// What the CUDA kernels' launch code asks of the device and of its operands: the current GPU's
// SM count (for wave and occupancy choices) and 16-byte alignment (for vector and TMA loads).
#pragma once

#include <cstdint>

namespace pagoda::cuda {

// Streaming multiprocessors of the calling thread's current device (queried once per device).
int SmCount();

inline bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace pagoda::cuda
