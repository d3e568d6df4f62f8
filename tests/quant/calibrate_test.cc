// Calibrated simulation (src/quant/calibrate.h, sim.h build_sim / SimModel): the weight clip grid
// search on single matrices (never worse than r = 1, strictly better with a planted outlier,
// equal to brute force), per-entry ratios through the one quantizer, static activation / KV scales
// (static = dynamic per-tensor when calibrated on the evaluated tokens with r = 1; the searched
// objective never above r = 1; static scales applied to every later call), reproducibility, and
// the configuration errors naming their flags.
#include "quant/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "quant/rotate.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using testing::logits_of;
using testing::bit_equal;
using testing::error_of;

constexpr auto stories = testing::stories260k;

// Ordinary token ids (stories260K vocab 512, BOS = 1), a different sequence per `salt`.
std::vector<int32_t> tokens(int n, int salt = 0) {
  std::vector<int32_t> t{1};
  for (int i = 1; i < n; ++i) t.push_back(int32_t(3 + (i * 37 + salt * 101) % 500));
  return t;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> m(size_t(rows * cols));
  for (float& v : m) v = nd(rng);
  return m;
}

ClipRatios uniform(int64_t rows, int64_t groups, float r) { return ClipRatios{rows, groups, std::vector<float>(size_t(rows * groups), r)}; }

TEST(ClipGrid, DefaultIsOneDownToHalfInStepsOf0025) {
  const auto g = default_clip_grid();
  ASSERT_EQ(g.size(), 21u);
  EXPECT_EQ(g.front(), 1.0f);
  EXPECT_EQ(g.back(), 0.5f);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], float(1.0 - 0.025 * double(i)));
  EXPECT_EQ(json_float(g[1]), 0.975);  // printed as the decimal, not 0.97500002384185791
}

TEST(ClipGrid, ParseClipNamesTheFlag) {
  EXPECT_TRUE(parse_clip("--w-clip", "grid").grid);
  EXPECT_EQ(parse_clip("--w-clip", "0.9").ratio, 0.9f);
  EXPECT_FALSE(parse_clip("--w-clip", "1").grid);
  for (const char* bad : {"1.5", "0", "-0.5", "abc", "0.9x", ""}) {
    const std::string e = error_of([&] { parse_clip("--a-clip", bad); });
    EXPECT_NE(e.find("--a-clip"), std::string::npos) << bad << ": " << e;
  }
}

