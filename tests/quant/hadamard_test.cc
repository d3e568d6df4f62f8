// tests/quant/hadamard_test.cc — Hadamard matrices (exact, in integers) and the fast transform
// (against the explicit matrix with a rounding-error bound), orthogonality, inverse, random signs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/hadamard.h"

namespace sinkq::quant {
namespace {

using ::testing::HasSubstr;

constexpr double kU = 0x1p-24;
// Higham's gamma_k = k u / (1 - k u): bound on the relative error of k chained fp32 roundings.
double gamma(double k) { return k * kU / (1.0 - k * kU); }

std::vector<float> randn(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

int log2i(int64_t p) {
  int k = 0;
  while ((int64_t(1) << k) < p) ++k;
  return k;
}

// Each output of the transform is a signed sum of all n inputs evaluated along a tree of depth
// (m - 1) [the m-part dot product] + log2(P) [the butterflies], then scaled by fl(1/√n): two more
// roundings. So |y_fast - y_exact| <= gamma(m + log2 P + 2) · ||x||_1 / √n per element.
double elem_tol(int64_t n, const float* x) {
  const HadamardFactors f = hadamard_factors(n);
  double l1 = 0;
  for (int64_t k = 0; k < n; ++k) l1 += std::fabs(x[k]);
  return gamma(double(f.m + log2i(f.pow2) + 2)) * l1 / std::sqrt(double(n));
}

TEST(Hadamard, BaseMatricesAreHadamardInIntegers) {
  for (int m : kHadamardBaseSizes) {
    const std::vector<int8_t>& H = hadamard_base(m);
    ASSERT_EQ(H.size(), size_t(m) * size_t(m));
    for (int8_t v : H) ASSERT_TRUE(v == 1 || v == -1) << m;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        int dot = 0;
        for (int k = 0; k < m; ++k) dot += H[size_t(i * m + k)] * H[size_t(j * m + k)];
        ASSERT_EQ(dot, i == j ? m : 0) << "m=" << m << " (" << i << "," << j << ")";
      }
  }
}

TEST(Hadamard, KroneckerMatricesSatisfyHHtEqualsNI) {
  // For every m and k = 0, 2: the explicit H_n (n up to 688) is ±1 with H·Hᵀ = n·I exactly.
  for (int m : kHadamardBaseSizes)
    for (int k : {0, 2}) {
      const int64_t n = int64_t(m) << k;
      const std::vector<float> Hf = hadamard_matrix(n);
      std::vector<int8_t> H(Hf.size());
      for (size_t t = 0; t < Hf.size(); ++t) {
        ASSERT_TRUE(Hf[t] == 1.0f || Hf[t] == -1.0f);
        H[t] = int8_t(Hf[t]);
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i; j < n; ++j) {
          int32_t dot = 0;
          const int8_t* a = H.data() + i * n;
          const int8_t* b = H.data() + j * n;
          for (int64_t t = 0; t < n; ++t) dot += a[t] * b[t];
          ASSERT_EQ(dot, i == j ? n : 0) << "n=" << n << " (" << i << "," << j << ")";
        }
    }
}

TEST(Hadamard, FastTransformEqualsExplicitMatrix) {
  std::mt19937_64 rng(1);
  for (int m : kHadamardBaseSizes)
    for (int k : {0, 1, 3}) {
      const int64_t n = int64_t(m) << k, rows = 3;
      const std::vector<float> H = hadamard_matrix(n);
      const std::vector<float> x = randn(rng, size_t(rows * n));
      std::vector<float> fwd = x, inv = x;
      fwht_inplace(fwd.data(), rows, n);
      fwht_inverse_inplace(inv.data(), rows, n);
      const double norm = 1.0 / std::sqrt(double(n));
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        const double tol = elem_tol(n, xr);
        for (int64_t j = 0; j < n; ++j) {
          long double yf = 0, yi = 0;  // x·H and x·Hᵀ
          for (int64_t i = 0; i < n; ++i) {
            yf += (long double)xr[i] * H[size_t(i * n + j)];
            yi += (long double)xr[i] * H[size_t(j * n + i)];
          }
          ASSERT_NEAR(fwd[size_t(r * n + j)], double(yf) * norm, tol) << "n=" << n << " j=" << j;
          ASSERT_NEAR(inv[size_t(r * n + j)], double(yi) * norm, tol) << "n=" << n << " j=" << j;
        }
      }
    }
}

TEST(Hadamard, PaleyOneIsNotSymmetricSoTheInverseNeedsTheTranspose) {
  const std::vector<float> H = hadamard_matrix(12);
  bool symmetric = true;
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 12; ++j) symmetric &= H[size_t(i * 12 + j)] == H[size_t(j * 12 + i)];
  EXPECT_FALSE(symmetric);
  // Paley II and Sylvester are symmetric: forward == inverse there.
  for (int64_t n : {36, 52, 64}) {
    const std::vector<float> S = hadamard_matrix(n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(S[size_t(i * n + j)], S[size_t(j * n + i)]) << n;
  }
}

TEST(Hadamard, PreservesNormAndInverseUndoesForward) {
  // ||fwd(x)||_2 vs ||x||_2: the error vector has 2-norm <= √n · elem_tol = gamma·||x||_1.
  // inverse(forward(x)) - x: the forward error passes through an orthogonal map, and the inverse
  // adds gamma·||y||_1/√n <= gamma·||x||_2 per element (+ the forward error's own share).
  std::mt19937_64 rng(2);
  for (int m : kHadamardBaseSizes)
    for (int k : {0, 4, 6}) {
      const int64_t n = int64_t(m) << k;
      const std::vector<float> x = randn(rng, size_t(n));
      std::vector<float> y = x;
      fwht_inplace(y.data(), 1, n);
      double nx = 0, ny = 0, l1 = 0;
      for (int64_t i = 0; i < n; ++i) {
        nx += double(x[size_t(i)]) * x[size_t(i)];
        ny += double(y[size_t(i)]) * y[size_t(i)];
        l1 += std::fabs(x[size_t(i)]);
      }
      nx = std::sqrt(nx);
      ny = std::sqrt(ny);
      const double g = gamma(double(m + k + 2));
      EXPECT_NEAR(ny, nx, g * l1 + 1e-12 * nx) << "n=" << n;
      fwht_inverse_inplace(y.data(), 1, n);
      const double tol = g * (l1 + 2 * nx);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[size_t(i)], x[size_t(i)], tol) << "n=" << n << " i=" << i;
    }
}

