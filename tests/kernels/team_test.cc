// The step team (kernels/team.h): parallel loops inside run_in_team run on the team's threads,
// cover every item once, wake workers that fell asleep, and bring exceptions back to the caller.
#include "kernels/team.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"

namespace sinkq {
namespace {

// These tests look at where loops run: the governor (which may send a thread's calls solo, e.g. on
// a loaded CI host) is off in this binary but for its own test.
const bool kGovernorOff = (set_team_governor_enabled(false), true);

// The threads one parallel_run(2, ...) ran on, and whether tid 0 was the calling thread.
struct Ran {
  std::set<std::thread::id> threads;
  bool tid0_is_caller = false;
  std::set<int> tids;
  int n = 0;
};

Ran run_two() {
  Ran r;
  std::mutex mu;
  const std::thread::id caller = std::this_thread::get_id();
  parallel_run(2, [&](int tid, int n) {
    // Long enough that one thread cannot finish both shares before the other starts.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mu);
    r.threads.insert(std::this_thread::get_id());
    r.tids.insert(tid);
    r.n = n;
    if (tid == 0) r.tid0_is_caller = std::this_thread::get_id() == caller;
  });
  return r;
}

TEST(Team, LoopsRunOnTheTeamsThreads) {
  EXPECT_FALSE(detail::in_team());
  bool inside = false;
  std::vector<Ran> ran;
  run_in_team(2, [&] {
    inside = detail::in_team();
    for (int i = 0; i < 20; ++i) ran.push_back(run_two());
  });
  EXPECT_TRUE(inside);
  EXPECT_FALSE(detail::in_team());
  ASSERT_EQ(ran.size(), 20u);
  std::set<std::thread::id> all;
  for (const Ran& r : ran) {
    EXPECT_EQ(r.n, 2);
    EXPECT_EQ(r.tids, (std::set<int>{0, 1}));
    EXPECT_EQ(r.threads.size(), 2u);  // two distinct threads each time
    EXPECT_TRUE(r.tid0_is_caller);
    all.insert(r.threads.begin(), r.threads.end());
  }
  EXPECT_EQ(all.size(), 2u);  // always the same two: the team's, not a region per loop
  // Outside a team the loop is an OpenMP region: still two threads.
  const Ran outside = run_two();
  EXPECT_EQ(outside.threads.size(), 2u);
}

// The governor times the two ways. A call is two items of 20 ms; its worker first sleeps `delay`
// (a worker that lost its core). Delay 100 ms: the caller takes both items (40 ms) and waits for
// the worker (100 ms), where solo takes 40 — under half: the solo probe on call 8 wins, and the
// calls after it run solo. Delay 0: the team takes 20 ms to solo's 40 — the team probe on call 40
// wins it back. (Sleeps, not CPU work, with 20 ms margins: a loaded host does not blur them.)
TEST(Team, GovernorGoesSoloWhileTheTeamStalls) {
  set_team_governor_enabled(true);
  const TeamGovernorStats s0 = team_governor_stats();
  ASSERT_EQ(s0.team_calls + s0.solo_calls, 0u) << "this thread's first governed calls";
  std::set<std::thread::id> ran;  // the threads that took items in the last call
  std::mutex mu;
  auto call = [&](int delay_ms) {
    ran.clear();
    run_in_team(2, [&] {
      std::atomic<int> next{0};
      parallel_run(2, [&](int tid, int) {
        if (tid == 1) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        for (int i = next++; i < 2; i = next++) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          std::lock_guard<std::mutex> lock(mu);
          ran.insert(std::this_thread::get_id());
        }
      });
    });
  };
  for (int k = 1; k <= 7; ++k) call(100);
  EXPECT_FALSE(team_governor_stats().solo);
  call(100);  // call 8: the solo probe
  EXPECT_EQ(ran.size(), 1u);
  EXPECT_TRUE(team_governor_stats().solo) << "the solo probe took under half the team's time";
  for (int k = 9; k <= 39; ++k) call(0);
  EXPECT_EQ(ran.size(), 1u) << "the calls after it run solo";
  call(0);  // call 40: the team probe
  const TeamGovernorStats s = team_governor_stats();
  EXPECT_FALSE(s.solo) << "team " << s.team_ns / 1e6 << " ms vs solo " << s.solo_ns / 1e6 << " ms";
  call(0);
  EXPECT_EQ(ran.size(), 2u);
  EXPECT_EQ(s.team_calls, 8u);
  EXPECT_EQ(s.solo_calls, 32u);
  set_team_governor_enabled(false);
}

TEST(Team, ParallelForCoversEveryItemOnce) {
  for (const bool team : {false, true})
    for (const int nt : {1, 2, 3})
      for (const int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(64), int64_t(1001)})
        for (const int64_t chunk : {int64_t(1), int64_t(3), int64_t(64), int64_t(5000)}) {
          std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
          auto loop = [&] {
            parallel_for(nt, n, chunk, [&](int64_t b, int64_t e) {
              ASSERT_LT(b, e);
              ASSERT_LE(e - b, chunk);
              for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
            });
          };
          if (team) run_in_team(2, loop);
          else loop();
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(hits[size_t(i)].load(), 1) << "team " << team << " nt " << nt << " n " << n << " chunk "
                                                 << chunk << " item " << i;
        }
}

