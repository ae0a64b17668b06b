// The CUDA backend's diagnostic switches (PAGODA_CUDA_PDL, PAGODA_FLASH_PING, ...): each read once
// from the environment at start, to time or check one path against another in the same build.
#pragma once

#include <cstdlib>
#include <cstring>

namespace pagoda::cuda {

// `name` as an on/off switch: `fallback` when unset or empty, off for "0", on for any other value.
inline bool EnvSwitch(const char* name, bool fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  return std::strcmp(e, "0") != 0;
}

}  // namespace pagoda::cuda
