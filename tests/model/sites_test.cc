// Activation sites: observers see every site with the right shape and positions; hooks replace
// values and the forward pass uses the replacement.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model/model.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

std::shared_ptr<Model> mixtext() { return Model::load(testing::shared_dir() + "/models/mixtext-2.5M"); }

const std::vector<int32_t> kIds{1, 403, 407, 261, 378, 432, 383, 286};

TEST(Sites, NamesRoundTrip) {
  for (int i = 0; i < kNumSites; ++i) EXPECT_EQ(parse_site(site_name(Site(i))), Site(i));
  EXPECT_FALSE(parse_site("attn_out").has_value());
}

TEST(Sites, ObserverSeesEverySiteWithShapesAndPositions) {
  const auto model = mixtext();
  const ModelConfig& c = model->config();
  Forward fwd(model, 32);
  std::map<std::pair<int, int>, int> calls;  // (site, layer) -> count
  fwd.hooks().add(Site::AttnIn, -1, [&](SiteView& v) { ++calls[{int(v.site), v.layer}]; });
  for (int s = 0; s < kNumSites; ++s) {
    fwd.hooks().add(Site(s), -1, [&, s](SiteView& v) {
      ++calls[{s, v.layer}];
      const std::map<Site, int64_t> width = {
          {Site::AttnIn, c.hidden_size}, {Site::Q, c.q_dim()},       {Site::KPreRope, c.kv_dim()},
          {Site::K, c.kv_dim()},         {Site::V, c.kv_dim()},      {Site::OIn, c.q_dim()},
          {Site::MlpIn, c.hidden_size},  {Site::DownIn, c.intermediate_size},
          {Site::Out, c.hidden_size},    {Site::Logits, c.vocab_size}, {Site::HeadIn, c.hidden_size}};
      EXPECT_EQ(v.features, width.at(v.site)) << site_name(v.site);
      EXPECT_EQ(v.positions.size(), size_t(v.tokens));
      EXPECT_EQ(v.token_ids.size(), size_t(v.tokens));
      EXPECT_EQ(v.site == Site::Logits || v.site == Site::HeadIn, v.layer == -1);
    });
  }
  fwd.step(std::span(kIds).first(5), true);  // prefill: positions 0..4
  std::vector<int32_t> seen;
  int h = fwd.hooks().add(Site::Out, 3, [&](SiteView& v) {
    seen.assign(v.positions.begin(), v.positions.end());
    EXPECT_EQ(v.token_ids[0], kIds[5]);
  });
  fwd.step(std::span(kIds).subspan(5, 1), false);  // decode: position 5
  fwd.hooks().remove(h);
  EXPECT_EQ(seen, std::vector<int32_t>{5});
  for (int s = 0; s < int(Site::Logits); ++s)
    for (int l = 0; l < c.num_layers; ++l) EXPECT_EQ((calls[{s, l}]), s == 0 ? 4 : 2) << site_name(Site(s)) << " layer " << l;
  EXPECT_EQ((calls[{int(Site::Logits), -1}]), 2);
  EXPECT_EQ((calls[{int(Site::HeadIn), -1}]), 2);
}

// k and v hooks see exactly the rows that land in the cache; edits there are what attention uses.
TEST(Sites, KAndVAreTheCacheRows) {
  const auto model = mixtext();
  Forward fwd(model, 16);
  std::vector<float> k_seen;
  fwd.hooks().add(Site::K, 2, [&](SiteView& v) { k_seen.assign(v.data, v.data + v.tokens * v.features); });
  fwd.step(kIds, false);
  const float* k_cache = fwd.cache().k(2);
  for (size_t i = 0; i < k_seen.size(); ++i) ASSERT_EQ(k_seen[i], k_cache[i]);
}

// Replacing a value changes the output; an identity hook changes nothing, bit for bit.
TEST(Sites, HooksReplaceValues) {
  const auto model = mixtext();
  Forward plain(model, 16), identity(model, 16), zeroed(model, 16), fake(model, 16);
  const auto a = plain.step(kIds, true);
  const std::vector<float> ref(a.begin(), a.end());
  for (int s = 0; s < kNumSites; ++s)
    identity.hooks().add(Site(s), -1, [](SiteView& v) {
      for (int64_t i = 0; i < v.tokens * v.features; ++i) v.data[i] = v.data[i] * 1.0f;
    });
  const auto b = identity.step(kIds, true);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(b[i], ref[i]);

  // The logits site is the last word: what a hook writes there is what step() returns.
  zeroed.hooks().add(Site::Logits, -1, [](SiteView& v) { std::fill(v.data, v.data + v.tokens * v.features, 0.0f); });
  const auto z = zeroed.step(kIds, true);
  for (float x : z) ASSERT_EQ(x, 0.0f);

  // A perturbation at k_pre_rope is seen after RoPE: k(pos 0) is unrotated (angle 0), so adding
  // delta before RoPE adds exactly delta to the cached row of position 0.
  std::vector<float> k_before(size_t(model->config().kv_dim()));
  fake.hooks().add(Site::KPreRope, 1, [&](SiteView& v) {
    std::copy(v.data, v.data + v.features, k_before.begin());
    v.data[0] += 0.5f;
  });
  const auto f = fake.step(kIds, true);
  EXPECT_FLOAT_EQ(fake.cache().k(1)[0], k_before[0] + 0.5f);
  double diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, double(std::abs(f[i] - ref[i])));
  EXPECT_GT(diff, 1e-4) << "perturbing k_pre_rope must change the logits";
}

}  // namespace
}  // namespace sinkq
