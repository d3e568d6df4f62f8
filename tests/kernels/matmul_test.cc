// tests/kernels/matmul_test.cc — matmul (GEMV for small T, sgemm above) against ref::matmul.
// T covers both sides of every ISA's GEMV/sgemm switch (8 scalar, 16 AVX2, 64 AVX-512).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace sinkq {
namespace {

using ktest::gamma;
using ktest::kU;

struct Shape {
  int64_t out, in;
};
const Shape kShapes[] = {{1, 1}, {3, 5}, {13, 17}, {67, 63}, {130, 100}, {9, 257}, {33, 1000}, {17, 2051}, {301, 1000}};
const int64_t kTs[] = {1, 2, 3, 5, 7, 8, 9, 17, 33, 64, 65};
const DType kDtypes[] = {DType::F32, DType::BF16, DType::F16};

// sum_k |x_tk w_rk| (+ |b_r|) in double: the scale of the dot product's rounding error.
std::vector<double> abs_dots(const std::vector<float>& x, int64_t T, const ktest::TestMat& W,
                             const float* bias) {
  std::vector<double> s(static_cast<size_t>(T * W.rows));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < W.rows; ++r) {
      double a = bias ? std::fabs(bias[r]) : 0.0;
      for (int64_t k = 0; k < W.cols; ++k)
        a += std::fabs(double(x[t * W.cols + k]) * W.widened[r * W.cols + k]);
      s[t * W.rows + r] = a;
    }
  return s;
}

// Bound: the fast result is an fp32 sum of in products (+ bias) in some order, so
// |fast - exact| <= gamma_{in+1} * sum|x w| (+|b|); ref is exact then rounded once (u |ref|).
TEST(Matmul, FastMatchesRefEveryIsaDtypeShape) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(42);
  int cases = 0;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (DType dt : kDtypes)
      for (const Shape& sh : kShapes)
        for (int64_t T : kTs) {
          const ktest::TestMat W = ktest::random_mat(rng, dt, sh.out, sh.in);
          const std::vector<float> x = ktest::random_vec(rng, size_t(T * sh.in));
          const std::vector<float> b = ktest::random_vec(rng, size_t(sh.out));
          const float* bias = (T + sh.out) % 2 ? b.data() : nullptr;
          std::vector<float> y(static_cast<size_t>(T * sh.out), NAN), yr(y.size());
          matmul(x.data(), T, W.mat(), bias, y.data());
          ref::matmul(x.data(), T, W.mat(), bias, yr.data());
          const std::vector<double> s = abs_dots(x, T, W, bias);
          double worst = 0.0;
          for (size_t i = 0; i < y.size(); ++i) {
            const double tol = gamma(double(sh.in + 1)) * s[i] + kU * std::fabs(yr[i]) + 1e-37;
            worst = std::max(worst, std::fabs(double(y[i]) - yr[i]) / tol);
            if (std::isnan(y[i])) worst = INFINITY;
          }
          EXPECT_LE(worst, 1.0) << ktest::ctx(isa, std::string(dtype_name(dt))) << " T=" << T
                                << " out=" << sh.out << " in=" << sh.in;
          ++cases;
        }
  }
  EXPECT_GT(cases, 0);
}

// BF16/F16 weights through the fast path vs the widened fp32 matrix through the fast path (same
// values, possibly different kernels and summation orders): both are within gamma_{in+1} sum|x w|
// of the exact result, so they differ by at most twice that.
TEST(Matmul, HalfWeightsMatchWidenedF32) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(7);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (DType dt : {DType::BF16, DType::F16})
      for (int64_t T : {int64_t(1), int64_t(4), int64_t(9), int64_t(64)}) {
        const ktest::TestMat W = ktest::random_mat(rng, dt, 75, 301);
        const std::vector<float> x = ktest::random_vec(rng, size_t(T * 301));
        std::vector<float> yh(static_cast<size_t>(T * 75)), yf(yh.size());
        matmul(x.data(), T, W.mat(), nullptr, yh.data());
        matmul(x.data(), T, W.f32_mat(), nullptr, yf.data());
        const std::vector<double> s = abs_dots(x, T, W, nullptr);
        for (size_t i = 0; i < yh.size(); ++i)
          ASSERT_LE(std::fabs(double(yh[i]) - yf[i]), 2 * gamma(302) * s[i] + 1e-37)
              << ktest::ctx(isa, std::string(dtype_name(dt))) << " T=" << T << " i=" << i;
      }
  }
}

