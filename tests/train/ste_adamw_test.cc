// Fake quantization with a straight-through estimator and LSQ step-size gradients
// (src/train/ste.h), and AdamW with the cosine schedule (src/train/adamw.h).
#include <gtest/gtest.h>

#include <random>

#include "formats/quantizer.h"
#include "train/adamw.h"
#include "train/ste.h"

namespace sinkq::train {
namespace {

// The forward is the library quantizer's fake_quant, bit for bit, per row / per group / per tensor.
TEST(Ste, ForwardIsFakeQuant) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int64_t rows = 4, cols = 64;
  std::vector<float> x(size_t(rows * cols));
  for (float& v : x) v = d(rng);
  x[5] = 40.0f;  // an outlier that clips at clip ratio 0.5
  for (int bits : {8, 4, 3})
    for (bool sym : {true, false})
      for (quant::Granularity g : {quant::Granularity::PerRow, quant::Granularity::PerGroup, quant::Granularity::PerTensor}) {
        quant::QuantSpec spec;
        spec.bits = bits;
        spec.symmetric = sym;
        spec.granularity = g;
        spec.group_size = 32;
        spec.clip_ratio = 0.5f;
        if (g == quant::Granularity::PerTensor && !sym) continue;
        const quant::Params p = quant::compute_params(spec, x.data(), rows, cols);
        std::vector<float> want = x;
        quant::fake_quant(spec, p, want.data(), rows, cols);
        SteLayout L;
        L.bits = bits;
        L.symmetric = sym;
        L.rows = rows;
        L.cols = cols;
        L.group = g == quant::Granularity::PerGroup ? 32 : cols;
        L.shared_rows = g == quant::Granularity::PerTensor;
        ASSERT_EQ(int64_t(p.scale.size()), L.scale_count());
        std::vector<float> got(x.size());
        ste_forward(L, x.data(), p.scale.data(), sym ? nullptr : p.zero.data(), got.data());
        EXPECT_EQ(got, want) << bits << " sym " << sym << " gran " << int(g);
      }
}

// dx passes inside the clip range and is 0 outside; ds is LSQ's: l − x/s inside, the clamped
// level outside (int4 symmetric: levels −8..7).
TEST(Ste, StraightThroughAndLsqGradients) {
  SteLayout L;
  L.bits = 4;
  L.rows = 1;
  L.cols = 4;
  L.group = 4;
  const std::vector<double> x = {0.6, -1.3, 10.0, -10.0};  // s = 0.5: x/s = 1.2, −2.6, 20, −20
  const double s = 0.5;
  const std::vector<double> dy = {1.0, 2.0, 3.0, 4.0};
  std::vector<double> y(4), dx(4), ds(1);
  ste_forward(L, x.data(), &s, nullptr, y.data());
  EXPECT_EQ(y, (std::vector<double>{0.5, -1.5, 3.5, -4.0}));
  ste_backward(L, dy.data(), x.data(), &s, nullptr, dx.data(), ds.data(), 0.5);
  EXPECT_EQ(dx, (std::vector<double>{1.0, 2.0, 0.0, 0.0}));
  // 0.5·(1·(1 − 1.2) + 2·(−3 + 2.6) + 3·7 + 4·(−8)) = 0.5·(−0.2 − 0.8 + 21 − 32) = −6
  EXPECT_NEAR(ds[0], -6.0, 1e-12);
}

// AdamW's first step moves every coordinate by lr (m̂ = g, v̂ = g²) plus the decoupled decay, and
// it minimises a quadratic deterministically; the cosine schedule runs from lr to min_lr.
TEST(AdamW, FirstStepDecayConvergenceAndSchedule) {
  AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  AdamW<double> opt(2, o);
  std::vector<double> p = {1.0, -2.0}, g = {0.3, -5.0};
  opt.step(p.data(), g.data());
  EXPECT_NEAR(p[0], 1.0 - 0.1 * (0.3 / (0.3 + 1e-8) + 0.01 * 1.0), 1e-12);
  EXPECT_NEAR(p[1], -2.0 - 0.1 * (-5.0 / (5.0 + 1e-8) + 0.01 * -2.0), 1e-12);
  // f(p) = Σ (p_i − c_i)², without decay: reaches c.
  o.weight_decay = 0;
  o.lr = 0.05;
  std::vector<double> q = {3.0, -1.0}, c = {-0.5, 2.0}, q2 = q;
  AdamW<double> a(2, o), b(2, o);
  for (int t = 0; t < 2000; ++t) {
    std::vector<double> gq = {2 * (q[0] - c[0]), 2 * (q[1] - c[1])}, gq2 = {2 * (q2[0] - c[0]), 2 * (q2[1] - c[1])};
    a.step(q.data(), gq.data(), cosine_lr(0.05, 0.0, t, 2000));
    b.step(q2.data(), gq2.data(), cosine_lr(0.05, 0.0, t, 2000));
  }
  EXPECT_NEAR(q[0], c[0], 1e-3);
  EXPECT_NEAR(q[1], c[1], 1e-3);
  EXPECT_EQ(q, q2);  // deterministic
  EXPECT_DOUBLE_EQ(cosine_lr(1.0, 0.1, 0, 10), 1.0);
  EXPECT_NEAR(cosine_lr(1.0, 0.1, 5, 10), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(cosine_lr(1.0, 0.1, 10, 10), 0.1);
  EXPECT_THROW(AdamW<double>(1, AdamWOptions{.lr = 0.1, .beta1 = 1.0}), Error);
}

}  // namespace
}  // namespace sinkq::train
