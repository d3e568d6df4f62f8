// The packed low-bit forward pass (src/runtime) against the simulator (src/quant/sim.h): the same
// codes and scales, so the logits differ by fp32 summation order only; and every configuration the
// lowbit kernels cannot run is an error that says so.
#include "runtime/packed_linear.h"

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/team.h"
#include "runtime/packed_kv.h"
#include "quant/sim.h"
#include "runtime/forcing.h"
#include "runtime/runtime_models.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::runtime {
namespace {

using testing::prompt;
using testing::logits_of;
using testing::bit_equal;
using testing::rel_diff;
using ::testing::HasSubstr;
using testing::error_of;

using testmodels::mixtext;
using testmodels::Forcing;
using testmodels::stories;
using testmodels::tiny_qwen2;

struct NamedModel {
  const char* name;
  std::shared_ptr<const Model> (*get)();
};
const NamedModel kModels[] = {{"stories260K", stories}, {"mixtext-2.5M", mixtext}, {"tiny-qwen2", tiny_qwen2}};

constexpr int kTokens = 48;

// Comparing free-running forward passes is not a test of the kernels: an fp32 rounding difference
// anywhere can move one activation across a rounding boundary of a later quantizer (one code step,
// measured up to 2% of max |logit| with A8 and 25% with static A4 on these models). So the packed
// model runs teacher-forced: a hook at attn_in / o_in / mlp_in / down_in of every layer replaces
// its fp32 input by the simulator's fp32 input at that site (captured before the simulator's
// quantization hook), so both quantize the same values to the same codes and only the fp32
// rounding of the linears (≤ (γ_{K+1} + γ_{G+3})·Σ|x̂ŵ| per output, lowbit/kernels.h), of the
// residual sums they feed and of attention over slightly different K/V remains.
// Tolerance: 1e-5 · max |value|, for the logits and for every linear input the packed model
// computes (compared before it is replaced). Measured: logits ≤ 3.3e-7, linear inputs ≤ 3.3e-6
// (o_in of stories260K: the softmax amplifies the rounding of q·k) on every model, format and
// activation mode; that is a few fp32 ulps, the per-linear worst case K·ε ≈ 512 · 6e-8 = 3e-5
// not being approached (roundings are random in sign, ~√K·ε). A real mismatch moves them by far
// more: a dropped q/k/v bias gives 0.16 at o_in (checked by mutation), a wrong scale, clip or group
// a whole quantization step (> 1e-3).
constexpr double kTol = 1e-5;


struct Scheme {
  const char* name;
  int wbits, group;
  bool wsym;
  int abits;
};
const Scheme kSchemes[] = {
    {"w8a8", 8, 0, true, 8},           {"w4a8", 4, 0, true, 8},
    {"w4a8_g128", 4, 128, true, 8},    {"w4a8_g128_asym", 4, 128, false, 8},
    {"w4a4", 4, 0, true, 4},           {"w4a4_g64", 4, 64, true, 4},
    {"w8a4", 8, 0, true, 4},           {"w4a8_g32_asym", 4, 32, false, 8},
};

quant::Recipe sim_config(const Scheme& s) {
  quant::Recipe c;
  c.w.bits = s.wbits;
  c.w.group = s.group;
  c.w.symmetric = s.wsym;
  c.a.bits = s.abits;
  c.a.mode = quant::ActMode::Dynamic;
  return c;
}
RuntimeConfig runtime_config(const Scheme& s) {
  RuntimeConfig c;
  c.w.bits = s.wbits;
  c.w.group = s.group;
  c.w.symmetric = s.wsym;
  c.a.bits = s.abits;
  c.a.mode = ActMode::Dynamic;
  return c;
}

// Whether a model has a matrix whose ragged asymmetric tail no format stores (stories260K:
// down_proj has 172 = 128 + 44 or 5·32 + 12 input columns).
bool runnable(const NamedModel& m, const Scheme& s) {
  return s.wsym || std::string(m.name) != "stories260K";
}

TEST(Runtime, DynamicMatchesSimulator) {
  const auto toks = prompt(kTokens);
  for (const NamedModel& nm : kModels) {
    for (const Scheme& s : kSchemes) {
      SCOPED_TRACE(std::string(nm.name) + " " + s.name);
      if (!runnable(nm, s)) {
        EXPECT_THAT(error_of([&] { pack_model(nm.get(), runtime_config(s)); }),
                    HasSubstr("which no packed format stores"));
        continue;
      }
      const quant::Recipe sc = sim_config(s);
      Forward sim(quant::fake_quantize_weights(nm.get(), sc), kTokens);
      Forcing forcing;
      forcing.record(sim);
      quant::attach(sim, sc);
      const auto packed_model = pack_model(nm.get(), runtime_config(s));
      Forward packed(packed_model, kTokens), free(packed_model, kTokens);
      forcing.force(packed);
      const auto want = logits_of(sim, toks);
      const double d = rel_diff(logits_of(packed, toks), want);
      std::printf("  %-13s %-15s dynamic  forced: max|dlogit|/max|logit| %.3g, linear inputs %.3g (%s); "
                  "free-running %.3g\n", nm.name, s.name, d, forcing.worst, forcing.worst_at.c_str(),
                  rel_diff(logits_of(free, toks), want));
      EXPECT_LE(forcing.worst, kTol) << forcing.worst_at;
      EXPECT_LE(d, kTol);
      // The packed layers did run: far from the full-precision model.
      Forward fp(nm.get(), kTokens);
      EXPECT_GT(rel_diff(logits_of(fp, toks), want), 100 * kTol);
    }
  }
}

// Static per-tensor activations: one scale per (layer, site) calibrated on the full-precision
// model's site inputs with clip 0.8 (so some values clip), against the simulator's weights plus a
// hook that applies the same Params with quant::fake_quant.
struct Statics {
  std::vector<StaticActScale> scales;
  quant::QuantSpec spec;
};
Statics calibrate(const std::shared_ptr<const Model>& m, int bits, const std::vector<int32_t>& toks) {
  Statics st;
  st.spec.bits = bits;
  st.spec.symmetric = true;
  st.spec.granularity = quant::Granularity::PerTensor;
  st.spec.clip_ratio = 0.8f;
  std::map<std::pair<int, int>, quant::Calibrator> cal;
  Forward f(m, int64_t(toks.size()));
  for (Site s : {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn})
    f.hooks().add(s, -1, [&](SiteView& v) {
      auto it = cal.try_emplace({v.layer, int(v.site)}, st.spec).first;
      it->second.observe(v.data, v.tokens, v.features);
    });
  f.step(toks, false);
  for (const auto& [key, c] : cal) st.scales.push_back({key.first, Site(key.second), c.params()});
  return st;
}

TEST(Runtime, StaticMatchesSimulatorHook) {
  const auto toks = prompt(kTokens);
  for (const NamedModel& nm : kModels) {
    for (const Scheme& s : kSchemes) {
      if (!runnable(nm, s)) continue;
      SCOPED_TRACE(std::string(nm.name) + " " + s.name + " static");
      const Statics st = calibrate(nm.get(), s.abits, prompt(kTokens / 2));
      ASSERT_EQ(st.scales.size(), size_t(4 * nm.get()->config().num_layers));
      quant::Recipe sc = sim_config(s);
      sc.a.bits = quant::kBitsOff;
      Forward sim(quant::fake_quantize_weights(nm.get(), sc), kTokens);
      Forcing forcing;
      forcing.record(sim);
      for (const StaticActScale& e : st.scales)
        sim.hooks().add(e.site, e.layer, [&st, &e](SiteView& v) {
          quant::fake_quant(st.spec, e.params, v.data, v.tokens, v.features);
        });
      RuntimeConfig rc = runtime_config(s);
      rc.a.mode = ActMode::Static;
      rc.a.scales = st.scales;
      const auto packed_model = pack_model(nm.get(), rc);
      Forward packed(packed_model, kTokens), free(packed_model, kTokens);
      forcing.force(packed);
      const auto want = logits_of(sim, toks);
      const double d = rel_diff(logits_of(packed, toks), want);
      std::printf("  %-13s %-15s static   forced: max|dlogit|/max|logit| %.3g, linear inputs %.3g (%s); "
                  "free-running %.3g\n", nm.name, s.name, d, forcing.worst, forcing.worst_at.c_str(),
                  rel_diff(logits_of(free, toks), want));
      EXPECT_LE(forcing.worst, kTol) << forcing.worst_at;
      EXPECT_LE(d, kTol);
    }
  }
}

// The thread count does not change a bit of the packed logits (lowbit/kernels.h; the ISA paths of
// the integer kernels agree bit for bit too, tests/lowbit, but the fp32 kernels around them don't).
TEST(Runtime, IndependentOfThreadCount) {
  const int threads0 = num_threads();
  const auto toks = prompt(kTokens);
  for (const Scheme& s : {kSchemes[3], kSchemes[5]}) {
    SCOPED_TRACE(s.name);
    auto m = pack_model(mixtext(), runtime_config(s));
    Forward f(m, kTokens);
    set_num_threads(1);
    const auto one = logits_of(f, toks);
    set_num_threads(2);
    EXPECT_TRUE(bit_equal(logits_of(f, toks), one));
    set_num_threads(threads0);
  }
}

// A decode step runs its parallel loops in one thread team (kernels/team.h); each loop's items are
// computed the same whichever thread runs them, so the team changes no bit of any logit row: fp32
// and packed linears, the fp32 cache and the packed KV4 store, with an fp32 prefix in front. On
// mixtext most packed loops are below the split threshold; SmolLM2's are not (q_proj alone is
// ~16 us of W8 bytes), so the team's hand-off runs under every kind of loop.
TEST(Runtime, DecodeInTeamIsBitIdentical) {
  const int threads0 = num_threads();
  set_num_threads(2);
  const auto toks = prompt(kTokens);
  auto decode = [&](Forward& f) {  // a prefill of half the prompt, then one token per step
    f.reset();
    const size_t half = toks.size() / 2;
    const auto p = f.step(std::span(toks).first(half), false);
    std::vector<float> rows(p.begin(), p.end());
    for (size_t i = half; i < toks.size(); ++i) {
      const auto l = f.step(std::span(toks).subspan(i, 1), false);
      rows.insert(rows.end(), l.begin(), l.end());
    }
    return rows;
  };
  std::vector<std::pair<std::string, std::shared_ptr<const Model>>> models = {{"fp32", mixtext()}};
  for (const Scheme& s : {kSchemes[1], kSchemes[3], kSchemes[5]})
    models.emplace_back(s.name, pack_model(mixtext(), runtime_config(s)));
  const auto smol = Model::load(testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf");
  for (const Scheme& s : {kSchemes[0], kSchemes[1]})
    models.emplace_back(std::string("smollm2 ") + s.name, pack_model(smol, runtime_config(s)));
  for (const auto& [name, m] : models)
    for (const bool kv4 : {false, true}) {
      SCOPED_TRACE(name + (kv4 ? " kv4" : ""));
      Forward f(m, kTokens);
      if (kv4) {
        KvScheme s;
        s.bits = 4;
        attach_packed_kv(f, s);
        f.set_prefix(KvPrefix::compute(m, {1, 13}));
      }
      set_team_enabled(false);
      const auto off = decode(f);
      set_team_enabled(true);
      const auto on = decode(f);
      EXPECT_TRUE(bit_equal(on, off));
    }
  set_num_threads(threads0);
}

// A site's linears (q/k/v over attn_in, gate/up over mlp_in) through
// LinearImpl::apply_shared — the forward's path: the input quantized once, one
// gemm_multi dispatch when the members are one block of one format — equal
// their separate applies bit for bit: one format (W8 per row), ragged two-block
// members (mixtext's 192 columns at g128 asym: the per-member path), mixed
// formats (a weight rule puts v_proj at W8: one quantization, one GEMM per
// member), static per-tensor A4, and CrossQuant folds; every ISA, 1 and 2
// threads, decode and prefill row counts. A member that is not packed (or
// quantizes its input another way) makes the site fall back to one apply each.
TEST(Runtime, SiteLinearsShareTheirInputQuantization) {
  ktest::StateGuard guard;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.5f, 4.0f);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const NamedModel &nm :
       {kModels[1],
        kModels[2]}) { // mixtext (ragged at g128), tiny-qwen2 (q/k/v biases)
    const auto base = nm.get();
    const int L = base->config().num_layers;
    const int64_t H = base->config().hidden_size;
    auto width = [&](int i) {
      return i == 3 ? base->config().intermediate_size
                    : (i == 1 ? base->config().q_dim() : H);
    };
    std::vector<std::pair<std::string, RuntimeConfig>> cfgs;
    cfgs.emplace_back("w8a8", runtime_config(kSchemes[0]));
    cfgs.emplace_back("w4a8 g128 asym", runtime_config(kSchemes[3]));
    RuntimeConfig mixed = runtime_config(kSchemes[5]); // w4a4 g64
    quant::WeightRule v8;
    v8.roles = 1u << int(LinearRole::V);
    v8.bits = 8;
    v8.group = 0;
    mixed.weight_rules.push_back(v8);
    cfgs.emplace_back("w4a4 g64, v_proj W8", mixed);
    RuntimeConfig st = runtime_config(kSchemes[4]); // w4a4 static
    st.a.mode = ActMode::Static;
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < 4; ++i) {
        quant::Params p;
        p.granularity = quant::Granularity::PerTensor;
        p.bits = 4;
        p.symmetric = true;
        p.prow = p.pcol = 1;
        p.col_block = width(i);
        p.scale = {u(rng) / 7.0f};
        st.a.scales.push_back({l, kLinearInputSites[i], p});
      }
    cfgs.emplace_back("w4a4 static", st);
    RuntimeConfig cross = runtime_config(kSchemes[0]);
    cross.a.mode = ActMode::Cross;
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < 4; ++i) {
        std::vector<float> c(static_cast<size_t>(width(i)));
        for (float &v : c)
          v = u(rng);
        cross.a.cross.push_back(quant::make_cross_fold(8, 0.15f, std::move(c)));
      }
    cfgs.emplace_back("w8a8 CrossQuant", cross);

    for (const auto &[name, cfg] : cfgs) {
      const auto m = pack_model(base, cfg);
      const LayerWeights &lw = m->weights().layers[1];
      const std::vector<std::vector<const LinearImpl *>> sites = {
          {lw.impl_of(LinearRole::Q).get(), lw.impl_of(LinearRole::K).get(), lw.impl_of(LinearRole::V).get()},
          {lw.impl_of(LinearRole::Gate).get(), lw.impl_of(LinearRole::Up).get()}};
      const std::vector<std::vector<const float *>> biases = {
          {lw.vec(VecRole::QBias), lw.vec(VecRole::KBias), lw.vec(VecRole::VBias)}, {nullptr, nullptr}};
      for (size_t si = 0; si < sites.size(); ++si)
        for (int64_t T : {1, 5, 33}) {
          std::vector<float> x(size_t(T * H));
          for (float &v : x)
            v = nd(rng);
          x[size_t(rng() % x.size())] *=
              40.0f; // an outlier sets a token's scale
          const auto &impls = sites[si];
          std::vector<std::vector<float>> want(impls.size()), got(impls.size());
          for (Isa isa : ktest::all_isas()) {
            set_isa(isa);
            for (int threads : {1, 2}) {
              set_num_threads(threads);
              SCOPED_TRACE(fmt::format("{} {} site {} T {} {} threads {}",
                                       nm.name, name, si, T, isa_name(isa),
                                       threads));
              std::vector<float *> ys;
              for (size_t k = 0; k < impls.size(); ++k) {
                const int64_t rows =
                    dynamic_cast<const PackedLinear &>(*impls[k]).rows();
                want[k].assign(size_t(T * rows), NAN);
                got[k].assign(size_t(T * rows), NAN);
                impls[k]->apply(x.data(), T, biases[si][k], want[k].data());
                ys.push_back(got[k].data());
              }
              impls[0]->apply_shared(x.data(), T, impls, biases[si], ys);
              for (size_t k = 0; k < impls.size(); ++k)
                EXPECT_TRUE(bit_equal(got[k], want[k])) << "member " << k;
            }
          }
        }
    }
  }
  const auto base = mixtext();
  const int64_t H = base->config().hidden_size;
  // Fallback: a member that is not a PackedLinear, or packed under another
  // input quantization.
  struct Plus1 final : LinearImpl {
    int64_t n;
    explicit Plus1(int64_t rows) : n(rows) {}
    void apply(const float *x, int64_t T, const float *,
               float *y) const override {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < n; ++r)
          y[t * n + r] = x[t] + 1.0f;
    }
    std::string describe() const override { return "plus1"; }
    size_t bytes() const override { return 0; }
    void gather_rows(std::span<const int32_t>, float *) const override {}
  };
  const auto a8 = pack_model(base, runtime_config(kSchemes[0])),
             a4 = pack_model(base, runtime_config(kSchemes[4]));
  const LinearImpl *q8 = a8->weights().layers[0].impl_of(LinearRole::Q).get();
  const LinearImpl *k4 = a4->weights().layers[0].impl_of(LinearRole::K).get();
  const Plus1 plus(3);
  const int64_t T = 4;
  std::vector<float> x(size_t(T * H));
  for (float &v : x)
    v = nd(rng);
  const int64_t QD = base->config().q_dim(), KV = base->config().kv_dim();
  for (const LinearImpl *other : {static_cast<const LinearImpl *>(&plus), k4}) {
    const int64_t rows = other == &plus ? 3 : KV;
    std::vector<float> wq(size_t(T * QD)), wo(size_t(T * rows)), gq(wq.size()),
        go(wo.size());
    q8->apply(x.data(), T, nullptr, wq.data());
    other->apply(x.data(), T, nullptr, wo.data());
    const LinearImpl *both[] = {q8, other};
    const float *no_bias[] = {nullptr, nullptr};
    float *ys[] = {gq.data(), go.data()};
    q8->apply_shared(x.data(), T, both, no_bias, ys);
    EXPECT_TRUE(bit_equal(gq, wq));
    EXPECT_TRUE(bit_equal(go, wo)) << other->describe();
  }
}

