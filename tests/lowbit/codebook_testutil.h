// tests/lowbit/codebook_testutil.h — the codebook-KV attention cases, scenes and their bound, shared
// by the CPU kernels' test (codebook_attn_test.cc) and the device's (tests/cuda/device).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "formats/nuq.h"
#include "kernels/kernel_test_util.h"
#include "lowbit/codebook_kv.h"
#include "lowbit/kv_testutil.h"

namespace sinkq::lowbit::cbtest {

namespace nuq = formats::nuq;
using ktest::gamma;
using ktest::kExpRel;
using ktest::kU;

struct Case {
  int H, Hkv, D, window;
  int64_t P, n_past, T;
  int bits;
  bool key_channel, value_channel, rope;
  double outliers;
};

struct Scene {
  CodebookKvCache cache;
  std::vector<float> q, pk, pv, cs;
  std::vector<float> qb;  // the body's queries when they differ from the prefix's (else empty)
  const float* q_body() const { return qb.empty() ? nullptr : qb.data(); }
};

constexpr auto kv_rows = kvtest::kv_data;

// A learned-looking codebook: 2^bits sorted levels in [-1, 1] (uneven spacing).
inline std::vector<float> levels(std::mt19937_64& rng, int bits) {
  std::vector<float> l = nuq::nf_levels(bits);
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  for (size_t i = 1; i + 1 < l.size(); ++i) l[i] += u(rng);
  std::sort(l.begin(), l.end());
  return l;
}

inline nuq::Codec codec(std::mt19937_64& rng, const Case& c, bool channel, const std::vector<float>& calib) {
  nuq::Codec x;
  x.per_channel = channel;
  x.outliers = c.outliers;
  x.levels = levels(rng, c.bits);
  if (channel) {
    const int64_t KV = int64_t(c.Hkv) * c.D, rows = int64_t(calib.size()) / KV;
    for (int64_t j = 0; j < KV; ++j) {
      const nuq::Range r = nuq::outlier_range(calib.data() + j, rows, KV, c.outliers);
      x.lo.push_back(r.lo);
      x.hi.push_back(r.hi);
    }
  }
  return x;
}

inline Scene make(std::mt19937_64& rng, const Case& c) {
  const int64_t n = c.n_past + c.T, KV = int64_t(c.Hkv) * c.D;
  const std::vector<float> calib = kv_rows(rng, 64, c.Hkv, c.D);
  std::vector<nuq::Codec> ck, cv;
  for (int l = 0; l < 2; ++l) ck.push_back(codec(rng, c, c.key_channel, calib)), cv.push_back(codec(rng, c, c.value_channel, calib));
  Scene s{CodebookKvCache(2, KV, n + 3, ck, cv), {}, {}, {}, {}, {}};
  for (int l = 0; l < 2; ++l) {
    const std::vector<float> k = kv_rows(rng, n, c.Hkv, c.D), v = kv_rows(rng, n, c.Hkv, c.D);
    // Two appends, as a prefill then decode steps write them.
    const int64_t a = n / 2;
    s.cache.store(l, 0, k.data(), v.data(), a);
    s.cache.store(l, a, k.data() + a * KV, v.data() + a * KV, n - a);
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  s.q.resize(size_t(c.T * c.H * c.D));
  for (float& x : s.q) x = u(rng);
  if (c.P > 0 && c.rope) {  // as a rotated model's: the body scored with other queries
    s.qb.resize(s.q.size());
    for (float& x : s.qb) x = u(rng);
  }
  s.pk = kv_rows(rng, c.P, c.Hkv, c.D);
  s.pv = kv_rows(rng, c.P, c.Hkv, c.D);
  for (float& x : s.pk) x *= 3.0f;  // sink-like prefix keys: large scores
  if (c.rope) {
    const int h = c.D / 2;
    s.cs.resize(size_t((c.P + n) * c.D));
    for (int64_t p = 0; p < c.P + n; ++p)
      for (int i = 0; i < h; ++i) {
        const double a = double(p) * std::pow(10000.0, -2.0 * i / c.D);
        s.cs[size_t(p * c.D + i)] = float(std::cos(a));
        s.cs[size_t(p * c.D + h + i)] = float(std::sin(a));
      }
  }
  return s;
}

// |got − ref| per output against the first-order bound of an fp32 computation of the same
// formula (tests/lowbit/kv_test.cc's, with the decoded keys rotated): a score errs by
// γ_{D+4}·scale·Σ_d |q_d|·(|x_d c_d| + |x_d' s_d|) (the D-term dot over keys each rounded twice by
// the rotation), the softmax as there; the weighted sum by γ_{n+2}·Σ_j p_j·m_jd with m_jd = |v_jd|,
// or for an outlier |v| + 2·|x̂(0)| (its dense term p·x̂(0) and the correction p·(v − x̂(0))).
// Every output must be written (NaN is never within the bound).
inline void check(const Case& c, const Scene& s, const std::vector<float>& got, const std::vector<float>& ref,
           const std::string& what, int splits = 0) {
  const int group = c.H / c.Hkv, D = c.D, h = D / 2;
  const double scale = double(float(1.0 / std::sqrt(double(D))));
  const int64_t C = int64_t(c.Hkv) * D, nb = c.n_past + c.T;
  std::vector<float> kb(size_t(nb * C)), vb(kb.size());
  s.cache.dequantize(1, false, nb, kb.data());
  s.cache.dequantize(1, true, nb, vb.data());
  std::vector<double> vmag(vb.size());
  for (size_t i = 0; i < vb.size(); ++i) vmag[i] = std::fabs(double(vb[i]));
  for (int g = 0; g < c.Hkv; ++g) {
    const CbRows r = s.cache.rows(1, true, g, D);
    for (int64_t j = 0; j < nb; ++j)
      for (uint32_t e = r.row_ptr[j]; e < r.row_ptr[j + 1]; ++e) {
        const int col = int(r.col[e]) - r.col0;
        if (col < 0 || col >= D) continue;
        const double l0 = r.levels[0];
        const double x0 = r.ch_scale ? l0 * r.ch_scale[col] + r.ch_zero[col] : l0 * r.row_sz[2 * j] + r.row_sz[2 * j + 1];
        vmag[size_t(j * C + g * D + col)] += 2 * std::fabs(x0);
      }
  }
  for (int64_t t = 0; t < c.T; ++t)
    for (int hd = 0; hd < c.H; ++hd) {
      const int g = hd / group;
      const int64_t hi = c.P + c.n_past + t;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, hi - c.window + 1) : 0;
      const int64_t n = hi - lo + 1;
      const float* qp = s.q.data() + (t * c.H + hd) * D;
      const float* qbody = (s.qb.empty() ? s.q : s.qb).data() + (t * c.H + hd) * D;
      std::vector<double> sc(static_cast<size_t>(n));
      double max_ds = 0, mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t a = lo + j;
        const float* q = a < c.P ? qp : qbody;
        double dot = 0, mag = 0;
        for (int d = 0; d < D; ++d) {
          if (a < c.P) {
            const double k = s.pk[size_t(a * C + g * D + d)];
            dot += q[d] * k, mag += std::fabs(q[d] * k);
            continue;
          }
          const float* x = kb.data() + (a - c.P) * C + g * D;
          const int o = d < h ? d + h : d - h;
          double k = x[d], m = std::fabs(double(x[d]));
          if (c.rope) {
            const double cs = s.cs[size_t(a * D + d % h)], sn = s.cs[size_t(a * D + h + d % h)];
            k = d < h ? x[d] * cs - x[o] * sn : x[d] * cs + x[o] * sn;
            m = std::fabs(x[d] * cs) + std::fabs(x[o] * sn);
          }
          dot += q[d] * k, mag += std::fabs(double(q[d])) * m;
        }
        sc[size_t(j)] = scale * dot;
        max_ds = std::max(max_ds, scale * gamma(D + 4) * mag + kU * std::fabs(sc[size_t(j)]));
        mx = std::max(mx, sc[size_t(j)]);
      }
      double sum = 0, spread = 0;
      for (double& x : sc) spread = std::max(spread, mx - x), sum += x = std::exp(x - mx);
      // A split computation (the device's flash-decoding, `splits` > 0) takes each weight through two
      // exps (in its split, at the merge) and sums over n + splits terms plus the merge weights.
      const double rel = splits == 0 ? 2 * max_ds + 2 * kU * spread + 2 * kExpRel + 2 * gamma(double(n + 2)) + 4 * kU
                                     : 2 * max_ds + 4 * kU * spread + 4 * kExpRel + 2 * gamma(double(n + splits + 4)) + 8 * kU;
      for (int d = 0; d < D; ++d) {
        double mag = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t a = lo + j;
          const double m = a < c.P ? std::fabs(double(s.pv[size_t(a * C + g * D + d)])) : vmag[size_t((a - c.P) * C + g * D + d)];
          mag += sc[size_t(j)] / sum * m;
        }
        const size_t i = size_t((t * c.H + hd) * D + d);
        ASSERT_LE(std::fabs(double(got[i]) - ref[i]), rel * mag + kU * std::fabs(double(ref[i])) + 1e-30)
            << what << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << D << " P=" << c.P << " n_past=" << c.n_past
            << " T=" << c.T << " window=" << c.window << " bits=" << c.bits << " t=" << t << " h=" << hd << " d=" << d;
      }
    }
}

