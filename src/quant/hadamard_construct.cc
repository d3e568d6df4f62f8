// sinkq/quant/hadamard_construct.cc — the m×m base Hadamard matrices of hadamard.h, built from
// their mathematical definitions: finite fields GF(p^e), Paley I / II, Sylvester doubling and the
// Williamson array. Every matrix is checked (H·Hᵀ = m·I in integers) when first built.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "quant/hadamard.h"

namespace sinkq::quant {

namespace {

using Mat = std::vector<int8_t>;  // row-major m×m, entries ±1

// ---- GF(p^e) -------------------------------------------------------------------------------
// Elements are the integers 0..q-1 read as base-p digit vectors = polynomial coefficients
// (digit k = coefficient of x^k). Addition is digit-wise mod p; multiplication is polynomial
// multiplication reduced by a monic irreducible f of degree e (for e <= 3, "no root in GF(p)"
// is equivalent to irreducible, so the first such f in a fixed enumeration order is used).
class Field {
 public:
  Field(int p, int e) : p_(p), e_(e), q_(1) {
    for (int i = 0; i < e; ++i) q_ *= p;
    SINKQ_ASSERT(e >= 1 && e <= 3);
    f_.assign(size_t(e), 0);  // f(x) = x^e + f_[e-1] x^(e-1) + ... + f_[0]
    if (e > 1) {
      bool found = false;
      for (int code = 0; code < q_ && !found; ++code) {
        for (int k = 0; k < e; ++k) f_[size_t(k)] = digit(code, k);
        found = f_[0] != 0 && !has_root();
      }
      SINKQ_ASSERT(found);
    }
  }
  int size() const { return q_; }
  int add(int a, int b) const {
    int r = 0, w = 1;
    for (int k = 0; k < e_; ++k, w *= p_) r += ((digit(a, k) + digit(b, k)) % p_) * w;
    return r;
  }
  int neg(int a) const {
    int r = 0, w = 1;
    for (int k = 0; k < e_; ++k, w *= p_) r += ((p_ - digit(a, k)) % p_) * w;
    return r;
  }
  int mul(int a, int b) const {
    std::vector<int> prod(size_t(2 * e_ - 1), 0);
    for (int i = 0; i < e_; ++i)
      for (int j = 0; j < e_; ++j) prod[size_t(i + j)] += digit(a, i) * digit(b, j);
    // Reduce: x^e ≡ -(f_[e-1] x^(e-1) + ... + f_[0]).
    for (int d = 2 * e_ - 2; d >= e_; --d) {
      const int c = prod[size_t(d)] % p_;
      prod[size_t(d)] = 0;
      for (int k = 0; k < e_; ++k) prod[size_t(d - e_ + k)] += (p_ - f_[size_t(k)]) * c;
    }
    int r = 0, w = 1;
    for (int k = 0; k < e_; ++k, w *= p_) r += (prod[size_t(k)] % p_) * w;
    return r;
  }
  // Quadratic character χ: 0 for 0, +1 for nonzero squares, -1 for non-squares.
  std::vector<int> quadratic_character() const {
    std::vector<int> chi(size_t(q_), -1);
    chi[0] = 0;
    for (int a = 1; a < q_; ++a) chi[size_t(mul(a, a))] = 1;
    return chi;
  }

