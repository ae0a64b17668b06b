// Run-time detection of the x86-64 vector extensions the CPU kernels can use.
//
// The build targets plain x86-64 (no -march flags); kernels for wider ISAs are
// compiled with per-function target attributes and chosen at run time from these
// flags. A flag is set only when the CPU reports the instructions (CPUID) AND the OS
// saves the registers they use (XGETBV: YMM state for AVX*, ZMM/opmask for AVX-512).
#pragma once

#include <string>

namespace pagoda {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_vnni = false;  // vpdpbusd
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16

  // "avx2 fma f16c avx512f ..." (the flags that are set), for logs and reports.
  std::string ToString() const;
};

// Detected once, thread-safe.
const CpuFeatures& GetCpuFeatures();

}  // namespace pagoda
