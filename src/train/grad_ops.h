// sinkq/train/grad_ops.h — the forward pass's operators with their backward, as plain functions
// (llm.c style), templated on the scalar type R: R = double is the reference that finite
// differences check (tests/train/grad_ops_test.cc), R = float is what training runs: the linear
// layers on sgemm (kernels/ops.h gemm; the double loops are their reference, tests/train
// FloatPathMatchesDouble), attention threaded over heads with OpenMP, the rest the same source.
//
// Conventions. Activations are [T, features] row-major, weights [out, in] (HF nn.Linear), a whole
// training sequence at once (positions P.., P = the prefix length). Every backward ADDS its input
// gradients into the given buffers (residual branches and tied weights sum for free; callers zero
// them first); a null gradient pointer skips that gradient. Forward ops that the backward needs
// state from return it through an explicit argument (rmsnorm's 1/rms, attention's probabilities).
// The forward functions compute what kernels/ops.h computes, in R (tests: float forward against
// Forward's logits).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/ops.h"

namespace sinkq::train {

// ---- linear: y[T, out] = x[T, in] · Wᵀ (+ b) -------------------------------------------------

template <typename R>
void linear_forward(const R* x, const R* W, const R* b, R* y, int64_t T, int64_t in, int64_t out) {
  if constexpr (std::is_same_v<R, float>) {  // the fast path: sgemm (kernels/ops.h gemm)
    gemm(false, true, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
    if (b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t o = 0; o < out; ++o) y[t * out + o] += b[o];
    return;
  }
#pragma omp parallel for schedule(static) if (T * in * out > (1 << 18))
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      R s = b ? b[o] : R(0);
      const R* xr = x + t * in;
      const R* wr = W + o * in;
      for (int64_t i = 0; i < in; ++i) s += xr[i] * wr[i];
      y[t * out + o] = s;
    }
}

// dx[t, i] += Σ_o dy[t, o]·W[o, i];  dW[o, i] += Σ_t dy[t, o]·x[t, i];  db[o] += Σ_t dy[t, o].
// Threads split dx by token and dW / db by output row: no two threads write one element.
template <typename R>
void linear_backward(const R* dy, const R* x, const R* W, R* dx, R* dW, R* db, int64_t T, int64_t in, int64_t out) {
  if constexpr (std::is_same_v<R, float>) {  // dx += dy·W, dW += dyᵀ·x on sgemm
    if (dx) gemm(false, false, T, in, out, 1.0f, dy, out, W, in, 1.0f, dx, in);
    if (dW) gemm(true, false, out, in, T, 1.0f, dy, out, x, in, 1.0f, dW, in);
    if (db)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t t = 0; t < T; ++t) db[o] += dy[t * out + o];
    return;
  }
  const bool big = T * in * out > (1 << 18);
  if (dx) {
#pragma omp parallel for schedule(static) if (big)
    for (int64_t t = 0; t < T; ++t) {
      R* dxr = dx + t * in;
      for (int64_t o = 0; o < out; ++o) {
        const R g = dy[t * out + o];
        const R* wr = W + o * in;
        for (int64_t i = 0; i < in; ++i) dxr[i] += g * wr[i];
      }
    }
  }
  if (dW || db) {
#pragma omp parallel for schedule(static) if (big)
    for (int64_t o = 0; o < out; ++o) {
      R* dwr = dW ? dW + o * in : nullptr;
      R sb = 0;
      for (int64_t t = 0; t < T; ++t) {
        const R g = dy[t * out + o];
        sb += g;
        if (dwr) {
          const R* xr = x + t * in;
          for (int64_t i = 0; i < in; ++i) dwr[i] += g * xr[i];
        }
      }
      if (db) db[o] += sb;
    }
  }
}

// ---- RMSNorm: y = x · r · w, r = (mean(x²) + eps)^(-1/2) per row --------------------------------

template <typename R>
void rmsnorm_forward(const R* x, const R* w, R* y, R* rstd, int64_t T, int64_t n, double eps) {
  for (int64_t t = 0; t < T; ++t) {
    const R* xr = x + t * n;
    R ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const R r = R(1) / std::sqrt(ss / R(n) + R(eps));
    rstd[t] = r;
    for (int64_t i = 0; i < n; ++i) y[t * n + i] = xr[i] * r * w[i];
  }
}