TEST(ClipGrid, SelectRowsEvenlySpacedAndReproducible) {
  EXPECT_EQ(select_rows(5, 512), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  const auto r = select_rows(2048, 512);
  ASSERT_EQ(r.size(), 512u);
  for (size_t k = 0; k < r.size(); ++k) EXPECT_EQ(r[k], int64_t(4 * k));
  const auto odd = select_rows(1000, 300);
  ASSERT_EQ(odd.size(), 300u);
  EXPECT_EQ(odd.front(), 0);
  for (size_t k = 1; k < odd.size(); ++k) EXPECT_GT(odd[k], odd[k - 1]);
  EXPECT_LT(odd.back(), 1000);
  EXPECT_EQ(select_rows(1000, 300), odd);
}

// Per-entry ratios go through the one quantizer: a uniform ratio equals the fixed-clip path bit for
// bit, and with mixed ratios every row (and every group of a row) equals that row quantized alone
// with its own ratio (compute_params on the single row: the same scale formula).
TEST(WeightClip, PerEntryRatiosAreTheLibraryQuantizer) {
  const int64_t R = 6, C = 40;  // group 16 is ragged: 16 + 16 + 8
  const auto W = random_matrix(R, C, 3);
  for (int group : {0, 16}) {
    for (bool sym : {true, false}) {
      WeightSim w;
      w.bits = 4;
      w.group = group;
      w.symmetric = sym;
      const int64_t G = weight_groups(w, C);
      EXPECT_EQ(G, group ? 3 : 1);
      // Uniform ratios == the fixed w.clip.
      auto a = W, b = W;
      w.clip = 0.8f;
      fake_quant_weight(w, a.data(), R, C);
      const ClipRatios u = uniform(R, G, 0.8f);
      fake_quant_weight(w, b.data(), R, C, &u);
      EXPECT_TRUE(bit_equal(a, b));
      // Mixed ratios == each (row, group) alone.
      ClipRatios mixed{R, G, {}};
      for (int64_t k = 0; k < R * G; ++k) mixed.r.push_back(default_clip_grid()[size_t((k * 7) % 21)]);
      auto m = W;
      fake_quant_weight(w, m.data(), R, C, &mixed);
      for (int64_t i = 0; i < R; ++i) {
        for (int64_t g = 0; g < G; ++g) {
          const int64_t c0 = group ? g * group : 0, width = group ? std::min<int64_t>(group, C - c0) : C;
          std::vector<float> row(W.begin() + i * C + c0, W.begin() + i * C + c0 + width);
          QuantSpec s;
          s.bits = 4;
          s.symmetric = sym;
          s.granularity = Granularity::PerRow;
          s.clip_ratio = mixed.at(i, g);
          fake_quant_dynamic(s, row.data(), 1, width);
          for (int64_t j = 0; j < width; ++j) ASSERT_EQ(m[size_t(i * C + c0 + j)], row[size_t(j)]) << i << "," << g;
        }
      }
    }
  }
  WeightSim w;
  w.bits = 4;
  auto x = W;
  const ClipRatios wrong = uniform(R, 2, 1.0f);
  EXPECT_NE(error_of([&] { fake_quant_weight(w, x.data(), R, C, &wrong); }).find("clip ratios"), std::string::npos);
}

// The chosen ratios never give a larger layer-output error than r = 1 (it is in the grid), entry
// by entry, recomputed independently of the search's own bookkeeping.
TEST(WeightClip, NeverWorseThanNoClipping) {
  const int64_t R = 24, C = 40, N = 64;
  for (uint64_t seed : {1u, 2u, 3u}) {
    const auto W = random_matrix(R, C, seed);
    const auto X = random_matrix(N, C, seed + 100);
    for (int group : {0, 16}) {
      for (int bits : {3, 4}) {
        WeightSim w;
        w.bits = bits;
        w.group = group;
        const WeightClipResult res = search_weight_clip(w, W.data(), R, C, X.data(), N, default_clip_grid());
        const int64_t G = weight_groups(w, C);
        const auto at1 = weight_clip_objective(w, W.data(), R, C, X.data(), N, uniform(R, G, 1.0f));
        const auto got = weight_clip_objective(w, W.data(), R, C, X.data(), N, res.ratios);
        double s1 = 0, sg = 0;
        for (size_t k = 0; k < got.size(); ++k) {
          EXPECT_LE(got[k], at1[k]) << "entry " << k;
          EXPECT_EQ(got[k], res.chosen[k]) << "mixed ratios give each entry its own objective";
          s1 += at1[k];
          sg += got[k];
        }
        EXPECT_LT(sg, s1) << "4-bit/3-bit random matrices: some clipping helps";
      }
    }
  }
}

// A large weight whose input column is small: with r = 1 it sets the row's scale and every other
// weight of the row rounds to a coarse grid; clipping it costs little (its input is ~0.01) and the
// rest gets a 2x finer grid. The search must clip that row and be strictly better there.
TEST(WeightClip, PlantedOutlierIsClipped) {
  const int64_t R = 8, C = 64, N = 128;
  auto W = random_matrix(R, C, 11, 0.5f);
  auto X = random_matrix(N, C, 12);
  W[size_t(3 * C + 5)] = 12.0f;
  for (int64_t t = 0; t < N; ++t) X[size_t(t * C + 5)] *= 0.01f;
  WeightSim w;
  w.bits = 4;
  const WeightClipResult res = search_weight_clip(w, W.data(), R, C, X.data(), N, default_clip_grid());
  const auto at1 = weight_clip_objective(w, W.data(), R, C, X.data(), N, uniform(R, 1, 1.0f));
  EXPECT_LT(res.ratios.at(3, 0), 0.75f);
  // Measured: r = 0.5 (the grid's end), e = 544 vs 1252 at r = 1.
  EXPECT_LT(res.chosen[3], 0.6 * at1[3]) << res.chosen[3] << " vs " << at1[3];
}

// Brute force on a tiny case: every (row, group) quantized alone with every ratio through the
// library's compute_params, the error multiplied out in double, the first minimum taken.
TEST(WeightClip, MatchesBruteForce) {
  const int64_t R = 5, C = 12, N = 7;
  const auto W = random_matrix(R, C, 21);
  const auto X = random_matrix(N, C, 22);
  const auto grid = default_clip_grid();
  for (int group : {0, 5}) {  // 5: groups 5 + 5 + 2 (ragged)
    for (bool sym : {true, false}) {
      WeightSim w;
      w.bits = 3;
      w.group = group;
      w.symmetric = sym;
      const WeightClipResult res = search_weight_clip(w, W.data(), R, C, X.data(), N, grid);
      const int64_t G = weight_groups(w, C);
      for (int64_t i = 0; i < R; ++i) {
        for (int64_t g = 0; g < G; ++g) {
          const int64_t c0 = group ? g * group : 0, width = group ? std::min<int64_t>(group, C - c0) : C;
          std::vector<double> e(grid.size());
          for (size_t c = 0; c < grid.size(); ++c) {
            std::vector<float> q(W.begin() + i * C + c0, W.begin() + i * C + c0 + width);
            QuantSpec s;
            s.bits = 3;
            s.symmetric = sym;
            s.granularity = Granularity::PerRow;
            s.clip_ratio = grid[c];
            fake_quant_dynamic(s, q.data(), 1, width);
            for (int64_t n = 0; n < N; ++n) {
              double dot = 0;
              for (int64_t j = 0; j < width; ++j)
                dot += double(X[size_t(n * C + c0 + j)]) * (double(W[size_t(i * C + c0 + j)]) - double(q[size_t(j)]));
              e[c] += dot * dot;
            }
          }
          size_t best = 0;
          for (size_t c = 1; c < e.size(); ++c)
            if (e[c] < e[best]) best = c;
          // The search multiplies in fp32 (matmul kernel): objectives agree to fp32 accuracy, and
          // the choice agrees unless the best two are within that accuracy of each other.
          const double got = res.chosen[size_t(i * G + g)];
          EXPECT_NEAR(got, e[best], 1e-4 * e[best] + 1e-9) << i << "," << g;
          double second = INFINITY;
          for (size_t c = 0; c < e.size(); ++c)
            if (c != best && grid[c] != grid[best]) second = std::min(second, e[c]);
          if (second - e[best] > 1e-4 * e[best]) {
            EXPECT_EQ(res.ratios.at(i, g), grid[best]) << i << "," << g;
          }
        }
      }
    }
  }
}

// Refinement (CalibSim::refine_steps) of a coarse grid, per entry: never worse than the grid's
// choice, some entry strictly better (a 2-ratio grid leaves room), every ratio the grid's or within
// ±width of it in (0, 1], and `chosen` is the objective of the chosen ratios (fp32 matmul accuracy,
// as in MatchesBruteForce).
TEST(WeightClip, RefinementNeverWorseThanItsGrid) {
  const int64_t R = 16, C = 64, N = 24;
  const auto W = random_matrix(R, C, 31);
  const auto X = random_matrix(N, C, 32);
  const std::vector<float> grid{1.0f, 0.6f};
  WeightSim w;
  w.bits = 3;
  w.group = 32;
  const WeightClipResult coarse = search_weight_clip(w, W.data(), R, C, X.data(), N, grid);
  const WeightClipResult fine = search_weight_clip(w, W.data(), R, C, X.data(), N, grid, 6, 0.2f);
  ASSERT_EQ(coarse.chosen.size(), fine.chosen.size());
  int better = 0;
  for (size_t k = 0; k < fine.chosen.size(); ++k) {
    EXPECT_LE(fine.chosen[k], coarse.chosen[k]) << k;
    better += fine.chosen[k] < coarse.chosen[k];
    const float r = fine.ratios.r[k], c = coarse.ratios.r[k];
    EXPECT_TRUE(r > 0.0f && r <= 1.0f && std::abs(r - c) <= 0.2f + 1e-6f) << k << ": " << r << " around " << c;
  }
  EXPECT_GT(better, 0);
  const std::vector<double> e = weight_clip_objective(w, W.data(), R, C, X.data(), N, fine.ratios);
  for (size_t k = 0; k < e.size(); ++k) EXPECT_NEAR(e[k], fine.chosen[k], 1e-4 * fine.chosen[k] + 1e-9) << k;
  EXPECT_EQ(fine.objective, coarse.objective);  // the grid's candidates only
}

// Static per-tensor activations (and static KV) calibrated on exactly the tokens that are then
// evaluated, with a grid that only holds 1.0, are dynamic per-tensor (per-head-shared) quantization
// of that call: bit-identical logits. This holds the whole layer-by-layer pipeline (quantized
// block inputs, sites in forward order, earlier sites fixed) to the plain forward pass.
TEST(StaticQuant, EqualsDynamicPerTensorOnTheCalibrationTokens) {
  const auto toks = tokens(40);
  for (KvGranularity kvg : {KvGranularity::Tensor, KvGranularity::Head}) {
    Recipe c;
    c.w.bits = 4;
    c.a.bits = 4;
    c.a.mode = ActMode::Static;
    c.kv.bits = 4;
    c.kv.mode = KvMode::Static;
    c.kv.granularity = kvg;
    c.calib.grid = {1.0f};
    const std::vector<std::vector<int32_t>> calib{toks};
    const SimModel sim = build_sim(stories(), c, calib);
    const int L = stories()->config().num_layers;
    EXPECT_EQ(sim.statics.size(), size_t(6 * L));
    Forward f(sim.model, 64);
    sim.attach(f);

    // Reference: the same quantized weights, dynamic per-tensor hooks computed on each call.
    Forward ref(sim.model, 64);
    QuantSpec act;
    act.bits = 4;
    act.granularity = Granularity::PerTensor;
    for (Site s : {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn})
      ref.hooks().add(s, -1, [act](SiteView& v) { fake_quant_dynamic(act, v.data, v.tokens, v.features); });
    QuantSpec kv = act;
    if (kvg == KvGranularity::Head) {
      kv.granularity = Granularity::PerHeadShared;
      kv.head_dim = stories()->config().head_dim;
    }
    for (Site s : {Site::K, Site::V})
      ref.hooks().add(s, -1, [kv](SiteView& v) { fake_quant_dynamic(kv, v.data, v.tokens, v.features); });
    EXPECT_TRUE(bit_equal(logits_of(f, toks), logits_of(ref, toks))) << kv_granularity_name(kvg);
    // And it really quantizes: the fp model differs.
    Forward fp(stories(), 64);
    EXPECT_FALSE(bit_equal(logits_of(f, toks), logits_of(fp, toks)));
  }
}

// CrossQuant's static columns (crossquant.h CrossFold): the calibrated c of every (layer, site) is
// the column abs-max of the fp model's input there over the calibration samples (exact: a max is
// order-free), and each quantized weight is the weight quantizer applied to W·diag(b), bit for bit.
// The stages that would train a non-folded model refuse the mode; so do the paths without data.
TEST(CrossStatic, ColumnMaximaAndFoldedWeights) {
  Recipe c = Recipe::from_preset("w4a8");
  c.a.mode = ActMode::Cross;
  c.a.cross_columns = ColumnMode::Static;
  const std::vector<std::vector<int32_t>> calib{tokens(40, 1), tokens(24, 2)};
  const SimModel sim = build_sim(stories(), c, calib);
  const ModelConfig& mc = stories()->config();
  ASSERT_EQ(sim.cross.size(), size_t(4 * mc.num_layers));
  std::vector<std::vector<float>> want(sim.cross.size());
  Forward fp(stories(), 64);
  for (int s = 0; s < 4; ++s)
    fp.hooks().add(kLinearInputSites[s], -1, [&want, s](SiteView& v) {
      auto& w = want[size_t(v.layer) * 4 + size_t(s)];
      w.resize(size_t(v.features), 0.0f);
      for (int64_t t = 0; t < v.tokens; ++t)
        for (int64_t j = 0; j < v.features; ++j) w[size_t(j)] = std::max(w[size_t(j)], std::fabs(v.row(t)[j]));
    });
  for (const auto& smp : calib) {
    fp.reset();
    fp.step(smp, false);
  }
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(sim.cross[k].col_max, want[k]) << k;
  for (int l = 0; l < mc.num_layers; ++l)
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const Mat& m = stories()->weights().layers[size_t(l)].mat(i);
      std::vector<float> w(size_t(m.rows * m.cols));
      to_f32(m.dtype, m.data, w.data(), w.size());
      cross_fold_weight(sim.cross[size_t(l) * 4 + size_t(kLinearRoles[i].input)], w.data(), m.rows, m.cols);
      fake_quant_weight(c.w, w.data(), m.rows, m.cols);
      const Mat& q = sim.model->weights().layers[size_t(l)].mat(i);
      ASSERT_EQ(q.dtype, DType::F32);
      EXPECT_EQ(std::memcmp(q.data, w.data(), w.size() * 4), 0) << l << " " << i;
    }
  EXPECT_NE(error_of([&] { build_sim(stories(), c, {}); }).find("--a-cross-cols static"), std::string::npos);
  Forward f(stories(), 8);
  EXPECT_NE(error_of([&] { attach(f, c); }).find("--a-cross-cols static needs calibrated column maxima"),
            std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_weights(stories(), c); }).find("--a-cross-cols static"), std::string::npos);
  Recipe ft = c;
  ft.finetune.epochs = 1;
  EXPECT_NE(error_of([&] { ft.validate(); }).find("--finetune blockwise with --a-cross-cols static"), std::string::npos);
  Recipe pt = c;
  pt.prefix.train_epochs = 1;
  EXPECT_NE(error_of([&] { pt.validate(); }).find("--prefix-train with --a-cross-cols static"), std::string::npos);
}

