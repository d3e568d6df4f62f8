// The packed KV cache in the forward pass (runtime/packed_kv.h) against the simulator's KV
// fake-quant hooks on the fp32 cache (quant/sim.h): the same codes and scales, so attention and
// logits differ by fp32 summation order only; with and without a KV prefix, prefill and decode,
// dynamic and static schemes; the default fp32 cache is untouched; unsupported schemes are errors.
#include "runtime/packed_kv.h"

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "quant/sim.h"
#include "runtime/runtime_models.h"
#include "util/testutil.h"

namespace sinkq::runtime {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

using testmodels::mixtext;
using testmodels::stories;
// Llama GQA 4:2 with head_dim 16 (one AVX-512 vector, two AVX2 ones).
std::shared_ptr<const Model> tiny() {
  static const std::shared_ptr<const Model> m = [] {
    static testing::TempDir dir;
    testing::TinyModelSpec s;
    s.hidden = 64;
    s.intermediate = 96;
    s.heads = 4;
    s.kv_heads = 2;
    s.layers = 2;
    s.init_scale = 0.15f;
    s.link_tokenizer = false;
    testing::write_tiny_model(dir.path(), s);
    return Model::load(dir.path());
  }();
  return m;
}

struct NamedModel {
  const char* name;
  std::shared_ptr<const Model> (*get)();
};
const NamedModel kModels[] = {{"tiny-llama", tiny}, {"stories260K", stories}, {"mixtext-2.5M", mixtext}};

std::vector<int32_t> prompt(int n, int seed = 0) {
  std::vector<int32_t> t{1};
  for (int i = 1; i < n; ++i) t.push_back(int32_t(3 + (i * 37 + seed * 11) % 500));
  return t;
}
constexpr int kPrefill = 40, kDecode = 6;

// max |a - b| / max |b|.
double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return m > 0 ? d / m : d;
}

struct Scheme {
  const char* name;
  int bits;
  quant::KvMode mode;
  quant::KvGranularity gran;
  bool sym;
};
const Scheme kSchemes[] = {
    {"kv8 dyn head", 8, quant::KvMode::Dynamic, quant::KvGranularity::Head, true},
    {"kv4 dyn head", 4, quant::KvMode::Dynamic, quant::KvGranularity::Head, true},
    {"kv4 dyn head asym", 4, quant::KvMode::Dynamic, quant::KvGranularity::Head, false},
    {"kv8 dyn token asym", 8, quant::KvMode::Dynamic, quant::KvGranularity::Token, false},
    {"kv4 dyn token", 4, quant::KvMode::Dynamic, quant::KvGranularity::Token, true},
    {"kv8 static head", 8, quant::KvMode::Static, quant::KvGranularity::Head, true},
    {"kv4 static head asym", 4, quant::KvMode::Static, quant::KvGranularity::Head, false},
    {"kv4 static tensor", 4, quant::KvMode::Static, quant::KvGranularity::Tensor, true},
    {"kv8 static tensor asym", 8, quant::KvMode::Static, quant::KvGranularity::Tensor, false},
};

quant::Recipe sim_config(const Scheme& s) {
  quant::Recipe c;
  c.kv.bits = s.bits;
  c.kv.mode = s.mode;
  c.kv.granularity = s.gran;
  c.kv.symmetric = s.sym;
  return c;
}

// Static K/V params per layer, calibrated on the full-precision model's k / v rows of `toks`
// (K with clip 0.8 so that some values clip, V with 1).
std::vector<quant::StaticQuant> calibrate(const std::shared_ptr<const Model>& m, const Scheme& s,
                                          const std::vector<int32_t>& toks) {
  const ModelConfig& mc = m->config();
  std::map<std::pair<int, int>, quant::Calibrator> cal;
  auto spec_of = [&](Site site) {
    quant::QuantSpec q;
    q.bits = s.bits;
    q.symmetric = s.sym;
    q.granularity = s.gran == quant::KvGranularity::Head ? quant::Granularity::PerHeadShared
                                                          : quant::Granularity::PerTensor;
    if (s.gran == quant::KvGranularity::Head) q.head_dim = mc.head_dim;
    q.clip_ratio = site == Site::K ? 0.8f : 1.0f;
    return q;
  };
  Forward f(m, int64_t(toks.size()));
  for (Site site : {Site::K, Site::V})
    f.hooks().add(site, -1, [&](SiteView& v) {
      cal.try_emplace({v.layer, int(v.site)}, spec_of(v.site)).first->second.observe(v.data, v.tokens, v.features);
    });
  f.step(toks, false);
  std::vector<quant::StaticQuant> out;
  for (const auto& [key, c] : cal) out.push_back({Site(key.second), key.first, spec_of(Site(key.second)), c.params()});
  return out;
}

