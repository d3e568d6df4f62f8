// sinkq/lowbit/attn_driver.h — the one driver of causal GQA attention over [fp32 prefix; a packed
// body]: attention_packed (int8 / int4 body, kv_kernels.cc) and attention_codebook (codebook body,
// codebook_attn.cc) are this loop with their own body kernels.
//
// Work items (token t, kv head g) carry the group's query heads together, so each body row is
// decoded once per group; each head's scores, softmax and sums are still its own. The prefix
// segment's scores / weighted sums and the softmax are the fp32 kernels of the active ISA
// (kernels/kernel_table.h), so the prefix is computed exactly as the fp32 attention computes it.
// Threads: the work items are a parallel loop (kernels/team.h) when the work is worth it; results
// do not depend on the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/team.h"

namespace sinkq::lowbit::detail {

// q: [T, n_heads, head_dim] scored against the prefix; q_body: the same shape, scored against the
// body (the body's keys may live in another basis; q_body = q otherwise). flops_per_key: the
// body kernels' work per (key, dimension) for the thread decision.
//   scores(g, blo, nb, qpad, ldq, G, scale, s, lds): s[i·lds + j] for heads i < G, body rows
//       blo..blo+nb-1 of kv head g (qpad: the G heads' q_body rows, zero-padded to ldq).
//   wsum(g, blo, nb, p, ldp, G, alpha, out): out[i·D + d] = alpha[i]·Σ_j p[i·ldp + j]·v_jd over
//       those rows (overwrites out; p may be used as scratch).
template <class Scores, class WSum>
void attention_driver(const AttnShape& s, const float* q, const float* q_body, const KvSegment& prefix,
                      int64_t n_past, int64_t T, double flops_per_key, Scores&& scores, WSum&& wsum, float* out) {
  const sinkq::detail::KernelTable& k = sinkq::detail::kernels_for(active_isa());
  const int H = s.n_heads, D = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t P = prefix.rows;
  const int64_t ldkv = int64_t(s.n_kv_heads) * D;  // prefix row stride (floats)
  const float scale = s.score_scale();
  const int64_t pairs = T * s.n_kv_heads;
  const int64_t max_keys = P + n_past + T;
  const int64_t keys = s.sliding_window ? std::min<int64_t>(max_keys, s.sliding_window) : max_keys;
  const int64_t ldq = (D + 15) / 16 * 16;  // padded q rows
  const double ns = double(pairs) * double(keys) * D * (flops_per_key + 2.0 * group) / 15.0;
  const int nt = sinkq::detail::threads_for(ns);
  const int64_t chunk = std::max<int64_t>(1, pairs / (int64_t(nt) * 8));
  parallel_for(nt, pairs, chunk, [&](int64_t p0, int64_t p1) {
    static thread_local std::vector<float> sc;    // scores of the group's heads: [group, keys]
    static thread_local std::vector<float> acc;   // the body segment's weighted sums: [group, D]
    static thread_local std::vector<float> qpad;  // the group's q_body rows, zero-padded: [group, ldq]
    static thread_local std::vector<float> inv;   // 1 / softmax sum per head: [group]
    if (sc.size() < size_t(group * keys)) sc.resize(size_t(group * keys));
    if (acc.size() < size_t(group * D)) acc.resize(size_t(group * D));
    if (qpad.size() < size_t(group * ldq)) qpad.resize(size_t(group * ldq));
    if (inv.size() < size_t(group)) inv.resize(size_t(group));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t t = p / s.n_kv_heads;
      const int g = int(p % s.n_kv_heads);
      const int64_t hi = P + n_past + t;  // absolute position of this query
      const int64_t lo = s.first_visible(hi);
      const int64_t np = std::max<int64_t>(0, P - lo);   // visible prefix rows [lo, P)
      const int64_t blo = std::max<int64_t>(0, lo - P);  // visible body rows [blo, hi - P]
      const int64_t nb = hi - P - blo + 1;
      const int64_t n = np + nb;
      const float* q0 = q + (t * H + int64_t(g) * group) * D;  // the group's heads, [group, D]
      const float* qb = q_body + (t * H + int64_t(g) * group) * D;
      float* o0 = out + (t * H + int64_t(g) * group) * D;
      for (int i = 0; i < group; ++i) {
        std::copy(qb + i * D, qb + (i + 1) * D, qpad.data() + i * ldq);
        std::fill(qpad.data() + i * ldq + D, qpad.data() + (i + 1) * ldq, 0.0f);
        if (np > 0) k.scores(q0 + i * D, prefix.k + lo * ldkv + int64_t(g) * D, ldkv, np, D, scale, sc.data() + i * n);
      }
      scores(g, blo, nb, qpad.data(), ldq, group, scale, sc.data() + np, n);
      for (int i = 0; i < group; ++i) {
        s.cap(sc.data() + i * n, n);
        inv[size_t(i)] = 1.0f / k.exp_shift_sum(sc.data() + i * n, n);
      }
      if (np == 0) {
        wsum(g, blo, nb, sc.data(), n, group, inv.data(), o0);
        continue;
      }
      wsum(g, blo, nb, sc.data() + np, n, group, inv.data(), acc.data());
      for (int i = 0; i < group; ++i) {
        float* o = o0 + i * D;
        k.weighted_sum(sc.data() + i * n, prefix.v + lo * ldkv + int64_t(g) * D, ldkv, np, D, inv[size_t(i)], o);
        for (int d = 0; d < D; ++d) o[d] += acc[size_t(i * D + d)];
      }
    }
  });
}

}  // namespace sinkq::lowbit::detail
