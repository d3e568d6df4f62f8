#include "eval/analyze.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <tuple>

#include "core/mmap.h"
#include "calib/calib_data.h"
#include "eval/svg.h"
#include "quant/crossquant.h"
#include "util/planted.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::shared_dir;
using testing::TempDir;

constexpr int32_t kLily = 317;  // "▁Lily" in the stories260K tokenizer the tiny models link
constexpr int32_t kDot = 426;   // "."

// A tiny 3-layer model whose tokens kLily and kDot are outliers at down_in of `layers`.
std::shared_ptr<const Model> planted_model(const TempDir& d, std::vector<int> layers = {1}) {
  testing::PlantedOutlierSpec s;
  s.base.layers = 3;
  s.token_ids = {kLily, kDot};
  s.layers = std::move(layers);
  testing::write_planted_model(d.path(), s);
  return Model::load(d.path());
}

// `n` seeded random token ids in [3, 512) that are not planted outlier tokens.
std::vector<int32_t> plain_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t;
  while (t.size() < n) {
    const auto id = int32_t(3 + rng() % 509);
    if (id != kLily && id != kDot) t.push_back(id);
  }
  return t;
}

using Hit = std::tuple<int, int64_t, int64_t, int32_t>;  // layer, sample, position, token id
std::set<Hit> hits_of(const OutlierStats& s) {
  std::set<Hit> h;
  for (const OutlierToken& t : s.tokens) h.insert({t.layer, t.sample, t.position, t.token_id});
  return h;
}

// Three samples of 40 tokens with the planted tokens at known positions (one at position 0).
std::vector<std::vector<int32_t>> planted_samples() {
  std::vector<std::vector<int32_t>> s = {plain_tokens(40, 1), plain_tokens(40, 2), plain_tokens(40, 3)};
  s[0][5] = kLily;
  s[0][20] = kDot;
  s[2][0] = kLily;
  s[2][39] = kDot;
  return s;
}

TEST(Analyze, LowerMedianAndTokenMaxStats) {
  const std::vector<float> v = {4, 1, 3, 2};
  EXPECT_EQ(lower_median(v), 2.0f);  // torch.median: the lower of the two middle values
  EXPECT_EQ(lower_median(std::vector<float>{5}), 5.0f);
  EXPECT_EQ(lower_median(std::vector<float>{}), 0.0f);
  const TokenMaxStats s = token_max_stats(v);
  EXPECT_EQ(s.tokens, 4);
  EXPECT_EQ(s.top1, 4.0f);
  EXPECT_EQ(s.median, 2.0f);
  EXPECT_EQ(s.min1, 1.0f);
  EXPECT_DOUBLE_EQ(s.top1_over_median(), 2.0);
  EXPECT_DOUBLE_EQ(s.median_over_min1(), 2.0);
  const float x[] = {1, -7, 2, 0, 0, 0};
  float m[2];
  token_max(x, 2, 3, m);
  EXPECT_EQ(m[0], 7.0f);
  EXPECT_EQ(m[1], 0.0f);
}

TEST(Analyze, OutlierIndicesFollowEquation3) {
  // median (lower) = 1: ratio 65 > 64 is an outlier, 64 is not (strict inequality).
  EXPECT_EQ(outlier_indices(std::vector<float>{1, 65, 1, 64, 1}, 64.0), std::vector<int64_t>({1}));
  // median 0: every token with a nonzero maximum has an infinite ratio.
  EXPECT_EQ(outlier_indices(std::vector<float>{0, 0, 3, 0}, 64.0), std::vector<int64_t>({2}));
}

// Eq. 3 at the paper's site alone: the residual stream (the default's second site) is tested below.
const std::vector<Site> kDownInOnly = {Site::DownIn};

