// The whole model's gradient (src/train/grad_model.h) against central finite differences of its
// loss in double precision, on a tiny random model (GQA, q/k/v biases, llama3 RoPE scaling, a
// sliding window variant, a 2-token KV prefix) and on stories260K: every parameter tensor (sampled
// entries), each layer's pre-RoPE K and V, and the prefix's K and V. The float forward equals the
// engine's Forward logits.
//
// Tolerance (double, h = 1e-5): the central difference's rounding error is ≈ ε·|L|/h ≈ 2e-10
// (ε = 1.1e-16, |L| <= ~20 here) and its truncation error h²·|L'''|/6 ≈ 1e-11 for O(1) third
// derivatives, so |fd − g| <= 1e-9 + 1e-6·|g| holds with margin while a wrong term (an O(|g|)
// change) fails it.
#include "train/grad_model.h"

#include <gtest/gtest.h>

#include <random>

#include "train/train_testutil.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::train {
namespace {

// Perturbs the model's weights away from Model::random's ones / zeros (norms, biases) so their
// gradients are generic.
void jitter(Params<double>& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 0.1);
  p.for_each([&](const std::string&, std::vector<double>& v) {
    for (double& x : v) x += d(rng);
  });
}

// Checks `per_tensor` sampled entries of every tensor, 6 sampled pre-RoPE K and V entries of every
// layer, and every third entry of the prefix's K and V.
void check_model(const ModelConfig& c, Params<double> p, const std::vector<int32_t>& toks,
                 const std::vector<int32_t>& targets, PrefixKv<double>* prefix, int per_tensor) {
  const Gradients<double> g = loss_and_grad(c, p, toks, targets, prefix);
  EXPECT_GT(g.loss, 0.0);
  std::mt19937_64 rng(7);
  auto L = [&] { return loss(c, p, toks, targets, prefix); };
  int checked = 0;
  std::vector<std::pair<std::string, std::vector<double>*>> tensors;
  p.for_each([&](const std::string& n, std::vector<double>& v) { tensors.emplace_back(n, &v); });
  std::vector<const std::vector<double>*> grads;
  g.params.for_each([&](const std::string&, const std::vector<double>& v) { grads.push_back(&v); });
  ASSERT_EQ(tensors.size(), grads.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    auto& [name, v] = tensors[k];
    for (int s = 0; s < per_tensor; ++s) {
      const size_t i = std::uniform_int_distribution<size_t>(0, v->size() - 1)(rng);
      expect_close(fd_at(L, (*v)[i]), (*grads[k])[i], name + "[" + std::to_string(i) + "]");
      ++checked;
    }
  }
  const int64_t KV = c.kv_dim(), T = int64_t(toks.size());
  for (int l = 0; l < c.num_layers; ++l)
    for (bool value : {false, true})
      for (int s = 0; s < 6; ++s) {
        const int64_t i = std::uniform_int_distribution<int64_t>(0, T * KV - 1)(rng);
        KvNudge up{l, value, i, kH}, down{l, value, i, -kH};
        const double fd = (loss(c, p, toks, targets, prefix, nullptr, up) - loss(c, p, toks, targets, prefix, nullptr, down)) / (2 * kH);
        expect_close(fd, (value ? g.v : g.k_pre)[size_t(l)][size_t(i)],
                     fmt::format("layer {} {} [{}]", l, value ? "V" : "K (pre-RoPE)", i));
        ++checked;
      }
  if (prefix)
    for (int l = 0; l < c.num_layers; ++l)
      for (size_t i = 0; i < prefix->k[size_t(l)].size(); i += 3) {
        expect_close(fd_at(L, prefix->k[size_t(l)][i]), g.prefix_k[size_t(l)][i], fmt::format("prefix K layer {} [{}]", l, i));
        expect_close(fd_at(L, prefix->v[size_t(l)][i]), g.prefix_v[size_t(l)][i], fmt::format("prefix V layer {} [{}]", l, i));
        checked += 2;
      }
  std::printf("  %d gradient entries checked, loss %.6f\n", checked, g.loss);
}

