// Architecture coverage: tiny random models of every supported family, written to temp dirs,
// loaded through the real loader and run through the real forward pass, against a plain
// double-precision reference forward written here from the HF modeling code's semantics
// (full recompute, no cache, explicit loops; independent of src/kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "model/model.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using Vec = std::vector<double>;

Vec widen(const Mat& m) {
  std::vector<float> f(size_t(m.rows * m.cols));
  to_f32(m.dtype, m.data, f.data(), f.size());
  return Vec(f.begin(), f.end());
}

// y[out] = W[out, in] · x[in] + b
Vec linear(const Vec& W, int64_t out, int64_t in, const Vec& x, const float* b) {
  Vec y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double s = b ? b[o] : 0.0;
    for (int64_t i = 0; i < in; ++i) s += W[size_t(o * in + i)] * x[size_t(i)];
    y[size_t(o)] = s;
  }
  return y;
}

Vec rmsnorm(const Vec& x, const float* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// HF inv_freq, with rope_scaling (llama3: _compute_llama3_parameters; linear: positions / factor).
Vec inv_freq(const ModelConfig& c) {
  const int d = c.head_dim;
  Vec f(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) f[size_t(i)] = 1.0 / std::pow(double(c.rope_theta), 2.0 * i / d);
  if (c.rope_scaling.type == "llama3") {
    const auto& s = c.rope_scaling;
    const double old_ctx = s.original_max_position_embeddings;
    const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
    for (double& x : f) {
      const double wl = 2 * std::numbers::pi / x;
      if (wl < high_wl) continue;
      if (wl > low_wl) {
        x /= s.factor;
      } else {
        const double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
  }
  return f;
}

void rope(const ModelConfig& c, const Vec& invf, double* head, int pos) {
  const int h = c.head_dim / 2;
  const double p = c.rope_scaling.type == "linear" ? pos / double(c.rope_scaling.factor) : pos;
  for (int i = 0; i < h; ++i) {
    const double a = p * invf[size_t(i)], cs = std::cos(a), sn = std::sin(a);
    const double x0 = head[i], x1 = head[i + h];
    head[i] = x0 * cs - x1 * sn;
    head[i + h] = x1 * cs + x0 * sn;
  }
}

// Logits [T][vocab] of the whole sequence, recomputed from scratch.
std::vector<Vec> reference_forward(const Model& m, const std::vector<int32_t>& ids) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  const size_t T = ids.size();
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const Vec emb = widen(w.embed), head = widen(w.lm_head), invf = inv_freq(c);
  std::vector<Vec> h(T);
  for (size_t t = 0; t < T; ++t) h[t] = Vec(emb.begin() + long(ids[t] * H), emb.begin() + long((ids[t] + 1) * H));
  for (const LayerWeights& L : w.layers) {
    const Vec wq = widen(L.mat(LinearRole::Q)), wk = widen(L.mat(LinearRole::K)), wv = widen(L.mat(LinearRole::V)), wo = widen(L.mat(LinearRole::O));
    const Vec wg = widen(L.mat(LinearRole::Gate)), wu = widen(L.mat(LinearRole::Up)), wd = widen(L.mat(LinearRole::Down));
    std::vector<Vec> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      const Vec xn = rmsnorm(h[t], L.vec(VecRole::AttnNorm), c.rms_norm_eps);
      q[t] = linear(wq, c.q_dim(), H, xn, L.vec(VecRole::QBias));
      k[t] = linear(wk, c.kv_dim(), H, xn, L.vec(VecRole::KBias));
      v[t] = linear(wv, c.kv_dim(), H, xn, L.vec(VecRole::VBias));
      for (int hh = 0; hh < c.num_heads; ++hh) rope(c, invf, q[t].data() + hh * D, int(t));
      for (int hh = 0; hh < c.num_kv_heads; ++hh) rope(c, invf, k[t].data() + hh * D, int(t));
    }
    for (size_t t = 0; t < T; ++t) {
      Vec o(size_t(c.q_dim()), 0.0);
      const size_t first = c.sliding_window > 0 && t + 1 > size_t(c.sliding_window) ? t + 1 - size_t(c.sliding_window) : 0;
      for (int hh = 0; hh < c.num_heads; ++hh) {
        const int kvh = hh / (c.num_heads / c.num_kv_heads);
        Vec sc(t + 1, -INFINITY);
        double mx = -INFINITY;
        for (size_t s = first; s <= t; ++s) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += q[t][size_t(hh * D + i)] * k[s][size_t(kvh * D + i)];
          sc[s] = d / std::sqrt(double(D));
          mx = std::max(mx, sc[s]);
        }
        double z = 0;
        for (size_t s = first; s <= t; ++s) z += std::exp(sc[s] - mx);
        for (size_t s = first; s <= t; ++s)
          for (int64_t i = 0; i < D; ++i) o[size_t(hh * D + i)] += std::exp(sc[s] - mx) / z * v[s][size_t(kvh * D + i)];
      }
      const Vec ao = linear(wo, H, c.q_dim(), o, nullptr);
      for (int64_t i = 0; i < H; ++i) h[t][size_t(i)] += ao[size_t(i)];
      const Vec xn = rmsnorm(h[t], L.vec(VecRole::MlpNorm), c.rms_norm_eps);
      Vec g = linear(wg, I, H, xn, nullptr);
      const Vec u = linear(wu, I, H, xn, nullptr);
      for (int64_t i = 0; i < I; ++i) g[size_t(i)] = g[size_t(i)] / (1 + std::exp(-g[size_t(i)])) * u[size_t(i)];
      const Vec dn = linear(wd, H, I, g, nullptr);
      for (int64_t i = 0; i < H; ++i) h[t][size_t(i)] += dn[size_t(i)];
    }
  }
  std::vector<Vec> logits(T);
  for (size_t t = 0; t < T; ++t) logits[t] = linear(head, c.vocab_size, H, rmsnorm(h[t], w.final_norm, c.rms_norm_eps), nullptr);
  return logits;
}