 private:
  int digit(int a, int k) const {
    for (int i = 0; i < k; ++i) a /= p_;
    return a % p_;
  }
  bool has_root() const {  // f(r) == 0 for some r in GF(p)?
    for (int r = 0; r < p_; ++r) {
      int v = 1;  // Horner on the monic polynomial
      for (int k = e_ - 1; k >= 0; --k) v = (v * r + f_[size_t(k)]) % p_;
      if (v == 0) return true;
    }
    return false;
  }
  int p_, e_, q_;
  std::vector<int> f_;
};

// Jacobsthal matrix Q[a][b] = χ(a - b) over GF(q), q×q.
std::vector<int> jacobsthal(const Field& F) {
  const int q = F.size();
  const std::vector<int> chi = F.quadratic_character();
  std::vector<int> Q(size_t(q * q));
  for (int a = 0; a < q; ++a)
    for (int b = 0; b < q; ++b) Q[size_t(a * q + b)] = chi[size_t(F.add(a, F.neg(b)))];
  return Q;
}

// Paley I, q ≡ 3 (mod 4): χ(-1) = -1 so Q is skew; S = [[0, 1ᵀ], [-1, Q]] is skew with
// S·Sᵀ = q·I, and H = I + S has H·Hᵀ = I + S + Sᵀ + S·Sᵀ = (q + 1)·I.
Mat paley1(int p, int e) {
  const Field F(p, e);
  const int q = F.size(), m = q + 1;
  SINKQ_ASSERT(q % 4 == 3);
  const std::vector<int> Q = jacobsthal(F);
  Mat H(size_t(m * m));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) {
      int s;
      if (i == 0) s = j == 0 ? 0 : 1;
      else if (j == 0) s = -1;
      else s = Q[size_t((i - 1) * q + (j - 1))];
      H[size_t(i * m + j)] = int8_t(i == j ? 1 : s);
    }
  return H;
}

// Paley II, q ≡ 1 (mod 4): χ(-1) = +1 so Q is symmetric; C = [[0, 1ᵀ], [1, Q]] is a symmetric
// conference matrix (C·Cᵀ = q·I). Replacing each 0 by [[1, -1], [-1, -1]] and each ±1 by
// ±[[1, 1], [1, -1]] gives a symmetric Hadamard matrix of order 2(q + 1).
Mat paley2(int p, int e) {
  const Field F(p, e);
  const int q = F.size(), c = q + 1, m = 2 * c;
  SINKQ_ASSERT(q % 4 == 1);
  const std::vector<int> Q = jacobsthal(F);
  Mat H(size_t(m * m));
  for (int i = 0; i < c; ++i)
    for (int j = 0; j < c; ++j) {
      const int v = (i == 0 && j == 0) ? 0 : i == 0 || j == 0 ? 1 : Q[size_t((i - 1) * q + (j - 1))];
      const int blk[2][2] = {{v == 0 ? 1 : v, v == 0 ? -1 : v}, {v == 0 ? -1 : v, v == 0 ? -1 : -v}};
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) H[size_t((2 * i + a) * m + 2 * j + b)] = int8_t(blk[a][b]);
    }
  return H;
}

// Sylvester doubling: [[H, H], [H, -H]] = H_2 ⊗ H.
Mat doubled(const Mat& h, int m) {
  Mat H(size_t(4 * m * m));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) {
      const int8_t v = h[size_t(i * m + j)];
      H[size_t(i * 2 * m + j)] = v;
      H[size_t(i * 2 * m + m + j)] = v;
      H[size_t((m + i) * 2 * m + j)] = v;
      H[size_t((m + i) * 2 * m + m + j)] = int8_t(-v);
    }
  return H;
}

// First rows ('+' = +1, '-' = -1) of symmetric circulant Williamson matrices A, B, C, D:
// A_ij = a[(j - i) mod n], and A² + B² + C² + D² = 4n·I. Found by our own bounded search
// (docs/quant.md): n = 43 among sequences invariant under the multiplier group {±1, ±6, ±7} of
// Z_43^*; n = 39 by a full search over symmetric sequences, meeting in the middle over the
// row-sum decomposition 156 = 9² + 5² + 5² + 5² with power-spectral-density pruning.
constexpr std::string_view kWilliamson39[4] = {
    "-+-+--+-++-++--++++++++++--++-++-+--+-+",
    "-+---+--++++++-++-+--+-++-++++++--+---+",
    "-+-+--++++---++--++++++--++---++++--+-+",
    "--+++-+----+++-+++-++-+++-+++----+-+++-",
};
constexpr std::string_view kWilliamson43[4] = {
    "++---++++-+--+--++--------++--+--+-++++---+",
    "+++-+-++--+-+-++++-+----+-++++-+-+--++-+-++",
    "+---++--++++-+-+++-++--++-+++-+-++++--++---",
    "--+------++++-+-++--+--+--++-+-++++------+-",
};

