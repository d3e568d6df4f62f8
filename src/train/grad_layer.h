// sinkq/train/grad_layer.h — one transformer block of the training forward and its backward: the
// unit both the whole-model loss (grad_model.h) and PrefixQuant's block-wise fine-tuning
// (blockwise.h) run, so there is one definition of a block's training forward.
//
// The block is the engine's (model/model.h Forward::layer): RMSNorm → q/k/v (+bias) → RoPE →
// causal GQA attention over [prefix; sequence] → o_proj → residual → RMSNorm → SwiGLU → down_proj →
// residual. What runs at the sites besides the fp ops is LayerSites, in the engine's order at each
// site: the online rotation (R3 on q and k after RoPE, R4 on down_in; quant/rotate.h), then the
// site hooks (the simulator's dynamic quantizers, float only), then a static quantizer trained by
// the straight-through estimator (ste.h). In the backward a hook is the identity (straight-through:
// exact for quantizers that never clip, dynamic per-token / per-head abs-max and CrossQuant), a
// static quantizer is ste_backward (the gradient of its step size too), a rotation its transpose.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"
#include "train/grad_model.h"

namespace sinkq::train {

// A static quantizer at one site, trained: one (scale, zero) per `group` consecutive features of
// every row (group = features: per tensor; head_dim: per head), shared by all tokens (ste.h
// SteLayout with shared_rows).
template <typename R>
struct StaticSite {
  int bits = 0;  // 0: none at this site
  bool symmetric = true;
  int64_t group = 0;
  const R* scale = nullptr;       // [features / group]
  const int32_t* zero = nullptr;  // [features / group], null when symmetric
};

template <typename R>
struct LayerSites {
  const SiteHooks* hooks = nullptr;  // float only
  // The online rotation: x ← x·M on each n-wide row (transpose: x ← x·Mᵀ, what the backward
  // needs); null: none. M is the normalized Hadamard of quant/rotate.h (the caller provides it: the
  // train layer does not link the quantizer library).
  std::function<void(R* x, int64_t rows, int64_t n, bool transpose)> rotate;
  std::array<StaticSite<R>, kNumSites> statics{};  // indexed by Site (attn_in, k, v, o_in, mlp_in, down_in)
};

// What the backward needs of one block.
template <typename R>
struct LayerTape {
  std::vector<R> x_in, xn1, rstd1, q, k_pre, k, v, att, probs, x_mid, xn2, rstd2, g, u, h;
  // The family's extra ops (io/config.h LayerSpec): q / k before their norms and the norms' 1/rms
  // (qk_norm); each block's output before its post-norm and that norm's 1/rms (post_norms).
  std::vector<R> q_lin, k_lin, rstd_q, rstd_k, o_out, rstd_po, d_out, rstd_pd;
  std::array<std::vector<R>, kNumSites> pre;  // a static site's input (before its quantizer)
};

// The block's inputs besides the weights: positions (P + t), the tokens (for hooks), the prefix
// rows of this layer ([P, kv_dim] K after RoPE and V; null when P = 0).
template <typename R>
struct LayerInput {
  std::span<const int32_t> pos, tokens;
  int64_t P = 0;
  const R* prefix_k = nullptr;
  const R* prefix_v = nullptr;
};

// The RoPE tables of a model's layers: one, or Gemma 3's two (its sliding layers' own base).
struct Ropes {
  RopeTable global, local;
  explicit Ropes(const ModelConfig& c)
      : global(RopeTable::make(c.rope())), local(c.rope_local_theta > 0 ? RopeTable::make(c.rope_local()) : RopeTable{}) {}
  const RopeTable& of(const ModelConfig& c, int l) const { return c.local_rope(l) ? local : global; }
};

// x [T, hidden]: the block's input in, its output out. The tape is filled for layer_backward.
// sites may be null (the fp block). nudge: finite-difference tests of the K / V gradients.
template <typename R>
void layer_forward(const ModelConfig& c, const Ropes& rope, const typename Params<R>::Layer& w, int layer,
                   const LayerInput<R>& in, std::vector<R>& x, LayerTape<R>& tape, const LayerSites<R>* sites,
                   const KvNudge& nudge = {});

// Where layer_backward adds its gradients; a null pointer skips that gradient (gw null: no weight
// gradients, about half the work).
template <typename R>
struct LayerGrads {
  typename Params<R>::Layer* w = nullptr;  // same shapes as the weights (norms, biases included)
  R* prefix_k = nullptr;                   // [P, kv_dim]
  R* prefix_v = nullptr;
  std::vector<R>* k_pre = nullptr;  // set to d (K before RoPE) [T, kv_dim]
  std::vector<R>* v = nullptr;      // set to d V [T, kv_dim]
  std::array<R*, kNumSites> scale{};  // a static site's step sizes (indexed by Site)
};

// dx [T, hidden]: d(block output) in, d(block input) out.
template <typename R>
void layer_backward(const ModelConfig& c, const Ropes& rope, const typename Params<R>::Layer& w, int layer,
                    const LayerInput<R>& in, const LayerTape<R>& tape, const LayerSites<R>* sites, std::vector<R>& dx,
                    LayerGrads<R>& g);

}  // namespace sinkq::train
