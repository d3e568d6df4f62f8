// sinkq/kernels/team.cc — run_in_team() and the team's hand-off (team.h says why).
//
// The hand-off: the caller (tid 0) publishes the loop (function, context, thread count), bumps
// `gen`, runs its own share, then waits until `pending` (the workers not yet done) reaches 0.
// Each worker waits for `gen` to change, runs its share (or nothing when its tid is past the
// loop's thread count) and decrements `pending`. Waiting = spinning (pause rounds with a
// sched_yield between them) for up to SINKQ_SPIN_US, then sleeping in std::atomic::wait (a
// futex); a waker calls notify only when someone sleeps (the `sleepers` / `caller_sleeps`
// counters, all seq_cst, so a sleeper either sees the new value before it sleeps or is counted
// before the waker looks).
#include "kernels/team.h"

#include <immintrin.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "core/env_switch.h"
#include "core/error.h"
#include "kernels/ops.h"

namespace sinkq {
namespace {

struct Team {
  int size = 1;
  std::atomic<uint32_t> gen{0};      // loops published so far
  std::atomic<uint32_t> pending{0};  // workers still on the current loop
  std::atomic<int> sleepers{0};      // workers asleep on gen
  std::atomic<int> caller_sleeps{0};
  // The current loop (written by the caller before gen is bumped, read by workers after).
  detail::TeamFn fn = nullptr;
  void* ctx = nullptr;
  int n = 0;
  bool stop = false;
  bool busy = false;  // a loop is in flight (the caller's own share is running)
  std::mutex err_mu;
  std::exception_ptr err;  // the first exception of the current loop
};

thread_local Team* tl_team = nullptr;  // the team this thread owns while run_in_team's body runs
thread_local bool tl_solo = false;     // run_in_team's body runs on the caller alone (the governor)

// The governor: whether the team pays on this machine now, measured. A thread's run_in_team calls
// (a decode step each, mostly) are timed; one call in 32 (calls 8, 40, 72, ...) runs the other way
// — solo: every loop on the caller, no OpenMP region — as a probe. Each way keeps a moving average
// of its calls' wall time (weight 0.2; a probe replaces the other way's: what it measured before
// may be long gone). The thread goes solo when solo is under half the team's time, and back to
// the team when the team is 15% ahead: a team's worker that loses its core mid-loop stalls every
// loop until it gets it back (a SmolLM2 fp32 decode step beside a 2-job build: 630 ms at 2 threads,
// 87 at 1), while beside two busy loops the team still wins (46 vs 57 ms) and a symmetric 15% rule,
// fooled by noisy solo probes, made it 63-70. Idle, the probes cost ~2% (solo 42 vs team 25 ms, 1
// call in 32). Results are the same bits either way (the loops' items do not depend on the split).
// Per thread: each server session, the batcher and each Python call decide alone.
struct Governor {
  double team_ns = -1, solo_ns = -1;  // moving averages of a call's wall time (-1: none yet)
  bool solo = false;                  // the way preferred now
  uint64_t calls = 0, team_calls = 0, solo_calls = 0;
};
thread_local Governor tl_governor;

EnvSwitch g_governor("SINKQ_TEAM_GOVERNOR");

EnvSwitch g_team("SINKQ_TEAM");

int64_t spin_ns() {
  static const int64_t ns = [] {
    const char* env = std::getenv("SINKQ_SPIN_US");
    if (!env || !*env) return int64_t(50'000);
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    SINKQ_CHECK(end && *end == '\0' && v >= 0 && v <= 1'000'000,
                "SINKQ_SPIN_US='{}': expected microseconds in [0, 1000000]", env);
    return int64_t(v) * 1000;
  }();
  return ns;
}

// Spins until ready() or spin_ns() have passed; returns ready().
template <class Ready>
bool spin_until(Ready&& ready) {
  if (ready()) return true;
  const int64_t budget = spin_ns();
  if (budget == 0) return false;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      _mm_pause();
      if (ready()) return true;
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(budget)) return ready();
    // Between pause rounds (~1-2 us each) give the core away when another thread wants it: on an
    // oversubscribed machine the thread being waited for may be the one that needs this core.
    // Beside one busy process, 2 threads decoded SmolLM2 at 0.61x the per-loop OpenMP regions
    // without this and 1.00x with it; idle it costs ~10% of the team's gain (bench/decode_team.sh).
    sched_yield();
  }
}

void run_share(Team& t, int tid) {
  if (tid >= t.n) return;
  try {
    t.fn(t.ctx, tid, t.n);
  } catch (...) {
    std::lock_guard<std::mutex> lock(t.err_mu);
    if (!t.err) t.err = std::current_exception();
  }
}

void worker(Team& t, int tid) {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return t.gen.load(std::memory_order_acquire) != seen; })) {
      t.sleepers.fetch_add(1);
      for (uint32_t g = t.gen.load(); g == seen; g = t.gen.load()) t.gen.wait(g);
      t.sleepers.fetch_sub(1);
    }
    seen = t.gen.load(std::memory_order_acquire);
    if (t.stop) return;
    run_share(t, tid);
    if (t.pending.fetch_sub(1) == 1 && t.caller_sleeps.load() > 0) t.pending.notify_one();
  }
}