Recipe w4a4kv4_static() {
  Recipe c = Recipe::from_preset("w4a4kv4");
  c.w.clip_grid = true;
  c.a.mode = ActMode::Static;
  c.kv.mode = KvMode::Static;
  return c;
}

std::vector<std::vector<int32_t>> calib_samples() { return {tokens(48, 1), tokens(48, 2), tokens(32, 3)}; }

// The block-output search never ends above its r = 1 candidate (1.0 is in the grid), for every
// static site of every layer; the report names every site with one entry per layer.
TEST(StaticQuant, SearchNeverIncreasesTheObjective) {
  const auto calib = calib_samples();
  const SimModel sim = build_sim(stories(), w4a4kv4_static(), calib);
  const nlohmann::json& r = sim.calibration_report;
  const size_t L = size_t(stories()->config().num_layers);
  int searched = 0, clipped = 0;
  for (const char* part : {"activations", "kv"}) {
    for (const auto& [site, e] : r.at(part).items()) {
      ASSERT_EQ(e.at("ratio").size(), L) << site;
      for (size_t l = 0; l < L; ++l) {
        EXPECT_LE(e.at("mse")[l].get<double>(), e.at("mse_at_1")[l].get<double>()) << site << " layer " << l;
        ++searched;
        clipped += e.at("ratio")[l].get<double>() < 1.0;
      }
    }
  }
  EXPECT_EQ(searched, 6 * int(L));
  EXPECT_GT(clipped, 0) << "4-bit per-tensor: some site must prefer clipping";
  EXPECT_EQ(r.at("weights").at("entries").get<int64_t>() > 0, true);
  EXPECT_LE(r.at("weights").at("objective_vs_r1").get<double>(), 1.0);
  EXPECT_EQ(r.at("samples"), 3);
  EXPECT_EQ(r.at("tokens"), 128);
  // The statics are in forward order per layer, with the chosen ratio in their spec.
  const Site order[6] = {Site::AttnIn, Site::K, Site::V, Site::OIn, Site::MlpIn, Site::DownIn};
  for (size_t k = 0; k < sim.statics.size(); ++k) {
    EXPECT_EQ(sim.statics[k].site, order[k % 6]);
    EXPECT_EQ(sim.statics[k].layer, int(k / 6));
  }
}

