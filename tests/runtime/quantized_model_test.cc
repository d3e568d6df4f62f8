// SimModel -> QuantizedModel (src/runtime/quantized_model.h): fake-quantized weights re-pack to the
// simulator's codes and scales exactly; the packed model equals the simulator teacher-forced
// (rotated or not, dynamic or calibrated static activations, fixed or grid-searched weight clip);
// what the kernels cannot run is an error.
#include "runtime/quantized_model.h"

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "quant/rotate.h"
#include "quant/sim.h"
#include "runtime/forcing.h"
#include "runtime/runtime_models.h"
#include "train/ste.h"
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

using testmodels::Forcing;
using testmodels::stories;
using testmodels::mixtext;
// Qwen2 with biases, hidden 128 / intermediate 192 (runtime_models.h): whole g128 groups, a ragged tail.
inline std::shared_ptr<const Model> tiny() { return testmodels::tiny_qwen2(); }

constexpr int kTokens = 48;

// ---- exact re-packing of fake-quantized weights -------------------------------------------

struct Fmt {
  lowbit::PackedFormat f;
  quant::WeightSim w;
};
std::vector<Fmt> formats() {
  auto ws = [](int bits, int group, bool sym) {
    quant::WeightSim w;
    w.bits = bits;
    w.group = group;
    w.symmetric = sym;
    return w;
  };
  using lowbit::PackedFormat;
  return {{PackedFormat::W8_PerRow, ws(8, 0, true)},    {PackedFormat::W4_PerRow, ws(4, 0, true)},
          {PackedFormat::W4_G32, ws(4, 32, true)},      {PackedFormat::W4_G128, ws(4, 128, true)},
          {PackedFormat::W4_G32_Asym, ws(4, 32, false)}, {PackedFormat::W4_G128_Asym, ws(4, 128, false)}};
}