// Publishes a loop (or the stop) to the workers, runs tid 0's share, waits for the workers.
void hand_off(Team& t, detail::TeamFn fn, void* ctx, int n, bool stop) {
  t.fn = fn;
  t.ctx = ctx;
  t.n = n;
  t.stop = stop;
  t.pending.store(uint32_t(stop ? 0 : t.size - 1));
  t.gen.fetch_add(1);
  if (t.sleepers.load() > 0) t.gen.notify_all();
  if (stop) return;
  t.busy = true;
  run_share(t, 0);
  t.busy = false;
  if (!spin_until([&] { return t.pending.load(std::memory_order_acquire) == 0; })) {
    t.caller_sleeps.fetch_add(1);
    for (uint32_t p = t.pending.load(); p != 0; p = t.pending.load()) t.pending.wait(p);
    t.caller_sleeps.fetch_sub(1);
  }
  if (t.err) {
    std::exception_ptr e = std::exchange(t.err, nullptr);
    std::rethrow_exception(e);
  }
}

}  // namespace

namespace detail {

bool in_team() { return tl_team != nullptr; }

bool team_dispatch(int nt, TeamFn fn, void* ctx) {
  if (tl_solo) {  // the governor sent this call solo: every loop on the caller
    fn(ctx, 0, 1);
    return true;
  }
  Team* t = tl_team;
  if (!t) return false;
  const int n = std::min(nt, t->size);
  // A loop inside the caller's share of another loop runs on the caller alone (the workers are
  // busy with the outer one), as a nested OpenMP region would.
  if (n <= 1 || t->busy) {
    fn(ctx, 0, 1);
    return true;
  }
  hand_off(*t, fn, ctx, n, false);
  return true;
}

}  // namespace detail

void set_team_enabled(bool on) { g_team.set(on); }

void set_team_governor_enabled(bool on) { g_governor.set(on); }

TeamGovernorStats team_governor_stats() {
  const Governor& g = tl_governor;
  return {g.team_calls, g.solo_calls, g.solo, g.team_ns, g.solo_ns};
}

bool team_enabled() { return g_team.on(); }

void run_in_team(int nt, void (*body)(void*), void* ctx) {
  if (nt == 0) nt = num_threads();
  if (nt <= 1 || tl_team || omp_in_parallel() || !team_enabled()) {
    body(ctx);
    return;
  }
  spin_ns();  // reads and checks SINKQ_SPIN_US here, where an error can reach the caller
  Governor& gov = tl_governor;
  const bool governed = g_governor.on();
  const bool probe = governed && ++gov.calls % 32 == 8;
  const bool solo = governed && gov.solo != probe;
  const auto t0 = std::chrono::steady_clock::now();
  // A call's wall time into its way's average, then the verdict (the thresholds: see Governor).
  auto measured = [&] {
    const double dt =
        double(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    double& avg = solo ? gov.solo_ns : gov.team_ns;
    avg = avg < 0 || probe ? dt : avg + 0.2 * (dt - avg);
    if (gov.team_ns >= 0 && gov.solo_ns >= 0) {
      if (!gov.solo && gov.solo_ns < 0.5 * gov.team_ns) gov.solo = true;
      else if (gov.solo && gov.team_ns < 0.85 * gov.solo_ns) gov.solo = false;
    }
  };
  if (solo) {
    ++gov.solo_calls;
    tl_solo = true;
    struct Reset {
      ~Reset() { tl_solo = false; }
    } reset;
    body(ctx);  // (a call that throws is not measured)
    measured();
    return;
  }
  if (governed) ++gov.team_calls;
  Team team;
  std::exception_ptr err;
#pragma omp parallel num_threads(nt)
  {
    // Only the caller reads team.size and tl_team; the workers only wait for a loop.
    if (omp_get_thread_num() == 0) {
      team.size = omp_get_num_threads();
      tl_team = &team;
      try {
        body(ctx);
      } catch (...) {
        err = std::current_exception();
      }
      tl_team = nullptr;
      hand_off(team, nullptr, nullptr, 0, true);
    } else {
      worker(team, omp_get_thread_num());
    }
  }
  if (err) std::rethrow_exception(err);
  if (governed) measured();
}

}  // namespace sinkq
