// The full-precision KV prefix in the simulated pipeline (src/quant/sim.h PrefixSim, build_sim,
// SimModel::attach): calibration behind the prefix (static scales no longer set by the outlier
// token), the leading [BOS] of calibration samples dropped behind a [BOS] prefix, prefix source fp
// (IntactKV on) vs quant (IntactKV off = the quantized model's own rows = the inline run), the
// rotation × prefix equivalence with the inline fp run, presets, JSON, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "quant/calibrate.h"
#include "quant/sim.h"
#include "util/planted.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using testing::logits_of;
using testing::rel_diff;
using testing::error_of;

constexpr int32_t kBos = 1;  // stories260K's BOS (the planted model links its tokenizer)

// A planted-outlier model: [BOS] (id 1) is an outlier token at down_in of layer 1 (≈ 128 there,
// normal tokens O(0.1): util/planted.h).
std::shared_ptr<const Model> planted() {
  // Built before the model, so destroyed after it at exit (and the directory removed: a `new`ed
  // one leaked a /tmp/sinkq-test-* directory per test process).
  static testing::TempDir d;
  static const std::shared_ptr<const Model> m = [] {
    testing::PlantedOutlierSpec spec;
    spec.token_ids = {kBos};
    spec.layers = {1};
    testing::write_planted_model(d.path(), spec);
    return std::shared_ptr<const Model>(Model::load(d.path()));
  }();
  return m;
}

constexpr auto stories = testing::stories260k;

// n calibration samples of len tokens, each starting with [BOS], the rest ordinary ids.
std::vector<std::vector<int32_t>> samples(int n, int len, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> x{kBos};
    for (int i = 1; i < len; ++i) x.push_back(int32_t(3 + rng() % 500));
    out.push_back(x);
  }
  return out;
}

// Static per-tensor A8 (plain max calibration, clip 1), nothing else.
Recipe static_a8() {
  Recipe c;
  c.a.bits = 8;
  c.a.mode = ActMode::Static;
  c.a.clip_grid = false;
  c.a.clip = 1.0f;
  return c;
}

float scale_at(const SimModel& sm, Site site, int layer) {
  for (const StaticQuant& q : sm.statics)
    if (q.site == site && q.layer == layer) return q.params.scale.at(0);
  ADD_FAILURE() << "no static quantizer at " << site_name(site) << " layer " << layer;
  return 0;
}

PrefixSim bos_prefix(PrefixSim::Source src = PrefixSim::Source::Fp) {
  PrefixSim p;
  p.spec = "bos";
  p.tokens = {kBos};
  p.bos_id = kBos;
  p.source = src;
  return p;
}

// PrefixQuant's point: without a prefix the per-tensor scale of down_in at the planted layer is
// set by [BOS] (≈ 128 / 127 at 8 bits); behind a [BOS] prefix the body holds no outlier and the
// scale falls to the normal tokens' range (O(0.1) / 127). The bound 0.05× is loose against the
// ≈ 1000× ratio the planted magnitudes give (128 vs ≈ 0.1), tight enough to catch a scale still
// fitted to the outlier. Layer 0 (no outlier) changes only a little in comparison.
TEST(SimPrefix, StaticScalesBehindBosPrefixIgnoreTheOutlier) {
  const auto calib = samples(4, 40);
  Recipe c = static_a8();
  const SimModel plain = build_sim(planted(), c, calib);
  c.prefix = bos_prefix();
  const SimModel pref = build_sim(planted(), c, calib);
  const float s0 = scale_at(plain, Site::DownIn, 1), s1 = scale_at(pref, Site::DownIn, 1);
  EXPECT_GT(s0, 0.5f);  // ≈ 128 / 127: the outlier sets it
  EXPECT_LT(s1, 0.05f * s0) << s0 << " -> " << s1;
  ASSERT_NE(pref.prefix, nullptr);
  EXPECT_EQ(pref.prefix->tokens(), std::vector<int32_t>{kBos});
  EXPECT_EQ(plain.prefix, nullptr);
  EXPECT_EQ(pref.calibration_report.at("behind_prefix"), "fp prefix KV");
}