TEST(Analyze, PlantedOutlierTokensAreFoundExactly) {
  TempDir d;
  const auto model = planted_model(d);
  const auto samples = planted_samples();
  AnalyzeOptions opt;
  opt.outlier_sites = kDownInOnly;
  const AnalyzeReport r = analyze(model, samples, opt);
  const OutlierStats& o = r.outliers;

  const std::set<Hit> expected = {{1, 0, 5, kLily}, {1, 0, 20, kDot}, {1, 2, 0, kLily}, {1, 2, 39, kDot}};
  EXPECT_EQ(hits_of(o), expected);
  EXPECT_EQ(o.sequences, 3);
  EXPECT_EQ(o.count, std::vector<int64_t>({0, 4, 0}));
  EXPECT_DOUBLE_EQ(o.mean_count[1], 4.0 / 3.0);
  EXPECT_EQ(o.outlier_number(), 2);  // ⌈4/3⌉
  for (const OutlierToken& t : o.tokens) {
    EXPECT_GE(t.ratio, 100.0) << "the planted outlier must be >= 100x the median";
    EXPECT_FLOAT_EQ(float(t.ratio), t.token_max / t.median);
  }
  // Per token id: '.' has 2 non-initial hits, Lily 1 (its other hit is at position 0).
  ASSERT_EQ(o.counts.size(), 2u);
  EXPECT_EQ(o.counts[0].token_id, kDot);
  EXPECT_EQ(o.counts[0].occurrences, 2);
  EXPECT_EQ(o.counts[0].non_initial, 2);
  EXPECT_EQ(o.counts[0].positions, 2);
  EXPECT_EQ(o.counts[1].token_id, kLily);
  EXPECT_EQ(o.counts[1].occurrences, 2);
  EXPECT_EQ(o.counts[1].non_initial, 1);
  EXPECT_EQ(o.counts[1].positions, 2);
  EXPECT_EQ(o.frequent_tokens(2), std::vector<int32_t>({kDot, kLily}));
  EXPECT_EQ(o.frequent_tokens(1), std::vector<int32_t>({kDot}));
  // tokens ordered by (layer, sample, position)
  EXPECT_TRUE(std::is_sorted(o.tokens.begin(), o.tokens.end(), [](const OutlierToken& a, const OutlierToken& b) {
    return std::tie(a.layer, a.sample, a.position) < std::tie(b.layer, b.sample, b.position);
  }));

  // Normal tokens stay far below η: the same hits at η/8.
  Forward fwd(model, 40, 40);
  EXPECT_EQ(hits_of(find_outlier_tokens(fwd, samples, 8.0, nullptr, {}, kDownInOnly)), expected);
  // The site statistics agree: down_in of layer 1 has top-1/median >= 100, the others no outlier.
  EXPECT_GE(r.layer[1].site(Site::DownIn).top1_over_median(), 100.0);
  EXPECT_LT(r.layer[0].site(Site::DownIn).top1_over_median(), 8.0);
  EXPECT_LT(r.layer[2].site(Site::DownIn).top1_over_median(), 8.0);
}

// A sink the norms hide from every linear input (Qwen2.5-1.5B's [BOS]: ≥ 100x the median token in
// the residual stream, ≤ 22x at down_in): a marker in the residual stream that nothing reads, with
// no planted down_in neuron. down_in alone finds nothing; the default sites find exactly the marked
// token at every layer, at `out`, and o = ⌈2/3⌉ = 1. marker 64 vs normal tokens' residual maxima
// O(0.1): a ratio of hundreds, far from η on either side.
TEST(Analyze, SinkOnlyInTheResidualStreamIsFoundThere) {
  TempDir d;
  testing::PlantedOutlierSpec s;
  s.base.layers = 3;
  s.token_ids = {kLily};
  s.layers = {};
  s.marker = 64.0f;
  testing::write_planted_model(d.path(), s);
  const auto model = Model::load(d.path());
  Forward fwd(model, 40, 40);
  const auto samples = planted_samples();
  const OutlierStats paper = find_outlier_tokens(fwd, samples, 64.0, nullptr, {}, kDownInOnly);
  EXPECT_TRUE(paper.tokens.empty());
  EXPECT_EQ(paper.outlier_number(), 0);
  const OutlierStats o = find_outlier_tokens(fwd, samples, 64.0);
  EXPECT_EQ(o.sites, std::vector<Site>(kOutlierSites.begin(), kOutlierSites.end()));
  std::set<Hit> expected;
  for (int l = 0; l < 3; ++l) {
    expected.insert({l, 0, 5, kLily});
    expected.insert({l, 2, 0, kLily});
  }
  EXPECT_EQ(hits_of(o), expected);
  for (const OutlierToken& t : o.tokens) {
    EXPECT_EQ(t.site, Site::Out);
    EXPECT_GE(t.ratio, 100.0);
  }
  EXPECT_EQ(o.count, std::vector<int64_t>({2, 2, 2}));
  EXPECT_EQ(o.outlier_number(), 1);
  ASSERT_EQ(o.counts.size(), 1u);
  EXPECT_EQ(o.counts[0].non_initial, 3);  // s0:5 in 3 layers; s2:0 is initial
}

