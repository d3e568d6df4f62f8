// tests/kernels/attention_test.cc — softmax and causal GQA attention against the references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace sinkq {
namespace {

using ktest::gamma;
using ktest::kU;

// p_i = e_i / S. Fast: d_i = fl(x_i - m) errs by u |x_i - m|, which exp turns into that much
// relative error, plus kExpRel; S (n positive terms) adds gamma_n relative and inherits the worst
// e_j error; 1/S and the product add 2u. So |p_fast - p| <= p (u (|x_i - m| + max|x_j - m|)
// + 2 kExpRel + gamma_n + 3u).
TEST(Softmax, FastMatchesRef) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(11);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int64_t n : {1, 2, 15, 16, 17, 100, 1000, 4099})
      for (float spread : {1.0f, 30.0f}) {
        std::vector<float> x = ktest::random_vec(rng, size_t(n), -spread, spread);
        const std::vector<float> x0 = x;
        std::vector<float> xr = x;
        softmax(x.data(), n);
        ref::softmax(xr.data(), n);
        const float m = *std::max_element(x0.begin(), x0.end());
        double maxd = 0, total = 0;
        for (float v : x0) maxd = std::max(maxd, double(m) - v);
        for (int64_t i = 0; i < n; ++i) {
          const double rel = kU * (double(m) - x0[i] + maxd) + 2 * ktest::kExpRel + gamma(double(n)) + 3 * kU;
          ASSERT_LE(std::fabs(double(x[i]) - xr[i]), rel * xr[i] + 1e-37)
              << ktest::ctx(isa, "softmax") << " n=" << n << " i=" << i;
          total += x[i];
        }
        EXPECT_NEAR(total, 1.0, gamma(double(n)) + 2 * ktest::kExpRel + 4 * kU + kU * 2 * maxd);
      }
  }
}

struct Case {
  int H, Hkv, D, window;
  int64_t n_past, T;
};

struct Cache {
  std::vector<float> q, k, v;
};

Cache make_cache(std::mt19937_64& rng, const Case& c) {
  const int64_t n_ctx = c.n_past + c.T + 3;  // spare rows past the query rows: must be ignored
  Cache m;
  m.q = ktest::random_vec(rng, size_t(c.T * c.H * c.D), -2.0f, 2.0f);
  m.k = ktest::random_vec(rng, size_t(n_ctx * c.Hkv * c.D), -2.0f, 2.0f);
  m.v = ktest::random_vec(rng, size_t(n_ctx * c.Hkv * c.D), -1.0f, 1.0f);
  return m;
}

// Per output element (t, h, d), from exact double quantities:
//  scores: s_j = fl(scale * dot(q, k_j)) errs by ds_j <= scale gamma_D sum|q k_j| + u |s_j|;
//  softmax as above, where the shift adds u |s_j - m| and the score errors enter p_j with
//  relative weight <= 2 max_j ds_j;
//  out = alpha * sum_j p_j v_j: gamma_n (sum p_j |v_j|) + u.
// Bound: (2 max ds + 2 u max|s - m| + 2 kExpRel + 2 gamma_n + 4u) * sum_j p_j |v_jd| + u |ref|.
void check_case(const Case& c, const Cache& m, const std::vector<float>& out, const std::string& what) {
  const int group = c.H / c.Hkv;
  const double scale = float(1.0 / std::sqrt(double(c.D)));
  for (int64_t t = 0; t < c.T; ++t)
    for (int h = 0; h < c.H; ++h) {
      const int64_t hi = c.n_past + t, lo = c.window ? std::max<int64_t>(0, hi - c.window + 1) : 0;
      const int64_t n = hi - lo + 1;
      const float* q = m.q.data() + (t * c.H + h) * c.D;
      std::vector<double> s(static_cast<size_t>(n));
      double max_ds = 0, mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const float* k = m.k.data() + ((lo + j) * c.Hkv + h / group) * c.D;
        double dot = 0, mag = 0;
        for (int d = 0; d < c.D; ++d) dot += double(q[d]) * k[d], mag += std::fabs(double(q[d]) * k[d]);
        s[j] = scale * dot;
        max_ds = std::max(max_ds, scale * gamma(c.D) * mag + kU * std::fabs(s[j]));
        mx = std::max(mx, s[j]);
      }
      double sum = 0, spread = 0;
      for (double& x : s) spread = std::max(spread, mx - x), sum += x = std::exp(x - mx);
      const double rel = 2 * max_ds + 2 * kU * spread + 2 * ktest::kExpRel + 2 * gamma(double(n)) + 4 * kU;
      for (int d = 0; d < c.D; ++d) {
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double v = m.v[((lo + j) * c.Hkv + h / group) * c.D + d];
          ref += s[j] / sum * v, mag += s[j] / sum * std::fabs(v);
        }
        const double got = out[(t * c.H + h) * c.D + d];
        ASSERT_LE(std::fabs(got - ref), rel * mag + kU * std::fabs(ref) + 1e-37)
            << what << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D << " window=" << c.window
            << " n_past=" << c.n_past << " T=" << c.T << " t=" << t << " h=" << h << " d=" << d;
      }
    }
}