// The property build_quantized rests on: the fake-quantized weights ŵ = fake_quant(w, clip r)
// determine the simulator's codes and scales. Plain re-quantization with clip 1 recovers them only
// at clip 1 (measured and printed: with clip < 1 a negative outlier clamped to -2^(N-1) makes
// max|ŵ|/qmax a different scale, for most rows); pack_exact recovers them in every case: the same
// codes, zero points and scales as quantizing w with clip r, dequantizing to ŵ bit for bit.
TEST(QuantizedModel, FakeQuantizedWeightsRepackExactly) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const int64_t rows = 24, cols = 256;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& x : w) x = nd(rng);
  for (int64_t r = 0; r < rows; r += 5) w[size_t(r * cols + (r * 13) % cols)] *= 40.0f;  // outliers
  for (const Fmt& f : formats()) {
    for (float clip : {1.0f, 0.9f, 0.725f, 0.5f}) {
      SCOPED_TRACE(fmt::format("{} clip {}", lowbit::traits(f.f).name, clip));
      quant::WeightSim ws = f.w;
      ws.clip = clip;
      std::vector<float> fq = w;
      quant::fake_quant_weight(ws, fq.data(), rows, cols);
      const lowbit::PackedTensor orig = lowbit::quantize(f.f, w.data(), rows, cols, clip);
      const lowbit::PackedTensor again = lowbit::quantize(f.f, fq.data(), rows, cols, 1.0f);
      size_t code_diff = 0, scale_diff = 0;
      for (size_t i = 0; i < orig.codes.size(); ++i) code_diff += orig.codes[i] != again.codes[i];
      for (size_t i = 0; i < orig.scales.size(); ++i) scale_diff += orig.scales[i] != again.scales[i];
      std::printf("  %-13s clip %.3f: plain re-quantization differs in %zu code bytes, %zu scales\n",
                  std::string(lowbit::traits(f.f).name).c_str(), clip, code_diff, scale_diff);
      if (clip == 1.0f && f.w.symmetric) {
        EXPECT_EQ(code_diff, 0u);
        EXPECT_EQ(scale_diff, 0u);
      }
      const lowbit::PackedTensor exact = pack_exact(f.f, fq.data(), rows, cols, "w");
      EXPECT_EQ(exact.zeros, orig.zeros);
      // Same codes and scale in every group, except where the values cannot tell: a group whose
      // codes are all 0 or -2^(N-1) (a clamped negative outlier, the rest rounded to 0) is
      // reproduced as well by (-(2^(N-1)-1), s·2^(N-1)/qmax), the first candidate; same values.
      const std::vector<int8_t> oc = lowbit::unpack_codes(orig), ec = lowbit::unpack_codes(exact);
      const int64_t ng = orig.groups(), gc = cols / ng, qlo = -(1 << (f.w.bits - 1));
      int ambiguous = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < ng; ++g) {
          bool same = orig.scales[size_t(r * ng + g)] == exact.scales[size_t(r * ng + g)], degenerate = true;
          for (int64_t j = r * cols + g * gc; j < r * cols + (g + 1) * gc; ++j) {
            same = same && oc[size_t(j)] == ec[size_t(j)];
            degenerate = degenerate && (oc[size_t(j)] == 0 || oc[size_t(j)] == qlo);
          }
          if (!same) ++ambiguous;
          EXPECT_TRUE(same || (f.w.symmetric && degenerate)) << "row " << r << " group " << g;
        }
      if (ambiguous) std::printf("    pack_exact: %d groups of codes {0, %lld} re-expressed with -%lld\n", ambiguous,
                                 (long long)qlo, (long long)(-qlo - 1));
      std::vector<float> back(fq.size());
      lowbit::dequantize(exact, back.data());
      EXPECT_TRUE(bit_equal(back, fq));
    }
  }
  // Per-(row, group) clip ratios (the grid search's result) are just as exact.
  for (const Fmt& f : formats()) {
    quant::ClipRatios cr;
    cr.rows = rows;
    cr.groups = quant::weight_groups(f.w, cols);
    for (int64_t i = 0; i < rows * cr.groups; ++i) cr.r.push_back(1.0f - 0.025f * float((i * 7) % 21));
    std::vector<float> fq = w;
    quant::fake_quant_weight(f.w, fq.data(), rows, cols, &cr);
    const lowbit::PackedTensor exact = pack_exact(f.f, fq.data(), rows, cols, "w");
    std::vector<float> back(fq.size());
    lowbit::dequantize(exact, back.data());
    EXPECT_TRUE(bit_equal(back, fq)) << lowbit::traits(f.f).name;
  }
  // Trained step sizes (block-wise fine-tuning, quant/finetune.h): the grid of each (row, group) is
  // s' = s·(1 + 0.15·k), k = 0..4, so in most groups no element reaches an end of the range (the
  // largest level is below qmax); the fake-quantized values (train::ste_forward, what the
  // fine-tuner writes) still pack to the same values bit for bit.
  for (const Fmt& f : formats()) {
    const quant::WeightGrid g = quant::weight_grid(f.w, w.data(), rows, cols);
    std::vector<float> s = g.scale;
    for (size_t i = 0; i < s.size(); ++i) s[i] *= 1.0f + 0.15f * float(i % 5);
    const train::SteLayout lay{.bits = f.w.bits, .symmetric = f.w.symmetric, .rows = rows, .cols = cols,
                               .group = g.groups == 1 ? cols : f.w.group};
    std::vector<float> fq(w.size());
    train::ste_forward(lay, w.data(), s.data(), g.zero.empty() ? nullptr : g.zero.data(), fq.data());
    const lowbit::PackedTensor exact = pack_exact(f.f, fq.data(), rows, cols, "w");
    std::vector<float> back(fq.size());
    lowbit::dequantize(exact, back.data());
    EXPECT_TRUE(bit_equal(back, fq)) << lowbit::traits(f.f).name << " trained step sizes";
  }
  // Values that are not on the grid are refused, not approximated.
  EXPECT_THAT(error_of([&] { pack_exact(lowbit::PackedFormat::W4_G32, w.data(), rows, cols, "m.q_proj.weight"); }),
              HasSubstr("m.q_proj.weight: row 0 group 0 (32 columns) is not on a w4_g32 quantization grid"));
}

// planar() is the exact inverse of the kernels' repack (what an artifact stores).
TEST(QuantizedModel, PlanarInvertsRepack) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const int64_t rows = 37, cols = 172;  // a partial 16-row block, ragged g128 tail, odd nibble count
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& x : w) x = ud(rng);
  for (const auto& [bits, group, sym] : {std::tuple{8, 0, true}, std::tuple{4, 0, true}, std::tuple{4, 128, true}, std::tuple{4, 32, true}}) {
    WeightScheme ws;
    ws.bits = bits;
    ws.group = group;
    ws.symmetric = sym;
    const PackedLinear pl("w", w.data(), rows, cols, ws, lowbit::PackedFormat::A8_PerToken);
    for (size_t b = 0; b < pl.blocks().size(); ++b) {
      const lowbit::PackedTensor p = pl.planar(b);
      std::vector<float> sub;
      const auto& blk = pl.blocks()[b];
      for (int64_t r = 0; r < rows; ++r)
        sub.insert(sub.end(), w.begin() + r * cols + blk.col0, w.begin() + r * cols + blk.col0 + blk.cols);
      const lowbit::PackedTensor want = lowbit::quantize(blk.w.format, sub.data(), rows, blk.cols);
      EXPECT_EQ(p.codes, want.codes) << bits << " " << group << " block " << b;
      EXPECT_EQ(p.scales, want.scales);
      EXPECT_EQ(p.zeros, want.zeros);
    }
  }
  // Asymmetric groups (zero points) too.
  std::vector<float> w2(w.begin(), w.begin() + 37 * 128);
  WeightScheme ws;
  ws.bits = 4;
  ws.group = 32;
  ws.symmetric = false;
  const PackedLinear pl("w", w2.data(), 37, 128, ws, lowbit::PackedFormat::A8_PerToken);
  const lowbit::PackedTensor want = lowbit::quantize(lowbit::PackedFormat::W4_G32_Asym, w2.data(), 37, 128);
  EXPECT_EQ(pl.planar(0).codes, want.codes);
  EXPECT_EQ(pl.planar(0).zeros, want.zeros);
  EXPECT_EQ(pl.planar(0).scales, want.scales);
}