// With g = dy·w: dx = r·g − r³/n · x · Σ(g·x);  dw += Σ_t dy · x · r.
template <typename R>
void rmsnorm_backward(const R* dy, const R* x, const R* w, const R* rstd, R* dx, R* dw, int64_t T, int64_t n) {
  for (int64_t t = 0; t < T; ++t) {
    const R* xr = x + t * n;
    const R* dyr = dy + t * n;
    const R r = rstd[t];
    R dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += dyr[i] * w[i] * xr[i];
    const R c = r * r * r / R(n) * dot;
    for (int64_t i = 0; i < n; ++i) {
      if (dx) dx[t * n + i] += r * dyr[i] * w[i] - c * xr[i];
      if (dw) dw[i] += dyr[i] * xr[i] * r;
    }
  }
}

// ---- RoPE (rotate_half pairs (i, i + D/2)), positions pos[T] ---------------------------------

// cos / sin of pair i at position p exactly as kernels/ops.h computes them (the angle in fp32,
// its cos / sin rounded to fp32), so the float path rotates as the engine does.
inline void rope_cos_sin(const RopeTable& rt, int32_t pos, int i, double& c, double& s) {
  const float p = rt.position_scale == 1.0f ? float(pos) : float(pos) * rt.position_scale;
  const float a = rt.inv_freq[size_t(i)] * p;
  c = float(std::cos(double(a)));
  s = float(std::sin(double(a)));
}

// x[T, heads, D] in place: (x1, x2) → (x1·c − x2·s, x2·c + x1·s); with `transpose` the inverse
// rotation (s → −s), which is the backward: (g1, g2) → (g1·c + g2·s, g2·c − g1·s).
template <typename R>
void rope_rotate(const RopeTable& rt, R* x, int64_t T, int heads, std::span<const int32_t> pos, bool transpose) {
  const int D = rt.head_dim, half = D / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < half; ++i) {
      double c, s;
      rope_cos_sin(rt, pos[size_t(t)], i, c, s);
      if (transpose) s = -s;
      for (int h = 0; h < heads; ++h) {
        R* v = x + (t * heads + h) * D;
        const R x1 = v[i], x2 = v[i + half];
        v[i] = x1 * R(c) - x2 * R(s);
        v[i + half] = x2 * R(c) + x1 * R(s);
      }
    }
}

template <typename R>
void rope_forward(const RopeTable& rt, R* x, int64_t T, int heads, std::span<const int32_t> pos) {
  rope_rotate(rt, x, T, heads, pos, false);
}

template <typename R>
void rope_backward(const RopeTable& rt, R* dx, int64_t T, int heads, std::span<const int32_t> pos) {
  rope_rotate(rt, dx, T, heads, pos, true);
}

// ---- SwiGLU: h = silu(g) · u -----------------------------------------------------------------

template <typename R>
void swiglu_forward(const R* g, const R* u, R* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] / (R(1) + std::exp(-g[i])) * u[i];
}

// dg += dh·u·σ(g)·(1 + g·(1 − σ(g)));  du += dh·silu(g).
template <typename R>
void swiglu_backward(const R* dh, const R* g, const R* u, R* dg, R* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const R sg = R(1) / (R(1) + std::exp(-g[i]));
    if (dg) dg[i] += dh[i] * u[i] * sg * (R(1) + g[i] * (R(1) - sg));
    if (du) du[i] += dh[i] * g[i] * sg;
  }
}

// ---- GeGLU (Gemma): h = gelu_tanh(g) · u ---------------------------------------------------------
// gelu_tanh(x) = ½·x·(1 + tanh(c·(x + a·x³))), c = √(2/π), a = 0.044715.

template <typename R>
void geglu_forward(const R* g, const R* u, R* h, int64_t n) {
  const R c = R(0.7978845608028654), a = R(0.044715);
  for (int64_t i = 0; i < n; ++i) h[i] = R(0.5) * g[i] * (R(1) + std::tanh(c * (g[i] + a * g[i] * g[i] * g[i]))) * u[i];
}

// gelu_tanh'(x) = ½·(1 + th) + ½·x·(1 − th²)·c·(1 + 3a·x²), th = tanh(c·(x + a·x³)).
template <typename R>
void geglu_backward(const R* dh, const R* g, const R* u, R* dg, R* du, int64_t n) {
  const R c = R(0.7978845608028654), a = R(0.044715);
  for (int64_t i = 0; i < n; ++i) {
    const R x = g[i], th = std::tanh(c * (x + a * x * x * x));
    const R gelu = R(0.5) * x * (R(1) + th);
    if (dg) dg[i] += dh[i] * u[i] * (R(0.5) * (R(1) + th) + R(0.5) * x * (R(1) - th * th) * c * (R(1) + R(3) * a * x * x));
    if (du) du[i] += dh[i] * gelu;
  }
}

