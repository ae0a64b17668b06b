// Writes tests/data/fp8_e4m3.bin and tests/data/fp8_e5m2.bin: the CUDA toolkit's host
// conversions (cuda_fp8.h), the reference that src/core/fp8_test.cc checks pagoda's
// conversions against without needing the toolkit at test time.
//
//   g++ -std=c++17 -O1 -I/usr/local/cuda/include tests/tools/fp8_reference_table.cc \
//       -o /tmp/fp8_table && /tmp/fp8_table tests/data
//
// File layout (little endian), one file per format:
//   256 x f32        decode table: code c -> float (via __nv_cvt_fp8_to_halfraw, exact)
//   65536 x u8       encode of every bf16 bit pattern b as the float (b << 16)
//   M x u8           encode of the "edge" inputs, in the order fp8_test.cc's EdgeInputs()
//                    makes them from the decode table (midpoints between neighbouring
//                    codes and the floats just below/above them, both signs)
// All encodes use __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt): round to nearest even,
// saturating to the largest finite value, NaN -> NaN.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static float HalfRawToFloat(__half_raw h) {
  const uint16_t x = h.x;
  const uint32_t sign = uint32_t(x & 0x8000u) << 16;
  const uint32_t exp = (x >> 10) & 0x1f, mant = x & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    float v = std::ldexp(float(mant), -24);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Must match EdgeInputs() in src/core/fp8_test.cc.
static std::vector<float> EdgeInputs(const std::vector<float>& decode) {
  std::vector<float> finite;
  for (int c = 0; c < 128; ++c) {
    if (std::isfinite(decode[c])) finite.push_back(decode[c]);
  }
  std::vector<float> out;
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float mid = (finite[i] + finite[i + 1]) * 0.5f;
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  const float top = finite.back();
  for (float x : {top * 1.0625f, top * 1.125f, top * 2.0f, 1e30f, INFINITY, NAN, 1e-30f, 1e-45f, 0.0f}) {
    out.push_back(x);
    out.push_back(-x);
  }
  return out;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  for (int which = 0; which < 2; ++which) {
    const __nv_fp8_interpretation_t fmt = which == 0 ? __NV_E4M3 : __NV_E5M2;
    std::vector<float> decode(256);
    for (int c = 0; c < 256; ++c) decode[c] = HalfRawToFloat(__nv_cvt_fp8_to_halfraw(uint8_t(c), fmt));
    std::vector<uint8_t> sweep(65536);
    for (uint32_t b = 0; b < 65536; ++b) {
      uint32_t bits = b << 16;
      float x;
      std::memcpy(&x, &bits, 4);
      sweep[b] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt);
    }
    std::vector<uint8_t> edges;
    for (float x : EdgeInputs(decode)) edges.push_back(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt));
    const std::string path = dir + (which == 0 ? "/fp8_e4m3.bin" : "/fp8_e5m2.bin");
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 1;
    std::fwrite(decode.data(), 4, 256, f);
    std::fwrite(sweep.data(), 1, sweep.size(), f);
    std::fwrite(edges.data(), 1, edges.size(), f);
    std::fclose(f);
    std::printf("%s: %zu edge inputs\n", path.c_str(), edges.size());
  }
  return 0;
}
