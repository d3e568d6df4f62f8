// PrefixQuant block-wise fine-tuning (quant/finetune.h) through build_sim, on stories260K with
// PrefixQuant's W4A8KV4 recipe (rotation, static per-tensor activations, static per-head KV, grid
// search initialisation) behind the [BOS] prefix: the training forward is the engine's, training
// lowers every block's output MSE, moves the weights and every static scale, is deterministic, and
// what cannot be fine-tuned is an error naming the flag. (Packing a fine-tuned model exactly is
// checked in tests/runtime/quantized_model_test.cc.)
#include "quant/finetune.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/mmap.h"
#include "calib/calib_data.h"
#include "kernels/ops.h"
#include "tokenizer/tokenizer.h"
#include "train/grad_layer.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using ::testing::HasSubstr;

constexpr auto stories = testing::stories260k;

Recipe w4a8kv4(int epochs) {
  Recipe r = Recipe::from_preset("prefixquant-w4a8kv4");
  r.prefix.spec = "bos";  // instead of auto: the tokens are known
  r.prefix.tokens = {1};
  r.prefix.bos_id = 1;
  r.calib.grid = {1.0f, 0.9f, 0.8f, 0.7f};  // a short grid: a test
  r.calib.weight_rows = 64;
  r.finetune.epochs = epochs;
  // Larger than the paper's 5e-6 / 5e-5 (8B models, 512 samples x 20 epochs): three epochs on
  // eight samples must move a 260K-parameter model.
  r.finetune.lr_weights = 1e-4;
  r.finetune.lr_scales = 1e-3;
  r.finetune.batch = 2;
  return r;
}

std::vector<std::vector<int32_t>> calib(int n = 8, int len = 48) {
  std::vector<std::vector<int32_t>> s;
  for (int i = 0; i < n; ++i) {
    auto p = testing::prompt(len, 20 + i);
    p[0] = 1;  // [BOS] first, as the calibration loader does (dropped behind the [BOS] prefix)
    s.push_back(p);
  }
  return s;
}

// The training forward with the simulation's sites (rotations, static quantizers, dynamic hooks)
// computes what the engine's Forward with SimModel::attach computes, layer by layer: each training
// block (train::layer_forward) runs on the engine's input of that block, so that a difference
// does not carry into the next blocks. Tolerance: the two differ in fp32 summation order (the
// engine's prefill attention runs on sgemm blocks, the training's is a plain loop), ~1e-7
// relative, until a value lands on the other side of a 4-bit rounding boundary; a flipped code
// moves one element by a step (~1/8 of its range): ~2e-4 in the block output's relative RMS over
// 40 x 64 values (measured on AVX-512: 1.7e-4 and 2.0e-4 in blocks 2 and 4, the others ~1e-7; 0
// on the AVX2 and scalar paths). The bound, 2e-3, allows ten such flips in a block; leaving out
// the last block's last static 8-bit quantizer measured 4.9e-3 there, a 4-bit one or a wrong
// rotation is larger.
TEST(Finetune, TrainingForwardIsTheEngines) {
  const SimModel sm = build_sim(stories(), w4a8kv4(0), calib());
  const ModelConfig& mc = sm.model->config();
  SiteHooks hooks(mc.num_layers);
  const auto sites = training_sites(sm.cfg, mc, sm.statics, hooks);
  auto toks = testing::prompt(40, 3);
  const train::Params<float> p = train::Params<float>::from_model(*sm.model);
  const train::PrefixKv<float> pre = train::PrefixKv<float>::from(*sm.prefix);

  Forward f(sm.model, 64);
  sm.attach(f);
  std::vector<std::vector<float>> want(size_t(mc.num_layers));
  f.hooks().add(Site::Out, -1, [&](SiteView& v) {
    want[size_t(v.layer)].assign(v.data, v.data + v.tokens * v.features);
  });
  f.step(toks, false);
  const int64_t T = int64_t(toks.size()), H = mc.hidden_size;
  std::vector<float> x(size_t(T * H));  // block 0's input: the embedding rows
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(x.data() + t * H, p.embed.data() + int64_t(toks[size_t(t)]) * H, size_t(H) * 4);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(pre.P + t);
  const train::Ropes rope(mc);
  double worst = 0;
  for (int l = 0; l < mc.num_layers; ++l) {
    train::LayerInput<float> in;
    in.pos = pos;
    in.tokens = toks;
    in.P = pre.P;
    in.prefix_k = pre.k[size_t(l)].data();
    in.prefix_v = pre.v[size_t(l)].data();
    train::LayerTape<float> tape;
    if (l > 0) x = want[size_t(l - 1)];  // the engine's input of block l
    train::layer_forward(mc, rope, p.layers[size_t(l)], l, in, x, tape, &sites[size_t(l)]);
    ASSERT_EQ(x.size(), want[size_t(l)].size());
    double d = 0, n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      d += std::pow(double(x[i]) - want[size_t(l)][i], 2);
      n += std::pow(double(want[size_t(l)][i]), 2);
    }
    std::printf("  block %d: training vs engine relative RMS difference %.3g\n", l, std::sqrt(d / n));
    worst = std::max(worst, std::sqrt(d / n));
  }
  EXPECT_LT(worst, 2e-3);
}

