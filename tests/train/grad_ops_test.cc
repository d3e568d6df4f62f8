// The backward of every op (src/train/grad_ops.h) against central finite differences of its own
// forward in double precision. For an op y = f(x) the test takes L = Σ w·y with random weights w,
// runs the backward with dy = w, and compares each input gradient element with
// (L(x + h) − L(x − h)) / 2h.
//
// Tolerance: in double with h = 1e-6 and O(1) values, the central difference's truncation error
// is h²·|L'''|/6 ≈ 1e-13 and its rounding error ≈ ε·|L|/h ≈ 1e-10·|L| (ε = 1.1e-16, |L| = O(10) for
// these sizes): |fd − analytic| <= 1e-7·max(1, |analytic|) leaves ~100x margin and still fails on any
// wrong term (a missing or wrong factor changes a gradient by O(1)).
#include "train/grad_ops.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

namespace sinkq::train {
namespace {

constexpr double kH = 1e-6, kTol = 1e-7;

std::vector<double> rnd(std::mt19937_64& rng, size_t n, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares grad with central differences of L over every element of x (x is restored).
void check(const char* what, std::vector<double>& x, const std::vector<double>& grad, const std::function<double()>& L) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kH;
    const double up = L();
    x[i] = x0 - kH;
    const double down = L();
    x[i] = x0;
    const double fd = (up - down) / (2 * kH);
    const double err = std::abs(fd - grad[i]) / std::max(1.0, std::abs(grad[i]));
    worst = std::max(worst, err);
    ASSERT_LE(err, kTol) << what << " element " << i << ": fd " << fd << " analytic " << grad[i];
  }
  std::printf("  %-22s %zu elements, worst relative error %.2e\n", what, x.size(), worst);
}

TEST(GradOps, Linear) {
  std::mt19937_64 rng(1);
  const int64_t T = 3, in = 5, out = 4;
  auto x = rnd(rng, T * in), W = rnd(rng, out * in), b = rnd(rng, out), w = rnd(rng, T * out);
  std::vector<double> y(T * out);
  auto L = [&] {
    linear_forward(x.data(), W.data(), b.data(), y.data(), T, in, out);
    return dot(y, w);
  };
  std::vector<double> dx(x.size()), dW(W.size()), db(b.size());
  linear_backward(w.data(), x.data(), W.data(), dx.data(), dW.data(), db.data(), T, in, out);
  check("linear dx", x, dx, L);
  check("linear dW", W, dW, L);
  check("linear db", b, db, L);
}

TEST(GradOps, RmsNorm) {
  std::mt19937_64 rng(2);
  const int64_t T = 3, n = 6;
  auto x = rnd(rng, T * n), g = rnd(rng, n), w = rnd(rng, T * n);
  std::vector<double> y(T * n), r(T);
  auto L = [&] {
    rmsnorm_forward(x.data(), g.data(), y.data(), r.data(), T, n, 1e-5);
    return dot(y, w);
  };
  L();
  std::vector<double> dx(x.size()), dg(g.size());
  rmsnorm_backward(w.data(), x.data(), g.data(), r.data(), dx.data(), dg.data(), T, n);
  check("rmsnorm dx", x, dx, L);
  check("rmsnorm dw", g, dg, L);
}

TEST(GradOps, RopeIncludingLlama3Scaling) {
  for (const char* type : {"none", "llama3"}) {
    SCOPED_TRACE(type);
    RopeParams rp;
    rp.head_dim = 8;
    rp.theta = 500000.0f;
    rp.scaling.type = type;
    rp.scaling.factor = 8.0f;
    rp.scaling.original_max_position_embeddings = 16;
    const RopeTable rt = RopeTable::make(rp);
    std::mt19937_64 rng(3);
    const int64_t T = 3;
    const int heads = 2;
    const std::vector<int32_t> pos = {5, 6, 7};
    auto x = rnd(rng, T * heads * 8), w = rnd(rng, x.size());
    auto L = [&] {
      std::vector<double> y = x;
      rope_forward(rt, y.data(), T, heads, pos);
      return dot(y, w);
    };
    std::vector<double> dx = w;
    rope_backward(rt, dx.data(), T, heads, pos);
    check("rope dx", x, dx, L);
    // The float forward rotates exactly as the engine's reference (ops_ref.cc) does.
    std::vector<float> xf(x.begin(), x.end()), xr = xf;
    rope_forward(rt, xf.data(), T, heads, pos);
    ref::rope_apply(rt, xr.data(), T, heads, pos);
    for (size_t i = 0; i < xf.size(); ++i) EXPECT_NEAR(xf[i], xr[i], 1e-6 * (1 + std::abs(xr[i])));
  }
}

TEST(GradOps, SwiGlu) {
  std::mt19937_64 rng(4);
  const int64_t n = 12;
  auto g = rnd(rng, n, 2.0), u = rnd(rng, n), w = rnd(rng, n);
  std::vector<double> h(n);
  auto L = [&] {
    swiglu_forward(g.data(), u.data(), h.data(), n);
    return dot(h, w);
  };
  std::vector<double> dg(n), du(n);
  swiglu_backward(w.data(), g.data(), u.data(), dg.data(), du.data(), n);
  check("swiglu dg", g, dg, L);
  check("swiglu du", u, du, L);
}

// GQA (4 query heads on 2 kv heads), a 2-row prefix, a sliding window in the second case.
TEST(GradOps, AttentionWithGqaAndPrefix) {
  for (int window : {0, 3}) {
    SCOPED_TRACE(window);
    AttnDims a;
    a.nh = 4;
    a.nkv = 2;
    a.D = 4;
    a.window = window;
    a.P = 2;
    a.T = 4;
    std::mt19937_64 rng(5);
    auto q = rnd(rng, a.T * a.nh * a.D), k = rnd(rng, a.T * a.nkv * a.D), v = rnd(rng, k.size());
    auto pk = rnd(rng, a.P * a.nkv * a.D), pv = rnd(rng, pk.size()), w = rnd(rng, q.size());
    std::vector<double> out(q.size()), probs(size_t(a.nh * a.T * a.keys()));
    auto L = [&] {
      attention_forward(a, q.data(), k.data(), v.data(), pk.data(), pv.data(), out.data(), probs.data());
      return dot(out, w);
    };
    L();
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), dpk(pk.size()), dpv(pv.size());
    attention_backward(a, w.data(), q.data(), k.data(), v.data(), pk.data(), pv.data(), probs.data(), dq.data(),
                       dk.data(), dv.data(), dpk.data(), dpv.data());
    check("attention dq", q, dq, L);
    check("attention dk", k, dk, L);
    check("attention dv", v, dv, L);
    check("attention dprefix_k", pk, dpk, L);
    check("attention dprefix_v", pv, dpv, L);
    // The float forward is the engine's attention (kernels/ops.h reference) over [prefix; cache].
    std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end()),
        pkf(pk.begin(), pk.end()), pvf(pv.begin(), pv.end()), of(q.size()), pf(probs.size()), oref(q.size());
    attention_forward(a, qf.data(), kf.data(), vf.data(), pkf.data(), pvf.data(), of.data(), pf.data());
    AttnShape s{a.nh, a.nkv, a.D, a.window};
    ref::attention(s, qf.data(), KvSegment{pkf.data(), pvf.data(), a.P}, kf.data(), vf.data(), 0, a.T, oref.data());
    for (size_t i = 0; i < of.size(); ++i) EXPECT_NEAR(of[i], oref[i], 1e-5 * (1 + std::abs(oref[i])));
  }
}

TEST(GradOps, CrossEntropyAndEmbedding) {
  std::mt19937_64 rng(6);
  const int64_t T = 4, V = 7, H = 3;
  auto logits = rnd(rng, T * V, 2.0);
  const std::vector<int32_t> targets = {3, -1, 0, 6};
  std::vector<double> d(logits.size());
  const double l0 = cross_entropy(logits.data(), targets, V, d.data());
  EXPECT_GT(l0, 0.0);
  check("cross_entropy dlogits", logits, d, [&] { return cross_entropy(logits.data(), targets, V, (double*)nullptr); });
  for (int64_t i = V; i < 2 * V; ++i) EXPECT_EQ(d[size_t(i)], 0.0);  // the unscored row
  auto table = rnd(rng, 5 * H), w = rnd(rng, T * H);
  const std::vector<int32_t> ids = {2, 4, 2, 0};  // a repeated id sums
  std::vector<double> out(T * H), dt(table.size());
  embed_backward(w.data(), ids, dt.data(), H);
  check("embedding dtable", table, dt, [&] {
    embed_forward(table.data(), ids, out.data(), H);
    return dot(out, w);
  });
}

}  // namespace
}  // namespace sinkq::train
