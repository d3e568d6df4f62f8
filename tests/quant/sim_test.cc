// Simulated quantization (src/quant/sim.h) on stories260K: the configuration (presets, flags,
// errors), weight fake-quant against the library quantizer, and the hooks' effect on what the
// forward pass sees (bit-identity when off, distinct-value counts when on).
#include "quant/sim.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using testing::prompt;
using testing::logits_of;
using testing::bit_equal;
using testing::error_of;

constexpr auto stories = testing::stories260k;

std::vector<float> widened(const Mat& m) {
  std::vector<float> v(size_t(m.rows * m.cols));
  to_f32(m.dtype, m.data, v.data(), v.size());
  return v;
}

TEST(Recipe, PresetsAndJson) {
  for (const auto& n : Recipe::preset_names()) EXPECT_NO_THROW(Recipe::from_preset(n).validate()) << n;
  const Recipe fp = Recipe::from_preset("fp16");
  EXPECT_FALSE(fp.any());
  const Recipe c = Recipe::from_preset("w4a8kv4");
  EXPECT_EQ(c.w.bits, 4);
  EXPECT_EQ(c.w.group, 0);
  EXPECT_EQ(c.a.bits, 8);
  EXPECT_EQ(c.kv.bits, 4);
  EXPECT_EQ(c.kv.granularity, KvGranularity::Head);
  const auto j = c.to_json();
  EXPECT_EQ(j.at("preset"), "w4a8kv4");
  EXPECT_EQ(j.at("weights").at("granularity"), "per_output_channel");
  EXPECT_EQ(j.at("weights").at("symmetric"), true);
  EXPECT_EQ(j.at("activations").at("mode"), "dynamic");
  EXPECT_EQ(j.at("activations").at("granularity"), "per_token");
  EXPECT_EQ(j.at("kv").at("granularity"), "per_head");
  EXPECT_EQ(c.describe(), "W4 per-channel sym | A8 dynamic per-token sym | KV4 dynamic per-head sym");
  const Recipe g = Recipe::from_preset("w4a16g128");
  EXPECT_EQ(g.w.group, 128);
  EXPECT_EQ(g.to_json().at("weights").at("group_size"), 128);
  EXPECT_EQ(g.to_json().at("activations"), nlohmann::json({{"bits", 16}}));
}

TEST(Recipe, ErrorsNameTheFlag) {
  EXPECT_NE(error_of([] { parse_bits("--w-bits", 1); }).find("--w-bits"), std::string::npos);
  EXPECT_NE(error_of([] { parse_bits("--kv-bits", 9); }).find("--kv-bits"), std::string::npos);
  EXPECT_EQ(parse_bits("--a-bits", 16), 16);
  EXPECT_NE(error_of([] { Recipe::from_preset("w3a3"); }).find("--preset"), std::string::npos);
  EXPECT_NE(error_of([] { parse_act_mode("minmax"); }).find("--a-quant"), std::string::npos);
  EXPECT_NE(error_of([] { parse_kv_granularity("channel"); }).find("--kv-gran"), std::string::npos);
  Recipe c = Recipe::from_preset("w8a8");
  c.a.mode = parse_act_mode("static");  // a valid configuration; it needs calibration data
  EXPECT_NO_THROW(c.validate());
  const std::string e = error_of([&] { build_sim(stories(), c, {}); });
  EXPECT_NE(e.find("--a-quant static"), std::string::npos) << e;
  EXPECT_NE(e.find("--calib"), std::string::npos) << e;
  Forward f(stories(), 8);  // the dynamic-only attach cannot place calibrated scales
  EXPECT_NE(error_of([&] { attach(f, c); }).find("--a-quant"), std::string::npos);
  c = Recipe::from_preset("w8a8");
  c.a.alpha = 1.5f;
  EXPECT_NE(error_of([&] { c.validate(); }).find("--a-alpha"), std::string::npos);
  c.a.alpha = 0.15f;
  c.w.clip = 0.0f;
  EXPECT_NE(error_of([&] { c.validate(); }).find("--w-clip"), std::string::npos);
}