// ---- causal GQA attention over [prefix; sequence] -----------------------------------------------
//
// q [T, nh, D] and k, v [T, nkv, D] of the sequence (after RoPE), the prefix's pk, pv [P, nkv, D]
// (P = 0: none) at positions 0..P−1, the sequence at P..P+T−1. Query t attends keys j of
// [prefix; sequence] with j <= P + t (and P + t − j < window when window > 0). Head h uses kv head
// h / (nh / nkv). probs [nh, T, P + T] keeps the softmax (zeros where masked) for the backward.
// Scores: scale·q·k (scale 0: 1/√D), then softcap·tanh(·/softcap) when softcap > 0 (Gemma 2).

struct AttnDims {
  int nh = 0, nkv = 0, D = 0;
  int window = 0;
  double scale = 0, softcap = 0;
  int64_t P = 0, T = 0;
  int64_t keys() const { return P + T; }
  bool visible(int64_t t, int64_t j) const { return j >= first(t) && j <= last(t); }
  // The keys query t sees: first(t)..last(t), inclusive.
  int64_t first(int64_t t) const { return window > 0 ? std::max<int64_t>(0, P + t - window + 1) : 0; }
  int64_t last(int64_t t) const { return P + t; }
};

template <typename R>
const R* key_row(const AttnDims& a, const R* pk, const R* k, int64_t j, int kvh) {
  return j < a.P ? pk + (j * a.nkv + kvh) * a.D : k + ((j - a.P) * a.nkv + kvh) * a.D;
}

template <typename R>
void attention_forward(const AttnDims& a, const R* q, const R* k, const R* v, const R* pk, const R* pv, R* out,
                       R* probs) {
  const R scale = a.scale > 0 ? R(a.scale) : R(1) / std::sqrt(R(a.D)), cap = R(a.softcap);
  const int group = a.nh / a.nkv;
  const int64_t NK = a.keys();
#pragma omp parallel for collapse(2) schedule(static) if (a.T * NK * a.nh * a.D > (1 << 18))
  for (int h = 0; h < a.nh; ++h)
    for (int64_t t = 0; t < a.T; ++t) {
      const int kvh = h / group;
      const R* qr = q + (t * a.nh + h) * a.D;
      R* p = probs + (int64_t(h) * a.T + t) * NK;
      const int64_t j0 = a.first(t), j1 = a.last(t);
      std::fill(p, p + NK, R(0));  // masked keys keep probability 0
      R mx = -INFINITY;
      for (int64_t j = j0; j <= j1; ++j) {
        const R* kr = key_row(a, pk, k, j, kvh);
        R s = 0;
        for (int d = 0; d < a.D; ++d) s += qr[d] * kr[d];
        p[j] = s * scale;
        if (cap > 0) p[j] = cap * std::tanh(p[j] / cap);
        mx = std::max(mx, p[j]);
      }
      R sum = 0;
      for (int64_t j = j0; j <= j1; ++j) sum += (p[j] = std::exp(p[j] - mx));
      R* o = out + (t * a.nh + h) * a.D;
      std::fill(o, o + a.D, R(0));
      for (int64_t j = j0; j <= j1; ++j) {
        p[j] /= sum;
        const R* vr = key_row(a, pv, v, j, kvh);
        const R pj = p[j];
        for (int d = 0; d < a.D; ++d) o[d] += pj * vr[d];
      }
    }
}

