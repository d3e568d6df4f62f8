// tests/quant/crossquant_test.cc — CrossQuant: α = 1 is per-token, the element-wise scale formula,
// the smaller quantization kernel with an outlier token, and the decode-time column modes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/quantizer.h"
#include "quant/crossquant.h"

namespace sinkq::quant {
namespace {

using ::testing::HasSubstr;

constexpr double kU = 0x1p-24;

std::vector<float> randn(std::mt19937_64& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Activations with an outlier token: row 0 carries a massive value (an attention-sink-like token
// with |x| = 1000 in one channel), every other entry is N(0, 1).
std::vector<float> outlier_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x = randn(rng, size_t(rows * cols));
  x[3] = 1000.0f;
  return x;
}

TEST(CrossQuant, AlphaOneIsPerTokenExactly) {
  const int64_t rows = 16, cols = 64;
  const std::vector<float> x = outlier_matrix(rows, cols, 1);
  for (int bits : {4, 8}) {
    QuantSpec pt;
    pt.bits = bits;
    pt.symmetric = true;
    pt.granularity = Granularity::PerRow;
    std::vector<float> want = x;
    fake_quant_dynamic(pt, want.data(), rows, cols);
    for (ColumnMode m : {ColumnMode::PerCall, ColumnMode::Static, ColumnMode::RunningMax}) {
      CrossQuantizer cq({bits, 1.0f, m}, cols);
      if (m == ColumnMode::Static) cq.calibrate(x.data(), 2, cols);  // any c: c^0 = 1
      std::vector<float> got = x;
      cq.apply(got.data(), rows, cols);
      EXPECT_TRUE(same_bits(got, want)) << "bits " << bits << " mode " << column_mode_name(m);
    }
  }
}

TEST(CrossQuant, ScaleFormulaElementWise) {
  // s_ij = t_i^α c_j^(1-α) / (2^(N-1) - 1): ours takes the powers and product in double (rel.
  // error ~1e-16), rounds once to fp32 (u) and divides in fp32 (u): |s - exact| <= 2.01 u·exact.
  const int64_t rows = 8, cols = 32;
  const std::vector<float> x = outlier_matrix(rows, cols, 2);
  for (float alpha : {0.0f, 0.15f, 0.5f, 0.85f}) {
    const CrossQuantSpec spec{8, alpha, ColumnMode::PerCall};
    CrossQuantizer cq(spec, cols);
    std::vector<int8_t> q(x.size());
    std::vector<float> sc(x.size());
    cq.quantize(x.data(), rows, cols, q.data(), sc.data());
    std::vector<long double> t(size_t(rows), 0), c(size_t(cols), 0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const long double a = std::fabs(x[size_t(i * cols + j)]);
        t[size_t(i)] = std::max(t[size_t(i)], a);
        c[size_t(j)] = std::max(c[size_t(j)], a);
      }
    std::vector<float> fq = x;
    CrossQuantizer(spec, cols).apply(fq.data(), rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t k = size_t(i * cols + j);
        const long double exact = std::pow(t[size_t(i)], (long double)alpha) *
                                  std::pow(c[size_t(j)], 1.0L - alpha) / 127.0L;
        ASSERT_LE(std::fabs(sc[k] - exact), 2.01L * kU * exact) << "alpha " << alpha << " at " << i << "," << j;
        EXPECT_EQ(sc[k], crossquant_scale(spec, float(t[size_t(i)]), float(c[size_t(j)])));
        // q = clamp(rne(x/s)) with that very s, and x̂ = s·q is what apply() writes.
        const float want_q = std::fmin(std::fmax(std::nearbyint(x[k] / sc[k]), -128.0f), 127.0f);
        ASSERT_EQ(float(q[k]), want_q);
        ASSERT_EQ(fq[k], float(q[k]) * sc[k]);
        // |x_ij| <= min(t_i, c_j) <= t^α c^(1-α): per-call CrossQuant never needs the clamp.
        ASSERT_LE(std::fabs(x[k] / sc[k]), 127.0f * (1 + 4 * kU));
      }
  }
}

TEST(CrossQuant, SmallerKernelThanPerTokenWithAnOutlierToken) {
  const int64_t rows = 64, cols = 256;
  const std::vector<float> x = outlier_matrix(rows, cols, 3);
  for (int bits : {4, 8}) {
    QuantSpec pt;
    pt.bits = bits;
    pt.granularity = Granularity::PerRow;
    const Params p = compute_params(pt, x.data(), rows, cols);
    const KernelCount per_token = kernel_count(pt, p, x.data(), rows, cols);
    CrossQuantizer cq({bits, 0.15f, ColumnMode::PerCall}, cols);
    KernelCount cross;
    std::vector<float> y = x;
    cq.apply(y.data(), rows, cols, &cross);
    EXPECT_DOUBLE_EQ(cross.fraction(), CrossQuantizer({bits, 0.15f, ColumnMode::PerCall}, cols)
                                           .kernel_fraction(x.data(), rows, cols));
    // Per-token: the outlier row's step is 1000/qmax, which zeroes almost its whole row
    // (|x| < 3.9 at 8 bits), so the kernel is at least ~1/64 of all elements.
    EXPECT_GT(per_token.fraction(), 0.9 / double(rows)) << bits;
    // CrossQuant divides by t^0.15 c^0.85 instead: the outlier row's step shrinks ~150x. It
    // loses the outlier column of the other rows instead (c_3 = 1000 >= t_i, the paper's
    // "case II"), and at 4 bits the normal rows' own kernel (|x| < t/14, ~16%) dominates both,
    // so the claim is "smaller" at 4 bits and "less than half" at 8 bits (~1/64 vs ~1%).
    EXPECT_LT(cross.fraction(), per_token.fraction()) << bits;
    if (bits == 8) {
      EXPECT_LT(cross.fraction(), 0.5 * per_token.fraction()) << cross.fraction() << " vs "
                                                              << per_token.fraction();
    }
    // Row 0 alone: per-token loses (nearly) everything, CrossQuant keeps most of it.
    const Params p0 = compute_params(pt, x.data(), 1, cols);
    const double row0_pt = kernel_fraction(pt, p0, x.data(), 1, cols);
    KernelCount row0_cq;
    std::vector<float> y0 = x;
    CrossQuantizer(cq.spec(), cols).apply(y0.data(), rows, cols, nullptr);
    for (int64_t j = 0; j < cols; ++j) {
      if (x[size_t(j)] == 0.0f) continue;
      ++row0_cq.nonzero;
      if (y0[size_t(j)] == 0.0f) ++row0_cq.zeroed;
    }
    if (bits == 8) {
      EXPECT_GT(row0_pt, 0.95);
    }
    EXPECT_LT(row0_cq.fraction(), 0.5 * row0_pt);
  }
}

TEST(CrossQuant, RunningMaxIsCausalAndDecodeEqualsPrefill) {
  const int64_t rows = 12, cols = 40;
  const std::vector<float> x = outlier_matrix(rows, cols, 4);
  for (bool seeded : {false, true}) {
    CrossQuantizer prefill({4, 0.15f, ColumnMode::RunningMax}, cols), decode = prefill;
    if (seeded) {
      std::mt19937_64 rng(9);
      const std::vector<float> cal = randn(rng, size_t(8 * cols));
      prefill.calibrate(cal.data(), 8, cols);
      decode.calibrate(cal.data(), 8, cols);
    }
    std::vector<float> a = x, b = x;
    prefill.apply(a.data(), rows, cols);
    for (int64_t i = 0; i < rows; ++i) decode.apply(b.data() + i * cols, 1, cols);  // token by token
    EXPECT_TRUE(same_bits(a, b)) << "seeded " << seeded;
    EXPECT_EQ(prefill.running_column_max(), decode.running_column_max());
    // Causal: quantizing the first 5 rows alone gives the same first 5 rows.
    CrossQuantizer part({4, 0.15f, ColumnMode::RunningMax}, cols);
    if (seeded) {
      part = prefill;
      part.reset();
    }
    std::vector<float> c(x.begin(), x.begin() + 5 * cols);
    part.apply(c.data(), 5, cols);
    EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
    // reset() starts a new sequence: the same tokens quantize the same way again.
    prefill.reset();
    std::vector<float> again = x;
    prefill.apply(again.data(), rows, cols);
    EXPECT_TRUE(same_bits(again, a));
  }
}

// Static columns: a row's result depends on the row alone (decode = prefill). A value above its
// calibrated column maximum widens its row's scale at 8 bits (no |z/s| beyond qmax + 1/2 anywhere)
// and is clamped at 4 (the row keeps CrossQuant's token factor t^α: crossquant.h); rows that stay
// inside the calibrated range get t^α / qmax at both widths.
TEST(CrossQuant, StaticColumnsWidenAtEightBitsAndClampBelow) {
  const int64_t rows = 10, cols = 16;
  std::mt19937_64 rng(5);
  const std::vector<float> cal = randn(rng, size_t(32 * cols));
  std::vector<float> x = randn(rng, size_t(rows * cols), 3.0f);  // exceeds the calibrated c
  for (int64_t j = 0; j < cols; ++j) x[size_t(j)] = cal[size_t(j)] * 0.5f;  // row 0 stays inside
  for (int bits : {8, 4}) {
    SCOPED_TRACE(bits);
    CrossQuantizer cq({bits, 0.15f, ColumnMode::Static}, cols);
    EXPECT_THAT([&] { std::vector<float> y = x; cq.apply(y.data(), rows, cols); },
                ::testing::ThrowsMessage<Error>(HasSubstr("calibrate")));
    cq.calibrate(cal.data(), 32, cols);
    std::vector<float> a = x, b = x;
    cq.apply(a.data(), rows, cols);
    for (int64_t i = 0; i < rows; ++i) cq.apply(b.data() + i * cols, 1, cols);
    EXPECT_TRUE(same_bits(a, b));
    const CrossFold f = make_cross_fold(bits, 0.15f, cq.calibrated_column_max());
    const float qm = float((1 << (bits - 1)) - 1);
    std::vector<int8_t> q(x.size());
    std::vector<float> s(static_cast<size_t>(rows));
    cross_fold_quantize(f, x.data(), rows, cols, q.data(), s.data());
    int widened = 0, clamped = 0;
    for (int64_t i = 0; i < rows; ++i) {
      float t = 0.0f;
      for (int64_t j = 0; j < cols; ++j) {
        const float z = x[size_t(i * cols + j)] / f.b[size_t(j)];
        if (std::fabs(z / s[size_t(i)]) > qm + 0.5f) {
          ++clamped;
          EXPECT_EQ(q[size_t(i * cols + j)], z > 0 ? int(qm) : -int(qm) - 1);
        }
        t = std::max(t, std::fabs(x[size_t(i * cols + j)]));
      }
      const float cross = cross_token_scale(bits, 0.15f, t, 0.0f);
      if (i == 0) {
        EXPECT_EQ(s[0], cross);  // inside the calibrated range: t^α / qmax
      }
      widened += s[size_t(i)] > cross;
    }
    if (bits == 8) {
      EXPECT_GT(widened, 0);  // the test data does leave the calibrated range
      EXPECT_EQ(clamped, 0);
    } else {
      EXPECT_EQ(widened, 0);
      EXPECT_GT(clamped, 0);
    }
  }
}

TEST(CrossQuant, PerCallWithOneTokenDegenerates) {
  // T = 1: c_j = |x_j| so x_j / s_j = ±qmax (|x_j| / t)^α: no nonzero element is ever zeroed,
  // because the scale carries the element itself. This is why decode needs Static/RunningMax.
  std::mt19937_64 rng(6);
  std::vector<float> x = randn(rng, 64);
  x[7] = 500.0f;
  CrossQuantizer cq({4, 0.15f, ColumnMode::PerCall}, 64);
  EXPECT_EQ(cq.kernel_fraction(x.data(), 1, 64), 0.0);
}

TEST(CrossQuant, ZeroRowsAndColumnsGiveZerosNotNaN) {
  const int64_t rows = 3, cols = 4;
  std::vector<float> x = {0, 0, 0, 0, 1, 0, -2, 3, 0.5f, 0, 0, -1};  // row 0 and column 1 zero
  for (ColumnMode m : {ColumnMode::PerCall, ColumnMode::RunningMax, ColumnMode::Static}) {
    for (float alpha : {0.0f, 0.15f, 1.0f}) {
      CrossQuantizer cq({8, alpha, m}, cols);
      if (m == ColumnMode::Static) cq.calibrate(x.data(), rows, cols);
      std::vector<float> y = x;
      cq.apply(y.data(), rows, cols);
      for (size_t k = 0; k < y.size(); ++k) {
        ASSERT_FALSE(std::isnan(y[k])) << column_mode_name(m) << " alpha " << alpha;
        if (x[k] == 0.0f) {
          ASSERT_EQ(y[k], 0.0f);
        }
      }
    }
  }
  EXPECT_EQ(crossquant_scale({8, 0.15f, ColumnMode::PerCall}, 0.0f, 0.0f), FLT_MIN);
}

TEST(CrossQuant, InvalidSpecsThrowNamingTheField) {
  auto msg = [](CrossQuantSpec s) {
    try {
      CrossQuantizer(s, 8);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(msg({1, 0.15f, ColumnMode::Static}), HasSubstr("bits"));
  EXPECT_THAT(msg({9, 0.15f, ColumnMode::Static}), HasSubstr("bits"));
  EXPECT_THAT(msg({8, -0.1f, ColumnMode::Static}), HasSubstr("alpha"));
  EXPECT_THAT(msg({8, 1.5f, ColumnMode::Static}), HasSubstr("alpha"));
  EXPECT_THAT(msg({8, NAN, ColumnMode::Static}), HasSubstr("alpha"));
  CrossQuantizer cq({8, 0.15f, ColumnMode::PerCall}, 8);
  std::vector<float> x(16, 1.0f);
  EXPECT_THROW(cq.apply(x.data(), 2, 7), Error);
  EXPECT_THROW(cq.set_column_max({1, 2}), Error);
  EXPECT_THROW(cq.set_column_max(std::vector<float>(8, -1.0f)), Error);
  EXPECT_EQ(parse_column_mode("running_max"), ColumnMode::RunningMax);
  EXPECT_THROW(parse_column_mode("dynamic"), Error);
}

}  // namespace

// ---- static columns, folded (CrossFold) ----

// α = 1: b = 1 and s_i = t_i / qmax, so the folded quantizer is dynamic per-token quantization
// (compute_params PerRow clip 1 + quantize_to_int) bit for bit, codes and scales.
TEST(CrossFold, AlphaOneIsPerToken) {
  std::mt19937_64 rng(11);
  const int64_t rows = 7, cols = 40;
  std::vector<float> x = randn(rng, size_t(rows * cols));
  x[3] = 300.0f;
  for (int bits : {4, 8}) {
    const CrossFold f = make_cross_fold(bits, 1.0f, std::vector<float>(size_t(cols), 5.0f));
    for (float b : f.b) ASSERT_EQ(b, 1.0f);
    std::vector<int8_t> q(x.size()), want(x.size());
    std::vector<float> s(static_cast<size_t>(rows));
    cross_fold_quantize(f, x.data(), rows, cols, q.data(), s.data());
    QuantSpec spec;
    spec.bits = bits;
    spec.granularity = Granularity::PerRow;
    const Params p = compute_params(spec, x.data(), rows, cols);
    quantize_to_int(spec, p, x.data(), rows, cols, want.data());
    EXPECT_EQ(q, want) << bits;
    for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(s[size_t(i)], p.scale[size_t(i)]) << bits;
  }
}

// The fold is CrossQuant's rule: with the column maxima of x itself (no clamping), its codes equal
// the element-wise per-call rule's except where the two fp32 roundings of x / (t^α c^(1-α) / qmax)
// (two steps vs one in double) fall on opposite sides of a rounding boundary: a few ulps wide, so
// rare (bound 0.5% of elements) and never more than one code apart. And folding is exact algebra:
// ẑ·(W·diag b)ᵀ = x̂·Wᵀ with x̂ the unfolded values (CrossQuantizer Static), to fp32 rounding.
TEST(CrossFold, IsTheElementWiseRuleFolded) {
  std::mt19937_64 rng(12);
  const int64_t rows = 16, cols = 64, out = 8;
  std::vector<float> x = randn(rng, size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i) x[size_t(i * cols + 5)] *= 80.0f;  // a massive channel
  x[size_t(2 * cols + 9)] = 0.0f;
  std::vector<float> c(size_t(cols), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[size_t(j)] = std::max(c[size_t(j)], std::fabs(x[size_t(i * cols + j)]));
  for (float alpha : {0.15f, 0.45f}) {
    const CrossFold f = make_cross_fold(4, alpha, c);
    std::vector<int8_t> qf(x.size()), qe(x.size());
    std::vector<float> s(static_cast<size_t>(rows)), se(x.size());
    cross_fold_quantize(f, x.data(), rows, cols, qf.data(), s.data());
    CrossQuantizer per_call({4, alpha, ColumnMode::PerCall}, cols);
    per_call.quantize(x.data(), rows, cols, qe.data(), se.data());
    int64_t differ = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_LE(std::abs(int(qf[k]) - int(qe[k])), 1) << k;
      differ += qf[k] != qe[k];
    }
    EXPECT_LE(differ, int64_t(x.size()) / 200) << alpha;

    CrossQuantizer st({4, alpha, ColumnMode::Static}, cols);
    st.set_column_max(c);
    std::vector<float> xhat = x, zhat = x;
    st.apply(xhat.data(), rows, cols);
    cross_fold_apply(f, zhat.data(), rows, cols);
    const std::vector<float> w = randn(rng, size_t(out * cols));
    std::vector<float> wf = w;
    cross_fold_weight(f, wf.data(), out, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t o = 0; o < out; ++o) {
        double a = 0, b = 0, mag = 0;
        for (int64_t j = 0; j < cols; ++j) {
          a += double(zhat[size_t(i * cols + j)]) * wf[size_t(o * cols + j)];
          b += double(xhat[size_t(i * cols + j)]) * w[size_t(o * cols + j)];
          mag += std::fabs(double(xhat[size_t(i * cols + j)]) * w[size_t(o * cols + j)]);
        }
        EXPECT_LE(std::fabs(a - b), 4 * FLT_EPSILON * mag) << i << " " << o;  // 3 fp32 roundings per term
      }
  }
}

// Column maxima: a zero column is not folded (b = 1); bad values and shapes are errors naming them.
TEST(CrossFold, ZeroColumnsAndErrors) {
  const CrossFold f = make_cross_fold(8, 0.15f, {0.0f, 4.0f, 1.0f});
  EXPECT_EQ(f.b[0], 1.0f);
  EXPECT_EQ(f.b[1], float(std::pow(4.0, 0.85)));
  EXPECT_EQ(f.b[2], 1.0f);
  EXPECT_THAT([] { make_cross_fold(8, 0.15f, {1.0f, -1.0f}); }, ::testing::ThrowsMessage<Error>(HasSubstr("column_max[1]")));
  EXPECT_THAT([] { make_cross_fold(8, 0.15f, {NAN}); }, ::testing::ThrowsMessage<Error>(HasSubstr("column_max[0]")));
  EXPECT_THAT([] { make_cross_fold(8, 1.5f, {1.0f}); }, ::testing::ThrowsMessage<Error>(HasSubstr("alpha")));
  EXPECT_THAT([] { make_cross_fold(8, 0.15f, {}); }, ::testing::ThrowsMessage<Error>(HasSubstr("no column maxima")));
  std::vector<float> x(4, 1.0f), s(2);
  EXPECT_THAT([&] { cross_fold_quantize(f, x.data(), 1, 4, nullptr, s.data()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("4 columns, the fold has 3")));
  x = {1.0f, INFINITY, 0.0f};
  EXPECT_THAT([&] { cross_fold_quantize(f, x.data(), 1, 3, nullptr, s.data()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("non-finite value inf at row 0, col 1")));
}

}  // namespace sinkq::quant