struct Case {
  std::string name;
  testing::TinyModelSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  testing::TinyModelSpec s;
  v.push_back({"llama2_mha_f32_untied", [&] { auto x = s; x.heads = 4, x.kv_heads = 4; return x; }()});
  v.push_back({"llama3_gqa4_llama3_rope_bf16", [&] {
                 auto x = s;
                 x.hidden = 64, x.heads = 8, x.kv_heads = 2, x.dtype = DType::BF16, x.rope_theta = 500000.0f;
                 x.rope_scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
                 return x;
               }()});
  v.push_back({"qwen2_bias_f16_tied", [&] {
                 auto x = s;
                 x.architecture = "Qwen2ForCausalLM", x.qkv_bias = true, x.dtype = DType::F16, x.tied = true;
                 return x;
               }()});
  v.push_back({"mistral_sliding_window_sharded", [&] {
                 auto x = s;
                 x.architecture = "MistralForCausalLM", x.sliding_window = 4, x.shards = 3;
                 return x;
               }()});
  v.push_back({"explicit_head_dim_linear_rope", [&] {
                 auto x = s;
                 x.head_dim = 16, x.heads = 4, x.kv_heads = 1;
                 x.rope_scaling = {{"type", "linear"}, {"factor", 2.0}};
                 return x;
               }()});
  return v;
}

class Architectures : public ::testing::TestWithParam<Case> {};

// The engine computes in fp32, the reference in double. Each logit passes through ~2 layers of
// dot products of length <= 64 (|terms| ~ 0.1): fp32 rounding (2^-24 relative per operation,
// γ_64 ≈ 4e-6 per dot) stays below 1e-5 absolute; 1e-4 leaves 10x margin and still catches any
// formula error (a wrong RoPE pair or GQA mapping moves logits by >= 1e-2 at these scales).
TEST_P(Architectures, ForwardMatchesDoubleReference) {
  const Case& tc = GetParam();
  testing::TempDir dir;
  testing::write_tiny_model(dir.path(), tc.spec);
  const auto model = Model::load(dir.path());
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(int32_t((i * 37 + 1) % tc.spec.vocab));
  const auto ref = reference_forward(*model, ids);
  const size_t V = size_t(model->config().vocab_size);

  Forward prefill(model, 16);
  const auto a = prefill.step(ids, true);
  double worst = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::abs(a[t * V + i] - ref[t][i]));
  EXPECT_LE(worst, 1e-4) << tc.name << " prefill";

  Forward decode(model, 16);
  worst = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto l = decode.step(std::span(&ids[t], 1), false);
    for (size_t i = 0; i < V; ++i) worst = std::max(worst, std::abs(l[i] - ref[t][i]));
  }
  EXPECT_LE(worst, 1e-4) << tc.name << " decode";
}

INSTANTIATE_TEST_SUITE_P(Tiny, Architectures, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sinkq
