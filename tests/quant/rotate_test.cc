// Hadamard rotation of a whole model (src/quant/rotate.h): the fused weights against explicit
// matrix products of the documented formulas, computational invariance (prefill and decode) on
// the shared models and on tiny random ones (MHA, GQA, Qwen2 biases + tied, bf16), what the
// rotation does to the activations and the KV cache, that every online hook is needed, errors,
// determinism.
#include "quant/rotate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using testing::prompt;
using testing::error_of;

const RotateConfig kRot{true, 42};

// fp32 rounding of the extra transforms: a rotated weight or activation carries a relative error
// of at most (m + log2(n/m) + 2)·2⁻²⁴ (the hadamard.h bound), ≤ 1.1e-5 for the largest m = 172,
// and a logit goes through ≤ 3 such transforms per layer and ≤ 6 layers: ≤ 1e-4 (brief's bound;
// the measured errors, printed, are ~100× smaller).
constexpr double kLogitTol = 1e-4;

std::shared_ptr<const Model> shared_model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  auto& m = cache[name];
  if (!m) m = Model::load(testing::shared_dir() + "/models/" + name);
  return m;
}

// A tiny random model written once per spec into a directory that lives as long as the binary
// (the loaded weights are mmapped from it).
std::shared_ptr<const Model> tiny_model(const std::string& name, const testing::TinyModelSpec& spec) {
  static testing::TempDir root;
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  auto& m = cache[name];
  if (!m) {
    const std::string dir = root.file(name);
    std::filesystem::create_directory(dir);
    testing::write_tiny_model(dir, spec);
    m = Model::load(dir);
  }
  return m;
}

testing::TinyModelSpec tiny_spec(int hidden, int intermediate, int heads, int kv_heads) {
  testing::TinyModelSpec s;
  s.hidden = hidden;
  s.intermediate = intermediate;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.link_tokenizer = false;
  return s;
}

// Qwen2 with q/k/v biases and tied embeddings; head_dim 12 (Paley I: H ≠ Hᵀ, so a transposed
// rotation anywhere would show), hidden 48 = 12·4, intermediate 56 = 28·2.
std::shared_ptr<const Model> qwen2_tied() {
  testing::TinyModelSpec s = tiny_spec(48, 56, 4, 2);
  s.architecture = "Qwen2ForCausalLM";
  s.tied = true;
  s.qkv_bias = true;
  return tiny_model("qwen2_bias_tied", s);
}

std::shared_ptr<const Model> model_by_name(const std::string& name) {
  if (name == "stories260K") return shared_model("stories260K");
  if (name == "mixtext") return shared_model("mixtext-2.5M");
  if (name == "qwen2_bias_tied") return qwen2_tied();
  if (name == "llama_mha") return tiny_model(name, tiny_spec(32, 48, 4, 4));
  if (name == "llama_gqa") return tiny_model(name, tiny_spec(64, 80, 8, 2));
  if (name == "llama_bf16") {
    testing::TinyModelSpec s = tiny_spec(32, 40, 4, 2);
    s.dtype = DType::BF16;
    return tiny_model(name, s);
  }
  ADD_FAILURE() << "unknown model " << name;
  return nullptr;
}

std::vector<float> prefill_logits(Forward& f, const std::vector<int32_t>& toks) {
  f.reset();
  const auto l = f.step(toks, true);
  return {l.begin(), l.end()};
}

// Token by token from an empty cache: the last-token logits of every step, concatenated.
std::vector<float> decode_logits(Forward& f, const std::vector<int32_t>& toks) {
  f.reset();
  std::vector<float> out;
  for (int32_t t : toks) {
    const auto l = f.step(std::span(&t, 1), false);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// std::max that keeps a NaN (std::max drops a NaN second argument): a NaN error must fail.
double worse(double worst, double x) { return std::isnan(worst) || std::isnan(x) ? NAN : std::max(worst, x); }

// max|a − b| / max|a|.
double rel_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = worse(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(a[i])));
  }
  return d / m;
}

std::vector<float> widened(const Mat& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  to_f32(m.dtype, m.data, v.data(), v.size());
  return v;
}

