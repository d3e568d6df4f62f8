// bench/kernels_bench.cc — Google Benchmark suite of the fp32 kernels (sinkq_kernel_bench).
//
// GEMV (decode, T=1): every weight dtype x ISA at TinyLlama-1.1B shapes; bytes/s counts weight
// bytes only (x and y are < 0.1% of the traffic), to set against BM_MemBw's measured read
// bandwidth. 2048x2048 BF16 (8 MiB) fits a 32 MiB L3, so its figure is a cache figure; 32000x2048
// (the lm_head, 125-250 MiB) is the honest DRAM one.
// Prefill: matmul T=512, attention, rmsnorm, rope, silu_mul. Attention shapes: 32 heads, 4 KV
// heads, head_dim 64 (TinyLlama).
//   ./sinkq_kernel_bench --benchmark_filter=Gemv --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/mat.h"
#include "kernels/cpu_features.h"
#include "kernels/membw.h"
#include "kernels/ops.h"

namespace sinkq {
namespace {

using bench::float_gemv;
using bench::Lcg;
using bench::use_isa;
using bench::vec;


// A [rows, cols] weight matrix in `dt`, created once per shape and kept for the whole run.
const Mat& weights(DType dt, int64_t rows, int64_t cols) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::pair<std::vector<uint8_t>, Mat>> cache;
  auto key = std::make_tuple(int(dt), rows, cols);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.second;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols) * dtype_size(dt));
  Lcg g{uint64_t(rows * 131 + cols)};
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = g.next() * 0.05f;
    if (dt == DType::F32) std::memcpy(bytes.data() + 4 * i, &v, 4);
    else {
      const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  auto& e = cache[key];
  e.first = std::move(bytes);
  e.second = Mat{dt, rows, cols, e.first.data(), "bench"};
  return e.second;
}