TEST(Analyze, PlantedInSeveralLayersCountsEveryLayer) {
  TempDir d;
  const auto model = planted_model(d, {0, 2});
  Forward fwd(model, 40, 40);
  const OutlierStats o = find_outlier_tokens(fwd, planted_samples(), 64.0, nullptr, {}, kDownInOnly);
  EXPECT_EQ(o.count, std::vector<int64_t>({4, 0, 4}));
  EXPECT_EQ(o.tokens.size(), 8u);
  ASSERT_EQ(o.counts.size(), 2u);
  EXPECT_EQ(o.counts[0].token_id, kDot);
  EXPECT_EQ(o.counts[0].occurrences, 4);  // 2 positions × 2 layers
  EXPECT_EQ(o.counts[0].non_initial, 4);
  EXPECT_EQ(o.counts[0].positions, 2);    // distinct (sample, position)
  EXPECT_EQ(o.counts[1].non_initial, 2);
  EXPECT_EQ(o.outlier_number(), 2);
}

// Planted tokens in real text: load_calib's samples, expected positions read off the samples.
TEST(Analyze, PlantedOutliersInCalibrationText) {
  TempDir d;
  const auto model = planted_model(d);
  const auto tok = Tokenizer::load(d.path());
  std::ofstream(d.file("story.txt"))
      << "Once upon a time, there was a girl named Lily. Lily liked to play in the park with her friends. "
         "One day, Lily saw a big red ball under a tree. She ran to get it. The ball was soft and round. "
         "Lily was very happy. She played with the ball all day. When the sun went down, she went home.\n";
  CalibOptions co;
  co.samples = 4;
  co.len = 32;
  co.seed = 3;
  const CalibSet set = load_calib(d.file("story.txt"), *tok, co);
  std::set<Hit> expected;
  for (size_t s = 0; s < set.samples.size(); ++s)
    for (size_t p = 0; p < set.samples[s].size(); ++p)
      if (set.samples[s][p] == kLily || set.samples[s][p] == kDot) expected.insert({1, int64_t(s), int64_t(p), set.samples[s][p]});
  ASSERT_GE(expected.size(), 4u) << "the text should put several planted tokens into the samples";
  AnalyzeOptions opt;
  opt.tokenizer = tok.get();
  opt.outlier_sites = kDownInOnly;
  const AnalyzeReport r = analyze(model, set.samples, opt);
  EXPECT_EQ(hits_of(r.outliers), expected);
  EXPECT_EQ(r.outliers.count[1], int64_t(expected.size()));
  for (const OutlierToken& t : r.outliers.tokens) EXPECT_EQ(t.text, tok->token_text(t.token_id));
}

