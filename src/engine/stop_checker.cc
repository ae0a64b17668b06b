#include "engine/stop_checker.h"

#include <algorithm>

namespace pagoda {
namespace {
// Largest n <= len such that s[0, n) ends on a UTF-8 character boundary.
size_t Utf8Floor(const std::string& s, size_t len) {
  while (len > 0 && len < s.size() && (static_cast<unsigned char>(s[len]) & 0xC0) == 0x80) --len;
  return len;
}
}  // namespace

StopChecker::StopChecker(const Tokenizer& tokenizer, std::vector<std::string> stop,
                         std::span<const int32_t> prompt, bool skip_special)
    : detok_(tokenizer, prompt, skip_special), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  for (const auto& s : stop_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

StopChecker::Result StopChecker::Add(int32_t id, bool check_stop) {
  Result r;
  const size_t old_len = pending_.size();
  pending_ += detok_.Add(id);
  if (check_stop && !stop_.empty()) {
    // A stop string may start up to max_stop_len - 1 bytes before the new text.
    const size_t from = old_len >= max_stop_len_ ? old_len - max_stop_len_ + 1 : 0;
    size_t best = std::string::npos;
    for (const auto& s : stop_) {
      const size_t at = pending_.find(s, from);
      if (at != std::string::npos) best = std::min(best, at);
    }
    if (best != std::string::npos) {
      r.text = pending_.substr(0, best);
      r.stopped = true;
      pending_.clear();
      return r;
    }
  }
  // Emit all but the longest suffix that is a prefix of some stop string.
  size_t hold = 0;
  if (check_stop) {
    for (const auto& s : stop_) {
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
  }
  const size_t emit = Utf8Floor(pending_, pending_.size() - hold);
  r.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return r;
}

std::string StopChecker::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  out += detok_.Flush();
  return out;
}

}  // namespace pagoda