// Copies of a site's [T, F] block per layer during one prefill.
struct Capture {
  std::vector<std::vector<float>> layers;
  int handle = 0;
  Capture(Forward& f, Site s) : layers(static_cast<size_t>(f.model().config().num_layers)) {
    handle = f.hooks().add(s, -1, [this](SiteView& v) {
      layers[static_cast<size_t>(v.layer)].assign(v.data, v.data + v.tokens * v.features);
    });
  }
};

// ---- Dense double-precision reference of the documented formulas ----

struct Dense {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Dense(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  Dense(const std::vector<float>& f, int64_t r, int64_t c) : rows(r), cols(c), v(f.begin(), f.end()) {}
  double& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Dense mul(const Dense& a, const Dense& b) {
  SINKQ_ASSERT(a.cols == b.rows);
  Dense c(a.rows, b.cols);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k)
      for (int64_t j = 0; j < b.cols; ++j) c.at(i, j) += a.at(i, k) * b.at(k, j);
  return c;
}

Dense transposed(const Dense& a) {
  Dense t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t.at(j, i) = a.at(i, j);
  return t;
}

Dense diag(const float* g, int64_t n) {
  Dense d(n, n);
  for (int64_t i = 0; i < n; ++i) d.at(i, i) = g[i];
  return d;
}

// diag(R, R, ..., R), `count` blocks.
Dense block_diag(const Dense& r, int64_t count) {
  Dense d(r.rows * count, r.cols * count);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t i = 0; i < r.rows; ++i)
      for (int64_t j = 0; j < r.cols; ++j) d.at(b * r.rows + i, b * r.cols + j) = r.at(i, j);
  return d;
}

Dense of(const Mat& m) { return Dense(widened(m), m.rows, m.cols); }

// The normalized plain Hadamard H_n/√n (R3, R4).
Dense plain_hadamard(int64_t n) {
  Dense h(hadamard_matrix(n), n, n);
  for (double& x : h.v) x /= std::sqrt(double(n));
  return h;
}

// max|got − want| / max|want|.
double mat_rel_diff(const Mat& got, const Dense& want) {
  EXPECT_EQ(got.rows, want.rows);
  EXPECT_EQ(got.cols, want.cols);
  EXPECT_EQ(got.dtype, DType::F32);
  const std::vector<float> g = widened(got);
  double d = 0, m = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    d = worse(d, std::abs(g[i] - want.v[i]));
    m = std::max(m, std::abs(want.v[i]));
  }
  return d / m;
}

// ---- Tests ----

