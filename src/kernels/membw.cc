// sinkq/kernels/membw.cc — see membw.h.
#include "kernels/membw.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/error.h"
#include "kernels/kernel_table.h"

namespace sinkq {

double measure_read_bandwidth_gbs(size_t bytes, int threads) {
  SINKQ_CHECK(bytes >= 4096 && threads >= 1, "measure_read_bandwidth_gbs: need >= 4096 bytes and >= 1 thread");
  const int64_t n = int64_t(bytes / sizeof(float));
  std::unique_ptr<float[]> buf(new float[size_t(n)]);
  const detail::KernelTable& k = detail::kernels();
  // Same static split for the first touch and the reads: each thread reads pages it faulted in
  // (matters on NUMA machines).
  auto range = [n](int i, int parts) {
    const int64_t per = (n + parts - 1) / parts;
    return std::pair<int64_t, int64_t>{std::min(n, per * i), std::min(n, per * (i + 1))};
  };
#pragma omp parallel num_threads(threads)
  {
    const auto [b, e] = range(omp_get_thread_num(), omp_get_num_threads());
    std::fill(buf.get() + b, buf.get() + e, 1.0f);
  }
  double best = 1e30;
  volatile float sink = 0.0f;
  for (int rep = 0; rep < 5; ++rep) {
    float total = 0.0f;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const auto [b, e] = range(omp_get_thread_num(), omp_get_num_threads());
      if (e > b) total += k.sum(buf.get() + b, e - b);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    best = std::min(best, s);
  }
  return double(n) * sizeof(float) / best / 1e9;
}

}  // namespace sinkq
