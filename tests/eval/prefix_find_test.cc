// tests/eval/prefix_find_test.cc — PrefixQuant §5.1 prefix finder on planted outlier tokens, and the
// effect of a prefix on the body's token-wise maxima (analyze with a KV prefix).
#include <gtest/gtest.h>

#include <random>

#include "eval/calib_data.h"
#include "eval/prefix.h"
#include "util/planted.h"

namespace sinkq {
namespace {

// [BOS], ".", "\n" planted as outlier tokens (the Llama-2-7B pattern of PrefixQuant Table 1).
// Every sample: [BOS] first, one "\n", one "." and, in half of the samples, a second "."; the
// rest random non-planted ids. Counts per sequence at the planted layer: 3 or 4 → mean 3.5 →
// o = 4 (initial token included); non-initial frequencies "." 6 > "\n" 4, so the prefix is the
// o − 1 = 3 most frequent non-initial outlier ids — only two exist — then [BOS]: ". \n [BOS]".
TEST(PrefixFind, PlantedOutlierTokensGiveOAndTheTokens) {
  testing::TempDir d;
  testing::PlantedOutlierSpec spec;
  spec.token_ids = {1, 29, 13};  // BOS, '.', '\n' in the stories260K vocabulary
  spec.layers = {1};
  testing::write_planted_model(d.path(), spec);
  const auto model = Model::load(d.path());
  std::mt19937_64 rng(3);
  std::vector<std::vector<int32_t>> samples;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> x{1};
    for (int i = 0; i < 30; ++i) {
      int32_t id;
      do id = int32_t(100 + rng() % 400); while (id == 29 || id == 13);
      x.push_back(id);
    }
    x[7] = 13;
    x[12] = 29;
    if (s % 2 == 0) x[20] = 29;
    samples.push_back(x);
  }
  Forward fwd(model, 64);
  const FoundPrefix f = find_prefix(fwd, samples, 64.0, /*bos_id=*/1);
  EXPECT_EQ(f.o, 4);
  EXPECT_EQ(f.tokens, (std::vector<int32_t>{29, 13, 1}));
  EXPECT_FALSE(f.initial_only);
  EXPECT_EQ(f.stats.sequences, 4);

  // Without BOS in the vocabulary's role (bos_id -1): the o most frequent non-initial ids only.
  EXPECT_EQ(find_prefix(fwd, samples, 64.0, -1).tokens, (std::vector<int32_t>{29, 13}));

  // Only the initial [BOS] is an outlier: the prefix is [BOS] alone, flagged initial_only.
  std::vector<std::vector<int32_t>> plain;
  for (auto x : samples) {
    for (size_t i = 1; i < x.size(); ++i)
      if (x[i] == 29 || x[i] == 13) x[i] = 200;
    plain.push_back(x);
  }
  const FoundPrefix b = find_prefix(fwd, plain, 64.0, 1);
  EXPECT_EQ(b.o, 1);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{1}));
  EXPECT_TRUE(b.initial_only);
  // A prefix already on the forward is refused: the finder must see the sequence start.
  fwd.reset();
  fwd.set_prefix(KvPrefix::compute(model, {1}));
  EXPECT_THROW(find_prefix(fwd, samples, 64.0, 1), Error);
}

// mixtext-2.5M: [BOS] is the largest token at down_in of layer 1 (README: ≈ 20–40× the median).
// With [BOS] moved into a full-precision prefix (samples without their own [BOS]), the body's
// top-1/median at that site must fall: the [BOS] rows are no longer part of the body. Measured
// 15.2 → 7.8 (4 × 128 tokens): it halves but does not collapse, because the first body token takes
// over part of the initial-token role (this small model has no real attention sink; docs/prefix.md
// shows the report). The bound, 0.75× the no-prefix ratio, asserts the direction with margin.
TEST(PrefixFind, BosPrefixShrinksTheBodysTokenwiseMaxRatioOnMixtext) {
  const std::string dir = testing::shared_dir() + "/models/mixtext-2.5M";
  const auto model = Model::load(dir);
  const auto tok = Tokenizer::load(dir);
  CalibOptions co;
  co.samples = 4;
  co.len = 128;
  const CalibSet calib = load_calib(testing::shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt", *tok, co);
  AnalyzeOptions opt;
  opt.alphas = {1.0f};
  const AnalyzeReport plain = analyze(model, calib.samples, opt);
  std::vector<std::vector<int32_t>> bodies;
  for (const auto& s : calib.samples) bodies.emplace_back(s.begin() + 1, s.end());
  opt.prefix = KvPrefix::compute(model, {1});
  const AnalyzeReport pre = analyze(model, bodies, opt);
  EXPECT_EQ(pre.prefix, (std::vector<int32_t>{1}));
  const double before = plain.layer[1].site(Site::DownIn).top1_over_median();
  const double after = pre.layer[1].site(Site::DownIn).top1_over_median();
  EXPECT_GT(before, 10.0);
  EXPECT_LT(after, 0.75 * before) << "before " << before << " after " << after;
  // Attention to absolute position 0 is now attention to the prefix: still measured, in (0, 1).
  EXPECT_GT(pre.layer[1].attention.mean_to_first(), 0.0);
  EXPECT_LT(pre.layer[1].attention.mean_to_first(), 1.0);
}

}  // namespace
}  // namespace sinkq