// Captured activations of one forward pass per sample: [layer] → rows [T, features].
struct Captured {
  std::vector<std::vector<float>> q, k, v, o;
};
Captured capture(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& sample) {
  const ModelConfig& c = model->config();
  Captured cap;
  for (auto* x : {&cap.q, &cap.k, &cap.v, &cap.o}) x->resize(size_t(c.num_layers));
  Forward fwd(model, int64_t(sample.size()), int64_t(sample.size()));
  const auto keep = [](std::vector<std::vector<float>>& dst) {
    return [&dst](SiteView& v) { dst[size_t(v.layer)].assign(v.data, v.data + v.tokens * v.features); };
  };
  fwd.hooks().add(Site::Q, -1, keep(cap.q));
  fwd.hooks().add(Site::K, -1, keep(cap.k));
  fwd.hooks().add(Site::V, -1, keep(cap.v));
  fwd.hooks().add(Site::OIn, -1, keep(cap.o));
  fwd.step(sample, false);
  return cap;
}

// The attention statistics, directly: softmax of q·k/sqrt(d) over the keys a query may see
// (causal, sliding window), GQA head mapping. Also checks that these probabilities reproduce the
// model's own attention output o_in = Σ_j p_j v_j, so the reference uses the model's conventions.
void expect_attention_matches_naive(const std::shared_ptr<const Model>& model,
                                    const std::vector<std::vector<int32_t>>& samples) {
  const ModelConfig& c = model->config();
  const int H = c.num_heads, hd = c.head_dim, group = c.num_heads / c.num_kv_heads;
  const int64_t QD = c.q_dim(), KV = c.kv_dim(), W = c.sliding_window;
  std::vector<std::vector<double>> sum1(size_t(c.num_layers), std::vector<double>(size_t(H))), sum4 = sum1;
  int64_t n1 = 0, n4 = 0;
  for (const auto& sample : samples) {
    const Captured cap = capture(model, sample);
    const auto T = int64_t(sample.size());
    for (int l = 0; l < c.num_layers; ++l)
      for (int64_t i = 0; i < T; ++i)
        for (int h = 0; h < H; ++h) {
          const float* q = cap.q[size_t(l)].data() + i * QD + h * hd;
          const int64_t kvh = h / group;
          std::vector<double> p(size_t(i + 1), 0.0);
          double mx = -INFINITY, z = 0;
          for (int64_t j = 0; j <= i; ++j) {
            if (W > 0 && j <= i - W) continue;  // outside the window: probability 0
            double d = 0;
            for (int e = 0; e < hd; ++e) d += double(q[e]) * double(cap.k[size_t(l)][size_t(j * KV + kvh * hd + e)]);
            p[size_t(j)] = d / std::sqrt(double(hd));
            mx = std::max(mx, p[size_t(j)]);
          }
          for (int64_t j = 0; j <= i; ++j) {
            const bool in = !(W > 0 && j <= i - W);
            p[size_t(j)] = in ? std::exp(p[size_t(j)] - mx) : 0.0;
            z += p[size_t(j)];
          }
          for (double& x : p) x /= z;
          for (int e = 0; e < hd; ++e) {
            double out = 0;
            for (int64_t j = 0; j <= i; ++j) out += p[size_t(j)] * cap.v[size_t(l)][size_t(j * KV + kvh * hd + e)];
            // fp32 kernel vs double over <= 16 keys with |v| < 1: far below 1e-4.
            ASSERT_NEAR(cap.o[size_t(l)][size_t(i * QD + h * hd + e)], out, 1e-4)
                << "layer " << l << " query " << i << " head " << h;
          }
          if (i >= 1) sum1[size_t(l)][size_t(h)] += p[0];
          if (i >= 4) sum4[size_t(l)][size_t(h)] += p[0] + p[1] + p[2] + p[3];
        }
    n1 += T - 1;
    n4 += std::max<int64_t>(0, T - 4);
  }
  const AnalyzeReport r = analyze(model, samples, {});
  for (int l = 0; l < c.num_layers; ++l) {
    const AttentionStats& a = r.layer[size_t(l)].attention;
    EXPECT_EQ(a.queries, n1);
    EXPECT_EQ(a.queries4, n4);
    ASSERT_EQ(a.to_first.size(), size_t(H));
    for (int h = 0; h < H; ++h) {
      // Same fp32 inputs, double arithmetic on both sides: only summation order differs.
      EXPECT_NEAR(a.to_first[size_t(h)], sum1[size_t(l)][size_t(h)] / double(n1), 1e-9) << l << " " << h;
      EXPECT_NEAR(a.to_first4[size_t(h)], sum4[size_t(l)][size_t(h)] / double(n4), 1e-9) << l << " " << h;
    }
  }
}

