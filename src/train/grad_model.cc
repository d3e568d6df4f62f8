// sinkq/train/grad_model.cc — loss and gradient of the whole model (grad_model.h): the training
// forward with its tape, and the backward of every op in reverse order.
#include "train/grad_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "train/grad_ops.h"

namespace sinkq::train {

namespace {

template <typename R>
std::vector<R> widen(const Mat& m) {
  std::vector<float> f(size_t(m.rows * m.cols));
  to_f32(m.dtype, m.data, f.data(), f.size());
  return std::vector<R>(f.begin(), f.end());
}

template <typename R>
std::vector<R> widen(const float* p, int64_t n) {
  return p ? std::vector<R>(p, p + n) : std::vector<R>{};
}

// What the backward needs of one layer.
template <typename R>
struct LayerTape {
  std::vector<R> x_in, xn1, rstd1, q, k_pre, k, v, att, probs, x_mid, xn2, rstd2, g, u, h;
};

template <typename R>
struct Tape {
  std::vector<LayerTape<R>> layers;
  std::vector<R> x_last, xf, rstdf, logits;
  std::vector<int32_t> pos;
};

template <typename R>
AttnDims dims(const ModelConfig& c, int64_t P, int64_t T) {
  AttnDims a;
  a.nh = c.num_heads;
  a.nkv = c.num_kv_heads;
  a.D = c.head_dim;
  a.window = c.sliding_window;
  a.P = P;
  a.T = T;
  return a;
}

template <typename R>
void check_inputs(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                  std::span<const int32_t> targets, const PrefixKv<R>* prefix) {
  SINKQ_CHECK(!tokens.empty() && tokens.size() == targets.size(), "train: {} tokens and {} targets", tokens.size(),
              targets.size());
  SINKQ_CHECK(int64_t(p.layers.size()) == c.num_layers, "train: {} layers of parameters, the config has {}",
              p.layers.size(), c.num_layers);
  for (int32_t t : tokens) SINKQ_CHECK(t >= 0 && t < c.vocab_size, "train: token id {} is outside the vocabulary", t);
  for (int32_t t : targets) SINKQ_CHECK(t < c.vocab_size, "train: target id {} is outside the vocabulary", t);
  const int64_t P = prefix ? prefix->P : 0;
  SINKQ_CHECK(P + int64_t(tokens.size()) <= c.max_position_embeddings,
              "train: prefix {} + {} tokens exceed max_position_embeddings {}", P, tokens.size(),
              c.max_position_embeddings);
  if (prefix)
    SINKQ_CHECK(int64_t(prefix->k.size()) == c.num_layers && int64_t(prefix->v.size()) == c.num_layers,
                "train: the prefix has {} layers, the model {}", prefix->k.size(), c.num_layers);
}

template <typename R>
R run_forward(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
              std::span<const int32_t> targets, const PrefixKv<R>* prefix, Tape<R>& tp, const KvNudge& nudge,
              std::vector<R>* dlogits, const std::vector<std::vector<R>>* layer_targets = nullptr,
              const SiteHooks* hooks = nullptr) {
  check_inputs(c, p, tokens, targets, prefix);
  const RopeTable rope = RopeTable::make(c.rope());
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(),
                KV = c.kv_dim(), V = c.vocab_size, P = prefix ? prefix->P : 0;
  const AttnDims ad = dims<R>(c, P, T);
  tp.pos.resize(size_t(T));
  for (int64_t t = 0; t < T; ++t) tp.pos[size_t(t)] = int32_t(P + t);
  std::vector<R> x(size_t(T * H)), tmp(size_t(T * H));
  embed_forward(p.embed.data(), tokens, x.data(), H);
  tp.layers.resize(size_t(c.num_layers));
  // The site hooks (float only): the values they leave are what the next op uses and what the
  // tape keeps, so the backward sees the quantized values (straight-through).
  auto site = [&](Site s, int l, std::vector<R>& x, int64_t features) {
    if constexpr (std::is_same_v<R, float>) {
      if (hooks && hooks->active(s, l)) {
        SiteView v{s, l, x.data(), T, features, tp.pos, tokens};
        hooks->run(v);
      }
    } else {
      SINKQ_CHECK(hooks == nullptr, "train: site hooks run in the float path only");
    }
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const auto& w = p.layers[size_t(l)];
    LayerTape<R>& L = tp.layers[size_t(l)];
    L.x_in = x;
    L.xn1.resize(size_t(T * H));
    L.rstd1.resize(size_t(T));
    rmsnorm_forward(x.data(), w.attn_norm.data(), L.xn1.data(), L.rstd1.data(), T, H, c.rms_norm_eps);
    site(Site::AttnIn, l, L.xn1, H);
    L.q.resize(size_t(T * Q));
    L.k.resize(size_t(T * KV));
    L.v.resize(size_t(T * KV));
    auto bias = [](const std::vector<R>& b) { return b.empty() ? nullptr : b.data(); };
    linear_forward(L.xn1.data(), w.wq.data(), bias(w.bq), L.q.data(), T, H, Q);
    linear_forward(L.xn1.data(), w.wk.data(), bias(w.bk), L.k.data(), T, H, KV);
    linear_forward(L.xn1.data(), w.wv.data(), bias(w.bv), L.v.data(), T, H, KV);
    if (nudge.layer == l) (nudge.value ? L.v : L.k)[size_t(nudge.index)] += R(nudge.delta);
    L.k_pre = L.k;
    rope_forward(rope, L.q.data(), T, c.num_heads, tp.pos);
    rope_forward(rope, L.k.data(), T, c.num_kv_heads, tp.pos);
    site(Site::K, l, L.k, KV);
    site(Site::V, l, L.v, KV);
    L.att.resize(size_t(T * Q));
    L.probs.resize(size_t(int64_t(c.num_heads) * T * (P + T)));
    attention_forward(ad, L.q.data(), L.k.data(), L.v.data(), prefix ? prefix->k[size_t(l)].data() : nullptr,
                      prefix ? prefix->v[size_t(l)].data() : nullptr, L.att.data(), L.probs.data());
    site(Site::OIn, l, L.att, Q);
    linear_forward(L.att.data(), w.wo.data(), static_cast<const R*>(nullptr), tmp.data(), T, Q, H);
    for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += tmp[size_t(i)];
    L.x_mid = x;
    L.xn2.resize(size_t(T * H));
    L.rstd2.resize(size_t(T));
    rmsnorm_forward(x.data(), w.mlp_norm.data(), L.xn2.data(), L.rstd2.data(), T, H, c.rms_norm_eps);
    site(Site::MlpIn, l, L.xn2, H);
    L.g.resize(size_t(T * I));
    L.u.resize(size_t(T * I));
    L.h.resize(size_t(T * I));
    linear_forward(L.xn2.data(), w.w_gate.data(), static_cast<const R*>(nullptr), L.g.data(), T, H, I);
    linear_forward(L.xn2.data(), w.w_up.data(), static_cast<const R*>(nullptr), L.u.data(), T, H, I);
    swiglu_forward(L.g.data(), L.u.data(), L.h.data(), T * I);
    site(Site::DownIn, l, L.h, I);
    linear_forward(L.h.data(), w.w_down.data(), static_cast<const R*>(nullptr), tmp.data(), T, I, H);
    for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += tmp[size_t(i)];
  }
  tp.x_last = x;
  if (layer_targets) {  // 1/2·Σ_l ||out_l − y_l||² / T (IntactKV §3.2, eq. 2, per token)
    SINKQ_CHECK(int64_t(layer_targets->size()) == c.num_layers, "train: {} layer targets for {} layers",
                layer_targets->size(), c.num_layers);
    R sum = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      const std::vector<R>& out = l + 1 < c.num_layers ? tp.layers[size_t(l + 1)].x_in : tp.x_last;
      const std::vector<R>& y = (*layer_targets)[size_t(l)];
      SINKQ_CHECK(y.size() == out.size(), "train: layer {} target has {} values, the output {}", l, y.size(), out.size());
      for (size_t i = 0; i < y.size(); ++i) sum += (out[i] - y[i]) * (out[i] - y[i]);
    }
    return R(0.5) * sum / R(T);
  }
  tp.xf.resize(size_t(T * H));
  tp.rstdf.resize(size_t(T));
  rmsnorm_forward(x.data(), p.final_norm.data(), tp.xf.data(), tp.rstdf.data(), T, H, c.rms_norm_eps);
  const std::vector<R>& head = p.lm_head.empty() ? p.embed : p.lm_head;
  tp.logits.resize(size_t(T * V));
  linear_forward(tp.xf.data(), head.data(), static_cast<const R*>(nullptr), tp.logits.data(), T, H, V);
  if (dlogits) dlogits->resize(size_t(T * V));
  return cross_entropy(tp.logits.data(), targets, V, dlogits ? dlogits->data() : nullptr);
}

}  // namespace