// Every fused matrix equals its formula in rotate.h, computed in double from explicit matrices:
// catches any transposed or misplaced rotation that invariance alone might hide in a symmetric H.
TEST(RotateWeights, FusedMatricesFollowTheDocumentedFormulas) {
  const auto base = qwen2_tied();
  const auto rot = rotate_model(base, kRot);
  const ModelConfig& c = base->config();
  const ModelWeights& a = base->weights();
  const ModelWeights& b = rot->weights();
  const int64_t H = c.hidden_size, hd = c.head_dim;
  const Dense Q(r1_rotation(c, kRot).matrix(), H, H);
  const Dense Qt = transposed(Q);
  const Dense R4 = plain_hadamard(c.intermediate_size);
  // fp32 rounding of the fused transforms against a double reference: ≤ (m + log2(n/m) + 2)·2⁻²⁴
  // per transform (hadamard.h bound), ≤ 1.9e-6 for m ≤ 28 here, two transforms at most per matrix.
  constexpr double kTol = 1e-5;
  double worst = 0;
  const auto rel_diff = [&worst](const Mat& got, const Dense& want) {
    const double d = mat_rel_diff(got, want);
    worst = worse(worst, d);
    return d;
  };

  EXPECT_LE(rel_diff(b.embed, mul(of(a.embed), Q)), kTol);
  ASSERT_NE(b.lm_head.data, b.embed.data);  // untied
  EXPECT_LE(rel_diff(b.lm_head, mul(mul(of(a.lm_head), diag(a.final_norm, H)), Q)), kTol);
  for (int l = 0; l < c.num_layers; ++l) {
    SCOPED_TRACE(l);
    const LayerWeights& s = a.layers[static_cast<size_t>(l)];
    const LayerWeights& d = b.layers[static_cast<size_t>(l)];
    const Dense R2(r2_rotation(c, kRot, l).matrix(), hd, hd);
    const Dense gA = diag(s.vec(VecRole::AttnNorm), H), gM = diag(s.vec(VecRole::MlpNorm), H);
    EXPECT_LE(rel_diff(d.mat(LinearRole::Q), mul(mul(of(s.mat(LinearRole::Q)), gA), Q)), kTol);
    EXPECT_LE(rel_diff(d.mat(LinearRole::K), mul(mul(of(s.mat(LinearRole::K)), gA), Q)), kTol);
    EXPECT_LE(rel_diff(d.mat(LinearRole::V), mul(mul(block_diag(transposed(R2), c.num_kv_heads), mul(of(s.mat(LinearRole::V)), gA)), Q)), kTol);
    EXPECT_LE(rel_diff(d.mat(LinearRole::O), mul(mul(Qt, of(s.mat(LinearRole::O))), block_diag(R2, c.num_heads))), kTol);
    EXPECT_LE(rel_diff(d.mat(LinearRole::Gate), mul(mul(of(s.mat(LinearRole::Gate)), gM), Q)), kTol);
    EXPECT_LE(rel_diff(d.mat(LinearRole::Up), mul(mul(of(s.mat(LinearRole::Up)), gM), Q)), kTol);
    EXPECT_LE(rel_diff(d.mat(LinearRole::Down), mul(mul(Qt, of(s.mat(LinearRole::Down))), R4)), kTol);
    // Biases: q/k untouched (shared), v rotated per kv head.
    EXPECT_EQ(d.vec(VecRole::QBias), s.vec(VecRole::QBias));
    EXPECT_EQ(d.vec(VecRole::KBias), s.vec(VecRole::KBias));
    const Dense bv = mul(Dense(std::vector<float>(s.vec(VecRole::VBias), s.vec(VecRole::VBias) + c.kv_dim()), c.num_kv_heads, hd), R2);
    for (int64_t i = 0; i < c.kv_dim(); ++i) EXPECT_NEAR(d.vec(VecRole::VBias)[i], bv.v[static_cast<size_t>(i)], 1e-6) << i;
    for (int64_t i = 0; i < H; ++i) {
      EXPECT_EQ(d.vec(VecRole::AttnNorm)[i], 1.0f);
      EXPECT_EQ(d.vec(VecRole::MlpNorm)[i], 1.0f);
    }
  }
  for (int64_t i = 0; i < H; ++i) EXPECT_EQ(b.final_norm[i], 1.0f);
  std::printf("[ measured ] qwen2_bias_tied fused matrices: max|Δ| / max|W'| = %.2e\n", worst);
}

class RotationInvariance : public ::testing::TestWithParam<std::string> {};

// The rotated model with its online rotations computes the original's logits: prefill (all
// positions) and token-by-token decode (every step's last-token logits).
TEST_P(RotationInvariance, PrefillAndDecodeLogitsEqualTheOriginal) {
  const auto base = model_by_name(GetParam());
  ASSERT_NE(base, nullptr);
  const auto rot = rotate_model(base, kRot);
  ASSERT_NE(rot.get(), base.get());
  const auto toks = prompt(72);  // > 64 rows: prefill takes the sgemm path on every ISA, decode GEMV
  Forward f0(base, 72), f1(rot, 72);
  EXPECT_EQ(attach_online_rotation(f1, kRot).size(), 3u);
  const double prefill = rel_max_diff(prefill_logits(f0, toks), prefill_logits(f1, toks));
  const double decode = rel_max_diff(decode_logits(f0, toks), decode_logits(f1, toks));
  std::printf("[ measured ] %s: prefill %.2e, decode %.2e (max|Δlogit| / max|logit|)\n", GetParam().c_str(),
              prefill, decode);
  EXPECT_LE(prefill, kLogitTol);
  EXPECT_LE(decode, kLogitTol);
}

