// KVQuant's per-vector codebook quantizer (formats/nuq.h).
#include "formats/nuq.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"

namespace sinkq::formats::nuq {
namespace {

TEST(Nuq, UniformLevelsAreEvenlySpacedFromMinusOneToOne) {
  for (int b = 2; b <= 4; ++b) {
    const std::vector<float> c = uniform_levels(b);
    ASSERT_EQ(c.size(), size_t(1) << b);
    EXPECT_EQ(c.front(), -1.0f);
    EXPECT_EQ(c.back(), 1.0f);
    const double step = 2.0 / double(c.size() - 1);
    for (size_t i = 1; i < c.size(); ++i) EXPECT_NEAR(c[i] - c[i - 1], step, 1e-6);  // fp32 of k·step
  }
  EXPECT_THROW(uniform_levels(1), Error);
  EXPECT_THROW(uniform_levels(9), Error);
}

TEST(Nuq, Nf4EqualsQloraTable) {
  // bitsandbytes' NF4 table (functional.py, get_4bit_type "nf4"), the QLoRA paper's construction.
  const float nf4[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                         -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                         0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                         0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  const std::vector<float> c = nf_levels(4);
  ASSERT_EQ(c.size(), 16u);
  // The table was computed in float64 (scipy) and stored as float32: 1e-6 is a few float32 ulps.
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(c[size_t(i)], nf4[i], 1e-6) << i;
  for (int b = 2; b <= 4; ++b) {
    const std::vector<float> d = nf_levels(b);
    ASSERT_EQ(d.size(), size_t(1) << b);
    EXPECT_TRUE(std::is_sorted(d.begin(), d.end()));
    EXPECT_EQ(d.front(), -1.0f);
    EXPECT_EQ(d.back(), 1.0f);
    EXPECT_EQ(std::count(d.begin(), d.end(), 0.0f), 1);  // an exact zero
  }
}

TEST(Nuq, NearestBreaksTiesDownAndClamps) {
  const std::vector<float> c = {-1.0f, 0.0f, 0.5f, 1.0f};
  EXPECT_EQ(nearest(c, -5.0f), 0);
  EXPECT_EQ(nearest(c, -0.5f), 0);  // midpoint of -1 and 0: the lower level
  EXPECT_EQ(nearest(c, -0.49f), 1);
  EXPECT_EQ(nearest(c, 0.25f), 1);
  EXPECT_EQ(nearest(c, 0.26f), 2);
  EXPECT_EQ(nearest(c, 5.0f), 3);
  // Against a brute-force argmin on random inputs.
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> U(-1.2f, 1.2f);
  const std::vector<float> nf = nf_levels(3);
  for (int i = 0; i < 1000; ++i) {
    const float u = U(rng);
    int best = 0;
    for (int j = 1; j < 8; ++j)
      if (std::abs(u - nf[size_t(j)]) < std::abs(u - nf[size_t(best)])) best = j;
    EXPECT_EQ(nearest(nf, u), best) << u;
  }
}

TEST(Nuq, OutlierRangeSetsAsideRoundPnOverTwoPerSide) {
  std::vector<float> x(200);
  for (int i = 0; i < 200; ++i) x[size_t(i)] = float((i * 37) % 200);  // a permutation of 0..199
  EXPECT_EQ(outliers_per_side(200, 0.01), 1);
  EXPECT_EQ(outliers_per_side(4096, 0.01), 20);
  const Range all = outlier_range(x.data(), 200, 1, 0.0);
  EXPECT_EQ(all.lo, 0.0f);
  EXPECT_EQ(all.hi, 199.0f);
  const Range one = outlier_range(x.data(), 200, 1, 0.01);
  EXPECT_EQ(one.lo, 1.0f);
  EXPECT_EQ(one.hi, 198.0f);
  const Range five = outlier_range(x.data(), 200, 1, 0.05);
  EXPECT_EQ(five.lo, 5.0f);
  EXPECT_EQ(five.hi, 194.0f);
  // Strided (a column of a [200, 2] matrix).
  std::vector<float> m(400, 7.0f);
  for (int i = 0; i < 200; ++i) m[size_t(2 * i + 1)] = x[size_t(i)];
  const Range col = outlier_range(m.data() + 1, 200, 2, 0.01);
  EXPECT_EQ(col.lo, 1.0f);
  EXPECT_EQ(col.hi, 198.0f);
  EXPECT_THROW(outliers_per_side(10, 1.0), Error);
}

// The one-pass path for a few outliers per side (k <= 8) and the selection path agree with a
// sort on random vectors with ties, for every k it takes and the first beyond it.
TEST(Nuq, OutlierRangeEqualsTheSortedOrderStatistics) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> small(-5, 5);  // many ties
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 19 + trial % 60;
    const int64_t k = 1 + trial % 9;  // 1..9: the last one takes the selection path
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = trial % 2 ? float(small(rng)) : nd(rng);
    const double p = (2.0 * double(k) + 0.5) / double(n);  // round(p·n/2) = k
    ASSERT_EQ(outliers_per_side(n, p), k);
    std::vector<float> s = x;
    std::sort(s.begin(), s.end());
    const Range r = outlier_range(x.data(), n, 1, p);
    EXPECT_EQ(r.lo, s[size_t(k)]) << n << " " << k;
    EXPECT_EQ(r.hi, s[size_t(n - 1 - k)]) << n << " " << k;
  }
}

TEST(Nuq, UniformCodebookIsMinMaxRounding) {
  // With uniform levels a vector codes to lo + rne((x − lo)/Δ)·Δ, Δ = (hi − lo)/(2^b − 1): the
  // asymmetric min-max integer grid of the vector (up to fp32 rounding of the two formulas).
  std::mt19937 rng(3);
  std::normal_distribution<float> N(0.3f, 2.0f);
  std::vector<float> x(64);
  for (float& v : x) v = N(rng);
  for (int b = 2; b <= 4; ++b) {
    const Range r = outlier_range(x.data(), 64, 1, 0.0);
    const std::vector<float> c = uniform_levels(b);
    const double step = double(r.hi - r.lo) / double((1 << b) - 1);
    for (float v : x) {
      const Coded q = code_one(v, r, c, false);
      EXPECT_FALSE(q.outlier);
      const double want = double(r.lo) + std::nearbyint((double(v) - r.lo) / step) * step;
      EXPECT_NEAR(q.value, want, 1e-5 * (r.hi - r.lo)) << v;  // |x| ~ 10, fp32 eps·10 ≪ 1e-5·range
    }
  }
}

TEST(Nuq, OutliersAreKeptAsFp16AndTheRestIsCoded) {
  std::vector<float> x(100, 0.0f);
  for (int i = 0; i < 100; ++i) x[size_t(i)] = float(i) / 100.0f;
  x[17] = 1000.123f;
  x[42] = -77.777f;
  const Range r = outlier_range(x.data(), 100, 1, 0.02);  // one per side
  EXPECT_EQ(r.hi, 0.99f);
  EXPECT_EQ(r.lo, 0.0f);
  const std::vector<float> c = uniform_levels(3);
  const Coded big = code_one(x[17], r, c, true);
  EXPECT_TRUE(big.outlier);
  EXPECT_EQ(big.value, fp16_round(1000.123f));
  EXPECT_NE(big.value, 1000.123f);  // fp16 has 11 significant bits: the value is rounded
  EXPECT_NEAR(big.value, 1000.123f, 0.5f);  // half an fp16 ulp at 1000 (ulp 0.5): within 0.25
  EXPECT_TRUE(code_one(x[42], r, c, true).outlier);
  // Without the sparse part the same value clamps to the top level.
  const Coded clamped = code_one(x[17], r, c, false);
  EXPECT_FALSE(clamped.outlier);
  EXPECT_FLOAT_EQ(clamped.value, r.hi);
  EXPECT_EQ(fp16_round(1e6f), 65504.0f);
  EXPECT_EQ(fp16_round(-1e6f), -65504.0f);
}

TEST(Nuq, ConstantVectorCodesExactly) {
  const float x[4] = {2.5f, 2.5f, 2.5f, 2.5f};
  const Range r = outlier_range(x, 4, 1, 0.0);
  for (int b = 2; b <= 4; ++b)
    for (const auto& c : {uniform_levels(b), nf_levels(b)}) EXPECT_EQ(code_one(2.5f, r, c, false).value, 2.5f);
}

}  // namespace
}  // namespace sinkq::formats::nuq