// Same samples, same config: identical ratios and scales, bit for bit.
TEST(StaticQuant, Reproducible) {
  const auto calib = calib_samples();
  const SimModel a = build_sim(stories(), w4a4kv4_static(), calib);
  const SimModel b = build_sim(stories(), w4a4kv4_static(), calib);
  ASSERT_EQ(a.weight_clip.size(), b.weight_clip.size());
  for (size_t l = 0; l < a.weight_clip.size(); ++l)
    for (size_t m = 0; m < 7; ++m) EXPECT_EQ(a.weight_clip[l][m].r, b.weight_clip[l][m].r);
  ASSERT_EQ(a.statics.size(), b.statics.size());
  for (size_t k = 0; k < a.statics.size(); ++k) {
    EXPECT_EQ(a.statics[k].spec.clip_ratio, b.statics[k].spec.clip_ratio);
    EXPECT_TRUE(bit_equal(a.statics[k].params.scale, b.statics[k].params.scale));
  }
  auto strip = [](nlohmann::json j) {  // timings differ, nothing else may
    j.erase("seconds");
    j.erase("static_seconds");
    j["weights"].erase("seconds");
    return j;
  };
  EXPECT_EQ(strip(a.calibration_report), strip(b.calibration_report));
  // Different samples give a different calibration (the data is really used).
  const std::vector<std::vector<int32_t>> other{tokens(48, 7), tokens(48, 8)};
  const SimModel c = build_sim(stories(), w4a4kv4_static(), other);
  bool differs = false;
  for (size_t k = 0; k < a.statics.size(); ++k) differs |= a.statics[k].params.scale != c.statics[k].params.scale;
  EXPECT_TRUE(differs);
}

