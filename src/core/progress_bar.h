// A progress bar on stderr for long work (benchmarks, evaluation, loading). Draws only
// when stderr is a terminal, or once every 10% otherwise (logs stay readable).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pagoda {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();  // finishes the line
  void Update(int64_t done);
  void Finish();

 private:
  std::string label_;
  int64_t total_;
  int64_t last_decile_ = -1;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace pagoda
