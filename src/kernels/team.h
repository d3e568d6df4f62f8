// sinkq/kernels/team.h — the kernels' parallel loops, and one thread team for a whole decode step.
//
// Every parallel loop of the kernels goes through parallel_run / parallel_for. Outside a team they
// open an OpenMP region of nt threads, as before. Inside run_in_team(), on the thread that called
// it, they hand the loop to that team's threads instead: the team is one OpenMP region for the
// whole step, its workers wait for the next loop by spinning for a short while (SINKQ_SPIN_US,
// default 50 us; pausing, and yielding the core between pause rounds) and only then sleeping on a
// futex.
//
// Why: a SmolLM2-135M decode step runs ~250 parallel loops of 5-100 us each. As OpenMP regions,
// each one wakes its workers from a futex (OMP_WAIT_POLICY=passive, BENCHMARKS.md "Threads on a
// shared machine") and costs tens of us on a VM — 2 threads decoded slower than 1. A spinning
// OpenMP policy fixes that but spins between steps and after the process's work too, which made
// 2 threads 3x slower than 1 beside a busy process; the team spins only inside a step, for at
// most SINKQ_SPIN_US at a time (then sleeps), and yields its core while it spins, so a descheduled
// peer gets it back. SmolLM2 at 2 threads (bench/decode_team.sh, BENCHMARKS.md): 1.8x the per-loop
// regions idle, at par beside a busy process.
//
// Results never depend on the team: the loops' items are computed the same way whichever thread
// runs them (every caller's items are independent), so a step gives the same bits with or
// without one (tests/kernels: Team.*, tests/model: Team.DecodeStepIsBitIdentical).
//
// One pool only: the team's threads are OpenMP's own (threads.cc).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace sinkq {

namespace detail {

using TeamFn = void (*)(void* ctx, int tid, int n);
// Runs fn(ctx, tid, n) for tid in [0, n) with n = min(nt, team size) on the calling thread's team
// (the caller is tid 0) and returns true when it is done; false when this thread runs no team.
// An exception thrown by fn on any thread is rethrown here after every thread has finished.
bool team_dispatch(int nt, TeamFn fn, void* ctx);
bool in_team();

}  // namespace detail

// fn(tid, n) on n <= nt threads (the team's or an OpenMP region's), tid 0 on the calling thread
// inside a team. nt <= 1: fn(0, 1) here. fn must be safe to run concurrently with itself.
template <class F>
void parallel_run(int nt, F&& fn) {
  if (nt <= 1) {
    fn(0, 1);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  auto call = [](void* c, int tid, int n) { (*static_cast<Fn*>(c))(tid, n); };
  if (detail::team_dispatch(nt, call, const_cast<void*>(static_cast<const void*>(&fn)))) return;
#pragma omp parallel num_threads(nt)
  fn(omp_get_thread_num(), omp_get_num_threads());
}

// fn(begin, end) over [0, n) in chunks of `chunk` items handed out dynamically (as
// schedule(dynamic, chunk): a thread that loses its core for a while delays one chunk).
template <class F>
void parallel_for(int nt, int64_t n, int64_t chunk, F&& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  if (nt <= 1 || n <= chunk) {
    for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk));
    return;
  }
  nt = int(std::min<int64_t>(nt, (n + chunk - 1) / chunk));
  std::atomic<int64_t> next{0};
  parallel_run(nt, [&](int, int) {
    for (int64_t b = next.fetch_add(chunk, std::memory_order_relaxed); b < n;
         b = next.fetch_add(chunk, std::memory_order_relaxed))
      fn(b, std::min(n, b + chunk));
  });
}

// The step team on (the default) or off (SINKQ_TEAM=0 in the environment, or set_team_enabled(false):
// benchmarks and tests compare the two). Off, run_in_team runs its body as it is and every parallel
// loop opens an OpenMP region. Applies to the next run_in_team call.
void set_team_enabled(bool on);
bool team_enabled();

// The governor (team.cc): each thread times its run_in_team calls with the team and, one call in
// 32, without (solo: its loops on the caller alone), and goes solo while that is under half the
// team's time — a loaded host where the team's workers lose their core mid-loop. On by default;
// SINKQ_TEAM_GOVERNOR=0 or set_team_governor_enabled(false) turns it off (benchmarks compare). Its
// state on the calling thread, for tests and benchmarks.
void set_team_governor_enabled(bool on);
struct TeamGovernorStats {
  uint64_t team_calls = 0, solo_calls = 0;
  bool solo = false;                  // the way preferred now
  double team_ns = -1, solo_ns = -1;  // the moving averages of a call's wall time
};
TeamGovernorStats team_governor_stats();

// fn(begin, end) once per thread over contiguous ranges of [0, n) (as schedule(static): each thread
// its own rows, e.g. to prefetch its next one), boundaries on multiples of `align`; a thread whose
// range is empty is not called. Items must be independent (no thread's result depends on the split).
template <class F>
void parallel_ranges(int nt, int64_t n, int64_t align, F&& fn) {
  if (n <= 0) return;
  parallel_run(nt, [&](int tid, int threads) {
    int64_t per = (n + threads - 1) / threads;
    per = (per + align - 1) / align * align;
    const int64_t b = std::min(n, per * tid), e = std::min(n, b + per);
    if (e > b) fn(b, e);
  });
}

// Runs body() on the calling thread with a team of nt threads (num_threads() when 0) ready for
// its parallel loops; the workers leave when body returns or throws (the exception is rethrown).
// nt <= 1, the team off, or a caller already in a team or an OpenMP region: body() runs as it is.
void run_in_team(int nt, void (*body)(void*), void* ctx);
template <class F>
void run_in_team(int nt, F&& body) {
  using Fn = std::remove_reference_t<F>;
  run_in_team(nt, [](void* c) { (*static_cast<Fn*>(c))(); }, const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace sinkq