TEST(Finetune, LowersBlockErrorMovesEveryParameterAndIsDeterministic) {
  const auto c = calib();
  const SimModel a = build_sim(stories(), w4a8kv4(3), c);
  const SimModel b = build_sim(stories(), w4a8kv4(0), c);
  const auto& rep = a.calibration_report.at("finetune");
  const auto& blocks = rep.at("blocks");
  ASSERT_EQ(blocks.size(), size_t(stories()->config().num_layers));
  // Every block ends below where the grid search left it, and the sum by 3% or more (measured:
  // 4-17% per block after 12 steps; a sign error or a dead gradient leaves it where it was or
  // above).
  double sum_before = 0, sum_after = 0;
  for (const auto& k : blocks) {
    const double before = k.at("mse_before").get<double>(), after = k.at("mse_after").get<double>();
    std::printf("  block %d: MSE %.4g -> %.4g (epochs %s)\n", k.at("layer").get<int>(), before, after,
                k.at("epoch_mse").dump().c_str());
    EXPECT_LT(after, before) << "block " << k.at("layer");
    sum_before += before;
    sum_after += after;
  }
  EXPECT_LT(sum_after, 0.97 * sum_before);
  // The weights moved (and stay on a 4-bit grid: the packer checks that), every static scale moved.
  for (int l = 0; l < stories()->config().num_layers; ++l) {
    const Mat& wa = a.model->weights().layers[size_t(l)].mat(LinearRole::Down);
    const Mat& wb = b.model->weights().layers[size_t(l)].mat(LinearRole::Down);
    EXPECT_NE(std::memcmp(wa.data, wb.data, size_t(wa.rows * wa.cols) * 4), 0) << l;
  }
  ASSERT_EQ(a.statics.size(), b.statics.size());
  for (size_t k = 0; k < a.statics.size(); ++k) {
    EXPECT_EQ(a.statics[k].site, b.statics[k].site);
    EXPECT_NE(a.statics[k].params.scale, b.statics[k].params.scale) << site_name(a.statics[k].site) << " layer "
                                                                    << a.statics[k].layer;
  }
  // The prefix (source fp) is the fp model's, untouched.
  EXPECT_EQ(std::memcmp(a.prefix->segment(0).k, b.prefix->segment(0).k, size_t(a.prefix->kv_dim()) * 4), 0);
  // Deterministic.
  const SimModel again = build_sim(stories(), w4a8kv4(3), c);
  const Mat& w1 = a.model->weights().layers[1].mat(LinearRole::Q);
  const Mat& w2 = again.model->weights().layers[1].mat(LinearRole::Q);
  EXPECT_EQ(std::memcmp(w1.data, w2.data, size_t(w1.rows * w1.cols) * 4), 0);
  for (size_t k = 0; k < a.statics.size(); ++k) EXPECT_EQ(a.statics[k].params.scale, again.statics[k].params.scale);
  // The recipe round-trips with its settings.
  const Recipe r = w4a8kv4(3);
  EXPECT_EQ(Recipe::from_json(r.to_json(), "t").to_json(), r.to_json());
  EXPECT_EQ(r.to_json().at("finetune").at("epochs"), 3);
  EXPECT_FALSE(w4a8kv4(0).to_json().contains("finetune"));
}

