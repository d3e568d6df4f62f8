// The fp32 forward pass against reference logits from independent implementations
// (../shared/golden: llama2.c run.c for stories260K, a numpy float64 HF forward for mixtext-2.5M).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "core/mmap.h"
#include "model/model.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

struct Golden {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;
};

Golden load_golden(const std::string& name) {
  const auto j = nlohmann::json::parse(read_file(testing::shared_dir() + "/golden/" + name + "/logits.json"));
  return {j.at("input_ids").get<std::vector<int32_t>>(), j.at("logits").get<std::vector<std::vector<float>>>()};
}

std::shared_ptr<Model> load_model(const std::string& name) {
  return Model::load(testing::shared_dir() + "/models/" + name);
}

// Both goldens are rounded to 6 significant digits (a 1e-4 grid for |logit| >= 10, so up to 5e-5
// of rounding) and a correct fp32 engine differs from the float64 truth by <= ~6e-5 (golden
// README): 2e-4 is the README's recommended bound with margin for OpenBLAS summation order.
constexpr double kLogitAtol = 2e-4;

void expect_logits_match(const std::string& name) {
  const auto model = load_model(name);
  const Golden g = load_golden(name);
  const int64_t V = model->config().vocab_size;
  Forward fwd(model, int64_t(g.ids.size()));
  const auto logits = fwd.step(g.ids, /*all_logits=*/true);
  double worst = 0;
  for (size_t p = 0; p < g.ids.size(); ++p) {
    ASSERT_EQ(int64_t(g.logits[p].size()), V);
    for (int64_t i = 0; i < V; ++i) {
      const double d = std::abs(double(logits[p * size_t(V) + size_t(i)]) - g.logits[p][size_t(i)]);
      worst = std::max(worst, d);
      ASSERT_LE(d, kLogitAtol) << name << " position " << p << " logit " << i;
    }
  }
  ::testing::Test::RecordProperty("max_abs_diff", std::to_string(worst));
  std::printf("%s: max |logit - golden| = %.3g over %zu positions\n", name.c_str(), worst, g.ids.size());
}

TEST(Golden, Stories260KLogitsEveryPosition) { expect_logits_match("stories260K"); }
TEST(Golden, Mixtext25MLogitsEveryPosition) { expect_logits_match("mixtext-2.5M"); }

// Decode one token at a time through the KV cache == one prefill over the whole prompt. Both
// paths compute the same sums in a different order (GEMV vs sgemm): fp32 reassociation over
// dot products of length <= 512 with |logits| <= 25 stays far below 1e-4.
TEST(Forward, DecodeOneByOneEqualsPrefill) {
  for (const char* name : {"stories260K", "mixtext-2.5M"}) {
    const auto model = load_model(name);
    const Golden g = load_golden(name);
    const size_t V = size_t(model->config().vocab_size);
    Forward a(model, int64_t(g.ids.size())), b(model, int64_t(g.ids.size()));
    const auto ref = a.step(g.ids, true);
    std::vector<float> prefill(ref.begin(), ref.end());
    for (size_t p = 0; p < g.ids.size(); ++p) {
      const auto l = b.step(std::span(&g.ids[p], 1), false);
      for (size_t i = 0; i < V; ++i) ASSERT_NEAR(l[i], prefill[p * V + i], 1e-4) << name << " pos " << p;
    }
    EXPECT_EQ(b.n_past(), int64_t(g.ids.size()));
  }
}

// Splitting a prompt into chunks (max_batch) changes only the order of work, not the math.
TEST(Forward, ChunkedPrefillEqualsWholePrefill) {
  const auto model = load_model("mixtext-2.5M");
  const Golden g = load_golden("mixtext-2.5M");
  const size_t V = size_t(model->config().vocab_size);
  Forward whole(model, 64), chunked(model, 64, /*max_batch=*/5);
  const auto a = whole.step(g.ids, true);
  std::vector<float> ref(a.begin(), a.end());
  const auto b = chunked.step(g.ids, true);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(b[i], ref[i], 1e-4) << "row " << i / V;
  // Last-row-only logits are the last row of the full logits.
  chunked.reset();
  const auto last = chunked.step(g.ids, false);
  ASSERT_EQ(last.size(), V);
  for (size_t i = 0; i < V; ++i) ASSERT_NEAR(last[i], ref[(g.ids.size() - 1) * V + i], 1e-4);
}

