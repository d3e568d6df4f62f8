// sinkq/kernels/ops_ref.cc — scalar references (namespace sinkq::ref): the tests' "truth".
//
// Plain loops over the obvious formulas, accumulating in double so that (for the sizes tested)
// their own rounding error is negligible next to the fp32 fast paths': products of two floats
// are exact in double, and a double sum of n terms errs by at most n * 2^-53 * sum|terms|.
// Single-threaded, ISA-independent, no blocking.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/ref_attention.h"

namespace sinkq::ref {

void matmul(const float* x, int64_t T, const Mat& W, const float* bias, float* y) {
  const int64_t out = W.rows, in = W.cols;
  std::vector<float> w(static_cast<size_t>(in));
  for (int64_t r = 0; r < out; ++r) {
    to_f32(W.dtype, static_cast<const char*>(W.data) + size_t(r) * dtype_row_bytes(W.dtype, in),
           w.data(), size_t(in));
    for (int64_t t = 0; t < T; ++t) {
      double acc = bias ? double(bias[r]) : 0.0;
      for (int64_t k = 0; k < in; ++k) acc += double(x[t * in + k]) * double(w[k]);
      y[t * out + r] = float(acc);
    }
  }
}

void rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[t * n + i]) * double(x[t * n + i]);
    const double r = 1.0 / std::sqrt(ss / double(n) + double(eps));
    for (int64_t i = 0; i < n; ++i) y[t * n + i] = float(double(x[t * n + i]) * r * double(w[i]));
  }
}

// The angle is part of the op's definition (HF computes it as one fp32 product) and so are the
// fp32 cos/sin tables; only the rotation itself is done in double here.
void rope_apply(const RopeTable& rt, float* x, int64_t T, int n_heads, std::span<const int32_t> pos) {
  const int D = rt.head_dim, half = D / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float p = rt.position_scale == 1.0f ? float(pos[t]) : float(pos[t]) * rt.position_scale;
    for (int i = 0; i < half; ++i) {
      const float a = rt.inv_freq[i] * p;
      const double c = float(std::cos(double(a))), s = float(std::sin(double(a)));
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * D;
        const double x1 = v[i], x2 = v[i + half];
        v[i] = float(x1 * c - x2 * s);
        v[i + half] = float(x2 * c + x1 * s);
      }
    }
  }
}

void silu_mul(float* g, const float* u, int64_t T, int64_t n) {
  for (int64_t i = 0; i < T * n; ++i) {
    const double v = g[i];
    g[i] = float(v / (1.0 + std::exp(-v)) * double(u[i]));
  }
}

void gelu_tanh_mul(float* g, const float* u, int64_t T, int64_t n) {
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < T * n; ++i) {
    const double x = g[i];
    g[i] = float(0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x))) * double(u[i]));
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  double m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  std::vector<double> e(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += e[i] = std::exp(double(x[i]) - m);
  for (int64_t i = 0; i < n; ++i) x[i] = float(e[i] / sum);
}

void attention(const AttnShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_past, int64_t T, float* out) {
  ref::attention(s, q, KvSegment{}, k_cache, v_cache, n_past, T, out);
}

void attention(const AttnShape& s, const float* q, const KvSegment& prefix, const float* k_cache,
               const float* v_cache, int64_t n_past, int64_t T, float* out) {
  const int64_t P = prefix.rows, row = int64_t(s.n_kv_heads) * s.head_dim;
  // Absolute position j: prefix row j (j < P) or cache row j - P.
  attention_over(s, q, P, n_past, T,
                 [&](bool value, int64_t j, int g, int d) {
                   const float* base = j < P ? (value ? prefix.v : prefix.k) + j * row
                                             : (value ? v_cache : k_cache) + (j - P) * row;
                   return double(base[g * s.head_dim + d]);
                 },
                 out);
}

}  // namespace sinkq::ref
