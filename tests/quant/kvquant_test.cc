// KVQuant in the simulator (quant/kvquant.h): the weighted k-means, Q-Norm, the codec at its
// sites, the calibration through build_sim on stories260K, the recipe fields and their errors.
#include "quant/kvquant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "quant/sim.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

namespace nuq = formats::nuq;
using testing::error_of;
using testing::logits_of;
using testing::rel_diff;

// The textbook Lloyd iteration (O(n·k) per step, nearest level by brute force) from given levels.
std::vector<double> brute_lloyd(const std::vector<WeightedValue>& p, std::vector<double> c, int iters) {
  for (int it = 0; it < iters; ++it) {
    std::vector<double> s(c.size(), 0.0), w(c.size(), 0.0);
    for (const WeightedValue& v : p) {
      size_t best = 0;
      for (size_t j = 1; j < c.size(); ++j)
        if (std::abs(v.u - c[j]) < std::abs(v.u - c[best])) best = j;
      s[best] += double(v.w) * v.u;
      w[best] += v.w;
    }
    for (size_t j = 0; j < c.size(); ++j)
      if (w[j] > 0) c[j] = s[j] / w[j];
  }
  return c;
}

std::vector<WeightedValue> gaussian_points(int n, uint64_t seed, bool weighted) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> N(0.0f, 0.35f);
  std::uniform_real_distribution<float> W(0.1f, 3.0f);
  std::vector<WeightedValue> p;
  for (int i = 0; i < n; ++i) p.push_back({std::clamp(N(rng), -1.0f, 1.0f), weighted ? W(rng) : 1.0f});
  return p;
}

TEST(KvQuant, KmeansIsLloydsFixedPoint) {
  for (bool weighted : {false, true}) {
    std::vector<WeightedValue> p = gaussian_points(5000, 7, weighted);
    const std::vector<float> c = weighted_kmeans_1d(p, 8);
    ASSERT_EQ(c.size(), 8u);
    EXPECT_TRUE(std::is_sorted(c.begin(), c.end()));
    // One more brute-force Lloyd step moves no level: the result is a fixed point (1e-5: the
    // prefix sums are double, the levels returned as float).
    const std::vector<double> next = brute_lloyd(p, std::vector<double>(c.begin(), c.end()), 1);
    for (size_t j = 0; j < c.size(); ++j) EXPECT_NEAR(next[j], c[j], 1e-5) << j;
    // And on Gaussian data it beats the uniform and the NormalFloat grids on its own objective.
    EXPECT_LT(codebook_error(c, p), codebook_error(nuq::uniform_levels(3), p));
    EXPECT_LT(codebook_error(c, p), codebook_error(nuq::nf_levels(3), p));
  }
}

TEST(KvQuant, KmeansWeightsPullLevels) {
  // Two clusters; weighting the right one 100× moves levels toward it.
  std::vector<WeightedValue> p;
  for (int i = 0; i < 1000; ++i) p.push_back({-0.5f + 0.0004f * float(i % 500), 1.0f});
  for (int i = 0; i < 1000; ++i) p.push_back({0.3f + 0.0006f * float(i % 500), 1.0f});
  std::vector<WeightedValue> q = p;
  for (size_t i = 1000; i < q.size(); ++i) q[i].w = 100.0f;
  const std::vector<float> a = weighted_kmeans_1d(p, 4), b = weighted_kmeans_1d(q, 4);
  const auto right = [](const std::vector<float>& c) { return std::count_if(c.begin(), c.end(), [](float x) { return x > 0.2f; }); };
  EXPECT_EQ(right(a), 2);
  EXPECT_EQ(right(b), 3);
  std::vector<WeightedValue> zero = {{0.1f, 0.0f}, {0.2f, 0.0f}};
  EXPECT_NE(error_of([&] { weighted_kmeans_1d(zero, 2); }).find("total weight"), std::string::npos);
}