// Longer gaps than the spin budget (SINKQ_SPIN_US, 50 us by default) put the workers to sleep on
// the futex; the next loop must wake them (and a slow worker must wake a caller that slept).
TEST(Team, SleepingWorkersAndCallerAreWoken) {
  run_in_team(2, [&] {
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      const Ran r = run_two();
      EXPECT_EQ(r.threads.size(), 2u) << "loop " << i;
      std::atomic<int> done{0};
      parallel_run(2, [&](int tid, int) {
        if (tid == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the caller waits, then sleeps
        done.fetch_add(1);
      });
      EXPECT_EQ(done.load(), 2) << "loop " << i;
    }
  });
}

TEST(Team, ExceptionsReachTheCallerAndTheTeamGoesOn) {
  run_in_team(2, [&] {
    for (const int thrower : {0, 1}) {
      EXPECT_THROW(parallel_run(2, [&](int tid, int) {
                     if (tid == thrower) throw Error("boom");
                   }),
                   Error);
      // The team still works after a failed loop.
      EXPECT_EQ(run_two().threads.size(), 2u);
    }
  });
  EXPECT_THROW(run_in_team(2, [] { throw std::runtime_error("body"); }), std::runtime_error);
  EXPECT_FALSE(detail::in_team());
  EXPECT_EQ(run_two().threads.size(), 2u);  // an OpenMP region again
}

TEST(Team, NestedAndDisabledRunInline) {
  // A loop inside a loop's share: the inner one runs on the thread that reached it, every item once.
  run_in_team(2, [&] {
    std::vector<std::atomic<int>> hits(64);
    parallel_for(2, 4, 1, [&](int64_t b, int64_t) {
      parallel_for(2, 16, 1, [&](int64_t i, int64_t) { hits[size_t(b * 16 + i)].fetch_add(1); });
    });
    for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << i;
  });
  int depth = 0;
  run_in_team(2, [&] {
    run_in_team(2, [&] {  // already in a team: runs inline, loops stay on the outer team
      ++depth;
      EXPECT_TRUE(detail::in_team());
      EXPECT_EQ(run_two().threads.size(), 2u);
    });
  });
  EXPECT_EQ(depth, 1);
  set_team_enabled(false);
  run_in_team(2, [&] { EXPECT_FALSE(detail::in_team()); });
  set_team_enabled(true);
  run_in_team(2, [&] { EXPECT_TRUE(detail::in_team()); });
  run_in_team(1, [&] { EXPECT_FALSE(detail::in_team()); });  // one thread: no team
}

}  // namespace
}  // namespace sinkq
