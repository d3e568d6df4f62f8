// bench/bench_util.h — pieces shared by the benchmark binaries: deterministic inputs, the ISA
// argument, and the fp32/bf16 GEMV that every low-bit figure is set against.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/weights.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace sinkq::bench {

// Deterministic pseudo-random values in [-1, 1) (cheap enough for 65M-element matrices).
struct Lcg {
  uint64_t s;
  float next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float(int32_t(s >> 32)) * (1.0f / 2147483648.0f);
  }
};

inline std::vector<float> vec(size_t n, uint64_t seed, float scale = 1.0f) {
  Lcg g{seed};
  std::vector<float> v(n);
  for (float& x : v) x = g.next() * scale;
  return v;
}

// Selects the ISA of argument `isa` (an Isa value); skips the benchmark when the CPU lacks it.
inline bool use_isa(benchmark::State& st, int64_t isa) {
  if (isa > int64_t(detected_isa())) {
    st.SkipWithError("ISA not supported on this CPU");
    return false;
  }
  set_isa(Isa(isa));
  st.SetLabel(std::string(isa_name(Isa(isa))));
  return true;
}

// Uniform weights in (-0.05, 0.05), [rows, cols], created once per shape (lowbit_bench, vs_ggml).
inline const std::vector<float>& f32_weights(int64_t rows, int64_t cols) {
  static std::map<std::pair<int64_t, int64_t>, std::vector<float>> cache;
  auto& w = cache[{rows, cols}];
  if (w.empty()) w = vec(size_t(rows * cols), uint64_t(rows * 131 + cols), 0.05f);
  return w;
}

// The same weights as a Mat in F32 or BF16.
inline const Mat& mat(DType dt, int64_t rows, int64_t cols) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::pair<std::vector<uint16_t>, Mat>> cache;
  auto& e = cache[{int(dt), rows, cols}];
  if (e.second.empty()) {
    const std::vector<float>& w = f32_weights(rows, cols);
    if (dt == DType::F32) {
      e.second = Mat{dt, rows, cols, w.data(), "bench"};
    } else {
      e.first.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) e.first[i] = f32_to_bf16(w[i]);
      e.second = Mat{dt, rows, cols, e.first.data(), "bench"};
    }
  }
  return e.second;
}

// matmul with T = 1 on W; bytes/s = the weight bytes streamed. Args: isa, dtype, out, in.
inline void float_gemv(benchmark::State& st, const Mat& W) {
  const std::vector<float> x = vec(size_t(W.cols), 1);
  std::vector<float> y(static_cast<size_t>(W.rows));
  for (auto _ : st) {
    matmul(x.data(), 1, W, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * W.rows * W.cols * int64_t(dtype_size(W.dtype)));
  st.SetLabel(std::string(isa_name(active_isa())) + " " + std::string(dtype_name(W.dtype)));
}

}  // namespace sinkq::bench
