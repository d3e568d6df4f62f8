// One block's training forward / backward with what runs at its sites (train/grad_layer.h): the
// online rotation's backward (at q, k after RoPE and at down_in) and the static quantizers' STE,
// against central finite differences in double precision.
//
// The rotation is a random dense matrix M (not orthogonal, not symmetric): the backward must apply
// Mᵀ, and a symmetric or orthogonal M would hide a missing transpose. The objective is
// L = Σ out·r with a fixed random r, so dL/d(out) = r is what layer_backward starts from.
// Tolerance as grad_model_test.cc: |fd − g| <= 1e-9 + 1e-6·|g| (h = 1e-5, |L| = O(10): rounding
// ≈ 1e-10, truncation ≈ 1e-11; a wrong term is an O(|g|) change).
#include "train/grad_layer.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "train/grad_ops.h"
#include "train/train_testutil.h"
#include "train/ste.h"
#include "util/testutil.h"

namespace sinkq::train {
namespace {

// One layer of the gradient tests' tiny shape, without biases; intermediate 12 (R4 acts on it).
ModelConfig config() {
  ModelConfig c = tiny_config(false, 0);
  c.num_layers = 1;
  c.intermediate_size = 12;
  c.qkv_bias = false;
  return c;
}

std::vector<double> randn(size_t n, std::mt19937_64& rng, double sd) {
  std::normal_distribution<double> d(0.0, sd);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

Params<double>::Layer random_layer(const ModelConfig& c, std::mt19937_64& rng) {
  const size_t H = size_t(c.hidden_size), I = size_t(c.intermediate_size), Q = size_t(c.q_dim()),
               KV = size_t(c.kv_dim());
  Params<double>::Layer w;
  w.vec(VecRole::AttnNorm) = randn(H, rng, 0.1);
  w.vec(VecRole::MlpNorm) = randn(H, rng, 0.1);
  for (double& x : w.vec(VecRole::AttnNorm)) x += 1.0;
  for (double& x : w.vec(VecRole::MlpNorm)) x += 1.0;
  w.mat(LinearRole::Q) = randn(Q * H, rng, 0.3);
  w.mat(LinearRole::K) = randn(KV * H, rng, 0.3);
  w.mat(LinearRole::V) = randn(KV * H, rng, 0.3);
  w.mat(LinearRole::O) = randn(H * Q, rng, 0.3);
  w.mat(LinearRole::Gate) = randn(I * H, rng, 0.3);
  w.mat(LinearRole::Up) = randn(I * H, rng, 0.3);
  w.mat(LinearRole::Down) = randn(H * I, rng, 0.3);
  return w;
}

// x ← x·M (transpose: x ← x·Mᵀ) on each n-wide row, M [n, n] from `mats` by n.
struct DenseRotation {
  std::map<int64_t, std::vector<double>> mats;
  void operator()(double* x, int64_t rows, int64_t n, bool transpose) const {
    const std::vector<double>& M = mats.at(n);
    std::vector<double> y(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      double* xr = x + r * n;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += xr[i] * (transpose ? M[size_t(j * n + i)] : M[size_t(i * n + j)]);
        y[size_t(j)] = s;
      }
      std::copy(y.begin(), y.end(), xr);
    }
  }
};

TEST(GradLayer, RotationAndPrefixAgainstFiniteDifferences) {
  const ModelConfig c = config();
  std::mt19937_64 rng(3);
  Params<double>::Layer w = random_layer(c, rng);
  const int64_t T = 5, P = 2, H = c.hidden_size, KV = c.kv_dim();
  std::vector<double> x0 = randn(size_t(T * H), rng, 1.0), r = randn(size_t(T * H), rng, 1.0);
  std::vector<double> pk = randn(size_t(P * KV), rng, 0.5), pv = randn(size_t(P * KV), rng, 0.5);
  DenseRotation rot;
  for (int64_t n : {int64_t(c.head_dim), int64_t(c.intermediate_size)}) {
    std::vector<double> M = randn(size_t(n * n), rng, 0.4);
    for (int64_t i = 0; i < n; ++i) M[size_t(i * n + i)] += 1.0;
    rot.mats[n] = M;
  }
  LayerSites<double> sites;
  sites.rotate = rot;
  const Ropes rope(c);
  std::vector<int32_t> pos, toks(size_t(T), 0);
  for (int64_t t = 0; t < T; ++t) pos.push_back(int32_t(P + t));
  auto input = [&] {
    LayerInput<double> in;
    in.pos = pos;
    in.tokens = toks;
    in.P = P;
    in.prefix_k = pk.data();
    in.prefix_v = pv.data();
    return in;
  };
  std::function<double()> L = [&] {
    std::vector<double> x = x0;
    LayerTape<double> tape;
    layer_forward(c, rope, w, 0, input(), x, tape, &sites);
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += x[i] * r[i];
    return s;
  };
  // Analytic.
  std::vector<double> x = x0;
  LayerTape<double> tape;
  layer_forward(c, rope, w, 0, input(), x, tape, &sites);
  Params<double>::Layer gw = w;
  for (auto* v : {&gw.vec(VecRole::AttnNorm), &gw.vec(VecRole::MlpNorm), &gw.mat(LinearRole::Q), &gw.mat(LinearRole::K), &gw.mat(LinearRole::V), &gw.mat(LinearRole::O), &gw.mat(LinearRole::Gate), &gw.mat(LinearRole::Up), &gw.mat(LinearRole::Down)})
    std::fill(v->begin(), v->end(), 0.0);
  std::vector<double> gpk(pk.size()), gpv(pv.size());
  LayerGrads<double> g;
  g.w = &gw;
  g.prefix_k = gpk.data();
  g.prefix_v = gpv.data();
  std::vector<double> dx = r;
  layer_backward(c, rope, w, 0, input(), tape, &sites, dx, g);

  int checked = 0;
  auto check_all = [&](std::vector<double>& p, const std::vector<double>& gp, const char* name, size_t stride) {
    for (size_t i = 0; i < p.size(); i += stride, ++checked) expect_close(fd_at(L, p[i]), gp[i], fmt::format("{}[{}]", name, i));
  };
  check_all(x0, dx, "input", 3);
  check_all(w.mat(LinearRole::Q), gw.mat(LinearRole::Q), "wq", 5);
  check_all(w.mat(LinearRole::K), gw.mat(LinearRole::K), "wk", 5);
  check_all(w.mat(LinearRole::V), gw.mat(LinearRole::V), "wv", 5);
  check_all(w.mat(LinearRole::O), gw.mat(LinearRole::O), "wo", 5);
  check_all(w.mat(LinearRole::Gate), gw.mat(LinearRole::Gate), "w_gate", 5);
  check_all(w.mat(LinearRole::Down), gw.mat(LinearRole::Down), "w_down", 5);
  check_all(w.vec(VecRole::AttnNorm), gw.vec(VecRole::AttnNorm), "attn_norm", 1);
  check_all(pk, gpk, "prefix_k", 1);
  check_all(pv, gpv, "prefix_v", 1);
  std::printf("  %d gradient entries checked through R3 / R4 rotations and a 2-token prefix\n", checked);
}

// A static quantizer at a site: its backward is ste_backward on the gradient of its output
// (straight-through: x's gradient passed inside the clip range, zeroed outside), and the step
// size's gradient is LSQ's Σ dy·(l − x/s) (clamped level outside). Checked at o_in: the step
// size's gradient from layer_backward against ste_backward of the downstream gradient computed
// separately (a finite difference of the rest of the block on o_in's quantized values).
TEST(GradLayer, StaticQuantizerBackwardIsTheSteOfTheDownstreamGradient) {
  const ModelConfig c = config();
  std::mt19937_64 rng(5);
  const Params<double>::Layer w = random_layer(c, rng);
  const int64_t T = 4, H = c.hidden_size, Q = c.q_dim();
  const std::vector<double> x0 = randn(size_t(T * H), rng, 1.0), r = randn(size_t(T * H), rng, 1.0);
  const Ropes rope(c);
  std::vector<int32_t> pos, toks(size_t(T), 0);
  for (int64_t t = 0; t < T; ++t) pos.push_back(int32_t(t));
  LayerInput<double> in;
  in.pos = pos;
  in.tokens = toks;
  // A 3-bit per-tensor scale small enough that some of o_in's values clip.
  std::vector<double> scale = {0.05};
  LayerSites<double> sites;
  sites.statics[size_t(Site::OIn)] = StaticSite<double>{.bits = 3, .symmetric = true, .group = Q, .scale = scale.data()};
  std::vector<double> x = x0;
  LayerTape<double> tape;
  layer_forward(c, rope, w, 0, in, x, tape, &sites);
  const std::vector<double>& pre = tape.pre[size_t(Site::OIn)];
  const std::vector<double> att_q = tape.att;  // the quantized values o_proj read
  size_t clipped = 0;
  for (double v : pre) clipped += std::abs(v / scale[0]) > 4.0;
  ASSERT_GT(clipped, 0u) << "the test needs clipped values";
  ASSERT_LT(clipped, pre.size());
  std::vector<double> dx = r, dscale(1, 0.0);
  LayerGrads<double> g;
  g.scale[size_t(Site::OIn)] = dscale.data();
  layer_backward(c, rope, w, 0, in, tape, &sites, dx, g);
  // The downstream gradient d L / d(att_q): L = Σ r·(x_in + att_q·Woᵀ + mlp(...)) is linear in
  // att_q up to the MLP; a finite difference on att_q with the rest of the block as recorded.
  auto L_of_att = [&](const std::vector<double>& att) {
    std::vector<double> y(size_t(T * H)), xm = x0;
    linear_forward(att.data(), w.mat(LinearRole::O).data(), static_cast<const double*>(nullptr), y.data(), T, Q, H);
    for (size_t i = 0; i < y.size(); ++i) xm[i] += y[i];
    std::vector<double> xn(static_cast<size_t>(T * H)), rs(static_cast<size_t>(T)),
        gg(static_cast<size_t>(T * c.intermediate_size)), uu = gg, hh = gg, out = xm;
    rmsnorm_forward(xm.data(), w.vec(VecRole::MlpNorm).data(), xn.data(), rs.data(), T, H, c.rms_norm_eps);
    linear_forward(xn.data(), w.mat(LinearRole::Gate).data(), static_cast<const double*>(nullptr), gg.data(), T, H, c.intermediate_size);
    linear_forward(xn.data(), w.mat(LinearRole::Up).data(), static_cast<const double*>(nullptr), uu.data(), T, H, c.intermediate_size);
    swiglu_forward(gg.data(), uu.data(), hh.data(), T * c.intermediate_size);
    linear_forward(hh.data(), w.mat(LinearRole::Down).data(), static_cast<const double*>(nullptr), y.data(), T, c.intermediate_size, H);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += (out[i] + y[i]) * r[i];
    return s;
  };
  std::vector<double> datt(att_q.size());
  for (size_t i = 0; i < att_q.size(); ++i) {
    std::vector<double> a = att_q;
    a[i] += 1e-5;
    const double up = L_of_att(a);
    a[i] -= 2e-5;
    datt[i] = (up - L_of_att(a)) / 2e-5;
  }
  std::vector<double> want_ds(1, 0.0);
  ste_backward(SteLayout{.bits = 3, .symmetric = true, .rows = T, .cols = Q, .group = Q, .shared_rows = true},
               datt.data(), pre.data(), scale.data(), static_cast<const int32_t*>(nullptr), static_cast<double*>(nullptr),
               want_ds.data());
  expect_close(want_ds[0], dscale[0], "d scale");
  EXPECT_NE(dscale[0], 0.0);
}

}  // namespace
}  // namespace sinkq::train
