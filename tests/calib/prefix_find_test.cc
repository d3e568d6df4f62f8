// tests/calib/prefix_find_test.cc — PrefixQuant §5.1 prefix finder on planted outlier tokens.
#include <gtest/gtest.h>

#include <random>

#include "calib/calib_data.h"
#include "calib/prefix.h"
#include "tokenizer/tokenizer.h"
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

// SmolLM2 (real, a [BOS] sink) on the demo's calibration (4 x 128 tokens of C4): the residual
// stream, measured beside down_in since Qwen2.5-1.5B's sink shows only there, adds hits but not a
// choice: " the" and " Tim" have one down_in hit each (the paper's tie, broken by the smaller id),
// " Tim" 9 more in the residual stream of the layers after it — not comparable counts, so the
// ranking stays the paper's and the prefix is " the" + [BOS] with either site set.
TEST(PrefixFind, SmolLM2KeepsThePapersChoiceWithTheResidualStream) {
  const std::string g = testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf";
  const auto model = Model::load(g);
  const auto tok = Tokenizer::load(g);
  CalibOptions co;
  co.samples = 4;
  co.len = 128;
  const CalibSet set = load_calib(testing::shared_dir() + "/data/c4/c4_train_00000_first1000.jsonl", *tok, co);
  Forward fwd(model, co.len);
  const FoundPrefix both = find_prefix(fwd, set.samples, 64.0, tok->bos_id(), tok.get());
  const std::vector<Site> paper_site = {Site::DownIn};
  const FoundPrefix paper = find_prefix(fwd, set.samples, 64.0, tok->bos_id(), tok.get(), {}, paper_site);
  const int32_t the = 260, tim = 6362;
  EXPECT_EQ(paper.tokens, (std::vector<int32_t>{the, 1}));
  EXPECT_EQ(both.tokens, paper.tokens);
  EXPECT_EQ(both.o, paper.o);
  // The residual stream saw more of " Tim" (and of [BOS]) than down_in did.
  const auto count_of = [](const FoundPrefix& f, int32_t id) {
    for (const OutlierTokenCount& c : f.stats.counts)
      if (c.token_id == id) return c;
    return OutlierTokenCount{};
  };
  EXPECT_EQ(count_of(both, tim).first_site_non_initial, 1);
  EXPECT_GT(count_of(both, tim).non_initial, count_of(both, the).non_initial);
  EXPECT_GT(count_of(both, 1).occurrences, count_of(paper, 1).occurrences);
}

}  // namespace
}  // namespace sinkq