TEST(Runtime, PackedLinearsAndDescriptions) {
  RuntimeConfig c = runtime_config(kSchemes[3]);  // w4 g128 asym, A8 dynamic
  EXPECT_EQ(c.describe(), "W4 g128 asym | A8 dynamic per-token sym");
  auto m = pack_model(mixtext(), c);
  const LayerWeights& L = m->weights().layers[0];
  ASSERT_TRUE(L.impl_of(LinearRole::Q) && L.impl_of(LinearRole::K) && L.impl_of(LinearRole::V) && L.impl_of(LinearRole::O) && L.impl_of(LinearRole::Gate) && L.impl_of(LinearRole::Up) && L.impl_of(LinearRole::Down));
  // hidden 192 = one 128-group + a ragged 64-column tail (one asymmetric group per row).
  EXPECT_EQ(L.impl_of(LinearRole::Q)->describe(),
            "model.layers.0.self_attn.q_proj.weight [192, 192]: w4_g128_asym[0:128] + w4_g64_asym[128:192] x "
            "a8_per_token");
  EXPECT_EQ(L.impl_of(LinearRole::Down)->describe(), "model.layers.0.mlp.down_proj.weight [192, 512]: w4_g128_asym x a8_per_token");
  // Sharing: embeddings / norms are the base model's.
  EXPECT_EQ(m->weights().embed.data, mixtext()->weights().embed.data);
  EXPECT_FALSE(mixtext()->weights().layers[0].impl_of(LinearRole::Q));
  // Packing a packed model is refused.
  EXPECT_THAT(error_of([&] { pack_model(m, c); }), HasSubstr("already runs packed linears"));
}

