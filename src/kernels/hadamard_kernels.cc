// sinkq/kernels/hadamard_kernels.cc — hadamard_rows: checks, threading over rows, ISA dispatch;
// and the scalar reference ref::hadamard_rows.
#include "kernels/hadamard_kernels.h"

#include <vector>

#include "core/error.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/team.h"

namespace sinkq {
namespace {

void check_shape(int64_t rows, int64_t pow2, int m, const float* base) {
  SINKQ_CHECK(rows >= 0, "hadamard_rows: rows = {} is negative", rows);
  SINKQ_CHECK(pow2 >= 1 && (pow2 & (pow2 - 1)) == 0, "hadamard_rows: pow2 = {} is not a power of two", pow2);
  SINKQ_CHECK(m >= 1 && m <= kHadamardMaxBase, "hadamard_rows: base size m = {} is outside [1, {}]", m,
              kHadamardMaxBase);
  SINKQ_CHECK(m == 1 || base != nullptr, "hadamard_rows: m = {} needs a base matrix", m);
}

}  // namespace

void hadamard_rows(float* x, int64_t rows, int64_t pow2, int m, const float* base, float scale,
                   const float* pre, const float* post) {
  check_shape(rows, pow2, m, base);
  if (rows == 0) return;
  const detail::KernelTable& k = detail::kernels();
  const int64_t n = pow2 * m;
  // Single-core cost, fitted to bench/hadamard_bench.cc with AVX-512 (AVX2 ~2x, which only
  // delays threading): ~0.25 ns per element per (m/16 FMAs of the m-step + log2(pow2)/8 butterfly
  // passes + 0.5 for loads and the scale). A single row stays on one thread (rows are the unit).
  int lg = 0;
  while ((int64_t(1) << lg) < pow2) ++lg;
  const double ns = double(rows) * double(n) * (double(m) / 16.0 + double(lg) / 8.0 + 0.5) * 0.25;
  const int nt = rows < 2 ? 1 : detail::threads_for(ns);
  if (nt == 1) return k.hadamard(x, rows, pow2, m, base, scale, pre, post);
  parallel_ranges(nt, rows, 1,
                  [&](int64_t b, int64_t e) { k.hadamard(x + b * n, e - b, pow2, m, base, scale, pre, post); });
}

namespace ref {

void hadamard_rows(float* x, int64_t rows, int64_t pow2, int m, const float* base, float scale,
                   const float* pre, const float* post) {
  check_shape(rows, pow2, m, base);
  const int64_t n = pow2 * m;
  std::vector<float> tmp(static_cast<size_t>(m));
  for (int64_t row = 0; row < rows; ++row) {
    float* xr = x + row * n;
    if (pre)
      for (int64_t k = 0; k < n; ++k) xr[k] *= pre[k];
    if (m > 1)
      for (int64_t a = 0; a < pow2; ++a) {  // Y_a = X_a · B, summed in order r = 0..m-1
        float* xa = xr + a * m;
        for (int c = 0; c < m; ++c) tmp[size_t(c)] = 0.0f;
        for (int r = 0; r < m; ++r) {
          const float v = xa[r];
          const float* br = base + int64_t(r) * m;
          for (int c = 0; c < m; ++c) tmp[size_t(c)] += v * br[c];
        }
        for (int c = 0; c < m; ++c) xa[c] = tmp[size_t(c)];
      }
    // Stage h: blocks X_a and X_{a+h} are two contiguous spans of h·m floats.
    for (int64_t h = 1; h < pow2; h *= 2) {
      const int64_t len = h * m;
      for (int64_t i = 0; i < pow2; i += 2 * h) {
        float* u = xr + i * m;
        float* w = u + len;
        for (int64_t c = 0; c < len; ++c) {
          const float a = u[c], b = w[c];
          u[c] = a + b;
          w[c] = a - b;
        }
      }
    }
    for (int64_t k = 0; k < n; ++k) xr[k] *= scale;
    if (post)
      for (int64_t k = 0; k < n; ++k) xr[k] *= post[k];
  }
}

}  // namespace ref
}  // namespace sinkq
