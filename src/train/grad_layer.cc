// sinkq/train/grad_layer.cc — one block's training forward and backward (grad_layer.h).
#include "train/grad_layer.h"

#include <type_traits>

#include "core/error.h"
#include "train/grad_ops.h"
#include "train/ste.h"

namespace sinkq::train {

namespace {

AttnDims dims(const ModelConfig& c, int l, int64_t P, int64_t T) {
  AttnDims a;
  a.nh = c.num_heads;
  a.nkv = c.num_kv_heads;
  a.D = c.head_dim;
  a.window = c.window(l);
  a.scale = c.attn_scale();
  a.softcap = c.attn_softcap;
  a.P = P;
  a.T = T;
  return a;
}

template <typename R>
SteLayout static_layout(const StaticSite<R>& s, int64_t T, int64_t features) {
  SINKQ_CHECK(s.group > 0 && features % s.group == 0, "train: a static quantizer of group {} over {} features",
              s.group, features);
  return SteLayout{.bits = s.bits, .symmetric = s.symmetric, .rows = T, .cols = features, .group = s.group,
                   .shared_rows = true};
}

// The forward at one site: hooks, then the static quantizer (its input kept in the tape). The
// rotation, where the site has one, was applied by the caller (it comes first).
template <typename R>
void site_forward(const LayerSites<R>* sites, Site s, int layer, const LayerInput<R>& in, std::vector<R>& x,
                  int64_t features, LayerTape<R>& tape) {
  if (!sites) return;
  const int64_t T = int64_t(in.pos.size());
  if constexpr (std::is_same_v<R, float>) {
    if (sites->hooks && sites->hooks->active(s, layer)) {
      SiteView v{s, layer, x.data(), T, features, in.pos, in.tokens};
      sites->hooks->run(v);
    }
  } else {
    SINKQ_CHECK(sites->hooks == nullptr, "train: site hooks run in the float path only");
  }
  const StaticSite<R>& st = sites->statics[size_t(s)];
  if (st.bits > 0) {
    tape.pre[size_t(s)] = x;
    ste_forward(static_layout(st, T, features), tape.pre[size_t(s)].data(), st.scale, st.zero, x.data());
  }
}

// The backward at one site: dx (d of the site's output) becomes d of its input. Hooks: identity.
template <typename R>
void site_backward(const LayerSites<R>* sites, Site s, const LayerTape<R>& tape, std::vector<R>& dx, int64_t T,
                   int64_t features, LayerGrads<R>& g) {
  if (!sites) return;
  const StaticSite<R>& st = sites->statics[size_t(s)];
  if (st.bits > 0) {
    const std::vector<R> dy = dx;
    std::fill(dx.begin(), dx.end(), R(0));
    ste_backward(static_layout(st, T, features), dy.data(), tape.pre[size_t(s)].data(), st.scale, st.zero, dx.data(),
                 g.scale[size_t(s)]);
  }
}

template <typename R>
void rotate(const LayerSites<R>* sites, std::vector<R>& x, int64_t rows, int64_t n, bool transpose) {
  if (sites && sites->rotate) sites->rotate(x.data(), rows, n, transpose);
}

template <typename R>
const R* bias(const std::vector<R>& b) {
  return b.empty() ? nullptr : b.data();
}

}  // namespace

template <typename R>
void layer_forward(const ModelConfig& c, const Ropes& ropes, const typename Params<R>::Layer& w, int l,
                   const LayerInput<R>& in, std::vector<R>& x, LayerTape<R>& L, const LayerSites<R>* sites,
                   const KvNudge& nudge) {
  const int64_t T = int64_t(in.pos.size()), H = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(),
                KV = c.kv_dim(), P = in.P, D = c.head_dim;
  SINKQ_ASSERT(int64_t(x.size()) == T * H);
  const AttnDims ad = dims(c, l, P, T);
  const RopeTable& rope = ropes.of(c, l);
  const LayerSpec& spec = c.spec();
  std::vector<R> tmp(size_t(T * H));
  L.x_in = x;
  L.xn1.resize(size_t(T * H));
  L.rstd1.resize(size_t(T));
  rmsnorm_forward(x.data(), w.vec(VecRole::AttnNorm).data(), L.xn1.data(), L.rstd1.data(), T, H, c.rms_norm_eps);
  site_forward(sites, Site::AttnIn, l, in, L.xn1, H, L);
  L.q.resize(size_t(T * Q));
  L.k.resize(size_t(T * KV));
  L.v.resize(size_t(T * KV));
  linear_forward(L.xn1.data(), w.mat(LinearRole::Q).data(), bias(w.vec(VecRole::QBias)), L.q.data(), T, H, Q);
  linear_forward(L.xn1.data(), w.mat(LinearRole::K).data(), bias(w.vec(VecRole::KBias)), L.k.data(), T, H, KV);
  linear_forward(L.xn1.data(), w.mat(LinearRole::V).data(), bias(w.vec(VecRole::VBias)), L.v.data(), T, H, KV);
  if (spec.qk_norm) {  // per head, before RoPE (and before the pre-RoPE K the gradients are of)
    L.q_lin = L.q;
    L.k_lin = L.k;
    L.rstd_q.resize(size_t(T * c.num_heads));
    L.rstd_k.resize(size_t(T * c.num_kv_heads));
    rmsnorm_forward(L.q_lin.data(), w.vec(VecRole::QNorm).data(), L.q.data(), L.rstd_q.data(), T * c.num_heads, D,
                    c.rms_norm_eps);
    rmsnorm_forward(L.k_lin.data(), w.vec(VecRole::KNorm).data(), L.k.data(), L.rstd_k.data(), T * c.num_kv_heads, D,
                    c.rms_norm_eps);
  }
  if (nudge.layer == l) (nudge.value ? L.v : L.k)[size_t(nudge.index)] += R(nudge.delta);
  L.k_pre = L.k;
  rope_forward(rope, L.q.data(), T, c.num_heads, in.pos);
  rope_forward(rope, L.k.data(), T, c.num_kv_heads, in.pos);
  rotate(sites, L.q, T * c.num_heads, D, false);  // R3
  rotate(sites, L.k, T * c.num_kv_heads, D, false);
  site_forward(sites, Site::K, l, in, L.k, KV, L);
  site_forward(sites, Site::V, l, in, L.v, KV, L);
  L.att.resize(size_t(T * Q));
  L.probs.resize(size_t(int64_t(c.num_heads) * T * (P + T)));
  attention_forward(ad, L.q.data(), L.k.data(), L.v.data(), in.prefix_k, in.prefix_v, L.att.data(), L.probs.data());
  site_forward(sites, Site::OIn, l, in, L.att, Q, L);
  linear_forward(L.att.data(), w.mat(LinearRole::O).data(), static_cast<const R*>(nullptr), tmp.data(), T, Q, H);
  if (spec.post_norms) {
    L.o_out = tmp;
    L.rstd_po.resize(size_t(T));
    rmsnorm_forward(L.o_out.data(), w.vec(VecRole::PostAttnNorm).data(), tmp.data(), L.rstd_po.data(), T, H,
                    c.rms_norm_eps);
  }
  for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += tmp[size_t(i)];
  L.x_mid = x;
  L.xn2.resize(size_t(T * H));
  L.rstd2.resize(size_t(T));
  rmsnorm_forward(x.data(), w.vec(VecRole::MlpNorm).data(), L.xn2.data(), L.rstd2.data(), T, H, c.rms_norm_eps);
  site_forward(sites, Site::MlpIn, l, in, L.xn2, H, L);
  L.g.resize(size_t(T * I));
  L.u.resize(size_t(T * I));
  L.h.resize(size_t(T * I));
  linear_forward(L.xn2.data(), w.mat(LinearRole::Gate).data(), static_cast<const R*>(nullptr), L.g.data(), T, H, I);
  linear_forward(L.xn2.data(), w.mat(LinearRole::Up).data(), static_cast<const R*>(nullptr), L.u.data(), T, H, I);
  if (spec.act == Activation::GeluTanh) geglu_forward(L.g.data(), L.u.data(), L.h.data(), T * I);
  else swiglu_forward(L.g.data(), L.u.data(), L.h.data(), T * I);
  rotate(sites, L.h, T, I, false);  // R4
  site_forward(sites, Site::DownIn, l, in, L.h, I, L);
  linear_forward(L.h.data(), w.mat(LinearRole::Down).data(), static_cast<const R*>(nullptr), tmp.data(), T, I, H);
  if (spec.post_norms) {
    L.d_out = tmp;
    L.rstd_pd.resize(size_t(T));
    rmsnorm_forward(L.d_out.data(), w.vec(VecRole::PostMlpNorm).data(), tmp.data(), L.rstd_pd.data(), T, H,
                    c.rms_norm_eps);
  }
  for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] += tmp[size_t(i)];
}

