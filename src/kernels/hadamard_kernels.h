// sinkq/kernels/hadamard_kernels.h — the online Hadamard rotation as a kernel (QuaRot R3 / R4).
//
// The transform of quant/hadamard.h with its base matrix passed in (the kernels layer does not
// build Hadamard matrices): each row of x[rows, n], n = pow2 · m, viewed as X[pow2, m], becomes
//   x ← ((H_pow2 · ((x ⊙ pre) as X) · B) · scale) ⊙ post         (H_pow2 Sylvester, symmetric)
// i.e. x·(H_pow2 ⊗ B)·scale with optional ±1 signs before (pre) and after (post). Order of the
// arithmetic, per row (ref::hadamard_rows; every ISA reproduces it bit for bit, see
// hadamard_simd.inc): x ⊙= pre; the m-step Y_a[c] = 0 + Σ_{r = 0..m-1} X_a[r]·B[r][c] summed in
// r order; radix-2 butterflies (u, w) ← (u + w, u − w) with block stride h = 1, 2, .., pow2/2;
// x ← x·scale, then x ⊙= post. Cost O(n·(m + log2 pow2)) per row.
//
// Requirements: pow2 a power of two >= 1; 1 <= m <= 256; base [m, m] row-major with entries ±1
// (so every product is exact and fused multiply-adds round like the reference's mul then add;
// ignored for m = 1, which is [1]); pre/post null or [n] of ±1. No alignment requirements.
// Threading: rows are split over num_threads() (ops.h) for large jobs; each row is transformed by
// one thread in a fixed order, so results depend neither on the thread count nor on the ISA.
#pragma once

#include <cstdint>

namespace sinkq {

inline constexpr int kHadamardMaxBase = 256;

// In place on x[rows, pow2 · m]. Throws sinkq::Error on a bad size.
void hadamard_rows(float* x, int64_t rows, int64_t pow2, int m, const float* base, float scale,
                   const float* pre = nullptr, const float* post = nullptr);

namespace ref {
// The scalar reference: the plain loops of the order above (single thread).
void hadamard_rows(float* x, int64_t rows, int64_t pow2, int m, const float* base, float scale,
                   const float* pre = nullptr, const float* post = nullptr);
}  // namespace ref

}  // namespace sinkq