// A NaN reaching a packed linear's input is an error naming that linear (was the activation
// quantizer's "non-finite value at token t, feature j", which names no tensor).
TEST(QuantizedModel, NonFiniteInputNamesTheLinear) {
  const int64_t rows = 16, cols = 64;
  std::vector<float> w(size_t(rows * cols), 0.25f), x(size_t(2 * cols), 1.0f), y(size_t(2 * rows));
  WeightScheme ws;
  ws.bits = 8;
  const PackedLinear pl("model.layers.3.mlp.down_proj.weight", w.data(), rows, cols, ws,
                        lowbit::PackedFormat::A8_PerToken);
  pl.apply(x.data(), 2, nullptr, y.data());  // finite: runs
  x[size_t(cols + 5)] = std::numeric_limits<float>::quiet_NaN();
  const std::string msg = error_of([&] { pl.apply(x.data(), 2, nullptr, y.data()); });
  EXPECT_NE(msg.find("model.layers.3.mlp.down_proj.weight: its input activations"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 1, feature 5"), std::string::npos) << msg;
}

// ---- the packed model against the simulator -------------------------------------------------

// Teacher forcing as in runtime_test.cc (read its comment for why free-running is no test of the
// kernels): every linear input and every new K / V row of the packed model is compared with, then
// replaced by, the simulator's at that site, recorded after the online rotation and before
// quantization (measured without K / V forcing: one static KV8 code flip moves o_in by 6.5e-4).
// Same tolerance and reasoning: 1e-5 · max |value| (fp32 summation order of the linears and
// attention; one code step of a wrong scale / clip / group is > 1e-3).
constexpr double kTol = 1e-5;

// The linear inputs, and k / v (after R3, before KV quantization): a KV row that differs by fp32
// rounding can cross a static KV quantizer's rounding boundary as an activation can.
constexpr Site kForced[] = {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn, Site::K, Site::V};

// SimModel::attach with the recording hooks slotted in between the online rotations and the
// quantization hooks (the same hooks, in the same order: checked free-running, bit for bit).
void attach_recording(const quant::SimModel& sim, Forward& f, Forcing* forcing) {
  quant::attach_online_rotation(f, sim.cfg.rotate);
  if (forcing) forcing->record(f);
  quant::Recipe dyn = sim.cfg;
  dyn.rotate.on = false;
  if (dyn.kv.mode == quant::KvMode::Static) dyn.kv.bits = quant::kBitsOff;
  if (dyn.a.mode == quant::ActMode::Static || dyn.act_cross_static()) dyn.a.bits = quant::kBitsOff;
  dyn.w.clip_grid = false;
  if (dyn.kv.vector()) dyn.kv = quant::KvSim{};  // the codec hooks below
  quant::attach(f, dyn);
  for (const quant::StaticQuant& q : sim.statics)
    f.hooks().add(q.site, q.layer, [spec = q.spec, p = q.params](SiteView& v) {
      quant::fake_quant(spec, p, v.data, v.tokens, v.features);
    });
  for (size_t k = 0; k < sim.cross.size(); ++k)  // after the recording: it forces the unfolded input x
    f.hooks().add(kLinearInputSites[k % 4], int(k / 4), [fold = &sim.cross[k]](SiteView& v) {
      quant::cross_fold_apply(*fold, v.data, v.tokens, v.features);
    });
  for (size_t l = 0; l < sim.kvq.size(); ++l) {
    f.hooks().add(sim.cfg.kv.key_pre_rope ? Site::KPreRope : Site::K, int(l),
                  [c = &sim.kvq[l].k](SiteView& v) { c->apply(v.data, v.tokens, v.features); });
    f.hooks().add(Site::V, int(l), [c = &sim.kvq[l].v](SiteView& v) { c->apply(v.data, v.tokens, v.features); });
  }
  if (sim.prefix) f.set_prefix(sim.prefix);
}

struct Case {
  const char* name;
  int wbits, group, abits;
  bool a_static, clip_grid;
  int kvbits = quant::kBitsOff;
  bool kv_static = false;
};
const Case kCases[] = {
    {"w8a8 dynamic", 8, 0, 8, false, false},
    {"w4a8 per-channel", 4, 0, 8, false, false},
    {"w4a8 g128 clip-grid", 4, 128, 8, false, true},
    {"w4a4 static clip-grid", 4, 0, 4, true, true},
    {"w4a8 kv4 dynamic", 4, 0, 8, false, false, 4, false},
    {"w8a8 static kv8 static", 8, 0, 8, true, false, 8, true},
};

// Teacher-forced (every linear input of the packed run replaced by the simulator's): packed logits
// and linear inputs = the simulator's within kTol. Prints the free-running difference too.
void expect_packed_matches_sim(const quant::SimModel& sim, const QuantizedModel& qm, const std::vector<int32_t>& toks,
                               const std::string& label) {
  Forward simf(sim.model, kTokens);
  Forcing forcing;
  forcing.sites.assign(std::begin(kForced), std::end(kForced));
  // The int8 head's input too: the final norm's output can cross its rounding boundary as well.
  if (sim.cfg.head.on()) forcing.sites.push_back(Site::HeadIn);
  // Keys coded before RoPE (KVQuant): forced where they are coded, at k_pre_rope (k after RoPE is
  // already decoded in the simulator, still raw in the packed run, which codes it in the store).
  if (sim.cfg.kv.vector() && sim.cfg.kv.key_pre_rope) std::replace(forcing.sites.begin(), forcing.sites.end(), Site::K, Site::KPreRope);
  attach_recording(sim, simf, &forcing);
  Forward packed(qm.model, kTokens), free(qm.model, kTokens);
  qm.attach(packed);
  qm.attach(free);
  forcing.force(packed);
  const auto want = logits_of(simf, toks);
  const double d = rel_diff(logits_of(packed, toks), want);
  std::printf("  %s forced: max|dlogit|/max|logit| %.3g, linear inputs %.3g (%s); free-running %.3g\n", label.c_str(), d,
              forcing.worst, forcing.worst_at.c_str(), rel_diff(logits_of(free, toks), want));
  EXPECT_LE(forcing.worst, kTol) << forcing.worst_at;
  EXPECT_LE(d, kTol);
}

TEST(QuantizedModel, MatchesSimulator) {
  const auto toks = prompt(kTokens);
  const std::vector<std::vector<int32_t>> calib = {prompt(32, 1), prompt(32, 2)};
  struct NamedModel {
    const char* name;
    std::shared_ptr<const Model> (*get)();
  };
  for (const auto& [mname, get] : {NamedModel{"stories260K", stories}, NamedModel{"tiny-qwen2", tiny}}) {
    for (const Case& c : kCases) {
      for (bool rotate : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} rotate {}", mname, c.name, rotate));
        quant::Recipe sc;
        sc.w.bits = c.wbits;
        sc.w.group = c.group;
        sc.w.clip_grid = c.clip_grid;
        sc.a.bits = c.abits;
        sc.a.mode = c.a_static ? quant::ActMode::Static : quant::ActMode::Dynamic;
        sc.kv.bits = c.kvbits;
        sc.kv.mode = c.kv_static ? quant::KvMode::Static : quant::KvMode::Dynamic;
        sc.kv.granularity = c.kv_static ? quant::KvGranularity::Tensor : quant::KvGranularity::Head;
        sc.rotate.on = rotate;
        sc.rotate.seed = 5;
        sc.calib.weight_rows = 32;
        const quant::SimModel sim = quant::build_sim(get(), sc, calib);
        const QuantizedModel qm = build_quantized(sim);
        EXPECT_EQ(qm.rt.a.scales.size(), c.a_static ? size_t(4 * get()->config().num_layers) : 0u);

        Forward ref(sim.model, kTokens), mine(sim.model, kTokens);
        sim.attach(ref);
        attach_recording(sim, mine, nullptr);
        ASSERT_TRUE(bit_equal(logits_of(mine, toks), logits_of(ref, toks))) << "attach_recording != SimModel::attach";

        expect_packed_matches_sim(sim, qm, toks, fmt::format("{:<11} {:<22} rot {}", mname, c.name, int(rotate)));
      }
    }
  }
}

// CrossQuant with static column maxima (quant/crossquant.h CrossFold): the simulator folds b into
// the weights and feeds them ẑ; the packed linears quantize x / b at the token factor's scale.
// Same codes, so packed = simulated within kTol teacher-forced (the forced input is the unfolded x
// both sides quantize), with rotation, a per-tensor static KV, a clip-grid g128 and α = 1 (where
// the fold is the identity and the result is dynamic per-token's bit for bit).
TEST(QuantizedModel, CrossQuantMatchesSimulator) {
  const auto toks = prompt(kTokens);
  const std::vector<std::vector<int32_t>> calib = {prompt(32, 1), prompt(32, 2)};
  struct NamedModel {
    const char* name;
    std::shared_ptr<const Model> (*get)();
  };
  struct CrossCase {
    const char* name;
    const char* preset;
    float alpha;
    int group = 0;
    bool clip_grid = false;
  };
  const CrossCase cases[] = {{"w8a8", "w8a8", 0.15f},
                             {"w4a4 kv4-static", "w4a4kv4", 0.15f},
                             {"w4a8 g128 clip-grid", "w4a8", 0.45f, 128, true},
                             {"w4a8 alpha 1", "w4a8", 1.0f}};
  for (const auto& [mname, get] : {NamedModel{"stories260K", stories}, NamedModel{"tiny-qwen2", tiny}}) {
    for (const CrossCase& c : cases) {
      for (bool rotate : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} rotate {}", mname, c.name, rotate));
        quant::Recipe sc = quant::Recipe::from_preset(c.preset);
        sc.a.mode = quant::ActMode::Cross;
        sc.a.cross_columns = quant::ColumnMode::Static;
        sc.a.alpha = c.alpha;
        sc.w.group = c.group;
        sc.w.clip_grid = c.clip_grid;
        if (sc.kv.on()) {
          sc.kv.mode = quant::KvMode::Static;
          sc.kv.granularity = quant::KvGranularity::Tensor;
        }
        sc.rotate.on = rotate;
        sc.rotate.seed = 5;
        sc.calib.weight_rows = 32;
        const quant::SimModel sim = quant::build_sim(get(), sc, calib);
        ASSERT_EQ(sim.cross.size(), size_t(4 * get()->config().num_layers));
        const QuantizedModel qm = build_quantized(sim);
        ASSERT_EQ(qm.rt.a.cross.size(), sim.cross.size());

        Forward ref(sim.model, kTokens), mine(sim.model, kTokens);
        sim.attach(ref);
        attach_recording(sim, mine, nullptr);
        ASSERT_TRUE(bit_equal(logits_of(mine, toks), logits_of(ref, toks))) << "attach_recording != SimModel::attach";
        expect_packed_matches_sim(sim, qm, toks, fmt::format("{:<11} cross {:<20} rot {}", mname, c.name, int(rotate)));
        if (c.alpha == 1.0f) {  // b = 1: the dynamic per-token model, bit for bit (same weights, same codes)
          quant::Recipe dyn = sc;
          dyn.a.mode = quant::ActMode::Dynamic;
          const quant::SimModel dsim = quant::build_sim(get(), dyn, calib);
          const QuantizedModel dqm = build_quantized(dsim);
          Forward a(qm.model, kTokens), b(dqm.model, kTokens);
          qm.attach(a);
          dqm.attach(b);
          EXPECT_TRUE(bit_equal(logits_of(a, toks), logits_of(b, toks)));
        }
      }
    }
  }
}

