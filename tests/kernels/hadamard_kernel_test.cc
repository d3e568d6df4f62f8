// tests/kernels/hadamard_kernel_test.cc — hadamard_rows: every ISA bit-identical to
// ref::hadamard_rows (sizes, row counts, signs, threads, out-of-bounds sentinels), the transform
// equal to x·(H_P ⊗ B)/√n, and orthogonality (inverse ∘ forward = identity within a γ bound).
//
// The kernels layer does not build Hadamard bases (quant/ does), so this file makes its own:
// Sylvester for m = 1, Paley I for q = 11, 19, 43 (m = 12, 20, 44), Paley II for q = 13 (m = 28),
// and a random ±1 matrix for m = 172 and m = 11 (not Hadamard: used where only the bit identity
// matters; quant_test covers the real 172, e.g. n = 11008 = 2^6·172).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/hadamard_kernels.h"
#include "kernel_test_util.h"

namespace sinkq {
namespace {

using ktest::gamma;

// Legendre symbol χ(a) mod prime q: 0, +1 (square) or -1.
int chi(int a, int q) {
  a = ((a % q) + q) % q;
  if (a == 0) return 0;
  for (int y = 1; y < q; ++y)
    if (y * y % q == a) return 1;
  return -1;
}

// Paley I, prime q ≡ 3 (mod 4): H = I + [[0, 1ᵀ], [-1, Q]], Q_ab = χ(a - b); order q + 1.
std::vector<float> paley1(int q) {
  const int m = q + 1;
  std::vector<float> H(size_t(m * m));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) {
      int s = i == 0 ? (j == 0 ? 0 : 1) : (j == 0 ? -1 : chi(i - j, q));
      H[size_t(i * m + j)] = float(s + (i == j ? 1 : 0));
    }
  return H;
}

// Paley II, prime q ≡ 1 (mod 4): C = [[0, 1ᵀ], [1, Q]] (symmetric conference matrix);
// H = C ⊗ [[1, 1], [1, -1]] + I ⊗ [[1, -1], [-1, -1]]; order 2(q + 1).
std::vector<float> paley2(int q) {
  const int c = q + 1, m = 2 * c;
  std::vector<float> H(size_t(m * m));
  const int K[2][2] = {{1, 1}, {1, -1}}, L[2][2] = {{1, -1}, {-1, -1}};
  for (int i = 0; i < c; ++i)
    for (int j = 0; j < c; ++j) {
      const int cij = i == 0 ? (j == 0 ? 0 : 1) : (j == 0 ? 1 : chi(i - j, q));
      for (int u = 0; u < 2; ++u)
        for (int v = 0; v < 2; ++v)
          H[size_t((2 * i + u) * m + 2 * j + v)] = float(cij * K[u][v] + (i == j ? L[u][v] : 0));
    }
  return H;
}

std::vector<float> random_signs(std::mt19937_64& rng, size_t n) {
  std::vector<float> s(n);
  for (float& v : s) v = (rng() >> 63) ? -1.0f : 1.0f;
  return s;
}

// The base of size m: a Hadamard matrix (verified: H·Hᵀ = m·I) where the test can build one.
struct Base {
  std::vector<float> h, ht;  // [m, m] and its transpose
  bool hadamard = false;
};
const Base& base(int m) {
  static std::map<int, Base> cache;
  auto it = cache.find(m);
  if (it != cache.end()) return it->second;
  Base b;
  std::mt19937_64 rng{uint64_t(m)};
  switch (m) {
    case 1: b.h = {1.0f}; break;
    case 12: b.h = paley1(11); break;
    case 20: b.h = paley1(19); break;
    case 28: b.h = paley2(13); break;
    case 44: b.h = paley1(43); break;
    default: b.h = random_signs(rng, size_t(m * m)); break;
  }
  b.ht.resize(b.h.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) b.ht[size_t(j * m + i)] = b.h[size_t(i * m + j)];
  b.hadamard = true;
  for (int i = 0; i < m && b.hadamard; ++i)
    for (int j = 0; j < m; ++j) {
      double dot = 0;
      for (int k = 0; k < m; ++k) dot += double(b.h[size_t(i * m + k)]) * b.h[size_t(j * m + k)];
      if (dot != (i == j ? m : 0)) {
        b.hadamard = false;
        break;
      }
    }
  return cache[m] = std::move(b);
}

struct Size {
  int64_t pow2;
  int m;
  int64_t n() const { return pow2 * m; }
};
// n = 1 .. 128 (pow2), 12, 20, 24 = 2·12, 40 = 2·20, 160 = 8·20, 172, 5632 = 128·44 (TinyLlama's
// intermediate; quant/ has no m = 44 base, the kernel takes any m), 11008 = 64·172 (Llama-2-7B),
// 14336 = 512·28 (Llama-3-8B), 4096 (hidden), and 512·11 (an odd m: masked tails everywhere).
const Size kSizes[] = {{1, 1},   {2, 1},    {4, 1},    {8, 1},   {16, 1},   {64, 1},
                       {128, 1}, {1, 12},   {1, 20},   {2, 12},  {2, 20},   {8, 20},
                       {1, 172}, {128, 44}, {64, 172}, {512, 28}, {4096, 1}, {512, 11},
                       {32, 1},  {256, 1},  {2048, 1}, {4, 28},  {16, 12}};

std::vector<float> randn(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n, size_t* first) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0) {
      *first = i;
      return false;
    }
  return true;
}