TEST(Runtime, UnsupportedConfigsAreErrors) {
  auto err = [](auto edit) {
    RuntimeConfig c;
    edit(c);
    return error_of([&] { pack_model(stories(), c); });
  };
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.bits = 4; c.a.bits = 16; }),
              HasSubstr("weight-only quantization (W4A16, fp32 activations) cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.a.symmetric = false; }),
              HasSubstr("asymmetric activations cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.a.bits = 6; }), HasSubstr("6-bit activations cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.bits = 3; }), HasSubstr("3-bit weights cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.group = 128; }),
              HasSubstr("int8 weights in groups of 128 columns cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.symmetric = false; }), HasSubstr("asymmetric int8 weights cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.bits = 4; c.w.symmetric = false; }),
              HasSubstr("asymmetric per-channel int4 weights cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.bits = 4; c.w.group = 96; }),
              HasSubstr("int4 weights in groups of 96 columns cannot run"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.clip = 0.0f; }), HasSubstr("clip ratio 0 is outside (0, 1]"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.a.mode = ActMode::Static; }),
              HasSubstr("static per-tensor activations need calibrated scales"));
  EXPECT_THAT(err([](RuntimeConfig& c) { c.a.scales.push_back({}); }),
              HasSubstr("1 static activation scales were given for dynamic activations"));
  // stories260K down_proj: 172 = 128 + 44 columns; the 44-column asymmetric tail has no format.
  EXPECT_THAT(err([](RuntimeConfig& c) { c.w.bits = 4; c.w.group = 128; c.w.symmetric = false; }),
              HasSubstr("model.layers.0.mlp.down_proj.weight [in = 172]: columns 128..171 form one asymmetric "
                        "int4 group of 44 columns"));

  // Static tables: every (layer, site) exactly once, with fitting params.
  const Statics st = calibrate(stories(), 8, prompt(8));
  auto static_err = [&](auto edit) {
    RuntimeConfig c;
    c.a.mode = ActMode::Static;
    c.a.scales = st.scales;
    edit(c.a.scales);
    return error_of([&] { pack_model(stories(), c); });
  };
  EXPECT_THAT(static_err([](auto& v) { v.pop_back(); }),
              HasSubstr("static per-tensor activations: no calibrated scale for layer 4 site down_in"));
  EXPECT_THAT(static_err([](auto& v) { v.push_back(v[0]); }), HasSubstr("two static activation scales for layer 0"));
  EXPECT_THAT(static_err([](auto& v) { v[0].site = Site::K; }),
              HasSubstr("static activation scale for site k: only the linear inputs"));
  EXPECT_THAT(static_err([](auto& v) { v[0].layer = 9; }),
              HasSubstr("static activation scale for layer 9: the model has 5 layers"));
  EXPECT_THAT(static_err([](auto& v) {
                for (auto& e : v) e.params.bits = 4;
              }),
              HasSubstr("static activation params (int4 sym per_tensor"));
}

}  // namespace
}  // namespace sinkq::runtime