template <typename R>
Params<R> Params<R>::from_model(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  Params p;
  p.embed = widen<R>(w.embed);
  if (w.lm_head.data != w.embed.data) p.lm_head = widen<R>(w.lm_head);
  p.final_norm = widen<R>(w.final_norm, c.hidden_size);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    for (int i = 0; i < kNumLinearRoles; ++i)
      SINKQ_CHECK(!lw.impl_of(i), "train: layer {} runs packed linears, which have no trainable weights", l);
    Layer L;
    L.attn_norm = widen<R>(lw.attn_norm, c.hidden_size);
    L.mlp_norm = widen<R>(lw.mlp_norm, c.hidden_size);
    L.wq = widen<R>(lw.wq);
    L.wk = widen<R>(lw.wk);
    L.wv = widen<R>(lw.wv);
    L.wo = widen<R>(lw.wo);
    L.w_gate = widen<R>(lw.w_gate);
    L.w_up = widen<R>(lw.w_up);
    L.w_down = widen<R>(lw.w_down);
    L.bq = widen<R>(lw.bq, c.q_dim());
    L.bk = widen<R>(lw.bk, c.kv_dim());
    L.bv = widen<R>(lw.bv, c.kv_dim());
    p.layers.push_back(std::move(L));
  }
  return p;
}