// Every ISA (and 1 or 2 threads) equals the reference bit for bit, with no writes outside x.
TEST(HadamardKernel, EveryIsaBitIdenticalToReference) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(11);
  constexpr size_t kGuard = 32;
  constexpr float kSentinel = -12345.678f;
  int cases = 0;
  for (const Size& sz : kSizes) {
    const int64_t n = sz.n();
    const Base& b = base(sz.m);
    const float scale = float(1.0 / std::sqrt(double(n)));
    for (int64_t rows : {1, 3, 8}) {
      if (rows * n > (int64_t(1) << 16) && rows > 1) continue;  // keep the big sizes quick
      std::vector<float> x = randn(rng, size_t(rows * n));
      // Row 1 (of 3 or 8) also has signed zeros, a huge and a subnormal value (all finite; the
      // huge one dominates its row, so the other rows stay plain Gaussian).
      if (rows > 1) {
        float* x1 = x.data() + n;
        x1[0] = -0.0f;
        if (n > 5) x1[3] = 0.0f, x1[2] = 3e37f, x1[5] = 1e-40f;
      }
      const std::vector<float> pre = random_signs(rng, size_t(n)), post = random_signs(rng, size_t(n));
      for (int signs = 0; signs < 3; ++signs) {
        const float* pp = signs == 1 ? pre.data() : nullptr;
        const float* po = signs == 2 ? post.data() : nullptr;
        std::vector<float> want = x;
        ref::hadamard_rows(want.data(), rows, sz.pow2, sz.m, b.h.data(), scale, pp, po);
        for (Isa isa : ktest::all_isas())
          for (int threads : {1, 2}) {
            set_isa(isa);
            set_num_threads(threads);
            std::vector<float> buf(x.size() + 2 * kGuard, kSentinel);
            std::copy(x.begin(), x.end(), buf.begin() + kGuard);
            hadamard_rows(buf.data() + kGuard, rows, sz.pow2, sz.m, b.h.data(), scale, pp, po);
            size_t at = 0;
            const std::string what = ktest::ctx(isa, "n=" + std::to_string(n) + " (" +
                                                         std::to_string(sz.pow2) + "x" +
                                                         std::to_string(sz.m) + ") rows=" +
                                                         std::to_string(rows) + " signs=" +
                                                         std::to_string(signs) + " threads=" +
                                                         std::to_string(threads));
            ASSERT_TRUE(same_bits(buf.data() + kGuard, want.data(), want.size(), &at))
                << what << " first difference at " << at << ": " << buf[kGuard + at] << " vs "
                << want[at];
            for (size_t i = 0; i < kGuard; ++i) {
              ASSERT_EQ(buf[i], kSentinel) << what << " wrote before x";
              ASSERT_EQ(buf[kGuard + x.size() + i], kSentinel) << what << " wrote past x";
            }
            ++cases;
          }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// Big row counts take the threaded path: 1 and 2 threads give the same bits.
TEST(HadamardKernel, ThreadCountDoesNotChangeResults) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(5);
  for (const Size sz : {Size{4096, 1}, Size{64, 20}, Size{32, 1}}) {
    const int64_t rows = sz.n() >= 1024 ? 40 : 2000, n = sz.n();
    const std::vector<float> x = randn(rng, size_t(rows * n));
    std::vector<float> one = x, two = x;
    set_num_threads(1);
    hadamard_rows(one.data(), rows, sz.pow2, sz.m, base(sz.m).h.data(), 0.5f);
    set_num_threads(2);
    hadamard_rows(two.data(), rows, sz.pow2, sz.m, base(sz.m).h.data(), 0.5f);
    size_t at = 0;
    EXPECT_TRUE(same_bits(one.data(), two.data(), one.size(), &at)) << "n=" << n << " at " << at;
  }
}

int log2i(int64_t p) {
  int k = 0;
  while ((int64_t(1) << k) < p) ++k;
  return k;
}

// Rounding depth of one output: the m-step adds m products (the first onto 0, exact), then
// log2(P) butterfly additions, then the multiply by fl(1/√n) (one rounding of the product, one of
// the scale itself): k = (m - 1) + log2 P + 2. Every output is ±x_i summed along that chain, so
// |ŷ_j - y_j| <= γ_k · ||x||_1 / √n (Higham, any summation order).
int depth(const Size& sz) { return sz.m - 1 + log2i(sz.pow2) + 2; }

// The fast transform equals x·(H_P ⊗ B)/√n computed exactly (long double) within that bound.
TEST(HadamardKernel, EqualsKroneckerProductMatrix) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(3);
  for (const Size& sz : kSizes) {
    const int64_t n = sz.n();
    if (n > 1024) continue;  // O(n²)
    const Base& b = base(sz.m);
    const std::vector<float> x = randn(rng, size_t(n));
    std::vector<float> y = x;
    hadamard_rows(y.data(), 1, sz.pow2, sz.m, b.h.data(), float(1.0 / std::sqrt(double(n))));
    double l1 = 0;
    for (float v : x) l1 += std::fabs(v);
    const double tol = gamma(depth(sz)) * l1 / std::sqrt(double(n)) + 1e-38;
    for (int64_t j = 0; j < n; ++j) {
      long double e = 0;
      const int64_t c = j / sz.m, d = j % sz.m;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t a = i / sz.m, r = i % sz.m;
        const int syl = (__builtin_popcountll(uint64_t(a & c)) & 1) ? -1 : 1;
        e += (long double)x[size_t(i)] * syl * b.h[size_t(r * sz.m + d)];
      }
      ASSERT_NEAR(y[size_t(j)], double(e / std::sqrt((long double)n)), tol) << "n=" << n << " j=" << j;
    }
  }
}