// Comparing free-running passes would not test the kernels: an fp32 rounding difference in the
// residual stream can move a K or V element across a rounding boundary of the next layer's KV
// quantizer (a whole code step). So the packed forward runs teacher-forced at attn_in: a hook
// replaces its input by the simulator's (recorded before anything else runs there), so both
// compute bit-identical q / k / v rows (same fp32 matmul and RoPE), quantize them to the same
// codes, and only the fp32 rounding of attention over those codes differs: the packed path
// forms s·Σ q·l, the simulator Σ q·fl(s·l), in another summation order (lowbit/kv_kernels.h),
// then the MLP and residual sums carry that rounding on to the logits.
// Tolerance 1e-5 · max|value| for o_in (the attention output, compared before anything changes
// it) and for the logits: attention of head_dim D errs by ~(2Δs + 2γ_n)·max|v̂| with Δs the score
// error, γ_{D+2}·|scale·Σ|q k̂|| worst case (tests/lowbit/kv_test.cc checks that bound exactly);
// with random-sign roundings that is a few ulps (√D·u·|score| ≈ 1e-6 for scores ~ 10), while a
// wrong code, scale or zero point moves o_in by a quantization step (int8: ≥ 1/127 of the head's
// range, int4 1/7) — orders of magnitude above.
constexpr double kTol = 1e-5;

// Recordings are keyed by (layer, position of the first row), so a step() split into chunks of
// max_batch tokens is forced chunk by chunk.
struct Forcing {
  using Key = std::pair<int, int32_t>;
  std::map<Key, std::vector<float>> attn_in, o_in;
  double worst_o = 0.0;
  static Key key(const SiteView& v) { return {v.layer, v.positions[0]}; }
  void record(Forward& sim) {
    sim.hooks().add(Site::AttnIn, -1, [this](SiteView& v) { attn_in[key(v)].assign(v.data, v.data + v.tokens * v.features); });
    sim.hooks().add(Site::OIn, -1, [this](SiteView& v) { o_in[key(v)].assign(v.data, v.data + v.tokens * v.features); });
  }
  void force(Forward& packed) {
    packed.hooks().add(Site::AttnIn, -1, [this](SiteView& v) {
      const std::vector<float>& x = attn_in.at(key(v));
      ASSERT_EQ(x.size(), size_t(v.tokens * v.features));
      std::copy(x.begin(), x.end(), v.data);
    });
    packed.hooks().add(Site::OIn, -1, [this](SiteView& v) {
      const std::vector<float>& x = o_in.at(key(v));
      ASSERT_EQ(x.size(), size_t(v.tokens * v.features));
      worst_o = std::max(worst_o, rel_diff(v.data, x.data(), x.size()));
    });
  }
};

// Prefill kPrefill tokens (all logits), then kDecode single-token steps; returns the worst
// relative logit difference. `prepare` sets up each Forward before the first step.
struct RunResult {
  double logits = 0.0, o_in = 0.0, free_running = 0.0, vs_fp = 0.0;
  double prefill = -1.0;  // the prefill's logits (free-running), max relative difference
};

RunResult run_pair(const std::shared_ptr<const Model>& m, const Scheme& s, std::shared_ptr<const KvPrefix> prefix) {
  const int64_t ctx = kPrefill + kDecode;
  const quant::Recipe cfg = sim_config(s);
  const std::vector<int32_t> toks = prompt(kPrefill + kDecode);
  std::vector<quant::StaticQuant> statics;
  if (s.mode == quant::KvMode::Static) statics = calibrate(m, s, prompt(kPrefill + kDecode, 5));
  quant::SimModel sm;
  sm.model = m;
  sm.cfg = cfg;
  sm.statics = statics;
  Forward sim(m, ctx), packed(m, ctx), free_packed(m, ctx), fp(m, ctx);
  Forcing forcing;
  forcing.record(sim);
  sm.attach(sim);
  attach_packed_kv(packed, KvScheme::from_sim(cfg.kv, statics));
  attach_packed_kv(free_packed, KvScheme::from_sim(cfg.kv, statics));
  forcing.force(packed);
  for (Forward* f : {&sim, &packed, &free_packed, &fp}) f->set_prefix(prefix);
  RunResult r;
  auto compare = [&](std::span<const int32_t> t, bool all) {
    const auto a = sim.step(t, all);
    const std::vector<float> want(a.begin(), a.end());
    const auto b = packed.step(t, all);
    r.logits = std::max(r.logits, rel_diff(b.data(), want.data(), want.size()));
    const auto c = free_packed.step(t, all);
    r.free_running = std::max(r.free_running, rel_diff(c.data(), want.data(), want.size()));
    if (r.prefill < 0) r.prefill = rel_diff(c.data(), want.data(), want.size());
    const auto d = fp.step(t, all);
    r.vs_fp = std::max(r.vs_fp, rel_diff(d.data(), want.data(), want.size()));
  };
  compare(std::span(toks).first(kPrefill), true);
  for (int i = 0; i < kDecode; ++i) compare(std::span(toks).subspan(size_t(kPrefill + i), 1), false);
  r.o_in = forcing.worst_o;
  EXPECT_EQ(packed.n_past(), (prefix ? prefix->size() : 0) + kPrefill + kDecode);
  return r;
}

