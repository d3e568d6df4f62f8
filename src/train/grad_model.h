// sinkq/train/grad_model.h — the whole model's loss and its gradient: a training forward over one
// sequence that keeps what the backward needs (the tape), then the backward of every op in reverse
// (grad_ops.h). Gradients of every parameter, of each layer's Keys before RoPE and Values (what
// KVQuant's Fisher information squares, KVQuant §3.3 / App. C), and of the full-precision KV prefix
// (what IntactKV+Cal trains, IntactKV §3.2).
//
// The forward is the engine's (model/model.h Forward::layer: RMSNorm → q/k/v (+bias) → RoPE →
// causal GQA attention over [prefix; sequence] → o_proj → residual → RMSNorm → SwiGLU → down_proj →
// residual; final norm → lm_head) in R = float or double, on an R copy of the weights (Params).
// R = double is what finite differences check (tests/train); float is what training will run.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "model/kv_prefix.h"
#include "model/model.h"

namespace sinkq::train {

// The trainable copy of a model's weights in R. Linear weights [out, in]; biases empty when the
// model has none; lm_head empty when tied to the embeddings.
template <typename R>
struct LayerSites;  // grad_layer.h

template <typename R>
struct Params {
  // One layer by role, as LayerWeights holds it (io/weights.h's schema): the seven linears
  // [out, in], then the norms and biases (empty where the architecture has none).
  struct Layer {
    std::array<std::vector<R>, kNumLinearRoles> mats;
    std::array<std::vector<R>, kNumVecRoles> vecs;
    std::vector<R>& mat(LinearRole r) { return mats[size_t(r)]; }
    const std::vector<R>& mat(LinearRole r) const { return mats[size_t(r)]; }
    std::vector<R>& vec(VecRole r) { return vecs[size_t(r)]; }
    const std::vector<R>& vec(VecRole r) const { return vecs[size_t(r)]; }
  };
  std::vector<R> embed, lm_head, final_norm;
  std::vector<Layer> layers;

  // Widened from the model's tensors (any dtype). Packed linears (LayerWeights::impl) cannot be
  // trained: sinkq::Error naming the layer.
  static Params from_model(const Model& m);
  // The same shapes, all zeros (a gradient buffer).
  Params zeros_like() const;
  // Calls f(name, tensor) for every tensor, in a fixed order (HF names: "model.layers.0.self_attn.
  // q_proj.weight", ...); empty tensors are skipped.
  void for_each(const std::function<void(const std::string&, std::vector<R>&)>& f);
  void for_each(const std::function<void(const std::string&, const std::vector<R>&)>& f) const;
};

// The full-precision KV prefix in R: per layer K (after RoPE, as KvPrefix stores it) and V rows,
// [P, kv_dim] each, at positions 0..P-1.
template <typename R>
struct PrefixKv {
  int64_t P = 0;
  std::vector<std::vector<R>> k, v;
  static PrefixKv from(const KvPrefix& p);
};

// An additive change of one pre-RoPE key or value element before it is used (finite-difference
// tests of the K / V gradients).
struct KvNudge {
  int layer = -1;  // -1: none
  bool value = false;
  int64_t index = 0;  // into [T, kv_dim]
  double delta = 0;
};

template <typename R>
struct Gradients {
  R loss = 0;
  Params<R> params;                          // d loss / d every weight (tied: into embed)
  std::vector<std::vector<R>> k_pre, v;      // per layer [T, kv_dim]: d loss / d (K before RoPE), d V
  std::vector<std::vector<R>> k_pre_values, v_values;  // per layer [T, kv_dim]: those activations
  std::vector<std::vector<R>> prefix_k, prefix_v;  // per layer [P, kv_dim] (empty without a prefix)
};

// Mean cross-entropy of targets[t] (< 0: not scored) after tokens[0..t], the sequence at positions
// P.. behind `prefix` (null: none). logits (if given) receives [T, vocab].
template <typename R>
R loss(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens, std::span<const int32_t> targets,
       const std::type_identity_t<PrefixKv<R>>* prefix = nullptr,
       std::type_identity_t<std::vector<R>>* logits = nullptr, const KvNudge& nudge = {});

// The loss and its gradient with respect to everything above. param_grads = false skips the
// weights' gradients (params stays empty; about half the backward's work): what the Fisher
// information of K and V needs.
template <typename R>
Gradients<R> loss_and_grad(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                           std::span<const int32_t> targets, const std::type_identity_t<PrefixKv<R>>* prefix = nullptr,
                           bool param_grads = true);

// Every layer's output [T, hidden] (the residual stream after layer l), behind `prefix`, with
// `sites` (below) at every layer.
template <typename R>
std::vector<std::vector<R>> layer_outputs(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                                          const std::type_identity_t<PrefixKv<R>>* prefix = nullptr,
                                          const std::type_identity_t<std::vector<LayerSites<R>>>* sites = nullptr);

// IntactKV's calibration objective (IntactKV §3.2, eq. 2): 1/2·Σ_l ||f_l − y_l||² over every layer's
// output and every token, divided by the number of tokens, against `layer_targets` (the
// full-precision model's layer_outputs on the same tokens); its gradient with respect to the
// prefix and to every layer's K / V (the weights' gradients are not computed). `sites` (null, or
// one per layer): what runs at each layer's sites besides the fp ops (grad_layer.h LayerSites: the online rotations,
// the dynamic quantizers as hooks, static quantizers by STE; their backward as there).
// The same objective, forward only:
template <typename R>
R layer_mse(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
            const std::vector<std::vector<R>>& layer_targets, const std::type_identity_t<PrefixKv<R>>* prefix = nullptr,
            const std::type_identity_t<std::vector<LayerSites<R>>>* sites = nullptr);

template <typename R>
Gradients<R> layer_mse_and_grad(const ModelConfig& c, const Params<R>& p, std::span<const int32_t> tokens,
                                const std::vector<std::vector<R>>& layer_targets,
                                const std::type_identity_t<PrefixKv<R>>* prefix = nullptr,
                                const std::type_identity_t<std::vector<LayerSites<R>>>* sites = nullptr);

}  // namespace sinkq::train
