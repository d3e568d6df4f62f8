// sinkq/train/grad_model.cc — loss and gradient of the whole model (grad_model.h): the training
// forward with its tape, and the backward of every op in reverse order.
#include "train/grad_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "train/grad_layer.h"
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

template <typename R>
struct Tape {
  std::vector<LayerTape<R>> layers;
  std::vector<R> x_last, xf, rstdf, logits;
  std::vector<int32_t> pos;
};

template <typename R>
LayerInput<R> layer_input(const Tape<R>& tp, std::span<const int32_t> tokens, const PrefixKv<R>* prefix, int l) {
  LayerInput<R> in;
  in.pos = tp.pos;
  in.tokens = tokens;
  in.P = prefix ? prefix->P : 0;
  in.prefix_k = prefix ? prefix->k[size_t(l)].data() : nullptr;
  in.prefix_v = prefix ? prefix->v[size_t(l)].data() : nullptr;
  return in;
}

template <typename R>
const LayerSites<R>* layer_sites(const std::vector<LayerSites<R>>* sites, int l) {
  return sites ? &(*sites)[size_t(l)] : nullptr;
}

template <typename R>
void check_inputs(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                  std::span<const int32_t> targets, const PrefixKv<R>* prefix, const std::vector<LayerSites<R>>* sites) {
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
  if (sites)
    SINKQ_CHECK(int64_t(sites->size()) == c.num_layers, "train: site settings for {} layers, the model has {}",
                sites->size(), c.num_layers);
  if (prefix)
    SINKQ_CHECK(int64_t(prefix->k.size()) == c.num_layers && int64_t(prefix->v.size()) == c.num_layers,
                "train: the prefix has {} layers, the model {}", prefix->k.size(), c.num_layers);
}

template <typename R>
R run_forward(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
              std::span<const int32_t> targets, const PrefixKv<R>* prefix, Tape<R>& tp, const KvNudge& nudge,
              std::vector<R>* dlogits, const std::vector<std::vector<R>>* layer_targets = nullptr,
              const std::vector<LayerSites<R>>* sites = nullptr) {
  check_inputs(c, p, tokens, targets, prefix, sites);
  const Ropes rope(c);
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, V = c.vocab_size, P = prefix ? prefix->P : 0;
  tp.pos.resize(size_t(T));
  for (int64_t t = 0; t < T; ++t) tp.pos[size_t(t)] = int32_t(P + t);
  std::vector<R> x(size_t(T * H));
  embed_forward(p.embed.data(), tokens, x.data(), H);
  if (c.spec().embed_scale)  // Gemma: × sqrt(hidden) (fp32, as the engine)
    for (R& v : x) v *= R(std::sqrt(float(H)));
  tp.layers.resize(size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l)
    layer_forward(c, rope, p.layers[size_t(l)], l, layer_input(tp, tokens, prefix, l), x, tp.layers[size_t(l)], layer_sites(sites, l),
                  nudge);
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
  if (const R cap = R(c.final_softcap); cap > 0)  // Gemma 2: cap · tanh(logits / cap)
    for (R& v : tp.logits) v = cap * std::tanh(v / cap);
  if (dlogits) dlogits->resize(size_t(T * V));
  const R loss = cross_entropy(tp.logits.data(), targets, V, dlogits ? dlogits->data() : nullptr);
  if (const R cap = R(c.final_softcap); cap > 0 && dlogits)  // d tanh: 1 − (capped / cap)²
    for (size_t i = 0; i < dlogits->size(); ++i) (*dlogits)[i] *= R(1) - (tp.logits[i] / cap) * (tp.logits[i] / cap);
  return loss;
}

}  // namespace