// The float training forward is the engine's: logits against Forward behind the same prefix
// (fp32 summation orders differ: 1e-4 relative to the largest logit).
void expect_training_forward_is_engines(const std::shared_ptr<const Model>& m, const std::shared_ptr<const KvPrefix>& kp,
                                        const std::vector<int32_t>& toks, const std::vector<int32_t>& targets) {
  const Params<float> pf = Params<float>::from_model(*m);
  const PrefixKv<float> pref = PrefixKv<float>::from(*kp);
  std::vector<float> mine;
  loss(m->config(), pf, toks, targets, &pref, &mine);
  Forward f(m, 32);
  f.set_prefix(kp);
  const auto want = f.step(toks, /*all_logits=*/true);
  EXPECT_LE(testing::rel_diff(mine, std::vector<float>(want.begin(), want.end())), 1e-4);
}

TEST(GradModel, TinyModelAgainstFiniteDifferences) {
  for (bool llama3 : {false, true})
    for (int window : {0, 5})
      for (bool with_prefix : {false, true}) {
        SCOPED_TRACE(fmt::format("llama3 {} window {} prefix {}", llama3, window, with_prefix));
        const ModelConfig c = tiny_config(llama3, window);
        const auto m = Model::random(c, DType::F32, 3);
        Params<double> p = Params<double>::from_model(*m);
        jitter(p, 11);
        std::vector<int32_t> toks = {1, 7, 3, 3, 19, 25, 2, 39}, targets = {7, 3, 3, 19, 25, 2, 39, -1};
        PrefixKv<double> pre;
        if (with_prefix) {
          std::mt19937_64 rng(5);
          std::normal_distribution<double> d(0.0, 0.5);
          pre.P = 2;
          for (int l = 0; l < c.num_layers; ++l) {
            pre.k.emplace_back(size_t(2 * c.kv_dim()));
            pre.v.emplace_back(size_t(2 * c.kv_dim()));
            for (double& x : pre.k.back()) x = d(rng);
            for (double& x : pre.v.back()) x = d(rng);
          }
        }
        check_model(c, p, toks, targets, with_prefix ? &pre : nullptr, 12);
      }
}

// stories260K (5 layers, GQA 8:4, vocab 512, tied embeddings: the lm_head gradient lands in the
// embedding table) behind its own [BOS] KV prefix.
TEST(GradModel, Stories260KAgainstFiniteDifferences) {
  const auto m = Model::load(testing::shared_dir() + "/models/stories260K");
  const ModelConfig& c = m->config();
  Params<double> p = Params<double>::from_model(*m);
  const std::vector<int32_t> toks = testing::prompt(12, 3);
  std::vector<int32_t> targets(toks.begin() + 1, toks.end());
  targets.push_back(-1);
  const auto kp = KvPrefix::compute(m, {1});
  PrefixKv<double> pre = PrefixKv<double>::from(*kp);
  check_model(c, p, toks, targets, &pre, 4);
  expect_training_forward_is_engines(m, kp, toks, targets);
}

// Every family's extra ops (io/config.h LayerSpec) in the training forward and backward: the
// transformers fixtures of tests/data/families (Qwen3 q/k norms; Gemma 2 post-norms, GeGLU, the
// embedding scale, query_pre_attn_scalar, attention and final soft-caps, alternating windows;
// Gemma 3 with its two RoPE bases; Phi-3's split fused linears) behind a 2-token prefix, against
// finite differences (same tolerance), and the float training forward against Forward.
TEST(GradModel, FamiliesAgainstFiniteDifferences) {
  for (const char* family : {"qwen3", "gemma2", "gemma3", "phi3"}) {
    SCOPED_TRACE(family);
    const auto m = Model::load(std::string(SINKQ_SOURCE_DIR) + "/tests/data/families/" + family);
    const ModelConfig& c = m->config();
    Params<double> p = Params<double>::from_model(*m);
    // 14 tokens behind 2 prefix rows: past the 8-token windows, so the masks differ per layer.
    const std::vector<int32_t> toks = {5, 17, 3, 88, 41, 9, 60, 2, 33, 71, 14, 50, 8, 27};
    std::vector<int32_t> targets(toks.begin() + 1, toks.end());
    targets.push_back(-1);
    const auto kp = KvPrefix::compute(m, {11, 23});
    PrefixKv<double> pre = PrefixKv<double>::from(*kp);
    check_model(c, p, toks, targets, &pre, 3);
    expect_training_forward_is_engines(m, kp, toks, targets);
  }
}