// Block-wise fine-tuning (quant/finetune.h) leaves trained step sizes, where a group's largest
// level need not reach the end of its range: the fine-tuned W4A4KV4 model (static activations and
// KV, rotation) still packs exactly and the packed model = the simulator teacher-forced within kTol.
TEST(QuantizedModel, FineTunedModelMatchesSimulator) {
  const auto toks = prompt(kTokens);
  const std::vector<std::vector<int32_t>> calib = {prompt(32, 1), prompt(32, 2), prompt(32, 3), prompt(32, 4)};
  quant::Recipe sc = quant::Recipe::from_preset("prefixquant-w4a4kv4");
  sc.prefix = quant::PrefixSim{};
  sc.calib.grid = {1.0f, 0.9f, 0.8f};
  sc.calib.weight_rows = 32;
  sc.finetune.epochs = 2;
  sc.finetune.lr_weights = 1e-4;
  sc.finetune.lr_scales = 1e-3;
  sc.finetune.batch = 2;
  const quant::SimModel sim = quant::build_sim(stories(), sc, calib);
  const QuantizedModel qm = build_quantized(sim);
  expect_packed_matches_sim(sim, qm, toks, "stories260K W4A4KV4 fine-tuned");
}

// KVQuant's codebook KV on the packed runtime (CodebookKvStore) with packed W4A8 linears and
// rotation: the packed model = the simulator teacher-forced within kTol.
TEST(QuantizedModel, CodebookKvMatchesSimulator) {
  const auto toks = prompt(kTokens);
  const std::vector<std::vector<int32_t>> calib = {prompt(32, 1), prompt(32, 2)};
  quant::Recipe sc = quant::Recipe::from_preset("w4a8");
  sc.kv.bits = 3;
  sc.kv.codebook = quant::KvCodebook::Fisher;
  sc.kv.outliers = 0.01;
  sc.rotate.on = true;
  const quant::SimModel sim = quant::build_sim(stories(), sc, calib);
  const QuantizedModel qm = build_quantized(sim);
  ASSERT_TRUE(qm.kv_codebook.has_value());
  EXPECT_FALSE(qm.kv.has_value());
  expect_packed_matches_sim(sim, qm, toks, "stories260K W4A8 nuq3-1% rotated");
}

