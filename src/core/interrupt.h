// sinkq/core/interrupt.h — stopping a long computation from outside it: the Python module's
// Ctrl-C (python/src/module.cc runs each long call on a thread of its own and, on KeyboardInterrupt,
// sets that thread's flag). The computation polls the flag at check points — between the layers
// of a forward pass, at each progress report of quantize's stages — and throws Interrupted there,
// so what it leaves is only what an exception leaves (the call's own Session is dropped).
//
// The flag is per thread (thread_local): two calls on two Python threads are stopped separately.
// A thread without a flag (the CLI, the server) never stops at a check point.
#pragma once

#include <atomic>

#include "core/error.h"

namespace sinkq {

struct Interrupted : Error {
  Interrupted() : Error("interrupted") {}
};

inline thread_local const std::atomic<bool>* tl_interrupt_flag = nullptr;

// Sets the calling thread's flag for the scope's life.
class InterruptScope {
 public:
  explicit InterruptScope(const std::atomic<bool>* flag) : prev_(tl_interrupt_flag) { tl_interrupt_flag = flag; }
  ~InterruptScope() { tl_interrupt_flag = prev_; }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  const std::atomic<bool>* prev_;
};

// A check point: throws Interrupted when the calling thread's flag is set.
inline void check_interrupt() {
  if (tl_interrupt_flag && tl_interrupt_flag->load(std::memory_order_relaxed)) throw Interrupted();
}

}  // namespace sinkq