template <typename R>
Params<R> Params<R>::from_model(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  Params p;
  // A pipeline stage (quant/finetune.cc over MPI ranks): what it holds; the other layers empty.
  const LayerRange& st = m.stage();
  if (st.first()) p.embed = widen<R>(w.embed);
  if (!w.tied() && st.last(c.num_layers)) p.lm_head = widen<R>(w.lm_head);
  p.final_norm = widen<R>(w.final_norm, c.hidden_size);
  for (int l = 0; l < c.num_layers; ++l) {
    if (!st.holds(l, c.num_layers)) {
      p.layers.emplace_back();
      continue;
    }
    const LayerWeights& lw = w.layers[size_t(l)];
    for (int i = 0; i < kNumLinearRoles; ++i)
      SINKQ_CHECK(!lw.impl_of(i), "train: layer {} runs packed linears, which have no trainable weights", l);
    Layer L;
    for (int r = 0; r < kNumLinearRoles; ++r) L.mats[size_t(r)] = widen<R>(lw.mat(r));
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, c)) L.vec(r.role) = widen<R>(lw.vec(r.role), vec_dim(r, c));
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
    for (const LinearRoleInfo& r : kLinearRoles) visit(pre + r.hf + ".weight", L.mat(r.role));
    for (const VecRoleInfo& r : kVecRoles) visit(pre + r.name, L.vec(r.role));  // the schema's names
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
                       const std::vector<std::vector<R>>* layer_targets, const std::vector<LayerSites<R>>* sites = nullptr) {
  Tape<R> tp;
  std::vector<R> dlogits;
  Gradients<R> g;
  g.loss = run_forward(c, p, tokens, targets, prefix, tp, KvNudge{}, layer_targets ? nullptr : &dlogits, layer_targets,
                       sites);
  if (param_grads) g.params = p.zeros_like();
  // The weights' gradient buffers, or null (skipped) without param_grads.
  auto gp = [param_grads](std::vector<R>& v) { return param_grads && !v.empty() ? v.data() : nullptr; };
  const Ropes rope(c);
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, KV = c.kv_dim(), V = c.vocab_size,
                P = prefix ? prefix->P : 0;
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
  for (int l = c.num_layers - 1; l >= 0; --l) {
    LayerGrads<R> lg;
    lg.w = param_grads ? &g.params.layers[size_t(l)] : nullptr;
    lg.prefix_k = prefix ? g.prefix_k[size_t(l)].data() : nullptr;
    lg.prefix_v = prefix ? g.prefix_v[size_t(l)].data() : nullptr;
    lg.k_pre = &g.k_pre[size_t(l)];
    lg.v = &g.v[size_t(l)];
    layer_backward(c, rope, p.layers[size_t(l)], l, layer_input(tp, tokens, prefix, l), tp.layers[size_t(l)], layer_sites(sites, l), dx,
                   lg);
    g.k_pre_values[size_t(l)] = tp.layers[size_t(l)].k_pre;
    g.v_values[size_t(l)] = tp.layers[size_t(l)].v;
    if (layer_targets && l > 0) add_layer_term(l - 1);
  }
  if (c.spec().embed_scale)
    for (R& v : dx) v *= R(std::sqrt(float(H)));
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
                                          const std::type_identity_t<PrefixKv<R>>* prefix,
                                          const std::type_identity_t<std::vector<LayerSites<R>>>* sites) {
  Tape<R> tp;
  const std::vector<int32_t> none(tokens.size(), -1);
  run_forward(c, p, tokens, none, prefix, tp, KvNudge{}, static_cast<std::vector<R>*>(nullptr),
              static_cast<const std::vector<std::vector<R>>*>(nullptr), sites);
  std::vector<std::vector<R>> out;
  for (int l = 0; l + 1 < c.num_layers; ++l) out.push_back(std::move(tp.layers[size_t(l + 1)].x_in));
  out.push_back(std::move(tp.x_last));
  return out;
}

template <typename R>
R layer_mse(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
            const std::vector<std::vector<R>>& layer_targets, const std::type_identity_t<PrefixKv<R>>* prefix,
            const std::type_identity_t<std::vector<LayerSites<R>>>* sites) {
  Tape<R> tp;
  const std::vector<int32_t> none(tokens.size(), -1);
  return run_forward(c, p, tokens, none, prefix, tp, KvNudge{}, static_cast<std::vector<R>*>(nullptr), &layer_targets,
                     sites);
}

template <typename R>
Gradients<R> layer_mse_and_grad(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                                const std::vector<std::vector<R>>& layer_targets,
                                const std::type_identity_t<PrefixKv<R>>* prefix,
                                const std::type_identity_t<std::vector<LayerSites<R>>>* sites) {
  const std::vector<int32_t> none(tokens.size(), -1);
  return grad_impl(c, p, tokens, none, prefix, /*param_grads=*/false, &layer_targets, sites);
}

template std::vector<std::vector<float>> layer_outputs(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                                                   const PrefixKv<float>*, const std::vector<LayerSites<float>>*);
template Gradients<float> layer_mse_and_grad(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                                          const std::vector<std::vector<float>>&, const PrefixKv<float>*, const std::vector<LayerSites<float>>*);
template std::vector<std::vector<double>> layer_outputs(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                                                   const PrefixKv<double>*, const std::vector<LayerSites<double>>*);
template Gradients<double> layer_mse_and_grad(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                                          const std::vector<std::vector<double>>&, const PrefixKv<double>*, const std::vector<LayerSites<double>>*);
template float layer_mse(const ModelConfig&, const Params<float>&, std::span<const int32_t>,
                        const std::vector<std::vector<float>>&, const PrefixKv<float>*, const std::vector<LayerSites<float>>*);
template double layer_mse(const ModelConfig&, const Params<double>&, std::span<const int32_t>,
                        const std::vector<std::vector<double>>&, const PrefixKv<double>*, const std::vector<LayerSites<double>>*);
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