// Mixed precision (recipe.h weight rules) on both models: every matrix packed in its own rule's
// format, and the packed model = the simulator teacher-forced within kTol.
TEST(QuantizedModel, WeightRulesMatchSimulator) {
  const auto toks = prompt(kTokens);
  const std::vector<std::vector<int32_t>> calib = {prompt(32, 1)};
  for (auto get : {stories, tiny}) {
    const auto base = get();
    const int L = base->config().num_layers;
    quant::Recipe sc = quant::Recipe::from_preset("w4a8kv4");
    sc.w.clip_grid = true;
    sc.calib.weight_rows = 32;
    quant::WeightRule down8, first8, qk;
    down8.layers = {-1};
    down8.roles = 1u << int(LinearRole::Down);
    down8.bits = 8;
    first8.layers = {0};
    first8.bits = 8;
    first8.group = 0;
    first8.symmetric = true;
    first8.clip = 0.95f;  // a fixed ratio instead of the grid for the whole first layer
    qk.roles = (1u << int(LinearRole::Q)) | (1u << int(LinearRole::K));
    qk.group = 32;
    qk.symmetric = false;
    sc.weight_rules = {down8, qk, first8};  // later rules win: layer 0 is W8 per-channel throughout
    const quant::SimModel sim = quant::build_sim(base, sc, calib);
    const QuantizedModel qm = build_quantized(sim);
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < kNumLinearRoles; ++i) {
        const auto* pl = dynamic_cast<const PackedLinear*>(qm.model->weights().layers[size_t(l)].impl_of(i).get());
        ASSERT_NE(pl, nullptr);
        const quant::WeightSim ws = sc.weights(l, i, L);
        const lowbit::PackedFormat want = ws.bits == 8                                    ? lowbit::PackedFormat::W8_PerRow
                                          : i == int(LinearRole::Q) || i == int(LinearRole::K) ? lowbit::PackedFormat::W4_G32_Asym
                                                                                           : lowbit::PackedFormat::W4_PerRow;
        EXPECT_EQ(pl->blocks().at(0).w.format, want) << "layer " << l << " " << kLinearRoles[i].name;
      }
    expect_packed_matches_sim(sim, qm, toks, fmt::format("{} weight rules", base->config().num_layers));
  }
}

