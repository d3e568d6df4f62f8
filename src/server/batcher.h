// sinkq/server/batcher.h — continuous batching of prefill chunks and decode steps across sessions.
//
// Each request of `sinkq serve` generates on its own Session (own KV cache) on its own handler
// thread. A forward reads every weight once whether it feeds one token or several (BENCHMARKS.md:
// a forward over 2 / 4 / 8 tokens costs about 1 / 1.4 / 2 single steps on SmolLM2), so what the
// sessions feed at the same time runs together: a session's generate() hands its prompt
// (prefill(): in step()'s chunks, one chunk a batch) and then each sampled token (step()) to the
// batcher, which blocks until one Forward::step_batch over the waiting sessions has run on the
// batcher's thread, and returns that session's logits — the same bits as feeding it alone
// (Forward::step_batch's linear groups; tests/engine). So a new request's prompt rides in the
// same forward as the others' decode rows instead of competing with them for the cores from its
// own thread. Sessions join at their first chunk and leave when their generation ends
// (Membership).
//
// When to run: as soon as every member has handed in its work, or `window` after the first one
// did (a member between steps — sampling, writing to its socket — delays the others by at most
// the window per step: a client reading its stream slowly costs the others up to 2 ms a token,
// ~5% of a SmolLM2 step). Whom: in arrival order, at most max_seqs sequences, and while the rows
// fit the first one's buffers (its max_batch, which is also step()'s chunk: a whole chunk of a
// long prompt may run without company). One batch at a time; its OpenMP threads are the process's.
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

class StepBatcher {
 public:
  explicit StepBatcher(int max_seqs, std::chrono::microseconds window = std::chrono::microseconds(2000));
  ~StepBatcher();  // stops the thread; work still waiting gets an error
  StepBatcher(const StepBatcher&) = delete;
  StepBatcher& operator=(const StepBatcher&) = delete;

  // One session's part in the batches while it generates: joins at its first prefill() / step(),
  // leaves when destroyed (its generation ended: done, stopped, cancelled or failed).
  class Membership {
   public:
    explicit Membership(StepBatcher& b) : b_(b) {}
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;
    // Feeds `prompt` to `fwd` (reset or not) in chunks of fwd.max_batch(), each in the next batch
    // that has room for it; returns fwd's logits after the last token. Rethrows an error of a
    // batch (sinkq::Error): one sequence's failure (a non-finite activation) fails the step of
    // every member of that batch.
    std::span<const float> prefill(Forward& fwd, std::span<const int32_t> prompt);
    // Feeds `id` to `fwd` in the next batch; returns fwd's logits after it. Errors as prefill().
    std::span<const float> step(Forward& fwd, int32_t id);

   private:
    void feed(Forward& fwd, std::span<const int32_t> chunk, bool prefill);
    StepBatcher& b_;
    bool joined_ = false;
  };

  struct Stats {
    uint64_t batches = 0;         // step_batch calls
    uint64_t decode_batches = 0;  // those with a decode step
    uint64_t rows = 0;            // decode steps run in them
    uint64_t prefill_chunks = 0, prefill_rows = 0;  // prompt chunks run in them, and their tokens
    uint64_t mixed = 0;     // batches with both a prompt chunk and a decode step
  };
  Stats stats() const;
  int members() const;  // sessions that joined and have not left

 private:
  struct Pending {
    Forward* fwd;
    std::span<const int32_t> chunk;
    bool prefill;
    bool done = false;
    std::exception_ptr error;
  };
  void loop();

  const int max_seqs_;
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