// The search's cost settings (CalibSim::search_samples, refine_steps) change only what they say:
//  - scoring on every sample by count is the default search, bit for bit;
//  - with the ratio fixed (no grid), scoring on one sample gives the same scales: the ranges still
//    come from every sample;
//  - refining a coarse grid tries a superset of it, so its objective is never above the coarse
//    one's (the same first-sample MSE, same inputs: earlier layers identical up to the layer where a
//    ratio first differs, so compared while every earlier choice agrees), and chooses ratios in (0, 1].
TEST(StaticQuant, SearchSamplesAndRefinementChangeOnlyWhatTheySay) {
  const auto calib = calib_samples();
  const SimModel base = build_sim(stories(), w4a4kv4_static(), calib);
  Recipe all = w4a4kv4_static();
  all.calib.search_samples = int64_t(calib.size());
  const SimModel by_count = build_sim(stories(), all, calib);
  ASSERT_EQ(base.statics.size(), by_count.statics.size());
  for (size_t k = 0; k < base.statics.size(); ++k) {
    EXPECT_EQ(base.statics[k].spec.clip_ratio, by_count.statics[k].spec.clip_ratio) << k;
    EXPECT_TRUE(bit_equal(base.statics[k].params.scale, by_count.statics[k].params.scale)) << k;
  }

  Recipe fixed = w4a4kv4_static();
  fixed.a.clip_grid = fixed.kv.clip_grid = false;
  fixed.a.clip = fixed.kv.clip = 0.9f;
  Recipe fixed1 = fixed;
  fixed1.calib.search_samples = 1;
  const SimModel f = build_sim(stories(), fixed, calib), f1 = build_sim(stories(), fixed1, calib);
  ASSERT_EQ(f.statics.size(), f1.statics.size());
  for (size_t k = 0; k < f.statics.size(); ++k) EXPECT_TRUE(bit_equal(f.statics[k].params.scale, f1.statics[k].params.scale)) << k;

  Recipe coarse = w4a4kv4_static();
  coarse.calib.search_samples = 1;
  coarse.calib.grid = {1.0f, 0.7f};
  Recipe refined = coarse;
  refined.calib.refine_steps = 5;
  refined.calib.refine_width = 0.1f;
  const SimModel c = build_sim(stories(), coarse, calib), r = build_sim(stories(), refined, calib);
  ASSERT_EQ(c.statics.size(), r.statics.size());
  int off_grid = 0;
  for (size_t k = 0; k < r.statics.size(); ++k) {
    const float ratio = r.statics[k].spec.clip_ratio;
    EXPECT_GT(ratio, 0.0f);
    EXPECT_LE(ratio, 1.0f);
    off_grid += ratio != 1.0f && ratio != 0.7f;
  }
  EXPECT_GT(off_grid, 0) << "no site chose a refined ratio";
  const nlohmann::json &cr = c.calibration_report, &rr = r.calibration_report;
  // Walk the sites in forward order while every choice so far agrees: the inputs are the same.
  const size_t L = size_t(stories()->config().num_layers);
  const char* names[6] = {"attn_in", "k", "v", "o_in", "mlp_in", "down_in"};
  size_t compared = 0;
  for (size_t l = 0; l < L; ++l) {
    bool same = true;
    for (size_t s = 0; s < 6 && same; ++s) {
      const char* part = s == 1 || s == 2 ? "kv" : "activations";
      const double mc = cr.at(part).at(names[s]).at("mse")[l].get<double>();
      const double mr = rr.at(part).at(names[s]).at("mse")[l].get<double>();
      EXPECT_LE(mr, mc) << names[s] << " layer " << l;
      ++compared;
      same = c.statics[l * 6 + s].spec.clip_ratio == r.statics[l * 6 + s].spec.clip_ratio;
    }
    if (!same) break;
  }
  EXPECT_GE(compared, 1u);
}