// Behind a prefix holding [BOS], a sample's own leading [BOS] is dropped: samples with and
// without it calibrate to exactly the same scales (bit-equal: the same body tokens at the same
// positions). With bos_id unknown (-1) nothing is dropped and the second [BOS] in the body is an
// outlier again (PrefixQuant §5.1): the down_in scale jumps back to the outlier's.
TEST(SimPrefix, LeadingBosDroppedBehindABosPrefix) {
  const auto calib = samples(3, 33);
  std::vector<std::vector<int32_t>> bodies;
  for (const auto& s : calib) bodies.emplace_back(s.begin() + 1, s.end());
  Recipe c = static_a8();
  c.prefix = bos_prefix();
  EXPECT_TRUE(c.prefix.strips_bos());
  const SimModel a = build_sim(planted(), c, calib), b = build_sim(planted(), c, bodies);
  ASSERT_EQ(a.statics.size(), b.statics.size());
  for (size_t i = 0; i < a.statics.size(); ++i) EXPECT_EQ(a.statics[i].params.scale, b.statics[i].params.scale) << i;
  c.prefix.bos_id = -1;
  EXPECT_FALSE(c.prefix.strips_bos());
  const SimModel kept = build_sim(planted(), c, calib);
  EXPECT_GT(scale_at(kept, Site::DownIn, 1), 20.0f * scale_at(a, Site::DownIn, 1));
  // A prefix without [BOS] keeps the samples as they are.
  PrefixSim nl;
  nl.tokens = {13};
  nl.bos_id = kBos;
  EXPECT_FALSE(nl.strips_bos());
}

// The rotation × prefix decision: with nothing quantized, the body behind the prefix computed by
// the rotated fp model (with its online rotations) gives the original model's inline logits for
// the same positions. Tolerance 1e-3 × max|logit|: the rotated model is the original up to fp32
// rounding of the extra transforms (rotate_test: ≤ 1.2e-6 relative per matrix, amplified over 5
// layers and the logits' dynamic range; the calibrate_test rotation check uses the same bound).
// Without rotation the prefix run is the fp inline run itself (1e-5: only the split of one call
// into prefix and body changes the summation order of attention).
TEST(SimPrefix, NoQuantizationPrefixRunEqualsInlineFpRun) {
  const std::vector<int32_t> prefix{kBos, 29, 13};
  std::vector<int32_t> body;
  for (int i = 0; i < 20; ++i) body.push_back(int32_t(40 + i * 7));
  std::vector<int32_t> inline_toks = prefix;
  inline_toks.insert(inline_toks.end(), body.begin(), body.end());
  Forward ref(stories(), 64);
  const auto full = logits_of(ref, inline_toks);
  const int64_t V = stories()->config().vocab_size;
  const std::vector<float> want(full.begin() + long(prefix.size() * size_t(V)), full.end());
  for (bool rotate : {false, true}) {
    Recipe c;
    c.rotate.on = rotate;
    c.rotate.seed = 7;
    c.prefix.spec = "ids:1,29,13";
    c.prefix.tokens = prefix;
    c.prefix.bos_id = kBos;
    const SimModel sm = build_sim(stories(), c, {});
    Forward f(sm.model, 40);
    sm.attach(f);
    EXPECT_EQ(f.prefix_size(), 3);
    EXPECT_LT(rel_diff(logits_of(f, body), want), rotate ? 1e-3 : 1e-5) << "rotate " << rotate;
  }
}

// Source quant = IntactKV off: the prefix rows are the quantized model's own, so the body's logits
// equal the quantized model run inline on prefix + body (1e-5 relative: the same per-row
// quantizers on the same rows; only the call split differs). Source fp gives different logits
// (the prefix rows are exact), and different prefix KV rows.
TEST(SimPrefix, PrefixSourceFpAndQuantDiffer) {
  Recipe c = Recipe::from_preset("w4a4kv4");  // dynamic: no calibration needed
  c.prefix = bos_prefix(PrefixSim::Source::Fp);
  const SimModel fp = build_sim(stories(), c, {});
  c.prefix.source = PrefixSim::Source::Quant;
  const SimModel q = build_sim(stories(), c, {});
  ASSERT_NE(fp.prefix, nullptr);
  ASSERT_NE(q.prefix, nullptr);
  const KvSegment a = fp.prefix->segment(2), b = q.prefix->segment(2);
  const int64_t D = fp.prefix->kv_dim();
  EXPECT_NE(std::memcmp(a.k, b.k, size_t(D) * sizeof(float)), 0);
  std::vector<int32_t> body;
  for (int i = 0; i < 24; ++i) body.push_back(int32_t(30 + i * 11));
  Forward ffp(fp.model, 32), fq(q.model, 32);
  fp.attach(ffp);
  q.attach(fq);
  const auto lf = logits_of(ffp, body), lq = logits_of(fq, body);
  EXPECT_GT(rel_diff(lf, lq), 1e-3);  // a 4-bit [BOS] row changes every later logit
  // The inline quantized run (no prefix object): [BOS] + body through the same hooks.
  Recipe plain = c;
  plain.prefix = PrefixSim{};
  const SimModel inl = build_sim(stories(), plain, {});
  Forward fi(inl.model, 40);
  inl.attach(fi);
  std::vector<int32_t> toks{kBos};
  toks.insert(toks.end(), body.begin(), body.end());
  const auto li = logits_of(fi, toks);
  const int64_t V = stories()->config().vocab_size;
  EXPECT_LT(rel_diff(lq, std::vector<float>(li.begin() + V, li.end())), 1e-5);
}