template <typename R>
Params<R> Params<R>::zeros_like() const {
  Params z = *this;
  z.for_each([](const std::string&, std::vector<R>& v) { std::fill(v.begin(), v.end(), R(0)); });
  return z;
}

template <typename R>
void Params<R>::for_each(const std::function<void(const std::string&, std::vector<R>&)>& f) {
  auto visit = [&f](const std::string& n, std::vector<R>& v) {
    if (!v.empty()) f(n, v);
  };
  visit("model.embed_tokens.weight", embed);
  for (size_t l = 0; l < layers.size(); ++l) {
    Layer& L = layers[l];
    const std::string pre = fmt::format("model.layers.{}.", l);
    visit(pre + "input_layernorm.weight", L.attn_norm);
    visit(pre + "self_attn.q_proj.weight", L.wq);
    visit(pre + "self_attn.q_proj.bias", L.bq);
    visit(pre + "self_attn.k_proj.weight", L.wk);
    visit(pre + "self_attn.k_proj.bias", L.bk);
    visit(pre + "self_attn.v_proj.weight", L.wv);
    visit(pre + "self_attn.v_proj.bias", L.bv);
    visit(pre + "self_attn.o_proj.weight", L.wo);
    visit(pre + "post_attention_layernorm.weight", L.mlp_norm);
    visit(pre + "mlp.gate_proj.weight", L.w_gate);
    visit(pre + "mlp.up_proj.weight", L.w_up);
    visit(pre + "mlp.down_proj.weight", L.w_down);
  }
  visit("model.norm.weight", final_norm);
  visit("lm_head.weight", lm_head);
}

template <typename R>
void Params<R>::for_each(const std::function<void(const std::string&, const std::vector<R>&)>& f) const {
  const_cast<Params*>(this)->for_each([&f](const std::string& n, std::vector<R>& v) { f(n, v); });
}

template <typename R>
PrefixKv<R> PrefixKv<R>::from(const KvPrefix& p) {
  PrefixKv out;
  out.P = p.size();
  for (int l = 0; l < p.num_layers(); ++l) {
    const KvSegment s = p.segment(l);
    const int64_t n = s.rows * p.kv_dim();
    out.k.emplace_back(s.k, s.k + n);
    out.v.emplace_back(s.v, s.v + n);
  }
  return out;
}

template <typename R>
R loss(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens, std::span<const int32_t> targets,
       const std::type_identity_t<PrefixKv<R>>* prefix, std::type_identity_t<std::vector<R>>* logits,
       const KvNudge& nudge) {
  Tape<R> tp;
  const R l = run_forward(c, p, tokens, targets, prefix, tp, nudge, static_cast<std::vector<R>*>(nullptr));
  if (logits) *logits = std::move(tp.logits);
  return l;
}