INSTANTIATE_TEST_SUITE_P(Rotation, RotationInvariance,
                         ::testing::Values("stories260K", "mixtext", "llama_mha", "llama_gqa", "qwen2_bias_tied",
                                           "llama_bf16"));

// R1 really moves the residual stream: the rotated model's site `out` is the original's times Q
// (so it is not the original), on mixtext.
TEST(RotationActivations, ResidualStreamIsTheOriginalTimesR1) {
  const auto base = shared_model("mixtext-2.5M");
  const auto rot = rotate_model(base, kRot);
  const ModelConfig& c = base->config();
  const auto toks = prompt(32);
  Forward f0(base, 32), f1(rot, 32);
  attach_online_rotation(f1, kRot);
  Capture o0(f0, Site::Out), o1(f1, Site::Out);
  prefill_logits(f0, toks);
  prefill_logits(f1, toks);
  const RandomHadamard q = r1_rotation(c, kRot);
  for (int l = 0; l < c.num_layers; ++l) {
    SCOPED_TRACE(l);
    std::vector<float> want = o0.layers[static_cast<size_t>(l)];
    const double changed = rel_max_diff(want, o1.layers[static_cast<size_t>(l)]);
    EXPECT_GT(changed, 0.5);  // a different basis, not a perturbation
    q.forward(want.data(), int64_t(toks.size()));
    EXPECT_LE(rel_max_diff(want, o1.layers[static_cast<size_t>(l)]), kLogitTol);
  }
}

// Mean over tokens and layers of max|x_t| / rms(x_t) at a [T, F] site.
double mean_peak_to_rms(const Capture& cap, int64_t features) {
  double sum = 0;
  int64_t n = 0;
  for (const auto& block : cap.layers) {
    for (size_t r = 0; r * size_t(features) < block.size(); ++r) {
      const float* x = block.data() + r * size_t(features);
      double mx = 0, ss = 0;
      for (int64_t i = 0; i < features; ++i) {
        mx = std::max(mx, std::abs(double(x[i])));
        ss += double(x[i]) * x[i];
      }
      sum += mx / std::sqrt(ss / double(features));
      ++n;
    }
  }
  return sum / double(n);
}

// The point of the rotation: flatter channels at the inputs of the linear layers. On mixtext
// the mean token-wise max/rms drops at attn_in from 3.59 to 2.93..3.00 (seeds 0..5, R1) and at
// down_in from 11.97 to 2.84 (R4, no seed): both end near the ≈ 2.9 of a Gaussian row of that
// width, i.e. as flat as a rotation makes them. attn_in starts mild (mixtext has no massive
// channels), so its margin is smaller; the thresholds sit between measured and original.
TEST(RotationActivations, ChannelsGetFlatterOnMixtext) {
  const auto base = shared_model("mixtext-2.5M");
  const auto rot = rotate_model(base, kRot);
  const ModelConfig& c = base->config();
  const auto toks = prompt(64);
  Forward f0(base, 64), f1(rot, 64);
  attach_online_rotation(f1, kRot);  // captures below run after the rotation hooks
  Capture a0(f0, Site::AttnIn), a1(f1, Site::AttnIn), d0(f0, Site::DownIn), d1(f1, Site::DownIn);
  prefill_logits(f0, toks);
  prefill_logits(f1, toks);
  const double attn0 = mean_peak_to_rms(a0, c.hidden_size), attn1 = mean_peak_to_rms(a1, c.hidden_size);
  const double down0 = mean_peak_to_rms(d0, c.intermediate_size), down1 = mean_peak_to_rms(d1, c.intermediate_size);
  std::printf("[ measured ] mixtext mean max/rms: attn_in %.2f -> %.2f, down_in %.2f -> %.2f\n", attn0, attn1,
              down0, down1);
  EXPECT_LT(attn1, 0.88 * attn0);  // measured ≤ 0.84·attn0
  EXPECT_LT(down1, 0.3 * down0);   // measured 0.24·down0
}