// Source quant with static scales: calibration sees the prefix tokens inline (no KvPrefix), so the
// outlier [BOS] is back in the statistics and sets the scale, as in a plain quantized model.
TEST(SimPrefix, SourceQuantCalibratesWithThePrefixInline) {
  const auto calib = samples(3, 33);
  Recipe c = static_a8();
  c.prefix = bos_prefix(PrefixSim::Source::Quant);
  const SimModel q = build_sim(planted(), c, calib);
  c.prefix.source = PrefixSim::Source::Fp;
  const SimModel f = build_sim(planted(), c, calib);
  EXPECT_GT(scale_at(q, Site::DownIn, 1), 20.0f * scale_at(f, Site::DownIn, 1));
  EXPECT_EQ(q.calibration_report.at("behind_prefix"), "prefix tokens inline");
}

TEST(SimPrefix, PresetsJsonAndDescribe) {
  const auto names = Recipe::preset_names();
  for (const char* n : {"prefixquant-w8a8kv8", "prefixquant-w4a8kv4", "prefixquant-w4a4kv4"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    const Recipe c = Recipe::from_preset(n);
    EXPECT_NO_THROW(c.validate());
    EXPECT_TRUE(c.rotate.on);
    EXPECT_EQ(c.prefix.spec, "auto");
    EXPECT_EQ(c.prefix.source, PrefixSim::Source::Fp);
    EXPECT_TRUE(c.w.clip_grid);
    EXPECT_TRUE(c.w.symmetric);
    EXPECT_EQ(c.w.group, 0);
    EXPECT_EQ(c.a.mode, ActMode::Static);
    EXPECT_TRUE(c.a.clip_grid);
    EXPECT_EQ(c.kv.mode, KvMode::Static);
    EXPECT_TRUE(c.kv.clip_grid);
    EXPECT_EQ(c.kv.granularity, c.kv.bits == 8 ? KvGranularity::Tensor : KvGranularity::Head) << n;
    EXPECT_TRUE(c.needs_calibration());
  }
  EXPECT_EQ(Recipe::from_preset("prefixquant-w4a8kv4").a.bits, 8);
  Recipe c = Recipe::from_preset("w4a16");
  EXPECT_TRUE(c.to_json().at("prefix").is_null());
  EXPECT_EQ(c.describe().find("prefix"), std::string::npos);
  c.prefix = bos_prefix(PrefixSim::Source::Quant);
  const auto j = c.to_json().at("prefix");
  EXPECT_EQ(j.at("spec"), "bos");
  EXPECT_EQ(j.at("tokens"), nlohmann::json::array({1}));
  EXPECT_EQ(j.at("source"), "quant");
  EXPECT_EQ(j.at("body_drops_leading_bos"), true);
  EXPECT_NE(c.describe().find("prefix bos [1] source=quant"), std::string::npos) << c.describe();
  EXPECT_EQ(prefix_source_name(parse_prefix_source("fp")), "fp");
}

TEST(SimPrefix, ErrorsNameTheFlags) {
  EXPECT_NE(error_of([] { parse_prefix_source("int8"); }).find("--prefix-source"), std::string::npos);
  Recipe c;
  c.prefix.source = PrefixSim::Source::Quant;
  EXPECT_NE(error_of([&] { c.validate(); }).find("--prefix"), std::string::npos);
  // A spec never resolved to tokens.
  Recipe u;
  u.prefix.spec = "auto";
  EXPECT_NE(error_of([&] { build_sim(stories(), u, {}); }).find("not resolved"), std::string::npos);
  // P + calibration body beyond max_position_embeddings (planted: 128): 3 prefix tokens (no
  // [BOS] among them: nothing dropped) + 127 > 128.
  Recipe s = static_a8();
  s.prefix.spec = "ids:29,13,40";
  s.prefix.tokens = {29, 13, 40};
  s.prefix.bos_id = kBos;
  const std::string e = error_of([&] { build_sim(planted(), s, samples(2, 127)); });
  EXPECT_NE(e.find("--calib-len"), std::string::npos) << e;
  EXPECT_NE(e.find("--prefix"), std::string::npos) << e;
  EXPECT_NE(e.find("125"), std::string::npos) << e;  // the longest length that fits
  // Out-of-vocabulary prefix token.
  Recipe v;
  v.prefix.tokens = {100000};
  EXPECT_NE(error_of([&] { build_sim(stories(), v, {}); }).find("--prefix"), std::string::npos);
}

}  // namespace
}  // namespace sinkq::quant