// Args: isa, dtype, out, in.
void BM_Gemv(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  float_gemv(st, weights(DType(st.range(1)), st.range(2), st.range(3)));
}
void gemv_args(benchmark::internal::Benchmark* b) {
  for (int isa = 0; isa <= 2; ++isa)
    for (int dt : {int(DType::F32), int(DType::BF16), int(DType::F16)})
      for (auto [o, i] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}})
        b->Args({isa, dt, o, i});
  b->ArgNames({"isa", "dtype", "out", "in"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Gemv)->Apply(gemv_args);

// Decode's real case: every call's matrix comes from DRAM (between two uses of a matrix the
// model's other weights pass through the caches). Copies of one matrix totalling >= 256 MiB,
// called in turn, so each call starts cold as in a decode step — also at SmolLM2-135M's small
// shapes, where per-call start-up shows. Bytes/s of weights, against BM_MemBw. Args: isa, dtype,
// out, in.
void BM_GemvCold(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const Mat& W = weights(DType(st.range(1)), st.range(2), st.range(3));
  const size_t bytes = size_t(W.rows * W.cols) * dtype_size(W.dtype);
  const size_t copies = std::max<size_t>(2, (size_t(256) << 20) / bytes + 1);
  std::vector<uint8_t> store(copies * bytes);
  std::vector<Mat> mats;
  for (size_t c = 0; c < copies; ++c) {
    std::memcpy(store.data() + c * bytes, W.data, bytes);
    mats.push_back(Mat{W.dtype, W.rows, W.cols, store.data() + c * bytes, "bench"});
  }
  const std::vector<float> x = vec(size_t(W.cols), 1);
  std::vector<float> y(static_cast<size_t>(W.rows));
  size_t c = 0;
  for (auto _ : st) {
    matmul(x.data(), 1, mats[c], nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    c = c + 1 == copies ? 0 : c + 1;
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(bytes));
  st.SetLabel(std::string(isa_name(active_isa())) + " " + std::string(dtype_name(W.dtype)));
}
void gemv_cold_args(benchmark::internal::Benchmark* b) {
  // SmolLM2-135M's q / gate / down projections, the 1B shape's gate.
  for (int isa : {1, 2})
    for (int dt : {int(DType::F32), int(DType::BF16)})
      for (auto [o, i] : {std::pair{576, 576}, {1536, 576}, {576, 1536}, {5632, 2048}}) b->Args({isa, dt, o, i});
  b->ArgNames({"isa", "dtype", "out", "in"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_GemvCold)->Apply(gemv_cold_args);

// Small-T batches (speculative decode, short prompts): all T tokens share one pass over the
// weights up to KernelTable::gemv_max_t (64 AVX-512, 16 AVX2), sgemm above. Args: T.
void BM_GemvSmallT(benchmark::State& st) {
  set_isa(detected_isa());
  const int64_t T = st.range(0);
  const Mat& W = weights(DType::BF16, 5632, 2048);
  const std::vector<float> x = vec(size_t(T * 2048), 2);
  std::vector<float> y(static_cast<size_t>(T * 5632));
  for (auto _ : st) matmul(x.data(), T, W, nullptr, y.data());
  st.SetBytesProcessed(int64_t(st.iterations()) * 5632 * 2048 * 2);
}
BENCHMARK(BM_GemvSmallT)
    ->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(65)->Arg(128)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Prefill matmul. Args: isa, dtype, T, out, in. Counter FLOPS = 2 T out in per second. The sgemm
// behind it is oneDNN's on the AVX-512 path and OpenBLAS's on the AVX2 path (kernels/ops.cc
// sgemm_1t): isa 1 against isa 2 at the same shape is the library choice, measured.
void BM_Matmul(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const DType dt = DType(st.range(1));
  const int64_t T = st.range(2), out = st.range(3), in = st.range(4);
  const Mat& W = weights(dt, out, in);
  const std::vector<float> x = vec(size_t(T * in), 3);
  std::vector<float> y(static_cast<size_t>(T * out));
  for (auto _ : st) matmul(x.data(), T, W, nullptr, y.data());
  st.counters["FLOPS"] = benchmark::Counter(2.0 * T * out * in, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(std::string(isa_name(active_isa())) + " " + std::string(dtype_name(dt)));
}
void matmul_args(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2}) {
    // SmolLM2-135M's MLP (K = 576 / 1536) and the 1B shape.
    for (auto [o, i] : {std::pair{1536, 576}, {576, 1536}, {2048, 2048}, {5632, 2048}})
      b->Args({isa, int(DType::F32), 512, o, i});
    for (auto [o, i] : {std::pair{2048, 2048}, {5632, 2048}, {2048, 5632}}) b->Args({isa, int(DType::BF16), 512, o, i});
    b->Args({isa, int(DType::F16), 512, 2048, 2048});
  }
  b->ArgNames({"isa", "dtype", "T", "out", "in"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_Matmul)->Apply(matmul_args);

// Baseline for the design choice: one sgemm with OpenBLAS's own 2..N threads (what we avoid
// to keep a single thread pool) vs BM_Matmul F32 (OpenMP split over single-threaded sgemms).
void BM_SgemmOpenBlasThreaded(benchmark::State& st) {
  const int64_t T = 512, out = 2048, in = 2048;
  const Mat& W = weights(DType::F32, out, in);
  const std::vector<float> x = vec(size_t(T * in), 3);
  std::vector<float> y(static_cast<size_t>(T * out));
  openblas_set_num_threads(num_threads());
  for (auto _ : st)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, out, in, 1.0f, x.data(), in,
                static_cast<const float*>(W.data), in, 0.0f, y.data(), out);
  openblas_set_num_threads(1);
  st.counters["FLOPS"] = benchmark::Counter(2.0 * T * out * in, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SgemmOpenBlasThreaded)->Unit(benchmark::kMillisecond)->UseRealTime();

// Attention. Args: isa, n_past, T (decode: T = 1 at context n_past + 1).
void BM_Attention(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const int64_t n_past = st.range(1), T = st.range(2);
  const AttnShape s{32, 4, 64, 0};
  const int64_t n_ctx = n_past + T;
  const std::vector<float> q = vec(size_t(T * 32 * 64), 4), k = vec(size_t(n_ctx * 4 * 64), 5),
                           v = vec(size_t(n_ctx * 4 * 64), 6);
  std::vector<float> out(q.size());
  for (auto _ : st) attention(s, q.data(), k.data(), v.data(), n_past, T, out.data());
  // QK and PV: 2 * 2 * head_dim flops per (query, head, visible key).
  double keys = 0;
  for (int64_t t = 0; t < T; ++t) keys += double(n_past + t + 1);
  st.counters["FLOPS"] = benchmark::Counter(4.0 * 64 * 32 * keys, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{0, 1, 2}, {511, 2047}, {1}})
    ->ArgsProduct({{0, 1, 2}, {0}, {512}})
    ->ArgsProduct({{2}, {512}, {8, 16, 32, 64}})  // prefill chunks behind a context
    ->ArgNames({"isa", "n_past", "T"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Elementwise ops at decode (T = 1) and prefill (T = 512). Args: T.
void BM_RmsNorm(benchmark::State& st) {
  set_isa(detected_isa());
  const int64_t T = st.range(0), n = 2048;
  std::vector<float> x = vec(size_t(T * n), 7), w = vec(size_t(n), 8), y(x.size());
  for (auto _ : st) rmsnorm(x.data(), w.data(), y.data(), T, n, 1e-5f);
  st.SetBytesProcessed(int64_t(st.iterations()) * T * n * 8);
}
BENCHMARK(BM_RmsNorm)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Rope(benchmark::State& st) {
  RopeParams p;
  p.head_dim = 64;
  p.theta = 10000.0f;
  const RopeTable rt = RopeTable::make(p);
  const int64_t T = st.range(0);
  std::vector<float> x = vec(size_t(T * 32 * 64), 9);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 100);
  for (auto _ : st) rope_apply(rt, x.data(), T, 32, pos);
}
BENCHMARK(BM_Rope)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SiluMul(benchmark::State& st) {
  set_isa(detected_isa());
  const int64_t T = st.range(0), n = 5632;
  std::vector<float> g = vec(size_t(T * n), 10), u = vec(size_t(T * n), 11);
  for (auto _ : st) {
    st.PauseTiming();
    std::vector<float> gg = g;
    st.ResumeTiming();
    silu_mul(gg.data(), u.data(), T, n);
    benchmark::DoNotOptimize(gg.data());
  }
}
BENCHMARK(BM_SiluMul)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Main-memory read bandwidth (1 GiB buffer, all threads), the yardstick for the GEMV GB/s.
void BM_MemBw(benchmark::State& st) {
  set_isa(detected_isa());
  double gbs = 0;
  for (auto _ : st) gbs = measure_read_bandwidth_gbs();
  st.counters["read_GBps"] = gbs;
}
BENCHMARK(BM_MemBw)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace sinkq
