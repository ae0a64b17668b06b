// What the machine offers: memory available to this process now.
#pragma once

#include <cstdint>

namespace pagoda {

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
int64_t AvailableMemoryBytes();
// MemTotal from /proc/meminfo in bytes; 0 when it cannot be read.
int64_t TotalMemoryBytes();

}  // namespace pagoda