TEST(PackedKv, MatchesSimulator) {
  for (const NamedModel& nm : kModels) {
    const auto m = nm.get();
    const auto prefix = KvPrefix::compute(m, {1, 13, 29});
    for (const Scheme& s : kSchemes)
      for (bool with_prefix : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} prefix={}", nm.name, s.name, with_prefix));
        const RunResult r = run_pair(m, s, with_prefix ? prefix : nullptr);
        std::printf("  %-13s %-23s prefix %d: forced max|dlogit|/max|logit| %.3g, o_in %.3g; free-running %.3g; "
                    "fp model vs sim %.3g\n",
                    nm.name, s.name, int(with_prefix), r.logits, r.o_in, r.free_running, r.vs_fp);
        EXPECT_LE(r.logits, kTol);
        EXPECT_LE(r.o_in, kTol);
        // Prefill (40 rows >= kFusedMaxT) decodes the stored rows and runs the simulator's fp32
        // attention on them: its logits are the simulator's bit for bit, without forcing.
        EXPECT_EQ(r.prefill, 0.0);
        // The quantizer did run: the simulator is far from the full-precision model.
        EXPECT_GT(r.vs_fp, 100 * kTol);
      }
  }
}

// The body is never held in fp32 by a packed Forward; the prefix stays fp32 and survives reset();
// removing the store gives back an fp32 cache whose logits are bit-identical to a fresh Forward.
TEST(PackedKv, MemoryResetAndDefaultPath) {
  const auto m = mixtext();
  const ModelConfig& c = m->config();
  const auto toks = prompt(24);
  Forward plain(m, 64);
  const auto l0 = plain.step(toks, true);
  const std::vector<float> want(l0.begin(), l0.end());
  EXPECT_EQ(plain.kv_bytes(), size_t(2) * c.num_layers * 64 * c.kv_dim() * 4);

  Forward f(m, 64);
  KvScheme s;
  s.bits = 4;
  attach_packed_kv(f, s);
  EXPECT_EQ(f.cache().bytes(), 0u);
  EXPECT_EQ(f.cache().capacity(), 0);
  EXPECT_EQ(f.max_ctx(), 64);
  EXPECT_EQ(f.kv_bytes(), size_t(lowbit::kv_cache_bytes(lowbit::PackedFormat::KV4_PerHead, c.num_layers,
                                                          c.num_kv_heads, c.head_dim, 64)));
  EXPECT_EQ(f.kv_store()->describe(), "KV4 dynamic per-head sym (kv4_per_head)");
  const auto prefix = KvPrefix::compute(m, {1, 13});
  f.set_prefix(prefix);
  EXPECT_EQ(f.max_ctx(), 66);
  const auto a = f.step(toks, true);
  const std::vector<float> first(a.begin(), a.end());
  EXPECT_EQ(f.n_past(), 26);
  EXPECT_THAT(error_of([&] { f.set_kv_store(nullptr); }), HasSubstr("only be set between sequences"));
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("only be set between sequences"));
  f.reset();
  EXPECT_EQ(f.n_past(), 2);  // the prefix stays
  const auto b = f.step(toks, true);
  EXPECT_EQ(std::memcmp(b.data(), first.data(), first.size() * 4), 0);  // deterministic, prefix intact
  f.reset();
  f.set_prefix(nullptr);
  f.set_kv_store(nullptr);
  EXPECT_EQ(f.cache().capacity(), 64);
  EXPECT_EQ(f.kv_store(), nullptr);
  const auto l1 = f.step(toks, true);
  EXPECT_EQ(std::memcmp(l1.data(), want.data(), want.size() * 4), 0);
}