// Williamson array (order 4n):  [ A  B  C  D ]
//                               [-B  A -D  C ]
//                               [-C  D  A -B ]
//                               [-D -C  B  A ]
// Off-diagonal block products cancel because symmetric circulants commute; the diagonal gives
// A² + B² + C² + D² = 4n·I.
Mat williamson(const std::string_view (&rows)[4]) {
  const int n = int(rows[0].size()), m = 4 * n;
  auto entry = [&](int w, int i, int j) {  // circulant w at (i, j)
    const char ch = rows[w][size_t(((j - i) % n + n) % n)];
    return ch == '+' ? 1 : -1;
  };
  for (int w = 0; w < 4; ++w) {  // symmetric first rows: a_k == a_(n-k)
    SINKQ_ASSERT(int(rows[w].size()) == n);
    for (int k = 1; k < n; ++k) SINKQ_ASSERT(rows[w][size_t(k)] == rows[w][size_t(n - k)]);
  }
  // block (R, C) -> (which of A..D, sign)
  static const int kWhich[4][4] = {{0, 1, 2, 3}, {1, 0, 3, 2}, {2, 3, 0, 1}, {3, 2, 1, 0}};
  static const int kSign[4][4] = {{1, 1, 1, 1}, {-1, 1, -1, 1}, {-1, 1, 1, -1}, {-1, -1, 1, 1}};
  Mat H(size_t(m * m));
  for (int R = 0; R < 4; ++R)
    for (int C = 0; C < 4; ++C)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          H[size_t((R * n + i) * m + C * n + j)] = int8_t(kSign[R][C] * entry(kWhich[R][C], i, j));
  return H;
}

Mat build(int m) {
  switch (m) {
    case 1: return Mat{1};
    case 12: return paley1(11, 1);
    case 20: return paley1(19, 1);
    case 28: return paley1(3, 3);
    case 36: return paley2(17, 1);
    case 40: return doubled(paley1(19, 1), 20);
    case 44: return paley1(43, 1);
    case 52: return paley2(5, 2);
    case 60: return paley1(59, 1);
    case 108: return paley1(107, 1);
    case 140: return paley1(139, 1);
    case 156: return williamson(kWilliamson39);
    case 172: return williamson(kWilliamson43);
  }
  SINKQ_ASSERT(false);
  return {};
}

// H·Hᵀ == m·I exactly, entries ±1: an internal invariant of every construction above.
void verify(const Mat& H, int m) {
  SINKQ_ASSERT(int64_t(H.size()) == int64_t(m) * m);
  for (int8_t v : H) SINKQ_ASSERT(v == 1 || v == -1);
  for (int i = 0; i < m; ++i)
    for (int j = i; j < m; ++j) {
      int dot = 0;
      for (int k = 0; k < m; ++k) dot += H[size_t(i * m + k)] * H[size_t(j * m + k)];
      SINKQ_ASSERT(dot == (i == j ? m : 0));
    }
}

}  // namespace

const std::vector<int8_t>& hadamard_base(int m) {
  // Built and verified once, on first use (thread-safe static initialization).
  static const std::array<Mat, kHadamardBaseSizes.size()> tables = [] {
    std::array<Mat, kHadamardBaseSizes.size()> t;
    for (size_t i = 0; i < t.size(); ++i) {
      t[i] = build(kHadamardBaseSizes[i]);
      verify(t[i], kHadamardBaseSizes[i]);
    }
    return t;
  }();
  for (size_t i = 0; i < kHadamardBaseSizes.size(); ++i)
    if (kHadamardBaseSizes[i] == m) return tables[i];
  fail("hadamard: no base matrix of size {} (supported: {})", m, fmt::join(kHadamardBaseSizes, ", "));
}

}  // namespace sinkq::quant