TEST(Analyze, AttentionMassMatchesNaiveComputationGqa) {
  TempDir d;
  testing::TinyModelSpec s;
  s.heads = 4;
  s.kv_heads = 2;
  s.init_scale = 0.3f;  // sharper attention than the default, so the masses differ across heads
  testing::write_tiny_model(d.path(), s);
  expect_attention_matches_naive(Model::load(d.path()), {plain_tokens(16, 5), plain_tokens(11, 6)});
}

TEST(Analyze, AttentionMassMatchesNaiveComputationSlidingWindow) {
  TempDir d;
  testing::TinyModelSpec s;
  s.architecture = "MistralForCausalLM";
  s.heads = 4;
  s.kv_heads = 1;
  s.sliding_window = 5;  // queries >= 5 cannot see token 0 at all
  s.init_scale = 0.3f;
  testing::write_tiny_model(d.path(), s);
  const auto model = Model::load(d.path());
  ASSERT_EQ(model->config().sliding_window, 5);
  expect_attention_matches_naive(model, {plain_tokens(16, 7)});
}

TEST(Analyze, SiteStatisticsAndKernelCountsMatchTheActivations) {
  TempDir d;
  const auto model = planted_model(d);
  const auto samples = planted_samples();
  AnalyzeOptions opt;
  opt.bits = 4;
  opt.alphas = {0.15f, 1.0f};
  const AnalyzeReport r = analyze(model, samples, opt);

  // Direct: down_in and attn_in of every layer, per sample (one call each).
  for (Site site : {Site::AttnIn, Site::DownIn}) {
    for (int l = 0; l < 3; ++l) {
      std::vector<float> maxima;
      quant::KernelCount per_token, cross;
      int64_t nonzero = 0;
      for (const auto& sample : samples) {
        Forward fwd(model, 40, 40);
        fwd.hooks().add(site, l, [&](SiteView& v) {
          for (int64_t t = 0; t < v.tokens; ++t) {
            float m = 0;
            for (int64_t j = 0; j < v.features; ++j) {
              m = std::max(m, std::fabs(v.row(t)[j]));
              nonzero += v.row(t)[j] != 0.0f;
            }
            maxima.push_back(m);
          }
          quant::QuantSpec spec{.bits = 4, .symmetric = true, .granularity = quant::Granularity::PerRow};
          per_token += quant::kernel_count(spec, quant::compute_params(spec, v.data, v.tokens, v.features), v.data,
                                           v.tokens, v.features);
          quant::CrossQuantizer cq({4, 0.15f, quant::ColumnMode::PerCall}, v.features);
          std::vector<float> x(v.data, v.data + v.tokens * v.features);
          cq.apply(x.data(), v.tokens, v.features, &cross);
        });
        fwd.step(sample, false);
      }
      const TokenMaxStats& st = r.layer[size_t(l)].site(site);
      std::sort(maxima.begin(), maxima.end());
      EXPECT_EQ(st.tokens, 120);
      EXPECT_EQ(st.top1, maxima.back());
      EXPECT_EQ(st.min1, maxima.front());
      EXPECT_EQ(st.median, maxima[(maxima.size() - 1) / 2]);
      const size_t k = site == Site::AttnIn ? 0 : 3;  // kLinearInputSites order
      const KernelStats& ks = r.layer[size_t(l)].kernel[k];
      EXPECT_EQ(ks.per_token.nonzero, nonzero);
      EXPECT_EQ(ks.per_token.zeroed, per_token.zeroed);
      EXPECT_EQ(ks.crossquant[0].zeroed, cross.zeroed);
    }
  }
  // α = 1 is per-token quantization bit for bit (crossquant.h), at every layer and site.
  for (const LayerReport& lr : r.layer)
    for (const KernelStats& ks : lr.kernel) {
      EXPECT_EQ(ks.crossquant[1].nonzero, ks.per_token.nonzero);
      EXPECT_EQ(ks.crossquant[1].zeroed, ks.per_token.zeroed);
    }
  // The planted token's down_in row is one huge value over near-zero ones: per-token 4-bit
  // quantization zeroes almost that whole row, so its kernel at layer 1 exceeds layer 0's.
  EXPECT_GT(r.layer[1].kernel[3].per_token.fraction(), r.layer[0].kernel[3].per_token.fraction());
}