// Each output is computed by one thread in an order fixed by `in` (GEMV) or by a fixed block of
// rows through a single-threaded sgemm (block bounds do not depend on the thread count): results
// are bit-identical for any thread count (the forward pass is reproducible across SINKQ_THREADS).
TEST(Matmul, IndependentOfThreadCount) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(3);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (DType dt : kDtypes)
      for (int64_t T : {int64_t(1), int64_t(3), int64_t(8), int64_t(20), int64_t(64)}) {
        const ktest::TestMat W = ktest::random_mat(rng, dt, 1001, 333);
        const std::vector<float> x = ktest::random_vec(rng, size_t(T * 333));
        std::vector<float> y1(size_t(T * 1001)), y2(y1.size());
        set_num_threads(1);
        matmul(x.data(), T, W.mat(), nullptr, y1.data());
        set_num_threads(2);
        matmul(x.data(), T, W.mat(), nullptr, y2.data());
        EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4))
            << ktest::ctx(isa, std::string(dtype_name(dt))) << " T=" << T;
      }
  }
}

// matmul_rowwise_max(): up to that many rows, every row of a matmul has the bits of that row
// computed alone, on every ISA (what makes Forward::step_batch, continuous batching in sinkq
// serve, give each session exactly its own logits). Random values: any change of a row's
// summation order shows in the low bits.
TEST(Matmul, RowsUpToRowwiseMaxEqualEachRowAlone) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(5);
  const int64_t Tmax = matmul_rowwise_max();
  ASSERT_GE(Tmax, 3);
  // 577 rows: a remainder after every ISA's small-batch tile (6 / 3 rows); T = 3: a pass with one
  // token after the two-token tiles. in = 333 ends on a masked step into chain 0 (every ISA),
  // in = 349 on a full step into chain 0 and a masked one into chain 1 (AVX-512 and AVX2).
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (DType dt : kDtypes)
      for (int64_t in : {int64_t(333), int64_t(349)})
        for (int64_t T : {int64_t(3), Tmax}) {
          const ktest::TestMat W = ktest::random_mat(rng, dt, 577, in);
          const std::vector<float> x = ktest::random_vec(rng, size_t(T * in));
          const std::vector<float> b = ktest::random_vec(rng, 577);
          std::vector<float> all(size_t(T * 577)), one(577);
          matmul(x.data(), T, W.mat(), b.data(), all.data());
          for (int64_t t = 0; t < T; ++t) {
            matmul(x.data() + t * in, 1, W.mat(), b.data(), one.data());
            EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * 577, 577 * 4))
                << ktest::ctx(isa, std::string(dtype_name(dt))) << " in=" << in << " row " << t << " of " << T;
          }
        }
  }
}

// Exact cases: small integers multiply and add exactly in fp32 in any order.
TEST(Matmul, ExactOnSmallIntegers) {
  ktest::StateGuard guard;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int64_t T : {int64_t(1), int64_t(2), int64_t(20)}) {
      const int64_t out = 19, in = 37;
      std::vector<float> w(static_cast<size_t>(out * in)), x(static_cast<size_t>(T * in)), b(static_cast<size_t>(out));
      for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3);
      for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 5) - 2);
      for (size_t i = 0; i < b.size(); ++i) b[i] = float(i);
      std::vector<float> y(static_cast<size_t>(T * out)), yr(y.size());
      matmul(x.data(), T, Mat{DType::F32, out, in, w.data(), "w"}, b.data(), y.data());
      ref::matmul(x.data(), T, Mat{DType::F32, out, in, w.data(), "w"}, b.data(), yr.data());
      EXPECT_EQ(y, yr) << isa_name(isa) << " T=" << T;
    }
  }
}

TEST(Matmul, ZeroSizes) {
  std::vector<float> w(12, 1.0f), x(8, 1.0f), b = {1, 2, 3}, y(6, NAN);
  matmul(x.data(), 0, Mat{DType::F32, 3, 4, w.data(), "w"}, nullptr, y.data());
  EXPECT_TRUE(std::isnan(y[0]));  // T = 0: nothing written
  matmul(x.data(), 2, Mat{DType::F32, 3, 0, w.data(), "w"}, b.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 1, 2, 3}));  // in = 0: y = bias
}

}  // namespace
}  // namespace sinkq
