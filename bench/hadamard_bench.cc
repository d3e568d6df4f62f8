// bench/hadamard_bench.cc — the online Hadamard rotations (kernels/hadamard_kernels.h) per ISA,
// against the fp32 matmul they sit next to (part of sinkq_kernel_bench).
//
// Shapes (Args: isa, rows, pow2, m; n = pow2·m):
//   R3 decode   32 rows x 128 (32 heads of head_dim 128, one token) — next to q_proj [4096, 4096]
//   R4 decode   1 x 5632 = 128·44 (TinyLlama)                    — before down_proj [2048, 5632]
//               1 x 11008 = 64·172 (Llama-2-7B)                   — before down_proj [4096, 11008]
//               1 x 14336 = 512·28 (Llama-3-8B)                   — before down_proj [4096, 14336]
//   R4 prefill  512 x 5632                                        — before down_proj, T = 512
// The base is a random ±1 matrix (the time does not depend on its values; quant/ builds the real
// ones and has no m = 44), the scale 1/(√pow2 · σ_max(B)) so that repeated calls keep x bounded
// (for a Hadamard base that is the usual 1/√n). Counters: matmul_us = the fp32 matmul of the
// same activations, as [rows·n / w_in, w_in], against that weight on the same ISA and threads
// (measured once, median of 5, wall time), ratio = rotation wall time / matmul_us.
//   SINKQ_THREADS=1 ./sinkq_kernel_bench --benchmark_filter=Hadamard
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "io/weights.h"
#include "kernels/hadamard_kernels.h"
#include "kernels/ops.h"

namespace sinkq {
namespace {

using bench::use_isa;
using bench::vec;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Median wall time (us) of 5 calls of matmul(x[T, in], W[out, in] fp32) on the current ISA.
double matmul_us(int64_t T, int64_t out, int64_t in) {
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, double> cache;
  const auto key = std::make_tuple(int(active_isa()), T, out, in);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const std::vector<float> w = vec(size_t(out * in), uint64_t(out + in), 0.05f);
  const std::vector<float> x = vec(size_t(T * in), 7);
  std::vector<float> y(size_t(T * out));
  const Mat W{DType::F32, out, in, w.data(), "bench.down_proj"};
  matmul(x.data(), T, W, nullptr, y.data());  // warm up (pages, caches, threads)
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul(x.data(), T, W, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    t.push_back(seconds_since(t0) * 1e6);
  }
  std::sort(t.begin(), t.end());
  return cache[key] = t[2];
}

// Largest singular value of B [m, m] (power iteration on BᵀB, in double).
double sigma_max(const std::vector<float>& B, int m) {
  std::vector<double> v(size_t(m), 1.0 / std::sqrt(double(m))), t(size_t(m), 0.0), u(size_t(m), 0.0);
  double lambda = 1.0;
  for (int it = 0; it < 200; ++it) {
    for (int i = 0; i < m; ++i) {  // t = B v
      t[size_t(i)] = 0;
      for (int j = 0; j < m; ++j) t[size_t(i)] += double(B[size_t(i * m + j)]) * v[size_t(j)];
    }
    double nrm = 0;
    for (int j = 0; j < m; ++j) {  // u = Bᵀ t
      u[size_t(j)] = 0;
      for (int i = 0; i < m; ++i) u[size_t(j)] += double(B[size_t(i * m + j)]) * t[size_t(i)];
      nrm += u[size_t(j)] * u[size_t(j)];
    }
    nrm = std::sqrt(nrm);
    lambda = nrm;  // ||BᵀB v|| with ||v|| = 1 -> σ_max²
    for (int j = 0; j < m; ++j) v[size_t(j)] = u[size_t(j)] / nrm;
  }
  return std::sqrt(lambda);
}

// Args: isa, rows, pow2, m, and the weight the rotation sits next to: out, in.
void BM_Hadamard(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const int64_t rows = st.range(1), pow2 = st.range(2), out = st.range(4), in = st.range(5);
  const int m = int(st.range(3));
  const int64_t n = pow2 * m;
  std::vector<float> base = vec(size_t(m * m), 3);
  for (float& b : base) b = b < 0 ? -1.0f : 1.0f;
  std::vector<float> x = vec(size_t(rows * n), 5);
  const float scale = float(1.0 / (std::sqrt(double(pow2)) * sigma_max(base, m)));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) {
    hadamard_rows(x.data(), rows, pow2, m, base.data(), scale);
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  const double us = seconds_since(t0) * 1e6 / double(std::max<int64_t>(1, st.iterations()));
  const double mm = matmul_us(rows * n / in, out, in);  // the same activations as [T, in]
  st.counters["matmul_us"] = mm;
  st.counters["ratio"] = us / mm;
  st.SetBytesProcessed(int64_t(st.iterations()) * rows * n * 8);  // read + write x
}
BENCHMARK(BM_Hadamard)
    ->ArgsProduct({{0, 1, 2}, {32}, {128}, {1}, {4096}, {4096}})
    ->ArgsProduct({{0, 1, 2}, {1}, {128}, {44}, {2048}, {5632}})
    ->ArgsProduct({{0, 1, 2}, {1}, {64}, {172}, {4096}, {11008}})
    ->ArgsProduct({{0, 1, 2}, {1}, {512}, {28}, {4096}, {14336}})
    ->ArgsProduct({{0, 1, 2}, {512}, {128}, {44}, {2048}, {5632}})
    ->ArgNames({"isa", "rows", "pow2", "m", "w_out", "w_in"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace sinkq