TEST(KvQuant, QNormMatchesMeanAndStd) {
  std::vector<WeightedValue> p = gaussian_points(4000, 11, false);
  for (WeightedValue& v : p) v.u = std::clamp(v.u + 0.2f, -1.0f, 1.0f);  // a shifted distribution
  const std::vector<float> c = nuq::uniform_levels(2);
  const std::vector<float> q = qnorm_levels(c, p);
  // With the assignment of the original levels, the renormalised values have the data's mean and
  // standard deviation (an affine map of the levels: exact up to float rounding, 1e-5).
  double s1 = 0, q1 = 0, s2 = 0, q2 = 0;
  for (const WeightedValue& v : p) {
    const double x = q[size_t(nuq::nearest(c, v.u))];
    s1 += v.u, q1 += double(v.u) * v.u, s2 += x, q2 += x * x;
  }
  const double n = double(p.size());
  EXPECT_NEAR(s2 / n, s1 / n, 1e-5);
  EXPECT_NEAR(std::sqrt(q2 / n - (s2 / n) * (s2 / n)), std::sqrt(q1 / n - (s1 / n) * (s1 / n)), 1e-5);
  EXPECT_TRUE(std::is_sorted(q.begin(), q.end()));
}

TEST(KvQuant, ChannelCodecUsesItsCalibratedRangeAndKeepsOutliers) {
  KvCodec c;
  c.per_channel = true;
  c.outliers = 0.01;
  c.levels = nuq::uniform_levels(2);  // -1, -1/3, 1/3, 1
  c.lo = {0.0f, -10.0f};
  c.hi = {3.0f, 10.0f};
  std::vector<float> x = {1.0f, 20.0f, 2.9f, -3.0f, -0.5f, 0.0f};  // [3, 2]
  const KvCodec::Count n = c.apply(x.data(), 3, 2);
  EXPECT_EQ(n.values, 6);
  EXPECT_EQ(n.outliers, 2);  // 20 (column 1 above 10) and -0.5 (column 0 below 0)
  EXPECT_FLOAT_EQ(x[0], 1.0f);     // column 0: levels 0, 1, 2, 3
  EXPECT_EQ(x[1], 20.0f);          // an fp16-exact outlier
  EXPECT_FLOAT_EQ(x[2], 3.0f);
  EXPECT_FLOAT_EQ(x[3], -10.0f / 3.0f);  // column 1: levels -10, -10/3, 10/3, 10
  EXPECT_EQ(x[4], -0.5f);
  EXPECT_FLOAT_EQ(x[5], -10.0f / 3.0f);  // 0 is a tie between -10/3 and 10/3: the lower level
  std::vector<float> wrong(9);
  EXPECT_NE(error_of([&] { c.apply(wrong.data(), 3, 3); }).find("channels"), std::string::npos);
}

// n calibration samples of len tokens starting with BOS (stories260K's id 1).
constexpr auto samples = testing::prompts;

Recipe kvquant(int bits, KvCodebook cb, double outliers = 0.0) {
  Recipe c;
  c.kv.bits = bits;
  c.kv.codebook = cb;
  c.kv.outliers = outliers;
  return c;
}

// Relative logit error of a SimModel against the fp model on a held-out prompt.
double logit_error(const SimModel& sm) {
  const auto fp = testing::stories260k();
  const std::vector<int32_t> t = testing::prompt(96, 40);
  Forward f0(fp, 128);
  Forward f1(sm.model, 128);
  sm.attach(f1);
  return rel_diff(logits_of(f1, t), logits_of(f0, t));
}

TEST(KvQuant, CalibratesEveryLayerOnStories260K) {
  const auto m = testing::stories260k();
  const int L = m->config().num_layers;
  const auto cal = samples(4, 64);
  const SimModel a = build_sim(m, kvquant(3, KvCodebook::Kmeans, 0.01), cal);
  ASSERT_EQ(a.kvq.size(), size_t(L));
  const nlohmann::json& rep = a.calibration_report.at("kv_codebooks");
  EXPECT_EQ(rep.at("tokens").get<int64_t>(), 4 * 64);
  for (int l = 0; l < L; ++l) {
    for (const KvCodec* c : {&a.kvq[size_t(l)].k, &a.kvq[size_t(l)].v}) {
      EXPECT_EQ(c->levels.size(), 8u);
      EXPECT_TRUE(std::is_sorted(c->levels.begin(), c->levels.end()));
    }
    EXPECT_TRUE(a.kvq[size_t(l)].k.per_channel);
    EXPECT_EQ(a.kvq[size_t(l)].k.lo.size(), size_t(m->config().kv_dim()));
    EXPECT_FALSE(a.kvq[size_t(l)].v.per_channel);
    for (const char* kv : {"k", "v"}) {
      const auto& r = rep["layers"][size_t(l)][kv];
      // k-means minimises the same (unweighted) objective the uniform grid is scored on.
      EXPECT_LE(r["error"].get<double>(), r["error_uniform"].get<double>()) << l << kv;
    }
    // Per-channel key ranges set aside round(1% · 256 / 2) = 1 value per side per channel.
    EXPECT_NEAR(rep["layers"][size_t(l)]["k"]["calibration_outlier_fraction"].get<double>(), 2.0 / 256, 1e-3);
  }
  // Deterministic.
  const SimModel b = build_sim(m, kvquant(3, KvCodebook::Kmeans, 0.01), cal);
  for (int l = 0; l < L; ++l) EXPECT_EQ(a.kvq[size_t(l)].k.levels, b.kvq[size_t(l)].k.levels);
}