// Static scales apply to every row a hook sees, whatever its position: after a prefill, decode
// steps at positions > 0 are quantized with the same calibrated scale (every value at a static
// per-tensor site is an integer multiple of the stored scale within the 4-bit code range).
TEST(StaticQuant, AppliesTheCalibratedScaleAtEveryPosition) {
  Recipe c;
  c.a.bits = 4;
  c.a.mode = ActMode::Static;
  const auto calib = calib_samples();
  const SimModel sim = build_sim(stories(), c, calib);
  Forward f(sim.model, 64);
  sim.attach(f);
  std::map<std::pair<Site, int>, float> scale;
  for (const StaticQuant& q : sim.statics) scale[{q.site, q.layer}] = q.params.scale.at(0);
  int64_t checked = 0;
  for (Site s : {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn}) {
    f.hooks().add(s, -1, [&](SiteView& v) {
      const float sc = scale.at({v.site, v.layer});
      for (int64_t k = 0; k < v.tokens * v.features; ++k) {
        const float q = std::nearbyint(v.data[k] / sc);  // x̂ = s·level, recovered exactly
        ASSERT_EQ(q * sc, v.data[k]);
        ASSERT_GE(q, -8.0f);
        ASSERT_LE(q, 7.0f);
        ++checked;
      }
    });
  }
  const auto toks = tokens(20, 5);
  f.step(toks, false);
  for (int32_t t : {11, 12, 13}) f.step(std::vector<int32_t>{t}, false);  // positions 20..22
  EXPECT_GT(checked, 0);
}