TEST(Hadamard, SizeFactorization) {
  EXPECT_EQ(hadamard_factors(4096).m, 1);
  EXPECT_EQ(hadamard_factors(4096).pow2, 4096);
  EXPECT_EQ(hadamard_factors(11008).m, 172);   // Llama-2-7B intermediate
  EXPECT_EQ(hadamard_factors(14336).m, 28);    // Llama-3-8B intermediate
  EXPECT_EQ(hadamard_factors(13824).m, 108);   // Llama-2-13B intermediate
  EXPECT_EQ(hadamard_factors(40).m, 20);       // 40·2^k is the same matrix as 20·2^(k+1)
  EXPECT_EQ(hadamard_factors(40).pow2, 2);
  // ... and the m = 40 base table is exactly H_2 ⊗ H_20.
  const std::vector<float> h40 = hadamard_matrix(40);
  const std::vector<int8_t>& b40 = hadamard_base(40);
  for (size_t t = 0; t < h40.size(); ++t) ASSERT_EQ(h40[t], float(b40[t]));
  for (int64_t n : {1, 2, 12, 24, 44, 5632, 156, 172 * 64, 140 * 32})
    EXPECT_TRUE(hadamard_supported(n)) << n;
  for (int64_t n : {0, -4, 3, 22, 18944, 100})
    EXPECT_FALSE(hadamard_supported(n)) << n;
}

TEST(Hadamard, UnsupportedSizesThrowNamingTheSize) {
  for (int64_t n : {0, 22, 18944}) {
    std::string msg;
    try {
      hadamard_factors(n);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_THAT(msg, HasSubstr("size " + std::to_string(n)));
    EXPECT_THAT(msg, HasSubstr("172"));
  }
  std::vector<float> x(22, 1.0f);
  EXPECT_THROW(fwht_inplace(x.data(), 1, 22), Error);
  EXPECT_THROW(RandomHadamard(22, 1), Error);
  EXPECT_THROW(hadamard_matrix(7), Error);
  EXPECT_THROW(hadamard_base(24), Error);
}

TEST(Hadamard, RandomHadamardIsASeededOrthogonalRotation) {
  std::mt19937_64 rng(3);
  for (int64_t n : {64, 96, 172}) {
    const RandomHadamard R(n, 42);
    EXPECT_EQ(R.signs(), RandomHadamard(n, 42).signs());  // deterministic in the seed
    EXPECT_NE(R.signs(), RandomHadamard(n, 43).signs());
    int neg = 0;
    for (float s : R.signs()) {
      ASSERT_TRUE(s == 1.0f || s == -1.0f);
      neg += s < 0;
    }
    EXPECT_GT(neg, 0);
    EXPECT_LT(neg, n);
    const std::vector<float> Q = R.matrix();
    // Q·Qᵀ = I: entries ±1/√n (one rounding each), n-term sums in double.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < n; ++t) dot += double(Q[size_t(i * n + t)]) * Q[size_t(j * n + t)];
        ASSERT_NEAR(dot, i == j ? 1.0 : 0.0, 4 * kU) << n;
      }
    const std::vector<float> x = randn(rng, size_t(2 * n));
    std::vector<float> y = x;
    R.forward(y.data(), 2);
    const double tol0 = elem_tol(n, x.data()), tol1 = elem_tol(n, x.data() + n);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t j = 0; j < n; ++j) {
        long double want = 0;  // x·Q, Q = diag(d)·H/√n
        for (int64_t i = 0; i < n; ++i) want += (long double)x[size_t(r * n + i)] * Q[size_t(i * n + j)];
        ASSERT_NEAR(y[size_t(r * n + j)], double(want), (r ? tol1 : tol0) + 2 * kU * std::fabs(double(want)));
      }
    R.inverse(y.data(), 2);
    for (int64_t r = 0; r < 2; ++r) {  // the bound of PreservesNormAndInverseUndoesForward
      double l1 = 0, l2 = 0;
      for (int64_t i = 0; i < n; ++i) {
        l1 += std::fabs(x[size_t(r * n + i)]);
        l2 += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
      }
      const HadamardFactors f = hadamard_factors(n);
      const double tol = gamma(double(f.m + log2i(f.pow2) + 2)) * (l1 + 2 * std::sqrt(l2));
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[size_t(r * n + i)], x[size_t(r * n + i)], tol) << n;
    }
  }
}

}  // namespace
}  // namespace sinkq::quant
