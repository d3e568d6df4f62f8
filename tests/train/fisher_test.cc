// The Fisher file (src/train/fisher.h): for every sample and layer it holds the K (before RoPE) and
// V rows that the engine's forward computes at sites k_pre_rope / v, and their Fisher = (n·g)² with
// g the gradient of the mean NLL over n targets (loss_and_grad); the writer streams in the file's
// own order and leaves nothing behind when interrupted.
#include "train/fisher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/safetensors.h"
#include "train/grad_model.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::train {
namespace {

using ::testing::HasSubstr;

std::vector<float> read(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(t->nbytes / 4);
  std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

TEST(Fisher, FileHoldsActivationsAndSquaredGradients) {
  const auto m = Model::load(testing::shared_dir() + "/models/stories260K");
  const ModelConfig& c = m->config();
  const std::vector<std::vector<int32_t>> samples = {testing::prompt(20, 1), testing::prompt(13, 2)};
  testing::TempDir tmp;
  const std::string out = tmp.file("f.safetensors");
  int calls = 0;
  const FisherResult r = write_fisher(*m, samples, out, {{"model", "stories260K"}}, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.tokens, 33);
  const auto f = SafetensorsFile::open(out);
  EXPECT_EQ(f->metadata().at("format"), "sinkq-fisher");
  EXPECT_EQ(f->metadata().at("model"), "stories260K");
  EXPECT_EQ(f->tensors().size(), size_t(2 * c.num_layers * 4));
  const Params<float> p = Params<float>::from_model(*m);
  for (size_t s = 0; s < samples.size(); ++s) {
    // The engine's own K (pre-RoPE) and V rows for this sample.
    std::vector<std::vector<float>> k_site(size_t(c.num_layers)), v_site(size_t(c.num_layers));
    Forward fwd(m, 64);
    fwd.hooks().add(Site::KPreRope, -1, [&](SiteView& v) { k_site[size_t(v.layer)].assign(v.data, v.data + v.tokens * v.features); });
    fwd.hooks().add(Site::V, -1, [&](SiteView& v) { v_site[size_t(v.layer)].assign(v.data, v.data + v.tokens * v.features); });
    fwd.step(samples[s], false);
    std::vector<int32_t> targets(samples[s].begin() + 1, samples[s].end());
    targets.push_back(-1);
    const auto g = loss_and_grad(c, p, samples[s], targets, nullptr, false);
    const float n = float(samples[s].size() - 1);
    for (int l = 0; l < c.num_layers; ++l) {
      SCOPED_TRACE(fmt::format("sample {} layer {}", s, l));
      // Activations: the training forward's (float, sgemm) against the engine's (1e-5 relative).
      EXPECT_LE(testing::rel_diff(read(*f, fisher_tensor(int64_t(s), l, "k_pre_rope")), k_site[size_t(l)]), 1e-5);
      EXPECT_LE(testing::rel_diff(read(*f, fisher_tensor(int64_t(s), l, "v")), v_site[size_t(l)]), 1e-5);
      const std::vector<float> fk = read(*f, fisher_tensor(int64_t(s), l, "k_fisher"));
      ASSERT_EQ(fk.size(), g.k_pre[size_t(l)].size());
      for (size_t i = 0; i < fk.size(); ++i) {
        const float want = (g.k_pre[size_t(l)][i] * n) * (g.k_pre[size_t(l)][i] * n);
        EXPECT_EQ(fk[i], want);
        EXPECT_GE(fk[i], 0.0f);
      }
      const std::vector<float> fv = read(*f, fisher_tensor(int64_t(s), l, "v_fisher"));
      double sum = 0;
      for (float x : fv) sum += x;
      EXPECT_GT(sum, 0.0);  // every V row reaches the loss
    }
  }
}

TEST(Fisher, StreamWriterChecksOrderAndLeavesNothing) {
  testing::TempDir tmp;
  const std::string out = tmp.file("s.safetensors");
  const std::vector<float> a(6, 1.0f), b(4, 2.0f);
  {
    SafetensorsStreamWriter w(out, {{"b", DType::F32, {2, 2}}, {"a", DType::F32, {2, 3}}});
    EXPECT_EQ(w.next_name(), "a");
    EXPECT_THAT(testing::error_of([&] { w.write("b", std::as_bytes(std::span(b))); }), HasSubstr("where 'a' comes next"));
    w.write("a", std::as_bytes(std::span(a)));
    EXPECT_THAT(testing::error_of([&] { w.commit(); }), HasSubstr("1 of 2 tensors written ('b' is missing)"));
  }  // destroyed without commit
  EXPECT_FALSE(std::filesystem::exists(out));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path())) ++entries;
  EXPECT_EQ(entries, 0u);
  // Written in full, it reads back as write_safetensors writes it (same bytes).
  SafetensorsStreamWriter w(out, {{"b", DType::F32, {2, 2}}, {"a", DType::F32, {2, 3}}});
  w.write("a", std::as_bytes(std::span(a)));
  w.write("b", std::as_bytes(std::span(b)));
  w.commit();
  write_safetensors(tmp.file("t.safetensors"), {{"a", DType::F32, {2, 3}, std::as_bytes(std::span(a))},
                                                {"b", DType::F32, {2, 2}, std::as_bytes(std::span(b))}});
  EXPECT_EQ(read_file(out), read_file(tmp.file("t.safetensors")));
}

}  // namespace
}  // namespace sinkq::train