// The quant_input target (--finetune-target quant) scores only the error a block adds: block 0 sees
// the same input either way (the embeddings), so its starting MSE is the same; every later block
// starts below the fp-trajectory target's (which also counts the drift of the earlier blocks), and
// training lowers the sum over blocks. (Not every block: with a local target a block's own error
// is small and 12 STE steps at this learning rate can end a few percent above it; measured.)
TEST(Finetune, QuantInputTargetScoresOnlyTheBlocksOwnError) {
  const auto c = calib();
  Recipe local = w4a8kv4(3);
  local.finetune.target = FinetuneSim::Target::QuantInput;
  const SimModel a = build_sim(stories(), w4a8kv4(3), c), b = build_sim(stories(), local, c);
  const auto& fa = a.calibration_report.at("finetune").at("blocks");
  const auto& fb = b.calibration_report.at("finetune").at("blocks");
  EXPECT_DOUBLE_EQ(fb[0].at("mse_before").get<double>(), fa[0].at("mse_before").get<double>());
  double before = 0, after = 0;
  for (size_t l = 0; l < fb.size(); ++l) {
    std::printf("  block %zu: fp-trajectory target MSE %.4g -> %.4g, quant-input target %.4g -> %.4g\n", l,
                fa[l].at("mse_before").get<double>(), fa[l].at("mse_after").get<double>(),
                fb[l].at("mse_before").get<double>(), fb[l].at("mse_after").get<double>());
    if (l > 0) {
      EXPECT_LT(fb[l].at("mse_before").get<double>(), fa[l].at("mse_before").get<double>()) << l;
    }
    before += fb[l].at("mse_before").get<double>();
    after += fb[l].at("mse_after").get<double>();
  }
  EXPECT_LT(after, before);
  EXPECT_EQ(Recipe::from_json(local.to_json(), "t").to_json(), local.to_json());
  EXPECT_EQ(local.to_json().at("finetune").at("target"), "quant_input");
}

// With both learning rates 0 the fine-tuner changes nothing: its weight grids (weight_grid →
// ste_forward) reproduce the simulator's fake-quantized weights bit for bit — per group with a
// ragged tail here (g32 over intermediate 172 = 5·32 + 12) and asymmetric — and the static scales
// come back as they went in.
TEST(Finetune, ZeroLearningRateChangesNothing) {
  Recipe r = w4a8kv4(1);
  r.w.group = 32;
  r.w.symmetric = false;
  r.finetune.lr_weights = 0;
  r.finetune.lr_scales = 0;
  Recipe off = r;
  off.finetune.epochs = 0;
  const auto c = calib(4, 32);
  const SimModel a = build_sim(stories(), r, c), b = build_sim(stories(), off, c);
  for (int l = 0; l < stories()->config().num_layers; ++l)
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const Mat& ma = a.model->weights().layers[size_t(l)].mat(i);
      const Mat& mb = b.model->weights().layers[size_t(l)].mat(i);
      ASSERT_EQ(ma.dtype, DType::F32);
      EXPECT_EQ(std::memcmp(ma.data, mb.data, size_t(ma.rows * ma.cols) * 4), 0) << l << " " << kLinearRoles[i].name;
    }
  ASSERT_EQ(a.statics.size(), b.statics.size());
  for (size_t k = 0; k < a.statics.size(); ++k) EXPECT_EQ(a.statics[k].params.scale, b.statics[k].params.scale);
}