TEST(KvQuant, MoreBitsAreCloserToFp) {
  const auto m = testing::stories260k();
  const auto cal = samples(4, 64);
  double prev = 1e9;
  for (int bits : {2, 3, 4}) {
    const double e = logit_error(build_sim(m, kvquant(bits, KvCodebook::Fisher, 0.01), cal));
    EXPECT_GT(e, 0.0);
    EXPECT_LT(e, prev) << bits;  // each bit halves the step: the logit error falls with it
    prev = e;
  }
}

TEST(KvQuant, FisherWeightsChangeTheLevels) {
  const auto m = testing::stories260k();
  const auto cal = samples(3, 48);
  const SimModel k = build_sim(m, kvquant(3, KvCodebook::Kmeans), cal);
  const SimModel f = build_sim(m, kvquant(3, KvCodebook::Fisher), cal);
  int differ = 0;
  for (size_t l = 0; l < f.kvq.size(); ++l) differ += f.kvq[l].k.levels != k.kvq[l].k.levels;
  EXPECT_GT(differ, 0);
  EXPECT_EQ(f.calibration_report["kv_codebooks"]["layers"][0]["k"]["error_weighted_by"], "fisher");
  // The Fisher summary: a positive mean, and the top 1% of elements hold at least 1% of the mass.
  const nlohmann::json& fs = f.calibration_report["kv_codebooks"]["layers"][0]["k"]["fisher"];
  EXPECT_GT(fs.at("mean").get<double>(), 0.0);
  EXPECT_GE(fs.at("top_1pct_mass_share").get<double>(), 0.01);
  EXPECT_LE(fs.at("top_1pct_mass_share").get<double>(), 1.0);
}

TEST(KvQuant, FirstTokenBehindTheFpPrefixIsNotCalibrated) {
  const auto m = testing::stories260k();
  Recipe c = kvquant(4, KvCodebook::Fisher);
  c.prefix.tokens = {1};
  c.prefix.bos_id = 1;
  const auto cal = samples(2, 40);
  const SimModel s = build_sim(m, c, cal);
  // Each sample's leading [BOS] is dropped behind the [BOS] prefix: 39 body tokens per sample.
  EXPECT_EQ(s.calibration_report["kv_codebooks"]["tokens"].get<int64_t>(), 2 * 39);
  EXPECT_GT(logit_error(s), 0.0);
}

// The distinct values of each of the first `n` rows of what the cache stores at site k of layer 0.
std::vector<int64_t> distinct_per_row(const SimModel& s, int n) {
  Forward f(s.model, 64);
  s.attach(f);
  std::vector<float> k;
  f.hooks().add(Site::K, 0, [&k](SiteView& v) { k.assign(v.data, v.data + v.tokens * v.features); });
  logits_of(f, testing::prompt(n));
  const int64_t KV = s.model->config().kv_dim();
  std::vector<int64_t> out;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> row(k.begin() + t * KV, k.begin() + (t + 1) * KV);
    std::sort(row.begin(), row.end());
    out.push_back(std::unique(row.begin(), row.end()) - row.begin());
  }
  return out;
}