// The real sink model (SmolLM2 from its GGUF file, 30 layers, GQA 3:1, a token at 2,000x the
// median at layer 11): packed W8A8 = the simulator within kTol teacher-forced, at every linear input
// and at the logits. Free-running the two drift apart after the first flipped code (printed).
TEST(QuantizedModel, MatchesSimulatorOnSmolLM2) {
  const auto smol = Model::load(testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf");
  const auto toks = prompt(kTokens);
  for (const char* preset : {"w8a8", "w8a8-head8"}) {  // and its tied 49152 x 576 table in int8
    SCOPED_TRACE(preset);
    const quant::SimModel sim = quant::build_sim(smol, quant::Recipe::from_preset(preset), {});
    const QuantizedModel qm = build_quantized(sim);
    expect_packed_matches_sim(sim, qm, toks, std::string("smollm2 ") + preset);
  }
}

// The packed head (quant/recipe.h HeadSim): int8 per row, int4 g32, and int4 g128 over mixtext's
// 192 columns (a ragged 64-column tail block, as a linear's). The packed tables hold exactly the
// simulator's values (an embedding row gathered from the codes = the fake-quantized row, bit for
// bit), stay tied where the model is, read the bytes their format says (codes, a scale per row and
// group, rows padded to 16), and the packed model = the simulator teacher-forced within kTol (the
// head's input forced too).
TEST(QuantizedModel, PackedHeadMatchesSimulator) {
  const auto toks = prompt(kTokens);
  struct Case {
    const char* model;
    std::shared_ptr<const Model> (*get)();
    int bits, group;
  };
  const Case cases[] = {{"stories260K", stories, 8, 0},  {"tiny-qwen2", tiny, 8, 0}, {"stories260K", stories, 4, 32},
                        {"tiny-qwen2", tiny, 4, 32},      {"mixtext", mixtext, 4, 128}};
  for (const Case& c : cases) {
    for (bool rotate : {false, true}) {
      if (rotate && std::string(c.model) == "mixtext") continue;  // 192 columns: rotatable, but one run is enough
      SCOPED_TRACE(fmt::format("{} head W{} g{} rotate {}", c.model, c.bits, c.group, rotate));
      quant::Recipe sc = quant::Recipe::from_preset("w4a8-head8");
      sc.head.bits = c.bits;
      sc.head.group = c.group;
      sc.rotate.on = rotate;
      sc.rotate.seed = 5;
      const quant::SimModel sim = quant::build_sim(c.get(), sc, {});
      const QuantizedModel qm = build_quantized(sim);
      const ModelWeights& sw = sim.model->weights();
      const ModelWeights& qw = qm.model->weights();
      ASSERT_TRUE(qw.lm_head_impl && qw.embed_impl);
      EXPECT_EQ(qw.tied(), sw.tied());
      EXPECT_EQ(qw.embed.data, nullptr);  // no fp table kept
      const int64_t V = sw.embed.rows, H = sw.embed.cols;
      std::vector<int32_t> ids(static_cast<size_t>(V));
      for (int64_t i = 0; i < V; ++i) ids[size_t(i)] = int32_t(i);
      std::vector<float> rows(size_t(V * H));
      qw.embed_impl->gather_rows(ids, rows.data());
      ASSERT_EQ(sw.embed.dtype, DType::F32);
      EXPECT_EQ(std::memcmp(rows.data(), sw.embed.data, rows.size() * sizeof(float)), 0);
      const int32_t bad = int32_t(V);
      EXPECT_THAT(error_of([&] { qw.embed_impl->gather_rows(std::span(&bad, 1), rows.data()); }),
                  ::testing::HasSubstr("outside the table's"));
      // Code bytes per row (8 bits: H; 4 bits: H / 2) and 4 bytes per scale: one per row, or one
      // per whole group plus one for a ragged tail; rows padded to 16.
      const int64_t G = c.group, scales = G == 0 || G >= H ? 1 : H / G + (H % G ? 1 : 0);
      const int64_t per_row = (c.bits == 8 ? H : H / 2) + 4 * scales;
      EXPECT_EQ(int64_t(qw.lm_head_impl->bytes()), (V + 15) / 16 * 16 * per_row);
      const auto* head = dynamic_cast<const PackedLinear*>(qw.lm_head_impl.get());
      ASSERT_NE(head, nullptr);
      EXPECT_EQ(head->blocks().size(), G > 0 && G < H && H % G ? 2u : 1u);
      EXPECT_LT(qm.model->decode_weight_bytes(), sim.model->decode_weight_bytes());
      expect_packed_matches_sim(sim, qm, toks,
                                fmt::format("{:<11} w4a8 head W{} g{} rot {}", c.model, c.bits, c.group, int(rotate)));
    }
  }
}

// The PrefixQuant presets on the real sink model: rotation, the [BOS] KV as a full-precision
// prefix, grid-searched weight clips, static per-tensor activations and static KV scales — every
// calibrated piece the artifact stores — packed = simulated (teacher-forced) within kTol. The
// calibration is tiny (one 24-token sample, 24 weight rows, a grid of three ratios): what is
// compared is the packed kernels against the simulator on the same scales, not their quality.
TEST(QuantizedModel, PrefixQuantPresetsMatchSimulatorOnSmolLM2) {
  const auto smol = Model::load(testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf");
  const auto toks = prompt(kTokens);
  const std::vector<std::vector<int32_t>> calib = {prompt(24, 3)};
  for (const char* preset : {"prefixquant-w4a4kv4", "prefixquant-w8a8kv8"}) {
    SCOPED_TRACE(preset);
    quant::Recipe sc = quant::Recipe::from_preset(preset);
    sc.calib.weight_rows = 24;
    sc.calib.grid = {1.0f, 0.9f, 0.8f};
    sc.prefix.spec = "bos";
    sc.prefix.bos_id = smol->config().bos_token_id;
    sc.prefix.tokens = {int32_t(smol->config().bos_token_id)};
    sc.prefix.source = quant::PrefixSim::Source::Fp;
    const quant::SimModel sim = quant::build_sim(smol, sc, calib);
    ASSERT_FALSE(sim.statics.empty());
    ASSERT_TRUE(sim.prefix != nullptr);
    const QuantizedModel qm = build_quantized(sim);
    expect_packed_matches_sim(sim, qm, toks, std::string("smollm2 ") + preset);
  }
}

TEST(QuantizedModel, FpDtypeRoundsEmbeddings) {
  quant::Recipe sc = quant::Recipe::from_preset("w8a8");
  sc.rotate.on = true;
  const quant::SimModel sim = quant::build_sim(stories(), sc, {});
  QuantizeOptions o;
  o.fp_dtype = DType::BF16;
  const QuantizedModel a = build_quantized(sim, o), b = build_quantized(sim);
  EXPECT_EQ(a.model->weights().embed.dtype, DType::BF16);
  EXPECT_EQ(a.model->weights().lm_head.dtype, DType::BF16);
  EXPECT_EQ(b.model->weights().embed.dtype, DType::F32);  // rotated: fp32
  Forward fa(a.model, kTokens), fb(b.model, kTokens);
  a.attach(fa);
  b.attach(fb);
  const auto toks = prompt(kTokens);
  const double d = rel_diff(logits_of(fa, toks), logits_of(fb, toks));
  std::printf("  bf16 embeddings / lm_head vs fp32: max|dlogit|/max|logit| %.3g\n", d);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.05);
}

TEST(QuantizedModel, UnsupportedConfigsAreErrors) {
  auto err = [](const char* preset, auto edit) {
    quant::Recipe c = quant::Recipe::from_preset(preset);
    edit(c);
    const quant::SimModel sim = quant::build_sim(stories(), c, {});
    return error_of([&] { build_quantized(sim); });
  };
  auto none = [](quant::Recipe&) {};
  EXPECT_THAT(err("w4a16", none), HasSubstr("weight-only quantization (W4A16, fp32 activations) cannot run"));
  EXPECT_THAT(err("fp16", none), HasSubstr("unquantized weights (--w-bits 16) cannot run on the packed runtime"));
  // CrossQuant runs only with static (folded) column maxima: the other two modes' scales change per call.
  EXPECT_THAT(err("w8a8", [](auto& c) { c.a.mode = quant::ActMode::Cross; }),
              HasSubstr("CrossQuant activations with --a-cross-cols per_call cannot run"));
  EXPECT_THAT(err("w8a8",
                  [](auto& c) {
                    c.a.mode = quant::ActMode::Cross;
                    c.a.cross_columns = quant::ColumnMode::RunningMax;
                  }),
              HasSubstr("--a-cross-cols running_max cannot run"));
  EXPECT_THAT(err("w8a8", [](auto& c) { c.a.symmetric = false; }), HasSubstr("asymmetric activations cannot run"));
  EXPECT_THAT(err("w4a8kv4", [](auto& c) { c.kv.bits = 3; }), HasSubstr("packed KV: int3 is not a packed KV format"));
  EXPECT_THAT(err("w8a8", [](auto& c) { c.w.group = 128; }),
              HasSubstr("int8 weights in groups of 128 columns cannot run"));
  // A weight rule that no kernel runs is named, whichever roles it applies to (here not q_proj).
  EXPECT_THAT(err("w4a8", [](auto& c) {
                quant::WeightRule r;
                r.roles = 1u << int(LinearRole::Down);
                r.bits = 3;
                c.weight_rules = {r};
              }),
              HasSubstr("weight_rules[0] (all layers down_proj: W3): 3-bit weights cannot run"));
  EXPECT_THAT(error_of([] {
                quant::Recipe c = quant::Recipe::from_preset("w4a8");
                quant::WeightRule r;
                r.roles = 1u << int(LinearRole::Up);
                r.group = 48;
                c.weight_rules = {r};
                check_runnable(c);
              }),
              HasSubstr("int4 weights in groups of 48 columns cannot run"));
}

}  // namespace
}  // namespace sinkq::runtime