// R3 and R2 seen in the KV cache, R3 at q, R4 at down_in: every layer's cache rows of the rotated
// model are the original's rotated per head, K by H/√head_dim (explicit matrix), V by that layer's
// R2; q and down_in likewise (down_in by H/√I). Relative to each row's norm.
TEST(RotationActivations, KvCacheQAndDownInAreTheOriginalsRotated) {
  for (const std::string name : {"mixtext", "qwen2_bias_tied"}) {
    SCOPED_TRACE(name);
    const auto base = model_by_name(name);
    const auto rot = rotate_model(base, kRot);
    const ModelConfig& c = base->config();
    const int64_t hd = c.head_dim, T = 16;
    const auto toks = prompt(int(T));
    Forward f0(base, T), f1(rot, T);
    attach_online_rotation(f1, kRot);
    Capture q0(f0, Site::Q), q1(f1, Site::Q), d0(f0, Site::DownIn), d1(f1, Site::DownIn);
    prefill_logits(f0, toks);
    prefill_logits(f1, toks);
    const Dense H3 = plain_hadamard(hd), H4 = plain_hadamard(c.intermediate_size);
    double worst = 0;
    // Rows of got[rows, n·heads] against want · diag(R, ..., R), each row relative to its norm.
    auto check = [&](const float* want, const float* got, int64_t rows, int64_t heads, const Dense& R) {
      const int64_t n = R.rows, F = n * heads;
      const Dense w = mul(Dense(std::vector<float>(want, want + rows * F), rows * heads, n), R);
      for (int64_t r = 0; r < rows; ++r) {
        double d2 = 0, n2 = 0;
        for (int64_t i = 0; i < F; ++i) {
          const double e = w.v[static_cast<size_t>(r * F + i)];
          d2 += (got[r * F + i] - e) * (got[r * F + i] - e);
          n2 += e * e;
        }
        worst = worse(worst, std::sqrt(d2 / n2));
      }
    };
    for (int l = 0; l < c.num_layers; ++l) {
      const Dense R2(r2_rotation(c, kRot, l).matrix(), hd, hd);
      check(f0.cache().k(l), f1.cache().k(l), T, c.num_kv_heads, H3);
      check(f0.cache().v(l), f1.cache().v(l), T, c.num_kv_heads, R2);
      check(q0.layers[size_t(l)].data(), q1.layers[size_t(l)].data(), T, c.num_heads, H3);
      check(d0.layers[size_t(l)].data(), d1.layers[size_t(l)].data(), T, 1, H4);
    }
    std::printf("[ measured ] %s: worst ‖Δrow‖ / ‖row‖ over K, V, q, down_in = %.2e\n", name.c_str(), worst);
    // fp32 rounding of the fused and online transforms: ≤ (m + log2(n/m) + 2)·2⁻²⁴ ≤ 1.9e-6 each
    // for these sizes (hadamard.h bound), a few per layer; ≤ 6 layers stay below 1e-5.
    EXPECT_LE(worst, 1e-5);
  }
}

// The online rotations are needed: without any hook the logits are wrong (R4 missing); without
// only q's or only k's R3 they are wrong; without both R3 hooks they are right again (q·kᵀ is
// unchanged by the pair; only the K cache differs).
TEST(RotationOnline, EveryHookMattersAndR3WorksInPairs) {
  const auto base = shared_model("stories260K");
  const auto rot = rotate_model(base, kRot);
  const auto toks = prompt(24);
  Forward f0(base, 32);
  const auto want = prefill_logits(f0, toks);
  auto without = [&](std::vector<size_t> removed) {
    Forward f(rot, 32);
    const std::vector<int> h = attach_online_rotation(f, kRot);
    for (size_t i : removed) f.hooks().remove(h[i]);
    return rel_max_diff(want, prefill_logits(f, toks));
  };
  const double none = without({0, 1, 2}), no_q = without({0}), no_k = without({1}), no_down = without({2}),
               no_r3 = without({0, 1});
  std::printf("[ measured ] stories260K rel. logit error without hooks: all %.2e, q %.2e, k %.2e, down_in %.2e, "
              "q+k %.2e\n", none, no_q, no_k, no_down, no_r3);
  EXPECT_GT(none, 0.05);
  EXPECT_GT(no_q, 0.05);
  EXPECT_GT(no_k, 0.05);
  EXPECT_GT(no_down, 0.05);
  EXPECT_LE(no_r3, kLogitTol);
}

