#include "server/batcher.h"

#include <algorithm>

#include "core/error.h"

namespace sinkq::server {

StepBatcher::StepBatcher(int max_seqs, std::chrono::microseconds window)
    : max_seqs_(std::max(1, max_seqs)), window_(window) {
  thread_ = std::thread([this] { loop(); });
}

StepBatcher::~StepBatcher() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  thread_.join();
}

StepBatcher::Membership::~Membership() {
  if (!joined_) return;
  {
    std::lock_guard g(b_.mu_);
    --b_.members_;
  }
  b_.cv_work_.notify_all();  // the members still stepping may now all be waiting
}

std::span<const float> StepBatcher::Membership::prefill(Forward& fwd, std::span<const int32_t> prompt) {
  SINKQ_CHECK(!prompt.empty(), "the prompt is empty");
  SINKQ_CHECK(fwd.n_past() + int64_t(prompt.size()) <= fwd.max_ctx(),
              "{} tokens after {} already in the cache exceed the context of {} tokens", prompt.size(), fwd.n_past(),
              fwd.max_ctx());  // here, not in the batch: it would fail the others' steps too
  for (size_t start = 0; start < prompt.size(); start += size_t(fwd.max_batch()))  // step()'s chunks
    feed(fwd, prompt.subspan(start, std::min(prompt.size() - start, size_t(fwd.max_batch()))), true);
  return fwd.logits();
}

std::span<const float> StepBatcher::Membership::step(Forward& fwd, int32_t id) {
  SINKQ_CHECK(fwd.n_past() + 1 <= fwd.max_ctx(), "1 token after {} already in the cache exceeds the context of {} tokens",
              fwd.n_past(), fwd.max_ctx());
  feed(fwd, std::span(&id, 1), false);
  return fwd.logits();
}

void StepBatcher::Membership::feed(Forward& fwd, std::span<const int32_t> chunk, bool prefill) {
  Pending p{&fwd, chunk, prefill, false, nullptr};
  {
    std::unique_lock lk(b_.mu_);
    if (!joined_) {
      joined_ = true;
      ++b_.members_;
    }
    SINKQ_CHECK(!b_.stop_, "the server is shutting down");
    b_.pending_.push_back(&p);
    b_.cv_work_.notify_all();
    b_.cv_done_.wait(lk, [&] { return p.done; });
  }
  if (p.error) std::rethrow_exception(p.error);
}

StepBatcher::Stats StepBatcher::stats() const {
  std::lock_guard g(mu_);
  return stats_;
}

int StepBatcher::members() const {
  std::lock_guard g(mu_);
  return members_;
}

void StepBatcher::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, nobody waiting
    if (!stop_) {
      // Wait for the other members' work, at most the window from now (the first arrival).
      const auto deadline = std::chrono::steady_clock::now() + window_;
      cv_work_.wait_until(lk, deadline, [&] {
        return stop_ || int(pending_.size()) >= std::min(members_, max_seqs_);
      });
    }
    // In arrival order: the first always (its chunk fits its own buffers), then whoever still fits
    // the first one's buffers; the rest wait for the next batch.
    std::vector<Pending*> batch;
    int64_t rows = 0;
    const int64_t cap = pending_.front()->fwd->max_batch();
    for (auto it = pending_.begin(); it != pending_.end() && int(batch.size()) < max_seqs_;) {
      const int64_t n = int64_t((*it)->chunk.size());
      if (!batch.empty() && rows + n > cap) {
        ++it;
        continue;
      }
      rows += n;
      batch.push_back(*it);
      it = pending_.erase(it);
    }
    std::exception_ptr error;
    if (stop_) {
      error = std::make_exception_ptr(Error("the server is shutting down"));
    } else {
      std::vector<Forward*> seqs;
      std::vector<std::span<const int32_t>> chunks;
      for (Pending* p : batch) {
        seqs.push_back(p->fwd);
        chunks.push_back(p->chunk);
      }
      lk.unlock();
      try {
        Forward::step_batch(seqs, chunks);
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      ++stats_.batches;
      bool prefill = false, decode = false;
      for (const Pending* p : batch) {
        (p->prefill ? prefill : decode) = true;
        if (p->prefill) {
          ++stats_.prefill_chunks;
          stats_.prefill_rows += p->chunk.size();
        } else {
          ++stats_.rows;
        }
      }
      stats_.decode_batches += decode;
      stats_.mixed += prefill && decode;
    }
    for (Pending* p : batch) {
      p->done = true;
      p->error = error;
    }
    cv_done_.notify_all();
  }
}

}  // namespace sinkq::server
