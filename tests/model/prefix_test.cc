// tests/model/prefix_test.cc — the full-precision KV prefix (PrefixQuant / IntactKV) in front of
// a sequence: equal to feeding the prefix inline, shared without copies, never seen by hooks.
#include <gtest/gtest.h>

#include <cmath>

#include "model/model.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

std::shared_ptr<Model> load(const std::string& name) { return Model::load(testing::shared_dir() + "/models/" + name); }

// Arbitrary in-vocabulary tokens: a [BOS] prefix with two more tokens, then a body.
const std::vector<int32_t> kPrefix{1, 403, 13};
const std::vector<int32_t> kBody{300, 68, 259, 87, 290, 371, 22, 13, 44, 326, 290, 470};

std::vector<int32_t> concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> r = a;
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

// Prefix in front == the same tokens inline: the body's logits differ only by the fp32 summation
// order of attention (two segments added at the end; prefill vs decode GEMV/sgemm), far below
// 1e-4 for |logits| <= 25 and dot products of length <= 192 (same bound as the decode test).
TEST(KvPrefix, EqualsFeedingThePrefixInline) {
  for (const char* name : {"stories260K", "mixtext-2.5M"}) {
    const auto model = load(name);
    const size_t V = size_t(model->config().vocab_size), P = kPrefix.size(), B = kBody.size();
    Forward inline_fwd(model, 64);
    const auto all = inline_fwd.step(concat(kPrefix, kBody), true);
    const std::vector<float> ref(all.begin() + std::ptrdiff_t(P * V), all.end());

    const auto prefix = KvPrefix::compute(model, kPrefix);
    EXPECT_EQ(prefix->size(), int64_t(P));
    Forward fwd(model, 32);
    fwd.set_prefix(prefix);
    EXPECT_EQ(fwd.n_past(), int64_t(P));
    EXPECT_EQ(fwd.max_ctx(), int64_t(P) + 32);
    const auto got = fwd.step(kBody, true);  // prefill
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-4) << name << " prefill row " << i / V;

    fwd.reset();  // the prefix stays; the body restarts after it
    EXPECT_EQ(fwd.n_past(), int64_t(P));
    for (size_t t = 0; t < B; ++t) {  // decode, one token at a time
      const auto l = fwd.step(std::span(&kBody[t], 1), false);
      for (size_t i = 0; i < V; ++i) ASSERT_NEAR(l[i], ref[t * V + i], 1e-4) << name << " decode t " << t;
    }
  }
}

// Every sequence reads the one prefix in place: two Forwards hold the same object, their caches
// are exactly as large as without a prefix (no prefix rows copied in), and the prefix's own
// storage is layers × P × kv_dim × (K and V) fp32, counted once.
TEST(KvPrefix, SharedBetweenSequencesWithoutCopies) {
  const auto model = load("mixtext-2.5M");
  const ModelConfig& c = model->config();
  const auto prefix = KvPrefix::compute(model, kPrefix);
  EXPECT_EQ(prefix->bytes(), size_t(c.num_layers) * kPrefix.size() * size_t(c.kv_dim()) * 2 * sizeof(float));
  Forward plain(model, 32), a(model, 32), b(model, 32);
  a.set_prefix(prefix);
  b.set_prefix(prefix);
  EXPECT_EQ(prefix.use_count(), 3);
  EXPECT_EQ(a.prefix().get(), b.prefix().get());
  EXPECT_EQ(a.cache().bytes(), plain.cache().bytes());
  a.step(kBody, false);
  b.step(std::span(kBody.data(), 5), false);
  EXPECT_EQ(a.n_past(), int64_t(kPrefix.size() + kBody.size()));
  EXPECT_EQ(b.n_past(), int64_t(kPrefix.size() + 5));
  // The prefix rows are not in the body cache: its first row is the first body token's key.
  Forward inline_fwd(model, 64);
  inline_fwd.step(concat(kPrefix, kBody), false);
  const int64_t KV = c.kv_dim();
  for (int64_t i = 0; i < KV; ++i)
    ASSERT_NEAR(a.cache().k(0)[i], inline_fwd.cache().k(0)[int64_t(kPrefix.size()) * KV + i], 1e-5);
}

// Hooks see only body rows, at absolute positions P.., so quantization never touches the prefix.
TEST(KvPrefix, HooksSeeOnlyTheBodyAtAbsolutePositions) {
  const auto model = load("stories260K");
  Forward fwd(model, 32);
  fwd.set_prefix(KvPrefix::compute(model, kPrefix));
  std::vector<int32_t> seen_pos, seen_ids;
  fwd.hooks().add(Site::K, 0, [&](SiteView& v) {
    seen_pos.assign(v.positions.begin(), v.positions.end());
    seen_ids.assign(v.token_ids.begin(), v.token_ids.end());
  });
  fwd.step(kBody, false);
  ASSERT_EQ(seen_pos.size(), kBody.size());
  for (size_t t = 0; t < kBody.size(); ++t) EXPECT_EQ(seen_pos[t], int32_t(kPrefix.size() + t));
  EXPECT_EQ(seen_ids, kBody);
}

TEST(KvPrefix, MisuseIsAnError) {
  const auto model = load("stories260K");
  const auto other = load("mixtext-2.5M");
  const auto prefix = KvPrefix::compute(model, kPrefix);
  Forward fwd(model, 16);
  fwd.step(kBody, false);
  EXPECT_NE(testing::error_of([&] { fwd.set_prefix(prefix); }).find("between sequences"), std::string::npos);
  Forward wrong(other, 16);
  EXPECT_NE(testing::error_of([&] { wrong.set_prefix(prefix); }).find("layers"), std::string::npos);
  Forward full(model, model->config().max_position_embeddings);
  EXPECT_NE(testing::error_of([&] { full.set_prefix(prefix); }).find("max_position_embeddings"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { KvPrefix::compute(model, {}); }).find("empty"), std::string::npos);
  Forward small(model, 4);
  small.set_prefix(prefix);
  EXPECT_THROW(small.step(kBody, false), Error);  // 12 body tokens > 4 cache rows
  small.set_prefix(nullptr);
  EXPECT_EQ(small.n_past(), 0);
}

}  // namespace
}  // namespace sinkq