namespace {

template <typename R>
Gradients<R> grad_impl(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                       std::span<const int32_t> targets, const PrefixKv<R>* prefix, bool param_grads,
                       const std::vector<std::vector<R>>* layer_targets, const SiteHooks* hooks = nullptr) {
  Tape<R> tp;
  std::vector<R> dlogits;
  Gradients<R> g;
  g.loss = run_forward(c, p, tokens, targets, prefix, tp, KvNudge{}, layer_targets ? nullptr : &dlogits, layer_targets,
                       hooks);
  if (param_grads) g.params = p.zeros_like();
  // The weights' gradient buffers, or null (skipped) without param_grads.
  auto gp = [param_grads](std::vector<R>& v) { return param_grads && !v.empty() ? v.data() : nullptr; };
  const RopeTable rope = RopeTable::make(c.rope());
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(),
                KV = c.kv_dim(), V = c.vocab_size, P = prefix ? prefix->P : 0;
  const AttnDims ad = dims<R>(c, P, T);
  g.k_pre.resize(size_t(c.num_layers));
  g.v.resize(size_t(c.num_layers));
  g.k_pre_values.resize(size_t(c.num_layers));
  g.v_values.resize(size_t(c.num_layers));
  if (prefix) {
    g.prefix_k.assign(size_t(c.num_layers), std::vector<R>(size_t(P * KV)));
    g.prefix_v.assign(size_t(c.num_layers), std::vector<R>(size_t(P * KV)));
  }
  std::vector<R> dx(size_t(T * H));
  // The gradient of the layer-MSE objective at layer l's output, added where dx is that output's.
  auto add_layer_term = [&](int l) {
    const std::vector<R>& out = l + 1 < c.num_layers ? tp.layers[size_t(l + 1)].x_in : tp.x_last;
    const std::vector<R>& y = (*layer_targets)[size_t(l)];
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += (out[i] - y[i]) / R(T);
  };
  if (layer_targets) {
    add_layer_term(c.num_layers - 1);
  } else {
    // Head and final norm.
    const bool tied = p.lm_head.empty();
    const std::vector<R>& head = tied ? p.embed : p.lm_head;
    R* dhead = param_grads ? (tied ? g.params.embed : g.params.lm_head).data() : nullptr;
    std::vector<R> dxf(size_t(T * H));
    linear_backward(dlogits.data(), tp.xf.data(), head.data(), dxf.data(), dhead, static_cast<R*>(nullptr), T, H, V);
    rmsnorm_backward(dxf.data(), tp.x_last.data(), p.final_norm.data(), tp.rstdf.data(), dx.data(),
                     gp(g.params.final_norm), T, H);
  }
  std::vector<R> dh, dg, du, dxn(size_t(T * H)), datt, dq, dk, dv;
  typename Params<R>::Layer no_grads;  // all empty: gp() gives null, nothing is written
  for (int l = c.num_layers - 1; l >= 0; --l) {
    const auto& w = p.layers[size_t(l)];
    auto& gw = param_grads ? g.params.layers[size_t(l)] : no_grads;
    const LayerTape<R>& L = tp.layers[size_t(l)];
    // MLP: x_out = x_mid + down(swiglu(gate(xn2), up(xn2))); dx is d x_out and flows on unchanged.
    dh.assign(size_t(T * I), R(0));
    linear_backward(dx.data(), L.h.data(), w.w_down.data(), dh.data(), gp(gw.w_down), static_cast<R*>(nullptr), T, I, H);
    dg.assign(size_t(T * I), R(0));
    du.assign(size_t(T * I), R(0));
    swiglu_backward(dh.data(), L.g.data(), L.u.data(), dg.data(), du.data(), T * I);
    std::fill(dxn.begin(), dxn.end(), R(0));
    linear_backward(dg.data(), L.xn2.data(), w.w_gate.data(), dxn.data(), gp(gw.w_gate), static_cast<R*>(nullptr), T, H, I);
    linear_backward(du.data(), L.xn2.data(), w.w_up.data(), dxn.data(), gp(gw.w_up), static_cast<R*>(nullptr), T, H, I);
    rmsnorm_backward(dxn.data(), L.x_mid.data(), w.mlp_norm.data(), L.rstd2.data(), dx.data(), gp(gw.mlp_norm), T, H);
    // Attention: x_mid = x_in + o(attention(rope(q), rope(k), v)).
    datt.assign(size_t(T * Q), R(0));
    linear_backward(dx.data(), L.att.data(), w.wo.data(), datt.data(), gp(gw.wo), static_cast<R*>(nullptr), T, Q, H);
    dq.assign(size_t(T * Q), R(0));
    dk.assign(size_t(T * KV), R(0));
    dv.assign(size_t(T * KV), R(0));
    attention_backward(ad, datt.data(), L.q.data(), L.k.data(), L.v.data(),
                       prefix ? prefix->k[size_t(l)].data() : nullptr, prefix ? prefix->v[size_t(l)].data() : nullptr,
                       L.probs.data(), dq.data(), dk.data(), dv.data(),
                       prefix ? g.prefix_k[size_t(l)].data() : nullptr, prefix ? g.prefix_v[size_t(l)].data() : nullptr);
    rope_backward(rope, dq.data(), T, c.num_heads, tp.pos);
    rope_backward(rope, dk.data(), T, c.num_kv_heads, tp.pos);
    g.k_pre[size_t(l)] = dk;
    g.v[size_t(l)] = dv;
    g.k_pre_values[size_t(l)] = L.k_pre;
    g.v_values[size_t(l)] = L.v;
    std::fill(dxn.begin(), dxn.end(), R(0));
    linear_backward(dq.data(), L.xn1.data(), w.wq.data(), dxn.data(), gp(gw.wq), gp(gw.bq), T, H, Q);
    linear_backward(dk.data(), L.xn1.data(), w.wk.data(), dxn.data(), gp(gw.wk), gp(gw.bk), T, H, KV);
    linear_backward(dv.data(), L.xn1.data(), w.wv.data(), dxn.data(), gp(gw.wv), gp(gw.bv), T, H, KV);
    rmsnorm_backward(dxn.data(), L.x_in.data(), w.attn_norm.data(), L.rstd1.data(), dx.data(), gp(gw.attn_norm), T, H);
    if (layer_targets && l > 0) add_layer_term(l - 1);
  }
  if (param_grads) embed_backward(dx.data(), tokens, g.params.embed.data(), H);
  return g;
}

}  // namespace

