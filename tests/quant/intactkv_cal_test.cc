// IntactKV+Cal through build_sim (recipe prefix.train_*, train/intactkv_cal.h): on stories260K with
// 3-bit g32 asymmetric RTN weights behind the [BOS] prefix, training the prefix lowers the
// layer-output MSE objective epoch after epoch, changes only the prefix, is deterministic, and
// what the recipe cannot train is an error naming the flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "quant/sim.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using ::testing::HasSubstr;

constexpr auto stories = testing::stories260k;

Recipe w3_bos(int epochs) {
  Recipe r;
  r.w.bits = 3;
  r.w.group = 32;
  r.w.symmetric = false;
  r.prefix.spec = "bos";
  r.prefix.tokens = {1};
  r.prefix.bos_id = 1;
  r.prefix.train_epochs = epochs;
  r.prefix.train_lr = 5e-3;  // larger than the paper's 2e-4: a few epochs on a tiny model must move
  r.prefix.train_batch = 4;
  return r;
}

std::vector<std::vector<int32_t>> calib() {
  std::vector<std::vector<int32_t>> s;
  for (int i = 0; i < 8; ++i) {
    auto p = testing::prompt(48, 10 + i);
    p[0] = 1;  // [BOS] first, as the calibration loader does (dropped behind the [BOS] prefix)
    s.push_back(p);
  }
  return s;
}

TEST(IntactKvCal, TrainingLowersTheObjectiveAndOnlyMovesThePrefix) {
  const auto c = calib();
  const SimModel a = build_sim(stories(), w3_bos(6), c);
  const auto& rep = a.calibration_report.at("prefix_train");
  const double initial = rep.at("initial_loss").get<double>();
  const auto& epochs = rep.at("epoch_loss");
  ASSERT_EQ(epochs.size(), 6u);
  // Each epoch's mean loss (measured before its updates) is below the previous one, and the last
  // is clearly below the untrained prefix's.
  for (size_t e = 1; e < epochs.size(); ++e) EXPECT_LT(epochs[e].get<double>(), epochs[e - 1].get<double>()) << e;
  EXPECT_LT(epochs.back().get<double>(), 0.99 * initial);
  // Same weights as the untrained recipe, another prefix with the same tokens.
  const SimModel b = build_sim(stories(), w3_bos(0), c);
  ASSERT_EQ(a.prefix->tokens(), b.prefix->tokens());
  const KvSegment sa = a.prefix->segment(0), sb = b.prefix->segment(0);
  EXPECT_NE(std::memcmp(sa.k, sb.k, size_t(a.prefix->kv_dim()) * 4), 0);
  const Mat& wa = a.model->weights().layers[0].mat(LinearRole::Q);
  const Mat& wb = b.model->weights().layers[0].mat(LinearRole::Q);
  EXPECT_EQ(std::memcmp(wa.data, wb.data, size_t(wa.rows * wa.cols) * 4), 0);
  // Deterministic.
  const SimModel again = build_sim(stories(), w3_bos(6), c);
  EXPECT_EQ(std::memcmp(again.prefix->segment(1).v, a.prefix->segment(1).v, size_t(a.prefix->kv_dim()) * 4), 0);
  // The recipe round-trips with its training settings.
  EXPECT_EQ(Recipe::from_json(w3_bos(6).to_json(), "t").to_json().at("prefix").at("train").at("epochs"), 6);
}

// With dynamic activation and KV quantization (W4A8KV4, the packed runtime's setting) the
// quantizers run in the training forward as the engine runs them (straight-through backward):
// the objective of the untrained prefix is larger than without them, and training lowers it.
TEST(IntactKvCal, TrainsWithDynamicActivationAndKvQuantizers) {
  Recipe r = w3_bos(4);
  r.w.bits = 4;
  r.w.group = 0;
  r.w.symmetric = true;
  r.a.bits = 8;
  r.kv.bits = 4;
  const auto c = calib();
  const SimModel q = build_sim(stories(), r, c);
  Recipe wonly = r;
  wonly.a.bits = kBitsOff;
  wonly.kv.bits = kBitsOff;
  const SimModel w = build_sim(stories(), wonly, c);
  const auto& rq = q.calibration_report.at("prefix_train");
  const auto& rw = w.calibration_report.at("prefix_train");
  EXPECT_GT(rq.at("initial_loss").get<double>(), rw.at("initial_loss").get<double>());
  const auto& e = rq.at("epoch_loss");
  EXPECT_LT(e.back().get<double>(), e.front().get<double>());
  EXPECT_LT(e.back().get<double>(), rq.at("initial_loss").get<double>());
}

// With PrefixQuant's static quantizers and online rotations in the forward (their STE / transposed
// backward, grad_layer.h), W3 g32 weights, static per-tensor A8 and static per-head KV8: every
// epoch's objective below the previous one and the last below the untrained prefix's. (With static
// KV4 the objective is rough in the prefix — one rounding flip of a body key moves it — and the
// epoch means on 8 samples go up and down by ~1% while trending down; KV8 keeps the test about
// the gradient, not that noise.)
TEST(IntactKvCal, TrainsWithStaticQuantizersAndRotation) {
  Recipe r = w3_bos(6);
  r.rotate.on = true;
  r.a.bits = 8;
  r.a.mode = ActMode::Static;
  r.kv.bits = 8;
  r.kv.mode = KvMode::Static;
  r.kv.granularity = KvGranularity::Head;
  r.calib.grid = {1.0f, 0.9f};
  const SimModel q = build_sim(stories(), r, calib());
  const auto& rq = q.calibration_report.at("prefix_train");
  const auto& e = rq.at("epoch_loss");
  std::printf("  static + rotation: objective %.5g -> epochs %s\n", rq.at("initial_loss").get<double>(), e.dump().c_str());
  for (size_t k = 1; k < e.size(); ++k) EXPECT_LT(e[k].get<double>(), e[k - 1].get<double>()) << k;
  EXPECT_LT(e.back().get<double>(), 0.98 * rq.at("initial_loss").get<double>());
}

TEST(IntactKvCal, UntrainableRecipesAreErrors) {
  Recipe none = w3_bos(2);
  none.prefix = PrefixSim{};
  none.prefix.train_epochs = 2;
  EXPECT_THAT(testing::error_of([&] { none.validate(); }), HasSubstr("--prefix-train trains the KV prefix"));
  EXPECT_THAT(testing::error_of([&] { build_sim(stories(), w3_bos(2), {}); }), HasSubstr("--prefix-train"));
}

}  // namespace
}  // namespace sinkq::quant