TEST(RotateConfig, CheckRotatableNamesTheDimension) {
  ModelConfig c = shared_model("stories260K")->config();
  EXPECT_NO_THROW(check_rotatable(c));
  c.hidden_size = 100;
  std::string e = error_of([&] { check_rotatable(c); });
  EXPECT_NE(e.find("hidden_size = 100"), std::string::npos) << e;
  EXPECT_NE(e.find("2^k · m"), std::string::npos) << e;
  EXPECT_NE(e.find("172"), std::string::npos) << e;  // the supported base sizes are listed
  c.hidden_size = 64;
  c.intermediate_size = 272;  // 16·17
  e = error_of([&] { check_rotatable(c); });
  EXPECT_NE(e.find("intermediate_size = 272"), std::string::npos) << e;
  c.intermediate_size = 172;
  c.head_dim = 6;
  e = error_of([&] { check_rotatable(c); });
  EXPECT_NE(e.find("head_dim = 6"), std::string::npos) << e;

  // rotate_model and attach_online_rotation check too; off, neither looks at the model.
  c.head_dim = 8;
  c.hidden_size = 100;
  const std::shared_ptr<const Model> bad = Model::random(c, DType::F32, 1);
  EXPECT_NE(error_of([&] { rotate_model(bad, kRot); }).find("hidden_size = 100"), std::string::npos);
  Forward f(bad, 8);
  EXPECT_NE(error_of([&] { attach_online_rotation(f, kRot); }).find("hidden_size = 100"), std::string::npos);
  EXPECT_EQ(rotate_model(bad, RotateConfig{}).get(), bad.get());
  EXPECT_TRUE(attach_online_rotation(f, RotateConfig{}).empty());
}

TEST(RotateConfig, Json) {
  EXPECT_EQ(to_json(RotateConfig{}), nlohmann::json({{"on", false}}));
  const nlohmann::json j = to_json(RotateConfig{true, 7});
  EXPECT_EQ(j.at("seed"), 7);
  EXPECT_EQ(j.at("r1").at("kind"), "random_hadamard");
  EXPECT_EQ(j.at("r2").at("kind"), "random_hadamard");
  EXPECT_EQ(j.at("r3").at("placement"), "online");
  EXPECT_EQ(j.at("r4").at("kind"), "hadamard");
}

// Every matrix and vector the rotation produces, as raw bytes.
std::vector<std::vector<float>> all_weights(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  std::vector<std::vector<float>> out{widened(w.embed), widened(w.lm_head)};
  for (const LayerWeights& l : w.layers) {
    for (const Mat* x : {&l.mat(LinearRole::Q), &l.mat(LinearRole::K), &l.mat(LinearRole::V), &l.mat(LinearRole::O), &l.mat(LinearRole::Gate), &l.mat(LinearRole::Up), &l.mat(LinearRole::Down)}) out.push_back(widened(*x));
    if (l.vec(VecRole::VBias)) out.emplace_back(l.vec(VecRole::VBias), l.vec(VecRole::VBias) + c.kv_dim());
  }
  return out;
}

TEST(RotateDeterminism, SameSeedBitIdenticalOtherSeedDifferent) {
  const auto base = qwen2_tied();
  const auto a = all_weights(*rotate_model(base, kRot));
  const auto b = all_weights(*rotate_model(base, kRot));
  const auto other = all_weights(*rotate_model(base, RotateConfig{true, kRot.seed + 1}));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), other.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0) << i;
    EXPECT_NE(a[i], other[i]) << i;  // every tensor depends on R1 or R2
  }
  // R2 draws its own signs per layer.
  const ModelConfig& c = base->config();
  EXPECT_NE(r2_rotation(c, kRot, 0).signs(), r2_rotation(c, kRot, 1).signs());
}

}  // namespace
}  // namespace sinkq::quant
