// sinkq/quant/rotate.h — Hadamard rotation of a whole model (QuaRot / SpinQuant R1..R4 as
// PrefixQuant appendix C uses them), computationally invariant: the rotated fp model gives the
// same logits as the original (up to fp32 rounding), but its activations have no large channels.
//
// Conventions. Activations are row vectors, a linear layer is y = x·Wᵀ + b with W [out, in] (HF
// layout). A rotation R acts on a row vector as x ← x·R (R orthogonal). Rotating a layer's input
// side means W ← W·R (then x·R·(W·R)ᵀ = x·Wᵀ), its output side W ← Rᵀ·W and b ← b·R (then the
// output is y·R). hadamard.h's transforms compute x·R row by row, so W·R rotates W's rows and
// Rᵀ·W = (Wᵀ·R)ᵀ rotates its columns.
//
//   R1  residual stream: Q = RandomHadamard(hidden_size, seed) (= diag(d)·H/√n, random signs d).
//       Fused offline. RMSNorm commutes with Q only without its gain (rms(x·Q) = rms(x)), so each
//       gain g is first folded into the next layers' input columns, W ← W·diag(g), and the norm
//       weights become 1:
//         embed              ← embed·Q                   (its rows are residual vectors)
//         q/k/v, gate/up     ← W·diag(g)·Q               (input side; g = attn_norm / mlp_norm)
//         o_proj, down_proj  ← Qᵀ·W                      (output side: they write the residual)
//         lm_head            ← lm_head·diag(final_norm)·Q
//       A tied lm_head becomes its own matrix (the embedding takes no gain). The q/k/v biases
//       are on the output side of R1 and do not change.
//   R2  per head on v_proj's output and o_proj's input, head_dim×head_dim. Fused offline: for
//       each kv head h, Wv_h ← R2ᵀ·Wv_h and bv_h ← bv_h·R2 (v_h ← v_h·R2, so the attention
//       output of every head is rotated too, its weights being a convex mix of v rows), and for
//       each q head i the column block Wo_i ← Wo_i·R2. All heads share one R2 per layer, so
//       GQA is consistent (q head i reads kv head i / (heads / kv_heads), both rotated alike).
//       R2 of layer l = RandomHadamard(head_dim, s_l), s_l the (l+1)-th output of
//       splitmix64(seed): independent signs per layer, as SpinQuant learns one R2 per layer.
//   R3  per head on q and k after RoPE (sites q and k), online: x ← x·H/√head_dim on every
//       head_dim slice (fwht_inplace). (q·H)(k·H)ᵀ = q·kᵀ, so the scores are unchanged; the K
//       cache holds rotated keys (what KV quantization sees). Nothing is fused for R3: the pair of
//       hooks leaves the logits as they are (it changes the K cache); one without the other
//       breaks them.
//   R4  on down_proj's input (intermediate×intermediate): down_proj ← down_proj·H/√I fused
//       offline (input side), x ← x·H/√I online at site down_in.
//
// Random vs plain: the fused rotations (R1, R2) cost nothing at inference, so they take random
// signs (QuaRot's randomized Hadamard: incoherence with high probability for any weights). The
// online ones (R3, R4) are the plain normalized Hadamard H/√n, a bare FWHT as in QuaRot's kernels.
//
// A rotated model is only correct with its online rotations attached: rotate_model() and
// attach_online_rotation() always go together (SimModel in sim.h does both).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"
#include "quant/hadamard.h"

namespace sinkq::quant {

struct RotateConfig {
  bool on = false;
  uint64_t seed = 0;  // random signs of the randomized rotations (R1, R2)
};

// {"on": false} or {"on": true, "seed", "r1".."r4": {"kind", "placement", "acts_on"}}.
nlohmann::json to_json(const RotateConfig& cfg);

// Throws sinkq::Error naming the dimension (hidden_size, intermediate_size or head_dim), its value
// and the supported sizes (2^k·m, hadamard.h) when the model cannot be rotated.
void check_rotatable(const ModelConfig& cfg);

// The rotated model: every matrix widened to fp32 and owned (norm weights: a shared vector of
// ones; q/k biases shared with base); cfg.on == false returns base itself. Parameter count grows
// by vocab·hidden for a tied model (lm_head is untied). Throws as check_rotatable.
std::shared_ptr<const Model> rotate_model(std::shared_ptr<const Model> base, const RotateConfig& cfg);

// Registers the online rotations (R3 at q and k, R4 at down_in, every layer) on fwd.hooks(), in
// that order, and returns their handles {q, k, down_in}; nothing when cfg.on is false. Must run
// before any quantization hook is added at those sites (hooks run in the order they were added).
// Throws as check_rotatable.
std::vector<int> attach_online_rotation(Forward& fwd, const RotateConfig& cfg);

// The randomized rotations rotate_model() fuses (R1, and R2 of `layer`), for code that maps
// between the original and the rotated coordinates. They depend on cfg.seed only, not cfg.on.
RandomHadamard r1_rotation(const ModelConfig& model, const RotateConfig& cfg);
RandomHadamard r2_rotation(const ModelConfig& model, const RotateConfig& cfg, int layer);

}  // namespace sinkq::quant