// embed + run_layer for every layer is step()'s layer loop, called from outside: the residual
// stream after the last layer is bit-identical (same kernels, same order), and run_layer neither
// advances n_past nor forgets the cache rows it wrote (a second call on the same rows is a no-op).
TEST(Forward, LayerAtATimeEqualsStep) {
  const auto model = load_model("mixtext-2.5M");
  const Golden g = load_golden("mixtext-2.5M");
  const int L = model->config().num_layers;
  const size_t H = size_t(model->config().hidden_size);
  Forward whole(model, 64), layered(model, 64);
  std::vector<float> ref;
  whole.hooks().add(Site::Out, L - 1, [&](SiteView& v) { ref.assign(v.data, v.data + v.tokens * v.features); });
  whole.step(g.ids, false);
  std::vector<float> x(g.ids.size() * H);
  layered.embed(g.ids, x.data());
  for (int l = 0; l < L; ++l) layered.run_layer(l, g.ids, x.data());
  EXPECT_EQ(layered.n_past(), 0);
  ASSERT_EQ(x.size(), ref.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], ref[i]) << i;
  EXPECT_THROW(layered.run_layer(L, g.ids, x.data()), Error);
  Forward small(model, 64, /*max_batch=*/4);
  EXPECT_THROW(small.run_layer(0, g.ids, x.data()), Error);  // more tokens than max_batch
}

// A layer saved at o_in / mlp_in / down_in and resumed there (Forward::resume_layer) gives the
// whole layer's output bit for bit, with the site's hook run on resume (here a hook that rounds
// its input to multiples of 1/8, so a skipped or doubled hook would show); other sites are refused.
TEST(Forward, ResumedLayerEqualsTheWholeLayer) {
  const auto model = load_model("mixtext-2.5M");
  const Golden g = load_golden("mixtext-2.5M");
  const int L = model->config().num_layers;
  const size_t H = size_t(model->config().hidden_size);
  for (Site at : {Site::OIn, Site::MlpIn, Site::DownIn}) {
    SCOPED_TRACE(site_name(at));
    Forward f(model, 64);
    int calls = 0;
    f.hooks().add(at, -1, [&](SiteView& v) {
      ++calls;
      for (int64_t i = 0; i < v.tokens * v.features; ++i) v.data[i] = std::nearbyint(v.data[i] * 8.0f) / 8.0f;
    });
    std::vector<float> x(g.ids.size() * H);
    f.embed(g.ids, x.data());
    for (int l = 0; l < L; ++l) {
      std::vector<float> whole = x, resumed(x.size());
      LayerResume saved;
      saved.site = at;
      f.run_layer(l, g.ids, whole.data(), &saved);
      f.resume_layer(l, g.ids, saved, resumed.data());
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(whole[i], resumed[i]) << "layer " << l << " element " << i;
      x = whole;
    }
    EXPECT_EQ(calls, 2 * L);
    LayerResume bad;
    bad.site = Site::K;
    EXPECT_THROW(f.run_layer(0, g.ids, x.data(), &bad), Error);
    EXPECT_THROW(f.resume_layer(0, g.ids, bad, x.data()), Error);
    LayerResume empty;  // no saved state of these tokens
    EXPECT_THROW(f.resume_layer(0, g.ids, empty, x.data()), Error);
  }
}

TEST(Forward, ContextOverflowIsAnError) {
  const auto model = load_model("stories260K");
  EXPECT_THROW(Forward(model, model->config().max_position_embeddings + 1), Error);
  Forward fwd(model, 4);
  const std::vector<int32_t> five{1, 2, 3, 4, 5};
  EXPECT_THROW(fwd.step(five, false), Error);
  const std::vector<int32_t> bad{1, 100000};
  EXPECT_THROW(fwd.step(bad, false), Error);  // token id outside the vocabulary
}

TEST(Forward, ContextBeyondMemoryIsRefusedBeforeAllocation) {
  // A tiny model that claims 2^30 positions: a cache of 2^30 tokens (8 layers x 2 x kv_dim 16 x
  // fp32 = 1 KiB per token: 1 TiB) fits no test machine; the error names the figure and --ctx
  // instead of a std::bad_alloc or the OOM killer.
  testing::TempDir d;
  testing::TinyModelSpec spec;
  spec.layers = 8;
  spec.max_pos = 1 << 30;
  testing::write_tiny_model(d.path(), spec);
  const auto model = std::shared_ptr<const Model>(Model::load(d.path()));
  ASSERT_GT(mem_available_bytes(), 0u);  // Linux: /proc/meminfo is there
  const std::string e = testing::error_of([&] { Forward(model, int64_t(1) << 30); });
  EXPECT_NE(e.find("KV cache of 1073741824 tokens needs 1099.51 GB"), std::string::npos) << e;
  EXPECT_NE(e.find("--ctx"), std::string::npos) << e;
}

}  // namespace
}  // namespace sinkq
