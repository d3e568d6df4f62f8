// sinkq/quant/hadamard.cc — size factorization, explicit matrices, and the fast transform (the
// kernels layer's hadamard_rows with the base matrices built here).
#include "quant/hadamard.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/hadamard_kernels.h"

namespace sinkq::quant {

namespace {

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Base matrix m as floats (and its transpose), cached: the kernel's m-step multiplies by ±1.0f
// (exact), so its fused multiply-adds round exactly like the reference's multiply then add.
struct BaseF {
  std::vector<float> h, ht;  // [m, m] row-major: H_m and H_mᵀ
};
const BaseF& base_f(int m) {
  static const std::array<BaseF, kHadamardBaseSizes.size()> tables = [] {
    std::array<BaseF, kHadamardBaseSizes.size()> t;
    for (size_t i = 0; i < t.size(); ++i) {
      const int mm = kHadamardBaseSizes[i];
      const std::vector<int8_t>& b = hadamard_base(mm);
      t[i].h.resize(size_t(mm * mm));
      t[i].ht.resize(size_t(mm * mm));
      for (int r = 0; r < mm; ++r)
        for (int c = 0; c < mm; ++c) {
          t[i].h[size_t(r * mm + c)] = float(b[size_t(r * mm + c)]);
          t[i].ht[size_t(c * mm + r)] = float(b[size_t(r * mm + c)]);
        }
    }
    return t;
  }();
  for (size_t i = 0; i < kHadamardBaseSizes.size(); ++i)
    if (kHadamardBaseSizes[i] == m) return tables[i];
  SINKQ_ASSERT(false);
  return tables[0];
}

// x[rows, n] ← x·D_pre·(H_P ⊗ B)/√n·D_post through the kernel (kernels/hadamard_kernels.h: an
// m-step X·B per block of m, then radix-2 butterflies over the P blocks, then the scale; every
// ISA bit-identical). B = H_m (forward) or H_mᵀ (inverse); H_P (Sylvester) is symmetric, so the
// same butterflies serve both directions.
void rotate(float* x, int64_t rows, int64_t n, bool inverse, const float* pre, const float* post) {
  SINKQ_CHECK(rows >= 0, "hadamard: rows = {} is negative", rows);
  const HadamardFactors f = hadamard_factors(n);
  const BaseF& b = base_f(f.m);
  const float norm = float(1.0 / std::sqrt(double(n)));  // exact for n = 4^j
  hadamard_rows(x, rows, f.pow2, f.m, (inverse ? b.ht : b.h).data(), norm, pre, post);
}

}  // namespace

bool hadamard_supported(int64_t n) {
  if (n <= 0) return false;
  for (int m : kHadamardBaseSizes)
    if (n % m == 0 && is_pow2(n / m)) return true;
  return false;
}

HadamardFactors hadamard_factors(int64_t n) {
  // The list is ascending, so the first fit has the smallest m (the most FWHT, the least m²).
  if (n > 0)
    for (int m : kHadamardBaseSizes)
      if (n % m == 0 && is_pow2(n / m)) return {n / m, m};
  fail("hadamard: size {} is not supported: it must be 2^k · m with m in {{{}}} (e.g. 4096 = 2^12, 11008 = "
       "2^6 · 172, 14336 = 2^9 · 28)", n, fmt::join(kHadamardBaseSizes, ", "));
}

std::vector<float> hadamard_matrix(int64_t n) {
  const HadamardFactors f = hadamard_factors(n);
  const std::vector<int8_t>& hm = hadamard_base(f.m);
  std::vector<float> H(size_t(n * n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = i / f.m, b = i % f.m;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t c = j / f.m, d = j % f.m;
      // Sylvester entry: (-1)^popcount(a & c).
      const int syl = (__builtin_popcountll(uint64_t(a & c)) & 1) ? -1 : 1;
      H[size_t(i * n + j)] = float(syl * hm[size_t(b * f.m + d)]);
    }
  }
  return H;
}

void fwht_inplace(float* x, int64_t rows, int64_t n) { rotate(x, rows, n, false, nullptr, nullptr); }
void fwht_inverse_inplace(float* x, int64_t rows, int64_t n) {
  rotate(x, rows, n, true, nullptr, nullptr);
}

RandomHadamard::RandomHadamard(int64_t n, uint64_t seed) : n_(n) {
  hadamard_factors(n);  // validates n
  std::mt19937_64 rng(seed);
  signs_.resize(size_t(n));
  for (float& s : signs_) s = (rng() >> 63) ? -1.0f : 1.0f;
}

// The signs are fused into the kernel's first load (forward) or last store (inverse): the same
// exact products x·(±1) as multiplying before / after.
void RandomHadamard::forward(float* x, int64_t rows) const { rotate(x, rows, n_, false, signs_.data(), nullptr); }

void RandomHadamard::inverse(float* x, int64_t rows) const { rotate(x, rows, n_, true, nullptr, signs_.data()); }

std::vector<float> RandomHadamard::matrix() const {
  std::vector<float> Q = hadamard_matrix(n_);
  const float norm = float(1.0 / std::sqrt(double(n_)));
  for (int64_t i = 0; i < n_; ++i)
    for (int64_t j = 0; j < n_; ++j) Q[size_t(i * n_ + j)] *= signs_[size_t(i)] * norm;
  return Q;
}

}  // namespace sinkq::quant