// With rotation on and nothing quantized, SimModel runs the rotated model with its online
// rotations: the logits equal the base model's up to fp32 rounding.
TEST(SimModel, RotationAloneKeepsTheModel) {
  Recipe c;
  c.rotate.on = true;
  c.rotate.seed = 3;
  const SimModel sim = build_sim(stories(), c, {});
  EXPECT_NE(sim.model.get(), stories().get());
  EXPECT_TRUE(sim.calibration_report.is_null());
  Forward f(sim.model, 64), ref(stories(), 64);
  EXPECT_GT(sim.attach(f).size(), 0u);
  const auto toks = tokens(30);
  const auto a = logits_of(f, toks), b = logits_of(ref, toks);
  float diff = 0, mag = 0;
  for (size_t k = 0; k < a.size(); ++k) diff = std::max(diff, std::abs(a[k] - b[k])), mag = std::max(mag, std::abs(b[k]));
  EXPECT_LT(diff, 1e-3f * mag);
  // A Forward over another model is refused (the hooks belong to sim.model).
  Forward other(stories(), 8);
  EXPECT_NE(error_of([&] { sim.attach(other); }).find("SimModel::attach"), std::string::npos);
  // The configuration says it.
  EXPECT_EQ(sim.to_json().at("rotation").at("on"), true);
  EXPECT_NE(c.describe().find("rotate seed=3"), std::string::npos);
}

// build_sim's in-place path (fake_quantize_layer_in_place on its own rotated copy, layer by layer)
// gives the matrices fake_quantize_weights gives, bit for bit — per output channel and in groups,
// with searched-style per-entry ratios and a weight rule that keeps one matrix at full precision —
// and is refused where the matrices are not the model's own fp32 (the loaded model).
TEST(SimModel, InPlaceEqualsCopy) {
  Recipe c = Recipe::from_preset("w4a8kv4");
  c.rotate.on = true;
  WeightRule keep;
  keep.layers = {0};
  keep.roles = 1u << int(LinearRole::Down);
  keep.bits = 16;
  c.weight_rules = {keep};
  for (int group : {0, 32}) {
    SCOPED_TRACE(group);
    c.w.group = group;
    const auto fp = stories();
    const int L = fp->config().num_layers;
    ModelClipRatios clips(static_cast<size_t>(L));
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < kNumLinearRoles; ++i) {
        const Mat& m = fp->weights().layers[size_t(l)].mat(i);
        const int64_t G = group ? (m.cols + group - 1) / group : 1;
        ClipRatios r{m.rows, G, std::vector<float>(size_t(m.rows * G))};
        for (size_t k = 0; k < r.r.size(); ++k) r.r[k] = 1.0f - 0.05f * float((k * 7 + size_t(i)) % 9);
        clips[size_t(l)].push_back(r);
      }
    Recipe grid = c;
    grid.w.clip_grid = true;
    const auto copy = fake_quantize_weights(rotate_model(fp, c.rotate), grid, &clips);
    const auto own = rotate_model(fp, c.rotate);
    EXPECT_FALSE(can_fake_quantize_in_place(*fp, grid));
    ASSERT_TRUE(can_fake_quantize_in_place(*own, grid));
    for (int l = 0; l < L; ++l) fake_quantize_layer_in_place(*own, grid, l, &clips);
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < kNumLinearRoles; ++i) {
        const Mat& a = copy->weights().layers[size_t(l)].mat(i);
        const Mat& b = own->weights().layers[size_t(l)].mat(i);
        ASSERT_EQ(a.dtype, DType::F32);
        ASSERT_EQ(b.dtype, DType::F32);
        ASSERT_EQ(std::memcmp(a.data, b.data, size_t(a.rows * a.cols) * 4), 0) << "layer " << l << " role " << i;
      }
    EXPECT_THROW(fake_quantize_layer_in_place(*fp, grid, 0, &clips), Error);
  }
}