namespace sinkq::runtime {
namespace {

// Token ids inside the family fixtures' 96-token vocabulary.
std::vector<int32_t> family_prompt(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(1 + (i * 37 + salt * 11) % 95));
  return t;
}

// PrefixQuant on every family (the transformers fixtures of tests/data/families): rotation, a
// full-precision prefix, grid-searched clips, static activations and KV — W4A8KV4 and W8A8KV8 —
// packed = simulated (teacher-forced). Rotation is refused on the families with post-norms
// (Gemma 2 / 3: quant/rotate.cc check_rotatable says why); PrefixQuant then runs without it.
// (KVQuant on every family: codebook_kv_store_test.cc.)
TEST(QuantizedModel, PrefixQuantOnEveryFamily) {
  for (const char* family : {"llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}) {
    const auto m = Model::load(std::string(SINKQ_SOURCE_DIR) + "/tests/data/families/" + family);
    const auto toks = family_prompt(kTokens, 1);
    const std::vector<std::vector<int32_t>> calib = {family_prompt(24, 3), family_prompt(24, 4)};
    for (const char* preset : {"prefixquant-w4a8kv4", "prefixquant-w8a8kv8"}) {
      SCOPED_TRACE(fmt::format("{} {}", family, preset));
      quant::Recipe sc = quant::Recipe::from_preset(preset);
      sc.w.group = std::min(sc.w.group, 32);  // the fixtures' rows are 64 / 128 wide
      sc.calib.weight_rows = 16;
      sc.calib.grid = {1.0f, 0.9f};
      sc.prefix.spec = "ids:5";
      sc.prefix.tokens = {5};
      sc.prefix.source = quant::PrefixSim::Source::Fp;
      if (sc.rotate.on && m->config().spec().post_norms) {
        EXPECT_THAT(error_of([&] { quant::build_sim(m, sc, calib); }),
                    HasSubstr("do not commute with a rotation of the residual stream"));
        sc.rotate.on = false;
      }
      const quant::SimModel sim = quant::build_sim(m, sc, calib);
      const QuantizedModel qm = build_quantized(sim);
      expect_packed_matches_sim(sim, qm, toks, std::string(family) + " " + preset);
    }
  }
}

}  // namespace
}  // namespace sinkq::runtime
