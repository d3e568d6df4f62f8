// sinkq/core/env_switch.h — a process-wide on/off switch that defaults to the environment:
// set() overrides it; until then the variable `name` decides ("0" off, "1" or unset on; anything
// else is a sinkq::Error naming it), read once. For the switches benchmarks and tests flip to
// compare two paths with identical results (SINKQ_TEAM, SINKQ_SITE_SHARING).
#pragma once

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace sinkq {

class EnvSwitch {
 public:
  explicit constexpr EnvSwitch(const char* name) : name_(name) {}
  void set(bool on) { state_.store(on ? 1 : 0); }
  bool on() {
    int s = state_.load(std::memory_order_relaxed);
    if (s < 0) {
      const char* env = std::getenv(name_);
      const std::string v = env ? env : "";
      SINKQ_CHECK(v.empty() || v == "0" || v == "1", "{}='{}': expected 0 (off) or 1 (on)", name_, v);
      int expected = -1;
      state_.compare_exchange_strong(expected, v == "0" ? 0 : 1);  // a concurrent set() wins
      s = state_.load();
    }
    return s == 1;
  }

 private:
  const char* name_;
  std::atomic<int> state_{-1};  // -1: not read from the environment yet
};

}  // namespace sinkq
