// sinkq/tokenizer/stop_matcher.cc — StopMatcher (tokenizer.h): stop strings over streamed text.
#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace sinkq {

std::string StopMatcher::push(std::string_view piece) {
  if (matched_) return {};
  pending_ += piece;
  size_t at = std::string::npos;
  for (const std::string& s : stops_) at = std::min(at, pending_.find(s));
  if (at != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, at);
    pending_.clear();
    text_ += out;
    return out;
  }
  // Hold back the longest tail of the pending text that a stop string starts with.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  text_ += out;
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!matched_) out.swap(pending_);
  text_ += out;
  return out;
}

}  // namespace sinkq
