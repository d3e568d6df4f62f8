#include "server/batcher.h"

#include <algorithm>

#include "core/error.h"

namespace sinkq::server {

DecodeBatcher::DecodeBatcher(int max_batch, std::chrono::microseconds window)
    : max_batch_(std::max(1, max_batch)), window_(window) {
  thread_ = std::thread([this] { loop(); });
}

DecodeBatcher::~DecodeBatcher() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  thread_.join();
}

DecodeBatcher::Membership::~Membership() {
  if (!joined_) return;
  {
    std::lock_guard g(b_.mu_);
    --b_.members_;
  }
  b_.cv_work_.notify_all();  // the members still stepping may now all be waiting
}

std::span<const float> DecodeBatcher::Membership::step(Forward& fwd, int32_t id) {
  SINKQ_CHECK(fwd.n_past() + 1 <= fwd.max_ctx(), "1 token after {} already in the cache exceeds the context of {} tokens",
              fwd.n_past(), fwd.max_ctx());  // here, not in the batch: it would fail the others' steps too
  Pending p{&fwd, id, false, nullptr};
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
  return fwd.logits();
}

DecodeBatcher::Stats DecodeBatcher::stats() const {
  std::lock_guard g(mu_);
  return stats_;
}

void DecodeBatcher::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_work_.wait(lk, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, nobody waiting
    if (!stop_) {
      // Wait for the other members' steps, at most the window from now (the first arrival).
      const auto deadline = std::chrono::steady_clock::now() + window_;
      cv_work_.wait_until(lk, deadline, [&] {
        return stop_ || int(pending_.size()) >= std::min(members_, max_batch_);
      });
    }
    const size_t n = std::min(pending_.size(), size_t(max_batch_));
    std::vector<Pending*> batch(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
    std::exception_ptr error;
    if (stop_) {
      error = std::make_exception_ptr(Error("the server is shutting down"));
    } else {
      std::vector<Forward*> seqs;
      std::vector<int32_t> ids;
      for (Pending* p : batch) {
        seqs.push_back(p->fwd);
        ids.push_back(p->id);
      }
      lk.unlock();
      try {
        Forward::step_batch(seqs, ids);
      } catch (...) {
        error = std::current_exception();
      }
      lk.lock();
      ++stats_.batches;
      stats_.rows += n;
    }
    for (Pending* p : batch) {
      p->done = true;
      p->error = error;
    }
    cv_done_.notify_all();
  }
}

}  // namespace sinkq::server