// GQA 4:2, 8:2 (a group of 4), 16:2 (8: the batched score sums), 9:1 (8 + 1), MHA 3:3; head_dim 8
// (< one vector), 24 and 40 (partial chunks and a scalar RoPE tail on both ISAs), 64; 2, 3 and 4
// bits; keys per channel or per token, values per token or per channel; outliers off / 5 %;
// prefix absent / 3 rows; decode and prefill after 0 or 17 rows; RoPE on the decoded keys or not;
// two sliding windows.
inline std::vector<Case> cases() {
  std::vector<Case> v;
  int i = 0;
  const int kDs[] = {8, 24, 64, 40};
  for (auto [H, Hkv] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{3, 3}, std::pair{16, 2}, std::pair{9, 1}})
    for (int64_t P : {0, 3})
      for (int64_t T : {1, 5})
        for (int64_t n_past : {0, 17}) {
          const int bits = 2 + i % 3;
          v.push_back({H, Hkv, kDs[i % 4], 0, P, n_past, T, bits, i % 2 == 0, i % 5 == 4, i % 3 != 2,
                       i % 4 < 2 ? 0.05 : 0.0});
          ++i;
        }
  v.push_back({4, 2, 64, 9, 3, 17, 5, 3, true, false, true, 0.05});  // window inside the body
  v.push_back({4, 2, 32, 12, 5, 2, 5, 4, true, false, true, 0.05});  // window reaching into the prefix
  return v;
}

}  // namespace sinkq::lowbit::cbtest