// Held-out, on real text: calibrated and fine-tuned on 32 x 128 C4 tokens, evaluated on 8 x 128
// WikiText-2 tokens it never saw. Fine-tuning trains each block's output toward the fp trajectory;
// on the held-out text every block's output, and the final norm's (the LM head's input), must be
// closer to the rotated fp model's (behind its own prefix: the quantized model's basis) than with
// the grid search alone. Measured ratios 0.78-0.83 per block on AVX-512 and AVX2 (the ISAs moved
// them by <= 0.04): the bound 0.9 leaves twice that. The logits are printed, not asserted: on this
// model their error does not follow (0.99x on the training samples, 1.02-1.08x held out; measured) —
// docs/results-smollm2.md §8 on what fine-tuning does at this data size.
TEST(Finetune, HeldOutBlockOutputsMoveTowardTheFpTrajectory) {
  const auto tok = Tokenizer::load(testing::shared_dir() + "/models/stories260K");
  CalibOptions train_opt;
  train_opt.samples = 32;
  train_opt.len = 128;
  const auto c = load_calib(testing::shared_dir() + "/data/c4/c4_train_00000_first1000.jsonl", *tok, train_opt).samples;
  CalibOptions held_opt;
  held_opt.samples = 8;
  held_opt.len = 128;
  const auto held =
      load_calib(testing::shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt", *tok, held_opt).samples;
  // The starting point is the grid search from the `max` statistic, where the bound was measured:
  // from `sample_mean`'s better start fine-tuning has less to gain on block 0 (0.907x measured,
  // 0.82-0.87x on the others), which is about the statistic, not about fine-tuning.
  Recipe tuned_recipe = w4a8kv4(3), plain_recipe = w4a8kv4(0);
  tuned_recipe.calib.statistic = plain_recipe.calib.statistic = CalibStatistic::Max;
  const SimModel tuned = build_sim(stories(), tuned_recipe, c);
  const SimModel plain = build_sim(stories(), plain_recipe, c);
  Recipe fp_recipe;  // the rotated fp model with its prefix: the fine-tuning's targets
  fp_recipe.rotate = w4a8kv4(0).rotate;
  fp_recipe.prefix = w4a8kv4(0).prefix;
  const SimModel fp = build_sim(stories(), fp_recipe, c);
  const int L = stories()->config().num_layers;
  // Per sequence: every layer's output, then the final norm's output (head_in), then the logits.
  auto run = [&](const SimModel& sm, const std::vector<int32_t>& toks) {
    Forward f(sm.model, int64_t(toks.size()));
    sm.attach(f);
    std::vector<std::vector<float>> out{size_t(L) + 2};
    f.hooks().add(Site::Out, -1, [&](SiteView& v) { out[size_t(v.layer)].assign(v.data, v.data + v.tokens * v.features); });
    f.hooks().add(Site::HeadIn, -1, [&](SiteView& v) { out[size_t(L)].assign(v.data, v.data + v.tokens * v.features); });
    const auto logits = f.step(toks, true);
    out[size_t(L) + 1].assign(logits.begin(), logits.end());
    return out;
  };
  auto sse = [](const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += std::pow(double(a[i]) - b[i], 2);
    return s;
  };
  std::vector<double> e_tuned(size_t(L) + 2), e_plain(size_t(L) + 2);
  for (const auto& toks : held) {
    const auto want = run(fp, toks), t = run(tuned, toks), p = run(plain, toks);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(t[i].size(), want[i].size());
      e_tuned[i] += sse(t[i], want[i]);
      e_plain[i] += sse(p[i], want[i]);
    }
  }
  for (int i = 0; i <= L + 1; ++i) {
    const std::string what = i < L ? "block " + std::to_string(i) : i == L ? "head_in" : "logits";
    const double r = e_tuned[size_t(i)] / e_plain[size_t(i)];
    std::printf("  held-out %-8s squared error vs fp: grid search %.4g, + fine-tuning %.4g (%.3fx)\n", what.c_str(),
                e_plain[size_t(i)], e_tuned[size_t(i)], r);
    if (i <= L) {
      EXPECT_LT(r, 0.9) << what;
    }
  }
}

TEST(Finetune, UntrainableSettingsAreErrors) {
  Recipe fp;
  fp.finetune.epochs = 2;
  EXPECT_THAT(testing::error_of([&] { fp.validate(); }), HasSubstr("--finetune blockwise"));
  EXPECT_THAT(testing::error_of([&] { build_sim(stories(), w4a8kv4(2), {}); }), HasSubstr("--finetune blockwise"));
  Recipe bad = w4a8kv4(2);
  bad.finetune.batch = 0;
  EXPECT_THAT(testing::error_of([&] { bad.validate(); }), HasSubstr("--finetune-batch"));
  nlohmann::json j = w4a8kv4(2).to_json();
  j["finetune"]["method"] = "endtoend";
  EXPECT_THAT(testing::error_of([&] { Recipe::from_json(j, "r.json"); }), HasSubstr("finetune.method"));
}

}  // namespace
}  // namespace sinkq::quant
