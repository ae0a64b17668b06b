#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace pagoda {

double YarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

double YarnCorrectionDim(double num_rotations, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (num_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RopeParams MakeRopeParams(const RopeSpec& s) {
  PAGODA_CHECK(s.dim > 0 && s.dim % 2 == 0) << "rope dim " << s.dim;
  RopeParams p;
  p.dim = s.dim;
  p.interleaved = s.interleaved;
  const int64_t half = s.dim / 2;
  p.inv_freq.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    p.inv_freq[i] = 1.0 / std::pow(s.theta, static_cast<double>(2 * i) / static_cast<double>(s.dim));
  }
  if (!s.freq_factors.empty()) {
    PAGODA_ENSURE(static_cast<int64_t>(s.freq_factors.size()) == half, ErrorCode::kCorruptData,
                  "rope_freqs has " << s.freq_factors.size() << " values, expected " << half);
    for (int64_t i = 0; i < half; ++i) p.inv_freq[i] /= s.freq_factors[i];
    return p;
  }
  switch (s.scaling) {
    case RopeScaling::kNone: break;
    case RopeScaling::kLinear:
      for (double& f : p.inv_freq) f /= s.factor;
      break;
    case RopeScaling::kLlama3: {
      const double old_len = static_cast<double>(s.original_max_position);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      for (double& f : p.inv_freq) {
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          f /= s.factor;
        } else {
          const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          f = (1.0 - smooth) * f / s.factor + smooth * f;
        }
      }
      break;
    }
    case RopeScaling::kYarn: {
      const double dim = static_cast<double>(s.dim);
      const double max_pos = static_cast<double>(s.original_max_position);
      double low = std::floor(YarnCorrectionDim(s.beta_fast, dim, s.theta, max_pos));
      double high = std::ceil(YarnCorrectionDim(s.beta_slow, dim, s.theta, max_pos));
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1.0);
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        const double extrapolation = p.inv_freq[i];
        const double interpolation = extrapolation / s.factor;
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation_factor = 1.0 - ramp;
        p.inv_freq[i] = interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor;
      }
      p.magnitude = s.mscale_all_dim > 0.0
                        ? YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim)
                        : YarnMscale(s.factor, 1.0);
      break;
    }
  }
  return p;
}

}  // namespace pagoda