// Orthogonality: with T = (H_P ⊗ B)/√n orthogonal (B Hadamard), Tᵀ·(T·x) = x. The forward error
// e (|e_i| <= γ_k ||x||_1/√n, above) passes through Tᵀ, whose rows have n entries ±1/√n:
// |(Tᵀe)_j| <= ||e||_1/√n <= γ_k ||x||_1; the inverse's own rounding adds γ_k ||ŷ||_1/√n. So
// |z_j - x_j| <= γ_k (||x||_1 + ||ŷ||_1/√n) (first order; a (1 + γ_k) factor covers the rest).
TEST(HadamardKernel, InverseOfForwardIsIdentity) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(4);
  int checked = 0;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (const Size& sz : kSizes) {
      const Base& b = base(sz.m);
      if (!b.hadamard) continue;
      const int64_t n = sz.n(), rows = 2;
      const float scale = float(1.0 / std::sqrt(double(n)));
      const std::vector<float> x = randn(rng, size_t(rows * n));
      const std::vector<float> d = random_signs(rng, size_t(n));
      std::vector<float> y = x;
      hadamard_rows(y.data(), rows, sz.pow2, sz.m, b.h.data(), scale, d.data(), nullptr);  // x·D·T
      std::vector<float> z = y;
      hadamard_rows(z.data(), rows, sz.pow2, sz.m, b.ht.data(), scale, nullptr, d.data());  // ·Tᵀ·D
      const double g = gamma(depth(sz));
      for (int64_t r = 0; r < rows; ++r) {
        double lx = 0, ly = 0;
        for (int64_t i = 0; i < n; ++i) {
          lx += std::fabs(x[size_t(r * n + i)]);
          ly += std::fabs(y[size_t(r * n + i)]);
        }
        const double tol = g * (1 + g) * (lx + ly / std::sqrt(double(n)));
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(z[size_t(r * n + i)], x[size_t(r * n + i)], tol)
              << ktest::ctx(isa, "n=" + std::to_string(n)) << " i=" << i;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(HadamardKernel, RejectsBadShapes) {
  float x[16] = {};
  const float b = 1.0f;
  EXPECT_THROW(hadamard_rows(x, 1, 3, 1, &b, 1.0f), Error);
  EXPECT_THROW(hadamard_rows(x, 1, 0, 1, &b, 1.0f), Error);
  EXPECT_THROW(hadamard_rows(x, -1, 4, 1, &b, 1.0f), Error);
  EXPECT_THROW(hadamard_rows(x, 1, 1, 12, nullptr, 1.0f), Error);
  EXPECT_THROW(hadamard_rows(x, 1, 1, kHadamardMaxBase + 1, &b, 1.0f), Error);
  hadamard_rows(x, 0, 4, 1, nullptr, 1.0f);  // zero rows: nothing to do
}

}  // namespace
}  // namespace sinkq
