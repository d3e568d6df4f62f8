// tests/kernels/kernel_test_util.h — shared helpers of the kernels tests: ISA loops, random
// data, matrices in any dtype, and the rounding-error constants the tolerances are built from.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/weights.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace sinkq::ktest {

// Unit roundoff of fp32 round-to-nearest.
inline constexpr double kU = 0x1p-24;
// Higham's gamma_n = n u / (1 - n u): |fl(sum of n products) - exact| <= gamma_n * sum|products|
// for any summation order, with or without FMA.
inline double gamma(double n) { return n * kU / (1.0 - n * kU); }
// Relative error bound of the fast exp (SIMD polynomial, ~2-3 ulp measured; libm: < 1 ulp).
inline constexpr double kExpRel = 4 * kU;

// Every ISA this CPU can run, scalar first.
inline std::vector<Isa> all_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(detected_isa()); ++i) v.push_back(Isa(i));
  return v;
}

// Restores the ISA and thread count a test changed.
struct StateGuard {
  Isa isa = active_isa();
  int threads = num_threads();
  ~StateGuard() {
    set_isa(isa);
    set_num_threads(threads);
  }
};

inline std::vector<float> random_vec(std::mt19937_64& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A row-major [rows, cols] matrix stored in `dtype`, plus its exact fp32 widening.
struct TestMat {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> widened;  // exactly what the stored values mean
  Mat mat() const { return Mat{dtype, rows, cols, bytes.data(), "test." + std::string(dtype_name(dtype))}; }
  Mat f32_mat() const { return Mat{DType::F32, rows, cols, widened.data(), "test.widened"}; }
};

inline TestMat random_mat(std::mt19937_64& rng, DType dt, int64_t rows, int64_t cols, float scale = 1.0f) {
  TestMat m{dt, rows, cols, {}, {}};
  const std::vector<float> v = random_vec(rng, size_t(rows * cols), -scale, scale);
  m.bytes.resize(v.size() * dtype_size(dt) + 64);  // slack: never read, catches nothing by luck
  m.widened.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(m.bytes.data() + 4 * i, &v[i], 4);
      m.widened[i] = v[i];
    } else {
      const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(m.bytes.data() + 2 * i, &h, 2);
      m.widened[i] = dt == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return m;
}

inline std::string ctx(Isa isa, const std::string& what) { return std::string(isa_name(isa)) + " " + what; }

}  // namespace sinkq::ktest
