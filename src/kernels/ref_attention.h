// sinkq/kernels/ref_attention.h — the one scalar reference of causal GQA attention, over any
// storage of the keys and values.
//
// elem(value, j, g, d) gives element d of KV head g of absolute position j: the key (value =
// false) or the value (true), exactly, as a double. ref::attention (ops_ref.cc: fp32 prefix and
// cache) and lowbit::ref::attention_packed (kv_kernels.cc: fp32 prefix, packed body) are this
// loop with their own accessor. Query t sits at absolute position n_before + n_past + t and
// attends [lo, that] (lo from the sliding window, 0 without one). Scores and the weighted sum in
// double; the scale is AttnShape::score_scale() (fp32, as HF computes it), then the soft-cap
// when set. q_body (optional): the queries
// the positions from n_before on are scored with (a store whose keys live in another basis than
// the prefix's: lowbit::attention_codebook); null: q for all.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace sinkq::ref {

template <class Elem>
void attention_over(const AttnShape& s, const float* q, int64_t n_before, int64_t n_past, int64_t T, Elem&& elem,
                    float* out, const float* q_body = nullptr) {
  const int H = s.n_heads, Hkv = s.n_kv_heads, D = s.head_dim, group = H / Hkv;
  const double scale = double(s.score_scale());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t hi = n_before + n_past + t;
    const int64_t lo = s.sliding_window > 0 ? std::max<int64_t>(0, hi - s.sliding_window + 1) : 0;
    for (int h = 0; h < H; ++h) {
      const float* qv = q + (t * H + h) * D;
      const float* qb = (q_body ? q_body : q) + (t * H + h) * D;
      const int g = h / group;
      std::vector<double> p(size_t(hi - lo + 1));
      double m = -INFINITY;
      for (int64_t j = lo; j <= hi; ++j) {
        double a = 0.0;
        const float* qj = j < n_before ? qv : qb;
        for (int d = 0; d < D; ++d) a += double(qj[d]) * elem(false, j, g, d);
        p[size_t(j - lo)] = a * scale;
        if (s.softcap > 0) p[size_t(j - lo)] = double(s.softcap) * std::tanh(p[size_t(j - lo)] / double(s.softcap));
        m = std::max(m, p[size_t(j - lo)]);
      }
      double sum = 0.0;
      for (double& v : p) sum += v = std::exp(v - m);
      for (int d = 0; d < D; ++d) {
        double a = 0.0;
        for (int64_t j = lo; j <= hi; ++j) a += p[size_t(j - lo)] * elem(true, j, g, d);
        out[(t * H + h) * D + d] = float(a / sum);
      }
    }
  }
}

}  // namespace sinkq::ref