// Every ISA x GQA ratio {1, 2, 4} x T {1, 2, 3, 7, 64, 130} x window on/off x n_past {0, > 0};
// head_dim cycles through sizes that are / are not multiples of the vector width and that span
// more than one register block of the V accumulation (64 floats AVX2, 128 AVX-512).
TEST(Attention, FastAndRefMatchExactDouble) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(12);
  const int kDs[] = {5, 40, 64, 72, 130, 128};
  int i = 0, cases = 0;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (auto [H, Hkv] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{8, 2}})
      for (int64_t T : {1, 2, 3, 7, 64, 130})
        for (int window : {0, 9})
          for (int64_t n_past : {0, 37}) {
            const Case c{H, Hkv, kDs[i++ % 6], window, n_past, T};
            const Cache m = make_cache(rng, c);
            const AttnShape s{c.H, c.Hkv, c.D, c.window};
            std::vector<float> out(m.q.size(), NAN), outr(m.q.size(), NAN);
            attention(s, m.q.data(), m.k.data(), m.v.data(), n_past, T, out.data());
            check_case(c, m, out, ktest::ctx(isa, "fast"));
            if (isa == Isa::Scalar) {  // the reference is ISA-independent: check it once
              ref::attention(s, m.q.data(), m.k.data(), m.v.data(), n_past, T, outr.data());
              check_case(c, m, outr, "ref");
            }
            ++cases;
          }
  }
  EXPECT_GT(cases, 0);
}

// Long contexts. Prefill chunks (T >= 8) run blocked: per (block of queries, head) one scores
// sgemm over every key the block sees, the rows masked to their own range; the block holds fewer
// queries here (its scores stay under 4 MiB: 34 and 52 of the 70). Decode (T < 8) takes the keys
// in chunks of 16 KiB of rows (512 at head_dim 8), the group's heads per chunk, the chunks' sums
// added up. With and without a window wider than a block: the same exact-double bound.
TEST(Attention, LongContextChunksKeysAndSplitsQueries) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(16);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int64_t T : {1, 3, 70})
      for (int window : {0, 20000}) {
        const Case c{4, 2, 8, window, 30000, T};
      const Cache m = make_cache(rng, c);
        std::vector<float> out(m.q.size(), NAN);
        attention(AttnShape{c.H, c.Hkv, c.D, c.window}, m.q.data(), m.k.data(), m.v.data(), c.n_past, c.T, out.data());
        check_case(c, m, out, ktest::ctx(isa, "long context"));
      }
  }
}