TEST(Analyze, OptionsAndSamplesAreValidated) {
  TempDir d;
  const auto model = planted_model(d);
  const auto samples = planted_samples();
  AnalyzeOptions o;
  o.eta = 0;
  EXPECT_NE(error_of([&] { analyze(model, samples, o); }).find("eta"), std::string::npos);
  o = {};
  o.bits = 1;
  EXPECT_NE(error_of([&] { analyze(model, samples, o); }).find("bits"), std::string::npos);
  o = {};
  o.alphas = {0.5f, 1.5f};
  EXPECT_NE(error_of([&] { analyze(model, samples, o); }).find("alpha"), std::string::npos);
  EXPECT_NE(error_of([&] { analyze(model, {}, {}); }).find("no samples"), std::string::npos);
  EXPECT_NE(error_of([&] { analyze(model, {{1, 2}, {}}, {}); }).find("sample 1 is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { analyze(model, {{1, 600}}, {}); }).find("token id 600"), std::string::npos);
  EXPECT_NE(error_of([&] { analyze(model, {std::vector<int32_t>(129, 5)}, {}); }).find("max_position_embeddings"),
            std::string::npos);
}

TEST(Analyze, JsonTextAndReportDirectory) {
  TempDir d;
  const auto model = planted_model(d);
  AnalyzeOptions opt;
  opt.outlier_sites = kDownInOnly;
  const AnalyzeReport r = analyze(model, planted_samples(), opt);
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["outliers"]["sites"], nlohmann::json::array({"down_in"}));
  for (const char* key : {"eta", "bits", "alphas", "samples", "len", "model", "sites", "layers", "outliers"})
    EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_EQ(j["layers"].size(), 3u);
  const auto& l1 = j["layers"][1];
  EXPECT_EQ(l1["token_max"].size(), 9u);
  EXPECT_EQ(l1["kernel"].size(), 4u);
  EXPECT_EQ(l1["kernel"]["down_in"]["crossquant"].size(), 4u);
  EXPECT_EQ(l1["kernel"]["down_in"]["crossquant"][0]["alpha"], 0.15);
  EXPECT_EQ(l1["outliers"]["count"], 4);
  EXPECT_EQ(j["outliers"]["outlier_number"], 2);
  EXPECT_EQ(j["outliers"]["tokens"].size(), 4u);
  EXPECT_EQ(l1["attention"]["to_first"].size(), 4u);
  const std::string text = to_text(r);
  for (const char* needle : {"top-1 / median", "down_in", "layer 1: 4 (1.33 per sequence)", "outlier number o", "per-token"})
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;

  // New directory: report.json (= j) and one SVG per plot; no temporary left beside it.
  const std::string out = d.file("report");
  write_report_dir(r, j, out + "/");
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/report.json")), j);
  size_t svgs = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() != ".svg") continue;
    ++svgs;
    const std::string s = read_file(e.path().string());
    EXPECT_EQ(s.rfind("<svg", 0), 0u) << e.path();
    EXPECT_EQ(s.substr(s.size() - 7), "</svg>\n") << e.path();
    EXPECT_EQ(testing::xml_wellformedness_error(s), "") << e.path();
  }
  EXPECT_EQ(svgs, 9u + 1u + 4u);  // token_max per site, attention, kernel per linear input
  for (const auto& e : fs::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".report.tmp"), std::string::npos) << e.path();
  // Existing non-empty: refused, untouched. Existing empty: used.
  EXPECT_NE(error_of([&] { write_report_dir(r, j, out); }).find("not empty"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/report.json"));
  fs::create_directory(d.file("empty"));
  write_report_dir(r, j, d.file("empty"));
  EXPECT_TRUE(fs::exists(d.file("empty/attention_token0.svg")));
  EXPECT_NE(error_of([&] { check_output_dir(d.file("missing/out")); }).find("parent"), std::string::npos);
  std::ofstream(d.file("afile")) << "x";
  EXPECT_NE(error_of([&] { check_output_dir(d.file("afile")); }).find("not a directory"), std::string::npos);
}

TEST(Svg, EscapesAndRendersWellFormedDocuments) {
  EXPECT_EQ(svg::escape("a<b&\"'>"), "a&lt;b&amp;&quot;&apos;&gt;");
  EXPECT_EQ(svg::escape("x\n\xff\xc3"), "x???");      // control char, invalid and truncated UTF-8
  EXPECT_EQ(svg::escape("\xe2\x96\x81the"), "\xe2\x96\x81the");  // valid UTF-8 kept ("▁the")
  svg::BarChart c;
  c.title = "t<1>";
  c.groups = {"0", "1"};
  c.series = {{"top-1", {100, 0}}, {"min-1", {0.01, NAN}}};  // 0 and NaN are not drawable on log axes
  c.log_y = true;
  const std::string s = svg::render(c);
  EXPECT_EQ(testing::xml_wellformedness_error(s), "");
  EXPECT_EQ(s.rfind("<svg", 0), 0u);
  EXPECT_EQ(s.substr(s.size() - 7), "</svg>\n");
  EXPECT_NE(s.find("t&lt;1&gt;"), std::string::npos);
  EXPECT_EQ(s.find("nan"), std::string::npos);
  c.series[0].values.pop_back();
  EXPECT_NE(error_of([&] { svg::render(c); }).find("series 'top-1' has 1 values for 2 groups"), std::string::npos);
  svg::Heatmap h;
  h.rows = {"layer 0"};
  h.cols = {"h0", "h1"};
  h.values = {{0.5, NAN}};
  const std::string hs = svg::render(h);
  EXPECT_EQ(testing::xml_wellformedness_error(hs), "");
  EXPECT_NE(hs.find("n/a"), std::string::npos);
  EXPECT_EQ(hs.substr(hs.size() - 7), "</svg>\n");
  c.log_y = false;  // linear axis with negative values
  c.series[0].values = {-3, 12};
  c.series[1].values = {0.5, 2};
  EXPECT_EQ(testing::xml_wellformedness_error(svg::render(c)), "");
}

TEST(Svg, WellFormednessCheckerCatchesBrokenDocuments) {
  EXPECT_EQ(testing::xml_wellformedness_error("<a x=\"1\"><b/>t &amp; &#65;</a>\n"), "");
  EXPECT_NE(testing::xml_wellformedness_error("<a x=\"1\" x=\"2\"/>"), "");  // duplicate attribute
  EXPECT_NE(testing::xml_wellformedness_error("<a><b></a></b>"), "");          // crossed tags
  EXPECT_NE(testing::xml_wellformedness_error("<a>x < y</a>"), "");            // raw '<'
  EXPECT_NE(testing::xml_wellformedness_error("<a>R&D</a>"), "");              // bare '&'
  EXPECT_NE(testing::xml_wellformedness_error("<a/><b/>"), "");                // two roots
  EXPECT_NE(testing::xml_wellformedness_error("<a x=1/>"), "");                // unquoted value
  EXPECT_NE(testing::xml_wellformedness_error("<a>"), "");                     // unclosed
}

// ---- real models (../shared) ------------------------------------------------------------------

AnalyzeReport analyze_shared(const std::string& name, int64_t samples, int64_t len, double eta) {
  const std::string dir = shared_dir() + "/models/" + name;
  const auto model = Model::load(dir);
  const auto tok = Tokenizer::load(dir);
  CalibOptions co;
  co.samples = samples;
  co.len = len;
  // WikiText-2 test: held out for both models (models/README.md).
  const CalibSet set = load_calib(shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt", *tok, co);
  AnalyzeOptions opt;
  opt.eta = eta;
  opt.tokenizer = tok.get();
  return analyze(model, set.samples, opt);
}

TEST(AnalyzeShared, Stories260KHasNoOutlierTokens) {
  const AnalyzeReport r = analyze_shared("stories260K", 4, 256, 64.0);
  // README: "no outlier tokens (token-wise max / median <= 4 in every layer; attention to token 0 ≈ 1%)".
  EXPECT_TRUE(r.outliers.tokens.empty());
  EXPECT_EQ(r.outliers.outlier_number(), 0);
  for (const LayerReport& lr : r.layer) {
    // Loosely: other text than the README's measurement (4.6 seen here), so 2x its figure.
    EXPECT_LE(lr.site(Site::DownIn).top1_over_median(), 8.0);
    EXPECT_LT(lr.attention.mean_to_first(), 0.05);  // ≈ 1%: no attention sink
  }
}

TEST(AnalyzeShared, MixtextBosIsTheLargestTokenWithoutAnAttentionSink) {
  // η = 8 lists the [BOS] of every sample (README: ≈ 40× at down_in of layer 1) with its ratio.
  const AnalyzeReport r = analyze_shared("mixtext-2.5M", 8, 256, 8.0);
  ASSERT_EQ(r.layer.size(), 6u);
  std::vector<double> bos_ratio;
  for (int64_t s = 0; s < r.samples; ++s) {
    const OutlierToken* top = nullptr;
    for (const OutlierToken& t : r.outliers.tokens)
      if (t.layer == 1 && t.sample == s && (!top || t.ratio > top->ratio)) top = &t;
    ASSERT_NE(top, nullptr) << "sample " << s << ": no token above 8x at layer 1";
    EXPECT_EQ(top->position, 0) << "sample " << s << ": [BOS] is the largest token at layer 1";
    EXPECT_EQ(top->token_id, 1);
    EXPECT_EQ(top->text, "<s>");
    bos_ratio.push_back(top->ratio);
  }
  // "≈ 40×": 19-41 per sample on these samples; loosely, the median sample within [15, 60].
  std::sort(bos_ratio.begin(), bos_ratio.end());
  EXPECT_GE(bos_ratio[bos_ratio.size() / 2], 15.0);
  EXPECT_LE(bos_ratio[bos_ratio.size() / 2], 60.0);
  // "the beginnings of an outlier token": nothing reaches PrefixQuant's η = 64.
  for (const OutlierToken& t : r.outliers.tokens) EXPECT_LT(t.ratio, 64.0) << t.layer << " " << t.sample;
  // "largest token in the residual stream from layer 1 on (≈ 12×)": 11 here; loosely within 2x.
  EXPECT_GE(r.layer[1].site(Site::Out).top1_over_median(), 6.0);
  EXPECT_LE(r.layer[1].site(Site::Out).top1_over_median(), 24.0);
  // "attention mass on token 0 stays at 1–6%": 1.7–6.7% here (head max 11%); a sink would be ≫ 10%.
  for (const LayerReport& lr : r.layer) {
    EXPECT_GT(lr.attention.mean_to_first(), 0.005);
    EXPECT_LT(lr.attention.mean_to_first(), 0.10);
  }
}

}  // namespace
}  // namespace sinkq
