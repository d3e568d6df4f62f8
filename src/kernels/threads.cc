// sinkq/kernels/threads.cc — how many threads the kernels use, and OpenBLAS kept single-threaded.
//
// One thread pool only: every parallel region is OpenMP (num_threads(num_threads())). OpenBLAS
// is pinned to 1 thread and the sgemm path splits its output columns over the OpenMP threads
// itself, so the two pools never oversubscribe the cores (OpenBLAS workers spin for a long time
// after each call and would otherwise steal the core an OpenMP GEMV wants next).
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <cblas.h>

#include "core/error.h"
#include "kernels/ops.h"

namespace sinkq {
namespace {

// Physical cores this process may run on: distinct (package, core) ids over the affinity mask
// (SMT siblings add little to memory-bound decode and slow sgemm down). Falls back to the number
// of CPUs in the mask when sysfs topology is unavailable.
int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int cpus = CPU_COUNT(&set);
  std::set<std::pair<int, int>> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    auto read_int = [c](const char* leaf) {
      const std::string path = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/" + leaf;
      int v = -1;
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fscanf(f, "%d", &v) != 1) v = -1;
        std::fclose(f);
      }
      return v;
    };
    const int pkg = read_int("physical_package_id"), core = read_int("core_id");
    if (pkg < 0 || core < 0) return cpus > 0 ? cpus : 1;
    cores.insert({pkg, core});
  }
  return cores.empty() ? (cpus > 0 ? cpus : 1) : int(cores.size());
}

std::atomic<int> g_threads{0};
std::once_flag g_blas_once;

void init_blas() {
  std::call_once(g_blas_once, [] { openblas_set_num_threads(1); });
}

// OpenBLAS is made single-threaded when this library is loaded, before any sgemm can run. It used
// to happen on the first num_threads() call, which small ops skip (threads_for returns 1 without
// asking): a model whose ops were all small ran its first sgemm calls on OpenBLAS's own threads.
// On Haswell-class kernels (AVX2 hosts) the threaded driver partitions the output differently and
// the edge kernels round differently, so the same product gave other bits before and after the
// first large op — and, called from two OpenMP threads at once, other bits depending on which call
// found OpenBLAS's pool free (issue 11: StaticQuant.EqualsDynamicPerTensor… on every AVX2 run,
// Sim.* bit-identity under load). blas_single_threaded() is also called before every sgemm, so no
// static-initialisation order can let one through.
[[maybe_unused]] const bool g_blas_at_load = (init_blas(), true);

}  // namespace

void blas_single_threaded() { init_blas(); }

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  init_blas();
  n = physical_cores();
  if (const char* env = std::getenv("SINKQ_THREADS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    SINKQ_CHECK(end && *end == '\0' && v >= 1 && v <= 1024,
                "SINKQ_THREADS='{}': expected a thread count in [1, 1024]", env);
    n = int(v);
  }
  int expected = 0;
  g_threads.compare_exchange_strong(expected, n);  // a concurrent set_num_threads() wins
  return g_threads.load(std::memory_order_relaxed);
}

void set_num_threads(int n) {
  SINKQ_CHECK(n >= 1 && n <= 1024, "set_num_threads({}): expected [1, 1024]", n);
  init_blas();
  g_threads.store(n, std::memory_order_relaxed);
}

}  // namespace sinkq
