// sinkq/quant/kvquant.h — KVQuant in the simulator (KVQuant §3.1–3.7): per-layer K and V codebook
// quantizers (formats/nuq.h) and their offline calibration, build_sim's KV step for a recipe with
// kv.codebook != int.
//
// Where they sit. Keys at site k_pre_rope (pre-RoPE, the default: RoPE then runs on the dequantized
// keys, as KVQuant's kernel applies it after the lookup) or at site k (post-RoPE, after the online
// R3 rotation when rotation is on: the baselines); Values at site v. Per channel (a column over
// tokens) or per token (a row: every KV head of the token together, as KVQuant's per-token vectors
// span the hidden dimension).
//
// Calibration (decisions; docs/kvquant.md):
//   data      every calibration sample run through the model as build_sim has made it so far
//             (rotated, quantized weights, activation quantizers, behind the fp prefix), the KV
//             sites unquantized; every row the K / V hooks see. Behind an fp prefix the first
//             token ([BOS], the sink) is in the prefix, so it is never seen: KVQuant §3.6's
//             "ignore the first token when calibrating" is the prefix's. Without one it is
//             calibrated on, as a plain quantized model's.
//   ranges    per channel: outlier_range of the column over all calibration rows (p/2 per side of
//             the calibration tokens, KVQuant §3.4/3.7); per token: computed online per row.
//   levels    uniform / nf: fixed. kmeans / fisher: weighted 1-D k-means (Lloyd, exact on the sorted
//             values, initialised at the weighted quantiles (i + ½)/2^b) of every non-outlier
//             value normalised to [−1, 1], one codebook per layer for K and one for V; weight 1 or
//             the diagonal Fisher information F = (∂ℓ/∂a)² of that element (KVQuant eq. 2).
//   Fisher    train::fisher_sample on the full-precision model (unrotated; behind its own fp
//             prefix when the recipe's prefix is fp), as KVQuant computes it on the fp16 model; the
//             Values' gradient is carried into the rotated basis (g·R2) when rotation is on (K
//             before RoPE is the same in both bases).
//   Q-Norm    levels Ĉ = (C − μ2)·σ1/σ2 + μ1 with μ1, σ1 the mean and standard deviation of the
//             normalised calibration values and μ2, σ2 those of their quantized values (KVQuant
//             eq. 3), unweighted, per layer and K / V.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string_view>
#include <memory>
#include <span>
#include <vector>

#include "formats/nuq.h"
#include "model/kv_prefix.h"
#include "model/model.h"
#include "quant/recipe.h"

namespace sinkq::quant {

struct SimModel;

// One layer's K or V quantizer (formats/nuq.h: per_channel, outliers, levels, the channel ranges).
using KvCodec = formats::nuq::Codec;

struct KvQuantLayer {
  KvCodec k, v;
};

// ---- pieces (exposed for tests) ----------------------------------------------------------------

// A normalised calibration value and its weight.
struct WeightedValue {
  float u, w;
};

// The normalised non-outlier values of x [rows, cols] under codec's axis, range and outlier
// fraction (levels unused), appended to `out` with weights from fisher [rows, cols] (null: 1).
void normalised_values(const KvCodec& codec, const float* x, const float* fisher, int64_t rows, int64_t cols,
                       std::vector<WeightedValue>& out);

// Weighted 1-D k-means (Lloyd) of k levels; sorts `points`. Total weight must be > 0.
std::vector<float> weighted_kmeans_1d(std::vector<WeightedValue>& points, int k, int max_iter = 200);

// Q-Norm (KVQuant eq. 3) of `levels` for the normalised values `points` (weights ignored).
std::vector<float> qnorm_levels(std::span<const float> levels, std::span<const WeightedValue> points);

// Σ w·(u − level(u))² / Σ w: the (weighted) error of a codebook on normalised values.
double codebook_error(std::span<const float> levels, std::span<const WeightedValue> points);

// The Fisher information (KVQuant eq. 2) of every layer's K (before RoPE) and V over the
// calibration samples, in order: k[l], v[l] each [tokens, kv_dim]. train::fisher_sample on `base`,
// the full-precision unrotated model, behind its own fp prefix of `prefix_tokens` (empty: none);
// with rotation the Values' gradients in the rotated basis. It widens `base` to fp32 for the
// backward, so build_sim runs it first, before rotation or fake quantization make fp32 copies of
// their own: the widened models are never held together (the 1.5B's W4 g32 + nuq3 quantize: peak
// 16.8 -> 11.5 GB). Refuses (sinkq::Error) when the activations and their Fisher information would
// not fit in memory.
struct KvFisher {
  std::vector<std::vector<float>> k, v;  // per layer
};
KvFisher kvquant_fisher(const std::shared_ptr<const Model>& base, const Recipe& cfg,
                        std::span<const int32_t> prefix_tokens, std::span<const std::vector<int32_t>> calib,
                        const std::function<void(std::string_view, int64_t, int64_t)>& progress);

// The calibrated quantizers of every layer (build_sim's KV step): `sm` holds the model and the
// hooks so far (its kvq empty), `fp_prefix` the prefix the calibration runs behind (null: none),
// `fisher` kvquant_fisher's result on the same samples for the Fisher codebook (else empty). Adds
// "kv_codebooks" to report. Refuses (sinkq::Error) when the calibration activations would not fit
// in memory. A recipe that calibrates nothing (token vectors, uniform / nf levels, no Q-Norm) gets
// its fixed codecs without running anything.
std::vector<KvQuantLayer> calibrate_kvquant(const SimModel& sm, const std::shared_ptr<const KvPrefix>& fp_prefix,
                                            std::span<const std::vector<int32_t>> calib, KvFisher fisher,
                                            const std::function<void(std::string_view, int64_t, int64_t)>& progress,
                                            nlohmann::json& report);

}  // namespace sinkq::quant