template <typename R>
void layer_backward(const ModelConfig& c, const Ropes& ropes, const typename Params<R>::Layer& w, int l,
                    const LayerInput<R>& in, const LayerTape<R>& L, const LayerSites<R>* sites, std::vector<R>& dx,
                    LayerGrads<R>& g) {
  const int64_t T = int64_t(in.pos.size()), H = c.hidden_size, I = c.intermediate_size, Q = c.q_dim(),
                KV = c.kv_dim(), P = in.P, D = c.head_dim;
  const AttnDims ad = dims(c, l, P, T);
  const RopeTable& rope = ropes.of(c, l);
  const LayerSpec& spec = c.spec();
  typename Params<R>::Layer none;  // all empty: gp() gives null, nothing is written
  auto& gw = g.w ? *g.w : none;
  auto gp = [](std::vector<R>& v) { return v.empty() ? nullptr : v.data(); };
  // MLP: x_out = x_mid + down(q(R4(swiglu(gate(q(xn2)), up(q(xn2)))))); dx flows on unchanged.
  // A post-norm between the block and the residual: its backward first (dx stays the residual's).
  auto through_post_norm = [&](const std::vector<R>& out, VecRole role, const std::vector<R>& rstd) {
    std::vector<R> d(size_t(T * H), R(0));
    rmsnorm_backward(dx.data(), out.data(), w.vec(role).data(), rstd.data(), d.data(), gp(gw.vec(role)), T, H);
    return d;
  };
  const std::vector<R> dd = spec.post_norms ? through_post_norm(L.d_out, VecRole::PostMlpNorm, L.rstd_pd) : dx;
  std::vector<R> dh(size_t(T * I), R(0));
  linear_backward(dd.data(), L.h.data(), w.mat(LinearRole::Down).data(), dh.data(), gp(gw.mat(LinearRole::Down)), static_cast<R*>(nullptr), T, I, H);
  site_backward(sites, Site::DownIn, L, dh, T, I, g);
  rotate(sites, dh, T, I, true);
  std::vector<R> dg(size_t(T * I), R(0)), du(size_t(T * I), R(0));
  if (spec.act == Activation::GeluTanh) geglu_backward(dh.data(), L.g.data(), L.u.data(), dg.data(), du.data(), T * I);
  else swiglu_backward(dh.data(), L.g.data(), L.u.data(), dg.data(), du.data(), T * I);
  std::vector<R> dxn(size_t(T * H), R(0));
  linear_backward(dg.data(), L.xn2.data(), w.mat(LinearRole::Gate).data(), dxn.data(), gp(gw.mat(LinearRole::Gate)), static_cast<R*>(nullptr), T, H, I);
  linear_backward(du.data(), L.xn2.data(), w.mat(LinearRole::Up).data(), dxn.data(), gp(gw.mat(LinearRole::Up)), static_cast<R*>(nullptr), T, H, I);
  site_backward(sites, Site::MlpIn, L, dxn, T, H, g);
  rmsnorm_backward(dxn.data(), L.x_mid.data(), w.vec(VecRole::MlpNorm).data(), L.rstd2.data(), dx.data(), gp(gw.vec(VecRole::MlpNorm)), T, H);
  // Attention: x_mid = x_in + o(q(attention(R3(rope(q)), q(R3(rope(k))), q(v)))).
  const std::vector<R> dout = spec.post_norms ? through_post_norm(L.o_out, VecRole::PostAttnNorm, L.rstd_po) : dx;
  std::vector<R> datt(size_t(T * Q), R(0));
  linear_backward(dout.data(), L.att.data(), w.mat(LinearRole::O).data(), datt.data(), gp(gw.mat(LinearRole::O)), static_cast<R*>(nullptr), T, Q, H);
  site_backward(sites, Site::OIn, L, datt, T, Q, g);
  std::vector<R> dq(size_t(T * Q), R(0)), dk(size_t(T * KV), R(0)), dv(size_t(T * KV), R(0));
  attention_backward(ad, datt.data(), L.q.data(), L.k.data(), L.v.data(), in.prefix_k, in.prefix_v, L.probs.data(),
                     dq.data(), dk.data(), dv.data(), g.prefix_k, g.prefix_v);
  site_backward(sites, Site::K, L, dk, T, KV, g);
  site_backward(sites, Site::V, L, dv, T, KV, g);
  rotate(sites, dq, T * c.num_heads, D, true);
  rotate(sites, dk, T * c.num_kv_heads, D, true);
  rope_backward(rope, dq.data(), T, c.num_heads, in.pos);
  rope_backward(rope, dk.data(), T, c.num_kv_heads, in.pos);
  if (g.k_pre) *g.k_pre = dk;  // d of K before RoPE (after its norm: what the KV cache holds)
  if (spec.qk_norm) {
    std::vector<R> dq_lin(size_t(T * Q), R(0)), dk_lin(size_t(T * KV), R(0));
    rmsnorm_backward(dq.data(), L.q_lin.data(), w.vec(VecRole::QNorm).data(), L.rstd_q.data(), dq_lin.data(),
                     gp(gw.vec(VecRole::QNorm)), T * c.num_heads, D);
    rmsnorm_backward(dk.data(), L.k_lin.data(), w.vec(VecRole::KNorm).data(), L.rstd_k.data(), dk_lin.data(),
                     gp(gw.vec(VecRole::KNorm)), T * c.num_kv_heads, D);
    dq = std::move(dq_lin);
    dk = std::move(dk_lin);
  }
  std::fill(dxn.begin(), dxn.end(), R(0));
  linear_backward(dq.data(), L.xn1.data(), w.mat(LinearRole::Q).data(), dxn.data(), gp(gw.mat(LinearRole::Q)), gp(gw.vec(VecRole::QBias)), T, H, Q);
  linear_backward(dk.data(), L.xn1.data(), w.mat(LinearRole::K).data(), dxn.data(), gp(gw.mat(LinearRole::K)), gp(gw.vec(VecRole::KBias)), T, H, KV);
  linear_backward(dv.data(), L.xn1.data(), w.mat(LinearRole::V).data(), dxn.data(), gp(gw.mat(LinearRole::V)), gp(gw.vec(VecRole::VBias)), T, H, KV);
  site_backward(sites, Site::AttnIn, L, dxn, T, H, g);
  rmsnorm_backward(dxn.data(), L.x_in.data(), w.vec(VecRole::AttnNorm).data(), L.rstd1.data(), dx.data(), gp(gw.vec(VecRole::AttnNorm)), T, H);
  if (g.v) *g.v = std::move(dv);
}

template void layer_forward(const ModelConfig&, const Ropes&, const Params<float>::Layer&, int,
                            const LayerInput<float>&, std::vector<float>&, LayerTape<float>&, const LayerSites<float>*,
                            const KvNudge&);
template void layer_forward(const ModelConfig&, const Ropes&, const Params<double>::Layer&, int,
                            const LayerInput<double>&, std::vector<double>&, LayerTape<double>&,
                            const LayerSites<double>*, const KvNudge&);
template void layer_backward(const ModelConfig&, const Ropes&, const Params<float>::Layer&, int,
                             const LayerInput<float>&, const LayerTape<float>&, const LayerSites<float>*,
                             std::vector<float>&, LayerGrads<float>&);
template void layer_backward(const ModelConfig&, const Ropes&, const Params<double>::Layer&, int,
                             const LayerInput<double>&, const LayerTape<double>&, const LayerSites<double>*,
                             std::vector<double>&, LayerGrads<double>&);

}  // namespace sinkq::train