// With dp_tj = dout_t·v_j and ds_tj = p_tj·(dp_tj − Σ_j' p_tj'·dp_tj'):
//   dv_j += Σ_t p_tj·dout_t;  dq_t += scale·Σ_j ds_tj·k_j;  dk_j += scale·Σ_t ds_tj·q_t
// (with a soft-cap, ds_tj also × (1 − tanh²(scale·q_t·k_j / cap)), the score recomputed)
// (j < P: into dpk / dpv, the prefix's gradients; null skips them). One thread per kv head:
// the heads of one group write the same dk / dv rows.
template <typename R>
void attention_backward(const AttnDims& a, const R* dout, const R* q, const R* k, const R* v, const R* pk,
                        const R* pv, const R* probs, R* dq, R* dk, R* dv, R* dpk, R* dpv) {
  const R scale = a.scale > 0 ? R(a.scale) : R(1) / std::sqrt(R(a.D)), cap = R(a.softcap);
  const int group = a.nh / a.nkv;
  const int64_t NK = a.keys();
#pragma omp parallel for schedule(static) if (a.T * NK * a.nh * a.D > (1 << 18))
  for (int kvh = 0; kvh < a.nkv; ++kvh) {
    std::vector<R> dp(static_cast<size_t>(NK));
    for (int h = kvh * group; h < (kvh + 1) * group; ++h)
      for (int64_t t = 0; t < a.T; ++t) {
        const R* p = probs + (int64_t(h) * a.T + t) * NK;
        const R* go = dout + (t * a.nh + h) * a.D;
        const R* qr = q + (t * a.nh + h) * a.D;
        R* dqr = dq ? dq + (t * a.nh + h) * a.D : nullptr;
        const int64_t j0 = a.first(t), j1 = a.last(t);
        R dot = 0;
        for (int64_t j = j0; j <= j1; ++j) {
          const R* vr = key_row(a, pv, v, j, kvh);
          R s = 0;
          for (int d = 0; d < a.D; ++d) s += go[d] * vr[d];
          dp[size_t(j)] = s;
          dot += p[j] * s;
        }
        for (int64_t j = j0; j <= j1; ++j) {
          const R pj = p[j];
          R ds = pj * (dp[size_t(j)] - dot) * scale;
          const R* kr = key_row(a, pk, k, j, kvh);
          if (cap > 0) {
            R s = 0;
            for (int d = 0; d < a.D; ++d) s += qr[d] * kr[d];
            const R th = std::tanh(s * scale / cap);
            ds *= R(1) - th * th;
          }
          R* dkr = j < a.P ? (dpk ? dpk + (j * a.nkv + kvh) * a.D : nullptr) : dk + ((j - a.P) * a.nkv + kvh) * a.D;
          R* dvr = j < a.P ? (dpv ? dpv + (j * a.nkv + kvh) * a.D : nullptr) : dv + ((j - a.P) * a.nkv + kvh) * a.D;
          if (dqr)
            for (int d = 0; d < a.D; ++d) dqr[d] += ds * kr[d];
          if (dkr)
            for (int d = 0; d < a.D; ++d) dkr[d] += ds * qr[d];
          if (dvr)
            for (int d = 0; d < a.D; ++d) dvr[d] += pj * go[d];
        }
      }
  }
}

// ---- cross-entropy over the vocabulary ---------------------------------------------------------

// Mean over rows with a target (targets[t] < 0: not scored) of −log softmax(logits[t])[target];
// dlogits (when given) = (softmax − onehot) / N · dloss, written (not added); rows without a target
// get 0. Returns the loss; N = 0 returns 0.
template <typename R>
R cross_entropy(const R* logits, std::span<const int32_t> targets, int64_t V, R* dlogits, R dloss = R(1)) {
  const int64_t T = int64_t(targets.size());
  int64_t n = 0;
  for (int32_t y : targets) n += y >= 0;
  R loss = 0;
  for (int64_t t = 0; t < T; ++t) {
    const R* l = logits + t * V;
    R* d = dlogits ? dlogits + t * V : nullptr;
    const int32_t y = targets[size_t(t)];
    if (y < 0) {
      if (d) std::fill(d, d + V, R(0));
      continue;
    }
    const R mx = *std::max_element(l, l + V);
    R sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(l[i] - mx);
    const R lse = mx + std::log(sum);
    loss += lse - l[y];
    if (d) {
      for (int64_t i = 0; i < V; ++i) d[i] = std::exp(l[i] - lse) / R(n) * dloss;
      d[y] -= dloss / R(n);
    }
  }
  return n ? loss / R(n) : R(0);
}

// ---- embeddings ----------------------------------------------------------------------------------

template <typename R>
void embed_forward(const R* table, std::span<const int32_t> ids, R* out, int64_t H) {
  for (size_t t = 0; t < ids.size(); ++t) std::copy(table + ids[t] * H, table + (ids[t] + 1) * H, out + int64_t(t) * H);
}

// dtable[id] += dout[t] for every position t holding id.
template <typename R>
void embed_backward(const R* dout, std::span<const int32_t> ids, R* dtable, int64_t H) {
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t i = 0; i < H; ++i) dtable[ids[t] * H + i] += dout[int64_t(t) * H + i];
}

}  // namespace sinkq::train