// Everything at 16 bits: no hook, the same model object, logits bit-identical. A copy of the
// weights through with_weights (same fp32 values, owned) gives the same logits too.
TEST(Sim, OffIsBitIdentical) {
  const auto toks = prompt(40);
  Forward ref(stories(), 64);
  const auto want = logits_of(ref, toks);
  Recipe off;  // all bits 16; modes set to non-defaults to show they are inert when off
  off.a.mode = ActMode::Cross;
  off.kv.granularity = KvGranularity::Token;
  const auto m = fake_quantize_weights(stories(), off);
  EXPECT_EQ(m.get(), stories().get());
  Forward f(m, 64);
  EXPECT_TRUE(attach(f, off).empty());
  EXPECT_TRUE(bit_equal(logits_of(f, toks), want));

  ModelWeights w;
  w.embed = stories()->weights().embed;
  w.lm_head = stories()->weights().lm_head;
  w.final_norm = stories()->weights().final_norm;
  w.layers = stories()->weights().layers;
  Forward g(Model::with_weights(stories(), std::move(w)), 64);
  EXPECT_TRUE(bit_equal(logits_of(g, toks), want));
}

// Each matrix of the fake-quantized model equals the library's fake_quant of the widened matrix;
// embeddings, lm_head and norms are the base model's own buffers.
TEST(Sim, WeightFakeQuantIsTheLibraryQuantizer) {
  for (const char* preset : {"w4a16", "w8a8"}) {
    for (bool sym : {true, false}) {
      Recipe c = Recipe::from_preset(preset);
      c.w.symmetric = sym;
      const auto q = fake_quantize_weights(stories(), c);
      ASSERT_NE(q.get(), stories().get());
      const ModelWeights& a = stories()->weights();
      const ModelWeights& b = q->weights();
      EXPECT_EQ(b.embed.data, a.embed.data);
      EXPECT_EQ(b.lm_head.data, a.lm_head.data);
      EXPECT_EQ(b.final_norm, a.final_norm);
      for (size_t l = 0; l < a.layers.size(); ++l) {
        EXPECT_EQ(b.layers[l].vec(VecRole::AttnNorm), a.layers[l].vec(VecRole::AttnNorm));
        const Mat* ma[] = {&a.layers[l].mat(LinearRole::Q), &a.layers[l].mat(LinearRole::K), &a.layers[l].mat(LinearRole::V), &a.layers[l].mat(LinearRole::O),
                           &a.layers[l].mat(LinearRole::Gate), &a.layers[l].mat(LinearRole::Up), &a.layers[l].mat(LinearRole::Down)};
        const Mat* mb[] = {&b.layers[l].mat(LinearRole::Q), &b.layers[l].mat(LinearRole::K), &b.layers[l].mat(LinearRole::V), &b.layers[l].mat(LinearRole::O),
                           &b.layers[l].mat(LinearRole::Gate), &b.layers[l].mat(LinearRole::Up), &b.layers[l].mat(LinearRole::Down)};
        for (size_t i = 0; i < 7; ++i) {
          auto want = widened(*ma[i]);
          QuantSpec s;
          s.bits = c.w.bits;
          s.symmetric = sym;
          s.granularity = Granularity::PerRow;
          fake_quant_dynamic(s, want.data(), ma[i]->rows, ma[i]->cols);
          EXPECT_EQ(mb[i]->dtype, DType::F32);
          EXPECT_TRUE(bit_equal(widened(*mb[i]), want)) << ma[i]->name;
        }
      }
    }
  }
}

// Groups: a dividing group is PerGroup exactly; a ragged one (stories260K down_proj has in = 172,
// 172 = 5·32 + 12) is PerGroup on the first 160 columns and one more group of 12 per row; a group
// >= in is per channel.
TEST(Sim, WeightGroups) {
  Recipe c = Recipe::from_preset("w4a16");
  c.w.group = 32;
  const auto q = fake_quantize_weights(stories(), c);
  const LayerWeights& a = stories()->weights().layers[2];
  const LayerWeights& b = q->weights().layers[2];
  ASSERT_EQ(a.mat(LinearRole::Q).cols, 64);
  auto want = widened(a.mat(LinearRole::Q));
  QuantSpec s;
  s.bits = 4;
  s.granularity = Granularity::PerGroup;
  s.group_size = 32;
  fake_quant_dynamic(s, want.data(), a.mat(LinearRole::Q).rows, 64);
  EXPECT_TRUE(bit_equal(widened(b.mat(LinearRole::Q)), want));

  ASSERT_EQ(a.mat(LinearRole::Down).cols, 172);
  const int64_t R = a.mat(LinearRole::Down).rows;
  const auto full = widened(a.mat(LinearRole::Down));
  std::vector<float> head(size_t(R * 160)), tail(size_t(R * 12));
  for (int64_t r = 0; r < R; ++r) {
    std::copy(full.begin() + r * 172, full.begin() + r * 172 + 160, head.begin() + r * 160);
    std::copy(full.begin() + r * 172 + 160, full.begin() + (r + 1) * 172, tail.begin() + r * 12);
  }
  fake_quant_dynamic(s, head.data(), R, 160);
  QuantSpec row = s;
  row.granularity = Granularity::PerRow;
  fake_quant_dynamic(row, tail.data(), R, 12);
  const auto got = widened(b.mat(LinearRole::Down));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < 172; ++j)
      ASSERT_EQ(got[size_t(r * 172 + j)], j < 160 ? head[size_t(r * 160 + j)] : tail[size_t(r * 12 + j - 160)]);

  c.w.group = 128;  // > 64 = in of q_proj: one group per row = per channel
  EXPECT_EQ(weight_spec(c.w, 64).granularity, Granularity::PerRow);
  const auto q128 = fake_quantize_weights(stories(), c);
  auto pc = widened(a.mat(LinearRole::Q));
  fake_quant_dynamic(row, pc.data(), a.mat(LinearRole::Q).rows, 64);
  EXPECT_TRUE(bit_equal(widened(q128->weights().layers[2].mat(LinearRole::Q)), pc));
}

