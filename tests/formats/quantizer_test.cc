// tests/quant/quantizer_test.cc — the uniform quantizer: grid, clamping, error bound, rounding,
// granularities, static == dynamic, integer path, kernel, and input validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/quantizer.h"

namespace sinkq::quant {
namespace {

using ::testing::HasSubstr;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

std::vector<float> randn(std::mt19937_64& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Runs fn and returns the sinkq::Error message ("" if nothing was thrown).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

QuantSpec spec_of(Granularity g, int bits, bool sym, float clip = 1.0f) {
  QuantSpec s;
  s.granularity = g;
  s.bits = bits;
  s.symmetric = sym;
  s.clip_ratio = clip;
  s.group_size = 4;
  s.head_dim = 6;
  return s;
}

const Granularity kAllGran[] = {Granularity::PerTensor, Granularity::PerRow,  Granularity::PerColumn,
                                Granularity::PerGroup,  Granularity::PerHead, Granularity::PerHeadShared};

// Scale / zero point used for element (i, j): the documented params layout.
float scale_at(const Params& p, int64_t i, int64_t j) {
  return p.scale[size_t((p.prow == 1 ? 0 : i) * p.pcol + j / p.col_block)];
}
int zero_at(const Params& p, int64_t i, int64_t j) {
  return p.zero.empty() ? 0 : p.zero[size_t((p.prow == 1 ? 0 : i) * p.pcol + j / p.col_block)];
}

TEST(Quantizer, GridValuesAreFixedPoints) {
  // k·s for every code k: fl(k·s)/s = k(1+δ) with |kδ| <= 128·2^-24 << 1/2, so rne gives k back
  // and the dequantized fl(k·s) is the same float: exact.
  std::mt19937_64 rng(1);
  for (bool sym : {true, false})
    for (int bits : {2, 3, 4, 8}) {
      const QuantSpec s = spec_of(Granularity::PerRow, bits, sym);
      const int64_t rows = 3, cols = 16;
      std::vector<float> x = randn(rng, size_t(rows * cols), 3.0f);
      const Params p = compute_params(s, x.data(), rows, cols);
      for (int64_t i = 0; i < rows; ++i) {
        std::vector<float> grid;
        for (int q = qmin(s); q <= qmax(s); ++q) grid.push_back(float(q - zero_at(p, i, 0)) * scale_at(p, i, 0));
        std::vector<float> y = grid;
        const QuantSpec st = spec_of(Granularity::PerTensor, bits, sym);
        Params pt = p;  // the row's params as a per-tensor set
        pt.granularity = Granularity::PerTensor;
        pt.prow = 1;
        pt.pcol = 1;
        pt.col_block = int64_t(grid.size());
        pt.scale = {scale_at(p, i, 0)};
        if (!sym) pt.zero = {zero_at(p, i, 0)};
        fake_quant(st, pt, y.data(), 1, int64_t(y.size()));
        for (size_t k = 0; k < y.size(); ++k) ASSERT_EQ(y[k], grid[k]) << describe(s) << " code " << k;
      }
    }
}

TEST(Quantizer, ClampsAtTheRangeEnds) {
  std::mt19937_64 rng(2);
  for (bool sym : {true, false}) {
    const QuantSpec s = spec_of(Granularity::PerTensor, 4, sym);
    std::vector<float> cal = randn(rng, 48);
    const Params p = compute_params(s, cal.data(), 8, 6);  // static: from calibration data
    const float sc = p.scale[0];
    const int z = sym ? 0 : p.zero[0];
    std::vector<float> x = {1e6f, -1e6f, 50.0f, -50.0f, INFINITY, -INFINITY};
    fake_quant(s, p, x.data(), 1, int64_t(x.size()));
    const float top = float(qmax(s) - z) * sc, bottom = float(qmin(s) - z) * sc;
    EXPECT_EQ(x[0], top);
    EXPECT_EQ(x[1], bottom);
    EXPECT_EQ(x[2], top);
    EXPECT_EQ(x[3], bottom);
    EXPECT_EQ(x[4], top);
    EXPECT_EQ(x[5], bottom);
    if (sym) {  // PrefixQuant eq. 1: the negative end is -2^(N-1), one code beyond -qmax
      EXPECT_EQ(bottom, -8.0f * sc);
      EXPECT_EQ(top, 7.0f * sc);
    }
  }
}

TEST(Quantizer, ErrorIsAtMostHalfAStepInsideTheRange) {
  // With clip = 1 every value lies inside the grid's range (up to rounding of s and z), so
  // |x - x̂| <= s/2 plus: x/s errs by u·|x/s| <= u·2^N steps, and s·level rounds once (u·|x̂|).
  std::mt19937_64 rng(3);
  for (Granularity g : kAllGran)
    for (bool sym : {true, false})
      for (int bits : {2, 4, 8}) {
        const QuantSpec s = spec_of(g, bits, sym);
        const int64_t rows = 5, cols = 12;
        std::vector<float> x = randn(rng, size_t(rows * cols));
        if (!sym)
          for (float& v : x) v = v + 1.5f;  // skewed data: the asymmetric range matters
        std::vector<float> y = x;
        const Params p = fake_quant_dynamic(s, y.data(), rows, cols);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const double sc = scale_at(p, i, j), e = std::fabs(double(x[i * cols + j]) - y[i * cols + j]);
            const double tol = sc * (0.5 + kU * double(1 << (bits + 1))) + kU * std::fabs(y[i * cols + j]);
            ASSERT_LE(e, tol) << describe(s) << " at " << i << "," << j << " x=" << x[i * cols + j];
          }
      }
}

TEST(Quantizer, AsymmetricRangeCoversMinAndMax) {
  std::mt19937_64 rng(4);
  for (int bits : {2, 4, 8}) {
    const QuantSpec s = spec_of(Granularity::PerTensor, bits, false);
    std::uniform_real_distribution<float> d(3.0f, 10.0f);  // all positive: range [0, max]
    std::vector<float> x(100);
    for (float& v : x) v = d(rng);
    x[0] = -2.0f;  // one negative value: lo = -2
    x[1] = 0.0f;
    const Params p = compute_params(s, x.data(), 1, 100);
    const double sc = p.scale[0], z = p.zero[0];
    ASSERT_GE(z, 0);
    ASSERT_LE(z, qmax(s));
    const double lo = -z * sc, hi = (qmax(s) - z) * sc, mx = *std::max_element(x.begin(), x.end());
    const double slack = sc * kU * double(1 << (bits + 1));
    EXPECT_LE(lo, -2.0 + sc / 2 + slack) << describe(s);
    EXPECT_GE(hi, mx - sc / 2 - slack) << describe(s);
    const size_t imax = size_t(std::max_element(x.begin(), x.end()) - x.begin());
    std::vector<float> e = x;
    fake_quant(s, p, e.data(), 1, 100);
    EXPECT_NEAR(e[0], -2.0, sc / 2 + slack);
    EXPECT_NEAR(e[imax], mx, sc / 2 + slack);
    EXPECT_EQ(e[1], 0.0f);  // 0 is always exactly representable (z is an integer code)
  }
}

TEST(Quantizer, StaticEqualsDynamicWhenCalibratedOnTheSameTensor) {
  std::mt19937_64 rng(5);
  for (Granularity g : kAllGran)
    for (bool sym : {true, false}) {
      const QuantSpec s = spec_of(g, 4, sym, 0.9f);
      const int64_t rows = 6, cols = 24;
      const std::vector<float> x = randn(rng, size_t(rows * cols));
      std::vector<float> dyn = x, stat = x;
      fake_quant_dynamic(s, dyn.data(), rows, cols);
      Calibrator cal(s);
      cal.observe(x.data(), rows, cols);
      fake_quant(s, cal.params(), stat.data(), rows, cols);
      EXPECT_EQ(0, std::memcmp(dyn.data(), stat.data(), dyn.size() * sizeof(float))) << describe(s);
      // Row-shared granularities: calibrating batch by batch equals calibrating on the whole.
      if (g == Granularity::PerTensor || g == Granularity::PerColumn || g == Granularity::PerHeadShared) {
        Calibrator batched(s);
        batched.observe(x.data(), 2, cols);
        batched.observe(x.data() + 2 * cols, 4, cols);
        const Params a = batched.params(), b = cal.params();
        EXPECT_EQ(a.scale, b.scale) << describe(s);
        EXPECT_EQ(a.zero, b.zero) << describe(s);
        std::vector<float> one_row(x.begin(), x.begin() + cols);  // static params, any row count
        fake_quant(s, a, one_row.data(), 1, cols);
        EXPECT_EQ(0, std::memcmp(one_row.data(), stat.data(), size_t(cols) * sizeof(float)));
      }
    }
}

// SampleMean: each call's range per column, averaged over the calls, then the range over a group's
// columns; one call equals Max (the mean of one range is that range), and the averaged range is
// never wider than Max's (a mean of per-call maxima is at most their max). Exact values below are
// small integers and halves: every sum and mean is exact in fp32/double.
TEST(Quantizer, SampleMeanAveragesEachCallsColumnRanges) {
  // Two calls of 2 rows × 4 columns; PerHeadShared with head_dim 2: groups {0,1} and {2,3}.
  const std::vector<float> a = {1, -4, 0.5f, 2,  //
                                -2, 1, 6, -1};
  const std::vector<float> b = {3, 2, -2, 0,  //
                                0, -1, 1, 5};
  QuantSpec s = spec_of(Granularity::PerHeadShared, 4, true);
  s.head_dim = 2;
  Calibrator mean(s, CalibStatistic::SampleMean), max(s);
  for (Calibrator* c : {&mean, &max}) {
    c->observe(a.data(), 2, 4);
    c->observe(b.data(), 2, 4);
  }
  // |x| maxima per column: call a (2, 4, 6, 2), call b (3, 2, 2, 5): means (2.5, 3, 4, 3.5);
  // group ranges 3 and 4 (Max: 4 and 6). Scale = range / 7.
  ASSERT_EQ(mean.params().scale.size(), 2u);
  EXPECT_FLOAT_EQ(mean.params().scale[0], 3.0f / 7);
  EXPECT_FLOAT_EQ(mean.params().scale[1], 4.0f / 7);
  EXPECT_FLOAT_EQ(max.params().scale[0], 4.0f / 7);
  EXPECT_FLOAT_EQ(max.params().scale[1], 6.0f / 7);
  // Asymmetric: per column min/max (0 kept inside): a lo (-2,-4,0,-1) hi (1,1,6,2);
  // b lo (0,-1,-2,0) hi (3,2,1,5); means lo (-1,-2.5,-1,-0.5) hi (2,1.5,3.5,3.5).
  // Per tensor: lo -2.5, hi 3.5, scale 6/15, z = rne(2.5 / 0.4) = rne(6.25) = 6.
  QuantSpec as = spec_of(Granularity::PerTensor, 4, false);
  Calibrator am(as, CalibStatistic::SampleMean);
  am.observe(a.data(), 2, 4);
  am.observe(b.data(), 2, 4);
  EXPECT_FLOAT_EQ(am.params().scale[0], 6.0f / 15);
  EXPECT_EQ(am.params().zero[0], 6);
  // One call: SampleMean equals Max bit for bit.
  Calibrator one_mean(as, CalibStatistic::SampleMean), one_max(as);
  one_mean.observe(b.data(), 2, 4);
  one_max.observe(b.data(), 2, 4);
  EXPECT_EQ(one_mean.params().scale, one_max.params().scale);
  EXPECT_EQ(one_mean.params().zero, one_max.params().zero);
  // Per-row granularities have no per-sample meaning: refused, naming the statistic.
  EXPECT_THAT(error_of([] { Calibrator(spec_of(Granularity::PerRow, 4, true), CalibStatistic::SampleMean); }),
              HasSubstr("sample_mean"));
  EXPECT_EQ(parse_calib_statistic("max"), CalibStatistic::Max);
  EXPECT_EQ(calib_statistic_name(CalibStatistic::SampleMean), "sample_mean");
  EXPECT_THAT(error_of([] { parse_calib_statistic("mean"); }), HasSubstr("'mean'"));
}

TEST(Quantizer, GranularityBlocksAreIndependentPerTensorQuantizers) {
  // Every granularity must equal per-tensor quantization of exactly its documented blocks.
  std::mt19937_64 rng(6);
  struct Shape {
    int64_t rows, cols;
    int group, head;
  };
  for (Shape sh : {Shape{3, 12, 4, 6}, Shape{1, 1, 1, 1}, Shape{5, 7, 7, 1}, Shape{2, 30, 5, 15}})
    for (Granularity g : kAllGran)
      for (bool sym : {true, false}) {
        QuantSpec s = spec_of(g, 3, sym);
        s.group_size = sh.group;
        s.head_dim = sh.head;
        std::vector<float> x = randn(rng, size_t(sh.rows * sh.cols));
        std::vector<float> y = x;
        const Params p = fake_quant_dynamic(s, y.data(), sh.rows, sh.cols);
        const bool shared = g == Granularity::PerTensor || g == Granularity::PerColumn || g == Granularity::PerHeadShared;
        ASSERT_EQ(p.prow, shared ? 1 : sh.rows) << describe(s);
        ASSERT_EQ(p.pcol * p.col_block, sh.cols);
        for (int64_t pr = 0; pr < p.prow; ++pr)
          for (int64_t b = 0; b < p.pcol; ++b) {
            std::vector<float> blk, got;  // the block's elements, row-major
            const int64_t r0 = shared ? 0 : pr, r1 = shared ? sh.rows : pr + 1;
            for (int64_t i = r0; i < r1; ++i)
              for (int64_t j = b * p.col_block; j < (b + 1) * p.col_block; ++j) {
                blk.push_back(x[size_t(i * sh.cols + j)]);
                got.push_back(y[size_t(i * sh.cols + j)]);
              }
            const QuantSpec st = spec_of(Granularity::PerTensor, 3, sym);
            const Params pt = fake_quant_dynamic(st, blk.data(), 1, int64_t(blk.size()));
            EXPECT_EQ(pt.scale[0], p.scale[size_t(pr * p.pcol + b)]) << describe(s);
            EXPECT_EQ(blk, got) << describe(s) << " block " << pr << "," << b;
          }
      }
}

TEST(Quantizer, AllZeroGroupsGiveZerosNotNaN) {
  for (bool sym : {true, false}) {
    const QuantSpec s = spec_of(Granularity::PerRow, 4, sym);
    std::vector<float> x = {0, 0, 0, 0, 1, -2, 3, 0.5f};  // row 0 all zero
    const Params p = fake_quant_dynamic(s, x.data(), 2, 4);
    EXPECT_EQ(p.scale[0], FLT_MIN);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(x[size_t(j)], 0.0f);
    for (float v : x) EXPECT_FALSE(std::isnan(v));
    // Static params from zero data applied to nonzero data: collapses to ~0, never NaN/inf.
    std::vector<float> zeros(4, 0.0f), big = {5, -5, 1e30f, -1e-30f};
    const Params pz = compute_params(s, zeros.data(), 1, 4);
    fake_quant(s, pz, big.data(), 1, 4);
    for (float v : big) EXPECT_LE(std::fabs(v), 256.0f * FLT_MIN);
  }
}

TEST(Quantizer, RoundsHalfToEven) {
  // absmax 127 at 8 bits gives s = 127/127 = 1 exactly, so x/s = x and the ties are exact.
  const QuantSpec s = spec_of(Granularity::PerTensor, 8, true);
  std::vector<float> x = {127, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, 3.5f, -126.5f};
  const Params p = fake_quant_dynamic(s, x.data(), 1, int64_t(x.size()));
  ASSERT_EQ(p.scale[0], 1.0f);
  const std::vector<float> want = {127, 0, 2, 2, 0, -2, -2, 126, 4, -126};
  EXPECT_EQ(x, want);
  // The vectorizable rounding equals std::nearbyint (FE_TONEAREST) on ties and random values.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> d(-300.0f, 300.0f);
  for (int k = 0; k < 100000; ++k) {
    const float v = k < 1200 ? float(k - 600) * 0.5f : d(rng);
    ASSERT_EQ(detail::rne_small(v), std::nearbyint(v)) << v;
  }
}

TEST(Quantizer, IntegerPathMatchesFakeQuantBitForBit) {
  std::mt19937_64 rng(8);
  for (Granularity g : kAllGran)
    for (bool sym : {true, false})
      for (int bits : {2, 4, 8}) {
        const QuantSpec s = spec_of(g, bits, sym, 0.8f);
        const int64_t rows = 4, cols = 12;
        const std::vector<float> x = randn(rng, size_t(rows * cols));
        const Params p = compute_params(s, x.data(), rows, cols);
        std::vector<int8_t> q(x.size());
        quantize_to_int(s, p, x.data(), rows, cols, q.data());
        std::vector<float> back(x.size()), fq = x;
        dequantize(s, p, q.data(), rows, cols, back.data());
        fake_quant(s, p, fq.data(), rows, cols);
        EXPECT_EQ(0, std::memcmp(back.data(), fq.data(), fq.size() * sizeof(float))) << describe(s);
        for (int8_t c : q) {  // stored codes c = q - offset lie in [qmin - off, qmax - off]
          ASSERT_GE(int(c), qmin(s) - code_offset(s));
          ASSERT_LE(int(c), qmax(s) - code_offset(s));
        }
      }
}

TEST(Quantizer, KernelFractionFollowsDefinition) {
  // s = 1: the kernel is |x| <= 0.5 under round-half-even (0.5 itself rounds to 0).
  const QuantSpec s = spec_of(Granularity::PerTensor, 8, true);
  std::vector<float> x = {127, 0.3f, 0.5f, 0.7f, 0, -0.4f, -0.6f, 0};
  const Params p = compute_params(s, x.data(), 1, int64_t(x.size()));
  const KernelCount kc = kernel_count(s, p, x.data(), 1, int64_t(x.size()));
  EXPECT_EQ(kc.nonzero, 6);
  EXPECT_EQ(kc.zeroed, 3);  // 0.3, 0.5, -0.4
  EXPECT_DOUBLE_EQ(kernel_fraction(s, p, x.data(), 1, int64_t(x.size())), 0.5);
}

TEST(Quantizer, InvalidSpecsThrowNamingTheField) {
  std::vector<float> x(24, 1.0f);
  auto check = [&](QuantSpec s, int64_t rows, int64_t cols, const char* field) {
    EXPECT_THAT(error_of([&] { compute_params(s, x.data(), rows, cols); }), HasSubstr(field)) << field;
  };
  QuantSpec s = spec_of(Granularity::PerTensor, 4, true);
  s.bits = 1; check(s, 2, 12, "bits");
  s.bits = 9; check(s, 2, 12, "bits");
  s = spec_of(Granularity::PerTensor, 4, true, 0.0f); check(s, 2, 12, "clip_ratio");
  s.clip_ratio = 1.5f; check(s, 2, 12, "clip_ratio");
  s.clip_ratio = NAN; check(s, 2, 12, "clip_ratio");
  s = spec_of(Granularity::PerGroup, 4, true); s.group_size = 0; check(s, 2, 12, "group_size");
  s.group_size = 5; check(s, 2, 12, "group_size");
  s = spec_of(Granularity::PerHead, 4, true); s.head_dim = -1; check(s, 2, 12, "head_dim");
  s.head_dim = 5; check(s, 2, 12, "head_dim");
  s = spec_of(Granularity::PerHeadShared, 4, true); s.head_dim = 7; check(s, 2, 12, "head_dim");
  s = spec_of(Granularity::PerTensor, 4, true); check(s, 2, 0, "cols");

  // Params that do not fit the spec or the tensor.
  const QuantSpec row = spec_of(Granularity::PerRow, 4, true);
  const Params p = compute_params(row, x.data(), 2, 12);
  EXPECT_THAT(error_of([&] { fake_quant(row, p, x.data(), 3, 8); }), HasSubstr("params"));
  EXPECT_THAT(error_of([&] { fake_quant(row, p, x.data(), 1, 12); }), HasSubstr("rows"));
  EXPECT_THAT(error_of([&] { fake_quant(spec_of(Granularity::PerRow, 8, true), p, x.data(), 2, 12); }),
              HasSubstr("params"));
  Calibrator cal(row);
  cal.observe(x.data(), 2, 12);
  EXPECT_THAT(error_of([&] { cal.observe(x.data(), 1, 12); }), HasSubstr("same rows"));
  EXPECT_THAT(error_of([&] { Calibrator(row).params(); }), HasSubstr("no data"));

  std::vector<float> bad = {1, NAN, 2};
  EXPECT_THAT(error_of([&] { compute_params(row, bad.data(), 1, 3); }), HasSubstr("non-finite"));
  EXPECT_THAT(error_of([] { parse_granularity("per_channel"); }), HasSubstr("ambiguous"));
  EXPECT_THAT(error_of([] { parse_granularity("rows"); }), HasSubstr("rows"));
  EXPECT_EQ(parse_granularity("per_token"), Granularity::PerRow);
  EXPECT_EQ(parse_granularity("per_head_shared"), Granularity::PerHeadShared);
}

TEST(Quantizer, EmptyTensorIsANoOp) {
  const QuantSpec s = spec_of(Granularity::PerTensor, 4, false);
  const Params p = compute_params(s, nullptr, 0, 8);
  EXPECT_EQ(p.scale[0], FLT_MIN);
  EXPECT_NO_THROW(fake_quant(s, p, nullptr, 0, 8));
}

}  // namespace
}  // namespace sinkq::quant