// A prefix segment in front of the cache (PrefixQuant / IntactKV) is the same attention as one
// cache holding [prefix; body]: the prefix is rows [0, P) of the concatenation, the body the rest,
// so check_case's exact-double bound for n_past' = P + n_past applies unchanged (splitting the
// weighted sum in two adds one rounding per output, inside its γ_n slack). Window on and off, and
// a window that hides the whole prefix.
TEST(Attention, PrefixSegmentEqualsConcatenatedCache) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(15);
  int cases = 0;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int64_t P : {1, 5, 300})  // 300: the decode path's key chunks (102 rows) span the prefix
      for (int64_t n_past : {0, 20})
        for (int64_t T : {1, 9})
          for (int window : {0, 4, 12, 200}) {
            const Case whole{8, 2, 40, window, P + n_past, T};  // the concatenated view
            const Cache m = make_cache(rng, whole);
            const int64_t ld = int64_t(whole.Hkv) * whole.D;
            const KvSegment prefix{m.k.data(), m.v.data(), P};
            std::vector<float> out(m.q.size(), NAN), outr(m.q.size(), NAN);
            const AttnShape s{whole.H, whole.Hkv, whole.D, window};
            attention(s, m.q.data(), prefix, m.k.data() + P * ld, m.v.data() + P * ld, n_past, T, out.data());
            check_case(whole, m, out, ktest::ctx(isa, "prefix"));
            if (isa == Isa::Scalar) {
              ref::attention(s, m.q.data(), prefix, m.k.data() + P * ld, m.v.data() + P * ld, n_past, T, outr.data());
              check_case(whole, m, outr, "ref prefix");
            }
            ++cases;
          }
  }
  EXPECT_GT(cases, 0);
}

// One visible key (first token; or window 1): softmax weight is exp(0)/exp(0) = 1 exactly and
// the output is that key's V row, bit for bit.
TEST(Attention, SingleKeyReturnsVExactly) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(13);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (const Case& c : {Case{4, 2, 72, 0, 0, 1}, Case{8, 2, 64, 1, 5, 7}, Case{3, 3, 130, 1, 0, 20}}) {
      const Cache m = make_cache(rng, c);
      std::vector<float> out(m.q.size());
      attention(AttnShape{c.H, c.Hkv, c.D, c.window}, m.q.data(), m.k.data(), m.v.data(), c.n_past, c.T, out.data());
      for (int64_t t = 0; t < c.T; ++t)
        for (int h = 0; h < c.H; ++h) {
          const float* v = m.v.data() + ((c.n_past + t) * c.Hkv + h / (c.H / c.Hkv)) * c.D;
          EXPECT_EQ(0, std::memcmp(out.data() + (t * c.H + h) * c.D, v, size_t(c.D) * 4))
              << isa_name(isa) << " t=" << t << " h=" << h;
        }
    }
  }
}

// Each (t, h) is computed in a fixed order whichever thread takes it: bit-identical for any thread
// count — prefill (T = 33: the blocked path) and decode (T = 1, 3, with and without a window;
// 300-700 keys, so two threads are used).
TEST(Attention, IndependentOfThreadCount) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(14);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (const Case c : {Case{8, 2, 64, 0, 100, 33}, Case{8, 2, 64, 0, 700, 1}, Case{9, 3, 64, 0, 700, 3},
                         Case{9, 3, 64, 300, 700, 1}}) {
      const Cache m = make_cache(rng, c);
      const AttnShape shape{c.H, c.Hkv, c.D, c.window};
      std::vector<float> o1(m.q.size()), o2(m.q.size());
      set_num_threads(1);
      attention(shape, m.q.data(), m.k.data(), m.v.data(), c.n_past, c.T, o1.data());
      set_num_threads(2);
      attention(shape, m.q.data(), m.k.data(), m.v.data(), c.n_past, c.T, o2.data());
      EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * 4))
          << isa_name(isa) << " H=" << c.H << " Hkv=" << c.Hkv << " T=" << c.T << " window=" << c.window;
    }
  }
}

}  // namespace
}  // namespace sinkq
