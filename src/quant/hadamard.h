// sinkq/quant/hadamard.h — Hadamard rotations (QuaRot / SpinQuant R1..R4, PrefixQuant appx. C).
//
// Sizes: n = 2^k · m with m in kHadamardBaseSizes. The n×n matrix is the Kronecker product
//   H_n = H_{2^k} ⊗ H_m,     H_n[a·m + b, c·m + d] = H_{2^k}[a, c] · H_m[b, d]
// with H_{2^k} Sylvester (H_1 = [1], H_{2j} = [[H_j, H_j], [H_j, -H_j]], symmetric) and H_m one
// of the base matrices below, all with ±1 entries and H·H^T = n·I. The rotation of a row vector is
// x ← x·H_n/√n (orthogonal): an explicit m×m product over the m part, then a radix-2 FWHT over
// the 2^k part — O(n·(m + log2 n)) per row instead of O(n²).
//
// Base matrices, all constructed here from their definitions (no tables copied; docs/quant.md):
//   m = 1                      [1]
//   m = 12, 20, 28, 44, 60, 108, 140   Paley I   for q = 11, 19, 27, 43, 59, 107, 139 (q ≡ 3 mod 4,
//                              q = 27 over GF(27)): H = I + [[0, 1ᵀ], [-1, Q]], Q_ab = χ(a - b)
//   m = 36, 52                 Paley II  for q = 17, 25 (q ≡ 1 mod 4, q = 25 over GF(25))
//   m = 40                     Sylvester doubling of m = 20 (so 40·2^k is the same matrix as
//                              20·2^(k+1); the factorization always picks the smallest m)
//   m = 156, 172               Williamson array of symmetric circulant A, B, C, D of order 39 / 43
//                              with A² + B² + C² + D² = 4n·I, first rows found by our own bounded
//                              search (docs/quant.md) and re-verified (H·Hᵀ = m·I) on first use
// Paley I matrices are not symmetric: the inverse rotation uses H_nᵀ (x ← x·H_nᵀ/√n).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace sinkq::quant {

// 44: TinyLlama-1.1B / the 1B benchmark shape's intermediate 5632 = 2^7·44.
inline constexpr std::array<int, 13> kHadamardBaseSizes = {1, 12, 20, 28, 36, 40, 44, 52, 60, 108, 140, 156, 172};

// n = pow2 · m with the smallest supported m (pow2 a power of two).
struct HadamardFactors {
  int64_t pow2 = 0;
  int m = 0;
};
bool hadamard_supported(int64_t n);
// Throws sinkq::Error naming n and listing the supported sizes if n is not 2^k · m.
HadamardFactors hadamard_factors(int64_t n);

// The m×m base matrix, row-major, entries ±1 (m must be in kHadamardBaseSizes, else throws).
const std::vector<int8_t>& hadamard_base(int m);

// The explicit n×n matrix H_n (entries ±1, NOT normalized), row-major. For tests and for
// folding rotations into weights; O(n²) memory.
std::vector<float> hadamard_matrix(int64_t n);

// Rotates each row of x[rows, n] in place: x ← x·H_n / √n. Runs kernels/hadamard_kernels.h's
// hadamard_rows (AVX2 / AVX-512, bit-identical to the scalar path on every ISA; threaded over rows
// for large jobs, nested calls from a parallel region stay on their thread).
void fwht_inplace(float* x, int64_t rows, int64_t n);
// The inverse: x ← x·H_nᵀ / √n (H_n/√n is orthogonal, so this undoes fwht_inplace).
void fwht_inverse_inplace(float* x, int64_t rows, int64_t n);

// QuaRot's random Hadamard rotation Q = diag(d)·H_n/√n with d_i = ±1 drawn from a seeded
// std::mt19937_64 (one top bit per sign: the same on every platform and compiler).
//   forward: x ← x·Q = (x ⊙ d)·H_n/√n        inverse: x ← x·Qᵀ = (x·H_nᵀ/√n) ⊙ d
class RandomHadamard {
 public:
  RandomHadamard(int64_t n, uint64_t seed);
  int64_t size() const { return n_; }
  const std::vector<float>& signs() const { return signs_; }
  void forward(float* x, int64_t rows) const;
  void inverse(float* x, int64_t rows) const;
  std::vector<float> matrix() const;  // Q explicit, [n, n] row-major, normalized

 private:
  int64_t n_;
  std::vector<float> signs_;  // [n], ±1
};

}  // namespace sinkq::quant
