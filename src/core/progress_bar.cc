#include "core/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace pagoda {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(std::max<int64_t>(1, total)), tty_(::isatty(2) != 0),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(int64_t done) {
  done = std::clamp<int64_t>(done, 0, total_);
  const double frac = static_cast<double>(done) / static_cast<double>(total_);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    const int width = 30;
    const int fill = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %lld/%lld %.1fs", label_.c_str(), fill,
                 "##############################", width - fill, "", static_cast<int>(frac * 100),
                 static_cast<long long>(done), static_cast<long long>(total_), secs);
    std::fflush(stderr);
  } else {
    const int64_t decile = static_cast<int64_t>(frac * 10);
    if (decile != last_decile_) {
      last_decile_ = decile;
      std::fprintf(stderr, "%s: %3d%% (%lld/%lld, %.1fs)\n", label_.c_str(), static_cast<int>(frac * 100),
                   static_cast<long long>(done), static_cast<long long>(total_), secs);
    }
  }
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) std::fputs("\n", stderr);
}

}  // namespace pagoda