TEST(Recipe, CalibratedConfigJsonAndDescribe) {
  Recipe c = w4a4kv4_static();
  c.kv.granularity = KvGranularity::Tensor;
  c.a.clip_grid = false;
  c.a.clip = 0.9f;
  c.calib.file = "c4.jsonl";
  c.calib.len = 256;
  EXPECT_NO_THROW(c.validate());
  EXPECT_TRUE(c.needs_calibration());
  const auto j = c.to_json();
  EXPECT_EQ(j.at("weights").at("clip_ratio"), "grid");
  EXPECT_EQ(j.at("weights").at("clip_search").at("rows_per_layer"), 512);
  EXPECT_EQ(j.at("activations").at("mode"), "static");
  EXPECT_EQ(j.at("activations").at("granularity"), "per_tensor");
  EXPECT_EQ(j.at("activations").at("clip_ratio"), 0.9);
  EXPECT_EQ(j.at("kv").at("mode"), "static");
  EXPECT_EQ(j.at("kv").at("granularity"), "per_tensor");
  EXPECT_EQ(j.at("kv").at("clip_ratio"), "grid");
  EXPECT_EQ(j.at("kv").at("clip_search").at("objective"), "block output MSE");
  EXPECT_EQ(j.at("calibration").at("file"), "c4.jsonl");
  EXPECT_EQ(j.at("calibration").at("samples"), 8);
  EXPECT_EQ(j.at("calibration").at("len"), 256);
  EXPECT_EQ(j.at("calibration").at("grid").size(), 21u);
  EXPECT_EQ(c.describe(),
            "W4 per-channel sym clip=grid | A4 static per-tensor sym clip=0.9 | KV4 static per-tensor sym clip=grid"
            " | calib c4.jsonl 8x256 seed=0");
  EXPECT_TRUE(Recipe::from_preset("w4a4kv4").to_json().at("calibration").is_null());
}

TEST(Recipe, CalibrationErrorsNameTheFlag) {
  auto expect = [](const Recipe& c, std::vector<std::string> needles) {
    const std::string e = error_of([&] {
      c.validate();
      build_sim(stories(), c, {});
    });
    for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << "'" << n << "' not in: " << e;
  };
  Recipe c = Recipe::from_preset("w4a16");
  c.w.clip_grid = true;
  expect(c, {"--w-clip grid", "--calib"});
  c = Recipe::from_preset("w8a8kv8");
  c.kv.mode = KvMode::Static;
  expect(c, {"--kv-quant static", "--calib"});
  c.kv.granularity = KvGranularity::Token;
  expect(c, {"--kv-gran"});
  c = Recipe::from_preset("w8a8kv8");
  c.kv.granularity = KvGranularity::Tensor;  // dynamic per-tensor is not a mode
  expect(c, {"--kv-gran", "--kv-quant static"});
  c = Recipe::from_preset("w8a8kv8");
  c.a.clip_grid = false;
  c.a.clip = 0.9f;  // dynamic: the clip would be silently ignored
  expect(c, {"--a-clip"});
  c = Recipe::from_preset("w8a8kv8");
  c.kv.clip = 0.5f;
  c.kv.clip_grid = false;
  expect(c, {"--kv-clip"});
  c = Recipe::from_preset("w8a8");
  c.a.mode = ActMode::Cross;
  c.a.symmetric = false;
  expect(c, {"--a-asym"});
  c = Recipe::from_preset("w8a8");
  c.calib.samples = 0;
  expect(c, {"--calib-samples"});
  c = Recipe::from_preset("w8a8");
  c.calib.len = 1;
  expect(c, {"--calib-len"});
  c = Recipe::from_preset("w8a8");
  c.calib.grid = {1.0f, 1.5f};
  expect(c, {"grid"});
  // Samples longer than the model's positions.
  c = Recipe::from_preset("w8a8");
  c.a.mode = ActMode::Static;
  const std::vector<std::vector<int32_t>> too_long{tokens(int(stories()->config().max_position_embeddings) + 1)};
  EXPECT_NE(error_of([&] { build_sim(stories(), c, too_long); }).find("--calib-len"), std::string::npos);
  // The dynamic-only attach refuses rotation (the model would not be rotated).
  c = Recipe::from_preset("w8a8");
  c.rotate.on = true;
  Forward f(stories(), 8);
  EXPECT_NE(error_of([&] { attach(f, c); }).find("--rotate"), std::string::npos);
  // fake_quantize_weights cannot search clip ratios itself.
  c = Recipe::from_preset("w4a16");
  c.w.clip_grid = true;
  EXPECT_NE(error_of([&] { fake_quantize_weights(stories(), c); }).find("--w-clip grid"), std::string::npos);
}

}  // namespace
}  // namespace sinkq::quant