// IntactKV's objective (layer-output MSE against another model's layer outputs): its gradient with
// respect to the prefix's K and V and the layers' K / V against central differences (same tolerance).
TEST(GradModel, LayerMseAgainstFiniteDifferences) {
  const ModelConfig c = tiny_config(true, 0);
  const auto m = Model::random(c, DType::F32, 3);
  Params<double> fp = Params<double>::from_model(*m), q = fp;
  jitter(q, 12);  // the "quantized" model: the same shapes, other weights
  const std::vector<int32_t> toks = {1, 7, 3, 3, 19, 25};
  PrefixKv<double> pre;
  pre.P = 2;
  std::mt19937_64 rng(9);
  std::normal_distribution<double> d(0.0, 0.5);
  for (int l = 0; l < c.num_layers; ++l) {
    pre.k.emplace_back(size_t(2 * c.kv_dim()));
    pre.v.emplace_back(size_t(2 * c.kv_dim()));
    for (double& x : pre.k.back()) x = d(rng);
    for (double& x : pre.v.back()) x = d(rng);
  }
  const auto targets = layer_outputs(c, fp, toks, &pre);
  ASSERT_EQ(targets.size(), size_t(c.num_layers));
  const auto g = layer_mse_and_grad(c, q, toks, targets, &pre);
  EXPECT_GT(g.loss, 0.0);
  EXPECT_TRUE(g.params.embed.empty());
  EXPECT_EQ(layer_mse(c, q, toks, targets, &pre), g.loss);  // the forward-only form: the same value
  auto L = [&] { return layer_mse(c, q, toks, targets, &pre); };
  int checked = 0;
  for (int l = 0; l < c.num_layers; ++l)
    for (size_t i = 0; i < pre.k[size_t(l)].size(); ++i) {
      expect_close(fd_at(L, pre.k[size_t(l)][i]), g.prefix_k[size_t(l)][i], fmt::format("prefix K layer {} [{}]", l, i));
      expect_close(fd_at(L, pre.v[size_t(l)][i]), g.prefix_v[size_t(l)][i], fmt::format("prefix V layer {} [{}]", l, i));
      checked += 2;
    }
  // The objective is 0 against the model's own outputs.
  EXPECT_NEAR(layer_mse_and_grad(c, fp, toks, targets, &pre).loss, 0.0, 1e-20);
  std::printf("  %d prefix gradient entries checked, loss %.6f\n", checked, g.loss);
}

// The float path (threaded: the linear layers and attention split over OpenMP threads) computes the
// double path's gradient in fp32: per tensor, max |g_f − g_d| <= 1e-3·max |g_d| (fp32 sums of a few
// hundred terms through ~12 ops: relative error ~1e-5 typical, 1e-3 leaves margin for cancellation
// in small entries while any wrong or missing term would be O(1) of the tensor's scale).
TEST(GradModel, FloatPathMatchesDouble) {
  const auto m = Model::load(testing::shared_dir() + "/models/stories260K");
  const ModelConfig& c = m->config();
  const std::vector<int32_t> toks = testing::prompt(48, 5);
  std::vector<int32_t> targets(toks.begin() + 1, toks.end());
  targets.push_back(-1);
  const auto gd = loss_and_grad(c, Params<double>::from_model(*m), toks, targets);
  const auto gf = loss_and_grad(c, Params<float>::from_model(*m), toks, targets);
  EXPECT_NEAR(gf.loss, gd.loss, 1e-5 * gd.loss);
  std::vector<std::pair<std::string, const std::vector<double>*>> d;
  gd.params.for_each([&](const std::string& n, const std::vector<double>& v) { d.emplace_back(n, &v); });
  size_t k = 0;
  gf.params.for_each([&](const std::string& n, const std::vector<float>& v) {
    ASSERT_EQ(n, d[k].first);
    double scale = 0, err = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      scale = std::max(scale, std::abs((*d[k].second)[i]));
      err = std::max(err, std::abs(double(v[i]) - (*d[k].second)[i]));
    }
    EXPECT_LE(err, 1e-3 * scale) << n;
    ++k;
  });
  EXPECT_EQ(k, d.size());
  // Without the weights' gradients: the same K / V gradients, no parameter buffers.
  const auto gkv = loss_and_grad(c, Params<float>::from_model(*m), toks, targets, nullptr, /*param_grads=*/false);
  EXPECT_TRUE(gkv.params.embed.empty());
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_EQ(gkv.k_pre[size_t(l)], gf.k_pre[size_t(l)]);
    EXPECT_EQ(gkv.v[size_t(l)], gf.v[size_t(l)]);
  }
}

}  // namespace
}  // namespace sinkq::train