// A prompt longer than max_batch runs in chunks whose rows are stored chunk by chunk (each
// later chunk attends to the packed rows of the earlier ones); then decode steps.
TEST(PackedKv, ChunkedPrefillMatchesSimulator) {
  const auto m = stories();
  const Scheme s = kSchemes[2];  // kv4 dynamic per-head asym
  const quant::Recipe cfg = sim_config(s);
  const auto toks = prompt(100);
  Forward sim(m, 128, /*max_batch=*/16), packed(m, 128, /*max_batch=*/16);
  Forcing forcing;
  forcing.record(sim);
  quant::attach(sim, cfg);
  attach_packed_kv(packed, KvScheme::from_sim(cfg.kv));
  forcing.force(packed);
  for (int64_t i = 64; i <= 68; ++i) {
    const auto t = i == 64 ? std::span(toks).first(64) : std::span(toks).subspan(size_t(i), 1);
    const auto a = sim.step(t, false);
    const std::vector<float> want(a.begin(), a.end());
    const auto b = packed.step(t, false);
    EXPECT_LE(rel_diff(b.data(), want.data(), want.size()), kTol);
  }
  EXPECT_EQ(packed.n_past(), 68);
  EXPECT_LE(forcing.worst_o, kTol);
}

// A rotated model (quant/rotate.h): the online R3 rotation runs at sites q / k, i.e. on the fp32
// rows before the store quantizes them, exactly where the simulator's KV hook sees them; the
// prefix is computed by the rotated fp model with its online rotations (kv_prefix.h).
TEST(PackedKv, RotatedModelMatchesSimulator) {
  for (const NamedModel& nm : {kModels[0], kModels[2]}) {
    SCOPED_TRACE(nm.name);
    quant::Recipe cfg = sim_config(kSchemes[1]);  // kv4 dynamic per-head sym
    cfg.rotate.on = true;
    cfg.rotate.seed = 3;
    const quant::SimModel sm = quant::build_sim(nm.get(), cfg, {});
    const auto prefix = KvPrefix::compute(sm.model, {1, 13, 29},
                                          [&](Forward& f) { quant::attach_online_rotation(f, cfg.rotate); });
    const auto toks = prompt(30);
    Forward sim(sm.model, 32), packed(sm.model, 32), fp(sm.model, 32);
    Forcing forcing;
    forcing.record(sim);
    sm.attach(sim);
    quant::attach_online_rotation(packed, cfg.rotate);
    quant::attach_online_rotation(fp, cfg.rotate);
    attach_packed_kv(packed, KvScheme::from_sim(cfg.kv));
    forcing.force(packed);
    for (Forward* f : {&sim, &packed, &fp}) f->set_prefix(prefix);
    for (int i = 0; i < 2; ++i) {
      const auto t = i == 0 ? std::span(toks).first(28) : std::span(toks).subspan(28, 1);
      const auto a = sim.step(t, true);
      const std::vector<float> want(a.begin(), a.end());
      const auto b = packed.step(t, true);
      EXPECT_LE(rel_diff(b.data(), want.data(), want.size()), kTol);
      const auto c = fp.step(t, true);
      EXPECT_GT(rel_diff(c.data(), want.data(), want.size()), 100 * kTol);  // KV4 did something
    }
    EXPECT_LE(forcing.worst_o, kTol);
  }
}

TEST(PackedKv, UnsupportedSchemesAreErrors) {
  const auto m = mixtext();
  Forward f(m, 16);
  KvScheme s;
  s.bits = 3;
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("int3 is not a packed KV format"));
  s.bits = 16;
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("not quantized"));
  s.bits = 8;
  s.granularity = quant::KvGranularity::Tensor;
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("dynamic per-tensor"));
  s.mode = quant::KvMode::Static;
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("calibrated params for site k of layer 0"));
  s.granularity = quant::KvGranularity::Token;
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("static KV scales are per head or per tensor"));
  // Static params of another scheme (int4 head params for an int8 head scheme).
  const Scheme s4{"kv4 static head", 4, quant::KvMode::Static, quant::KvGranularity::Head, true};
  s.granularity = quant::KvGranularity::Head;
  s.statics = calibrate(m, s4, prompt(20));
  EXPECT_THAT(error_of([&] { attach_packed_kv(f, s); }), HasSubstr("the scheme needs kv8_static_head"));
  EXPECT_EQ(f.kv_store(), nullptr);  // nothing changed
  EXPECT_EQ(f.cache().capacity(), 16);
}

}  // namespace
}  // namespace sinkq::runtime