template <typename R>
Gradients<R> loss_and_grad(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                           std::span<const int32_t> targets, const std::type_identity_t<PrefixKv<R>>* prefix,
                           bool param_grads) {
  return grad_impl(c, p, tokens, targets, prefix, param_grads, static_cast<const std::vector<std::vector<R>>*>(nullptr));
}

template <typename R>
std::vector<std::vector<R>> layer_outputs(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                                          const std::type_identity_t<PrefixKv<R>>* prefix) {
  Tape<R> tp;
  const std::vector<int32_t> none(tokens.size(), -1);
  run_forward(c, p, tokens, none, prefix, tp, KvNudge{}, static_cast<std::vector<R>*>(nullptr));
  std::vector<std::vector<R>> out;
  for (int l = 0; l + 1 < c.num_layers; ++l) out.push_back(std::move(tp.layers[size_t(l + 1)].x_in));
  out.push_back(std::move(tp.x_last));
  return out;
}

template <typename R>
R layer_mse(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
            const std::vector<std::vector<R>>& layer_targets, const std::type_identity_t<PrefixKv<R>>* prefix,
            const SiteHooks* hooks) {
  Tape<R> tp;
  const std::vector<int32_t> none(tokens.size(), -1);
  return run_forward(c, p, tokens, none, prefix, tp, KvNudge{}, static_cast<std::vector<R>*>(nullptr), &layer_targets,
                     hooks);
}

template <typename R>
Gradients<R> layer_mse_and_grad(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                                const std::vector<std::vector<R>>& layer_targets,
                                const std::type_identity_t<PrefixKv<R>>* prefix, const SiteHooks* hooks) {
  const std::vector<int32_t> none(tokens.size(), -1);
  return grad_impl(c, p, tokens, none, prefix, /*param_grads=*/false, &layer_targets, hooks);
}

template std::vector<std::vector<float>> layer_outputs(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                                                   const PrefixKv<float>*);
template Gradients<float> layer_mse_and_grad(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                                          const std::vector<std::vector<float>>&, const PrefixKv<float>*, const SiteHooks*);
template std::vector<std::vector<double>> layer_outputs(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                                                   const PrefixKv<double>*);
template Gradients<double> layer_mse_and_grad(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                                          const std::vector<std::vector<double>>&, const PrefixKv<double>*, const SiteHooks*);
template float layer_mse(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                        const std::vector<std::vector<float>>&, const PrefixKv<float>*, const SiteHooks*);
template double layer_mse(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                        const std::vector<std::vector<double>>&, const PrefixKv<double>*, const SiteHooks*);
template struct Params<float>;
template struct Params<double>;
template struct PrefixKv<float>;
template struct PrefixKv<double>;
template float loss(const ModelConfig&, const Params<float>&, std::span<const int32_t>, std::span<const int32_t>,
                    const PrefixKv<float>*, std::vector<float>*, const KvNudge&);
template double loss(const ModelConfig&, const Params<double>&, std::span<const int32_t>, std::span<const int32_t>,
                     const PrefixKv<double>*, std::vector<double>*, const KvNudge&);
template Gradients<float> loss_and_grad(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                                        std::span<const int32_t>, const PrefixKv<float>*, bool);
template Gradients<double> loss_and_grad(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                                         std::span<const int32_t>, const PrefixKv<double>*, bool);

}  // namespace sinkq::train
