// sinkq/server/batcher.h — continuous batching of decode steps across sessions.
//
// Each request of `sinkq serve` generates on its own Session (own KV cache) on its own handler
// thread. A decode step reads every weight once whether it feeds one token or several
// (BENCHMARKS.md: a forward over 2 / 4 / 8 tokens costs about 1 / 1.4 / 2 single steps on
// SmolLM2), so the steps of the sessions that are decoding at the same time are run together:
// a session's generate() hands its token to step(), which blocks until one
// Forward::step_batch over the waiting sessions (at most max_batch of them) has run on the
// batcher's thread, and returns that session's logits — the same bits as stepping alone
// (Forward::step_batch; tests/engine). Sessions join at their first decode step (a prefill is
// never waited for) and leave when their generation ends (Membership).
//
// When to run: as soon as every member has handed in its step, or `window` after the first one
// did (a member between steps — sampling, writing to its socket — delays the others by at most
// the window per step: a client reading its stream slowly costs the others up to 2 ms a token,
// ~5% of a SmolLM2 step). At most max_batch sequences per batch (the server: min(--parallel,
// matmul_rowwise_max), so that every row stays exact). One batch at a time; the batch's OpenMP
// threads are the process's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "model/model.h"

namespace sinkq::server {

class DecodeBatcher {
 public:
  explicit DecodeBatcher(int max_batch, std::chrono::microseconds window = std::chrono::microseconds(2000));
  ~DecodeBatcher();  // stops the thread; steps still waiting get an error
  DecodeBatcher(const DecodeBatcher&) = delete;
  DecodeBatcher& operator=(const DecodeBatcher&) = delete;

  // One session's part in the batches while it generates: joins at its first step(), leaves when
  // destroyed (its generation ended: done, stopped, cancelled or failed).
  class Membership {
   public:
    explicit Membership(DecodeBatcher& b) : b_(b) {}
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;
    // Feeds `id` to `fwd` in the next batch; returns fwd's logits after it. Rethrows an error of
    // the batch (sinkq::Error): one sequence's failure (a non-finite activation) fails the step of
    // every member of that batch.
    std::span<const float> step(Forward& fwd, int32_t id);

   private:
    DecodeBatcher& b_;
    bool joined_ = false;
  };

  struct Stats {
    uint64_t batches = 0, rows = 0;  // step_batch calls, and the sequence-steps they ran
  };
  Stats stats() const;

 private:
  struct Pending {
    Forward* fwd;
    int32_t id;
    bool done = false;
    std::exception_ptr error;
  };
  void loop();

  const int max_batch_;
  const std::chrono::microseconds window_;
  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<Pending*> pending_;
  int members_ = 0;
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

}  // namespace sinkq::server
