// kernels/ops.h gemm (OpenBLAS sgemm on fixed row blocks) against a double-precision loop, every
// transpose combination, sizes that leave partial blocks, beta = 0 and 1; and independent of the
// thread count (bit for bit).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/ops.h"

namespace sinkq {
namespace {

TEST(Gemm, MatchesDoubleLoopAndThreadCount) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t M = 150, N = 37, K = 70;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        std::vector<float> A(size_t(M * K)), B(size_t(K * N)), C0(size_t(M * N));
        for (float& v : A) v = d(rng);
        for (float& v : B) v = d(rng);
        for (float& v : C0) v = d(rng);
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        std::vector<float> C = C0;
        gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C.data(), N);
        double worst = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double a = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
              const double b = tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
              s += a * b;
              mag += std::abs(a * b);
            }
            const double want = 0.5 * s + beta * C0[size_t(i * N + j)];
            // fp32 dot of K terms: |err| <= K·2^-24·Σ|a·b| (plus one rounding of the sum).
            EXPECT_LE(std::abs(C[size_t(i * N + j)] - want), double(K + 2) * 0x1p-24 * (0.5 * mag + std::abs(want)) + 1e-30);
            worst = std::max(worst, std::abs(C[size_t(i * N + j)] - want));
          }
        const int saved = num_threads();
        set_num_threads(1);
        std::vector<float> C1 = C0;
        gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C1.data(), N);
        set_num_threads(saved);
        EXPECT_EQ(C1, C) << "ta " << ta << " tb " << tb;
      }
}

}  // namespace
}  // namespace sinkq