// KV 4-bit per head: every cached K (and V) row takes at most 2^4 distinct values per head, and
// the cache differs from the fp one (the hook really ran).
TEST(Sim, KvPerHeadHasAtMost16LevelsPerHead) {
  Recipe c;
  c.kv.bits = 4;
  c.kv.granularity = KvGranularity::Head;
  const auto toks = prompt(24);
  Forward fp(stories(), 32), f(stories(), 32);
  EXPECT_EQ(attach(f, c).size(), 2u);
  logits_of(fp, toks);
  logits_of(f, toks);
  const ModelConfig& mc = stories()->config();
  bool changed = false;
  for (int l = 0; l < mc.num_layers; ++l) {
    for (const float* cache : {f.cache().k(l), f.cache().v(l)}) {
      for (int64_t t = 0; t < int64_t(toks.size()); ++t) {
        for (int h = 0; h < mc.num_kv_heads; ++h) {
          const float* r = cache + t * mc.kv_dim() + h * mc.head_dim;
          EXPECT_LE(std::set<float>(r, r + mc.head_dim).size(), 16u) << "layer " << l << " t " << t << " head " << h;
        }
      }
    }
    changed |= std::memcmp(f.cache().k(l), fp.cache().k(l), toks.size() * size_t(mc.kv_dim()) * 4) != 0;
  }
  EXPECT_TRUE(changed);
}

// A4 per-token: an observer registered after attach() sees at most 16 distinct values per row at
// every linear-layer input (hooks run in registration order).
TEST(Sim, ActivationsPerTokenLevels) {
  Recipe c;
  c.a.bits = 4;
  Forward f(stories(), 32);
  EXPECT_EQ(attach(f, c).size(), 4u * size_t(stories()->config().num_layers));
  int64_t rows = 0;
  for (Site s : {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn})
    f.hooks().add(s, -1, [&](SiteView& v) {
      for (int64_t t = 0; t < v.tokens; ++t, ++rows)
        EXPECT_LE(std::set<float>(v.row(t), v.row(t) + v.features).size(), 16u) << site_name(v.site);
    });
  logits_of(f, prompt(12));
  EXPECT_EQ(rows, 12 * 4 * stories()->config().num_layers);
}

// CrossQuant with α = 1 is per-token quantization bit for bit (crossquant.h), so the whole
// forward pass agrees with the dynamic mode; α = 0.15 differs.
TEST(Sim, CrossAlphaOneIsPerToken) {
  const auto toks = prompt(30);
  Recipe d = Recipe::from_preset("w8a8");
  Forward fd(fake_quantize_weights(stories(), d), 32);
  attach(fd, d);
  Recipe x = d;
  x.a.mode = ActMode::Cross;
  x.a.alpha = 1.0f;
  Forward fx(fake_quantize_weights(stories(), x), 32);
  attach(fx, x);
  const auto want = logits_of(fd, toks);
  EXPECT_TRUE(bit_equal(logits_of(fx, toks), want));
  x.a.alpha = 0.15f;
  Forward fy(fake_quantize_weights(stories(), x), 32);
  attach(fy, x);
  EXPECT_FALSE(bit_equal(logits_of(fy, toks), want));
  // RunningMax restarts at position 0: the same window twice gives the same logits.
  x.a.cross_columns = ColumnMode::RunningMax;
  Forward fr(stories(), 32);
  attach(fr, x);
  const auto first = logits_of(fr, toks);
  EXPECT_TRUE(bit_equal(logits_of(fr, toks), first));
}

}  // namespace
}  // namespace sinkq::quant