TEST(KvQuant, KeysAreCodedBeforeOrAfterRope) {
  // Per-token uniform 2-bit keys: coded at k (post-RoPE) every cached row holds at most 4 distinct
  // values; coded at k_pre_rope, RoPE then rotates channel pairs of the coded row, so rows after
  // position 0 (where RoPE is the identity) hold more.
  const auto m = testing::stories260k();
  const auto cal = samples(2, 40);
  Recipe post = kvquant(2, KvCodebook::Uniform);
  post.kv.key_pre_rope = false;
  post.kv.key_axis = KvAxis::Token;
  for (int64_t d : distinct_per_row(build_sim(m, post, cal), 16)) EXPECT_LE(d, 4);
  Recipe pre = post;
  pre.kv.key_pre_rope = true;
  const std::vector<int64_t> dp = distinct_per_row(build_sim(m, pre, cal), 16);
  EXPECT_LE(dp[0], 4);
  for (size_t t = 1; t < dp.size(); ++t) EXPECT_GT(dp[t], 4) << t;
}

TEST(KvQuant, RecipeFieldsRoundTripAndErrorsNameTheFlag) {
  for (const char* p : {"kvquant-4bit", "kvquant-3bit-1pct", "kvquant-2bit-1pct"}) {
    const Recipe r = Recipe::from_preset(p);
    EXPECT_TRUE(r.kv.vector());
    const Recipe back = Recipe::from_json(r.to_json(), "test");
    EXPECT_EQ(back.to_json(), r.to_json()) << p;
  }
  EXPECT_TRUE(Recipe::from_preset("kvquant-2bit").kv.qnorm);
  EXPECT_FALSE(Recipe::from_preset("kvquant-3bit").kv.qnorm);
  EXPECT_EQ(Recipe::from_preset("kvquant-3bit-1pct").kv.outliers, 0.01);
  Recipe five = kvquant(5, KvCodebook::Nf);
  EXPECT_NE(error_of([&] { five.validate(); }).find("--kv-bits 5"), std::string::npos);
  Recipe st = kvquant(4, KvCodebook::Kmeans);
  st.kv.mode = KvMode::Static;
  EXPECT_NE(error_of([&] { st.validate(); }).find("--kv-quant"), std::string::npos);
  Recipe out = kvquant(4, KvCodebook::Int);
  out.kv.outliers = 0.01;
  EXPECT_NE(error_of([&] { out.validate(); }).find("--kv-outliers"), std::string::npos);
  Recipe much = kvquant(4, KvCodebook::Nf, 0.5);
  EXPECT_NE(error_of([&] { much.validate(); }).find("--kv-outliers"), std::string::npos);
  Recipe fisher_post = kvquant(4, KvCodebook::Fisher);
  fisher_post.kv.key_pre_rope = false;
  EXPECT_NE(error_of([&] { fisher_post.validate(); }).find("--kv-keys"), std::string::npos);
  EXPECT_NE(error_of([] { parse_kv_codebook("nuq"); }).find("--kv-codebook"), std::string::npos);
  EXPECT_NE(error_of([] { parse_kv_values("head"); }).find("--kv-values"), std::string::npos);
  KvSim k;
  EXPECT_NE(error_of([&] { k.parse_keys("channel"); }).find("--kv-keys"), std::string::npos);
  nlohmann::json j = Recipe::from_preset("kvquant-3bit").to_json();
  j["kv"]["values"] = "head";
  EXPECT_NE(error_of([&] { Recipe::from_json(j, "r.json"); }).find("kv.values"), std::string::npos);
  // Calibration is required, and its absence names the flag.
  EXPECT_NE(error_of([] { build_sim(testing::stories260k(), kvquant(3, KvCodebook::Fisher), {}); }).find("--kv-codebook fisher"),
            std::string::npos);
  // NormalFloat per token needs nothing calibrated.
  Recipe nf = kvquant(4, KvCodebook::Nf);
  nf.kv.key_axis = KvAxis::Token;
  EXPECT_FALSE(nf.needs_calibration());
}

TEST(KvQuant, FixedCodebooksNeedNoCalibrationAndStillQuantize) {
  Recipe nf = kvquant(4, KvCodebook::Nf);
  nf.kv.key_axis = KvAxis::Token;
  const SimModel s = build_sim(testing::stories260k(), nf, {});
  ASSERT_EQ(s.kvq.size(), size_t(testing::stories260k()->config().num_layers));
  EXPECT_EQ(s.kvq[0].k.levels, nuq::nf_levels(4));
  EXPECT_FALSE(s.kvq[0].k.per_channel);
  EXPECT_GT(logit_error(s), 0.0);  // the KV really is quantized
}

}  // namespace
}  // namespace sinkq::quant
