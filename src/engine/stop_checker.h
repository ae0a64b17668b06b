// StopChecker: incremental detokenization with stop strings. Text that could still turn
// into a stop string is held back, so a stop string is never emitted, not even partly;
// text is never cut inside a UTF-8 character.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

class StopChecker {
 public:
  // `tokenizer` must outlive the checker. `prompt`: the request's prompt ids, the context
  // the first generated tokens are decoded in (IncrementalDetokenizer), so the text is
  // Decode(prompt + output) minus Decode(prompt).
  StopChecker(const Tokenizer& tokenizer, std::vector<std::string> stop,
              std::span<const int32_t> prompt = {}, bool skip_special = true);

  struct Result {
    std::string text;      // newly final text (possibly empty)
    bool stopped = false;  // a stop string appeared; `text` ends right before it
  };
  // Appends one generated id. `check_stop` false (before min_tokens) still detokenizes.
  Result Add(int32_t id, bool check_stop = true);
  // The held-back tail, at the end of the request (not after a stop).
  std::string Flush();

 private:
  IncrementalDetokenizer detok_;
  std::vector<std::string> stop_;
  size_t max_stop_len_ = 0;
  std::string pending_;  // decoded but not yet emitted
};

}  // namespace pagoda
