// sinkq/train/fisher.h — the diagonal Fisher information of every layer's Keys (before RoPE) and
// Values on calibration samples: what KVQuant's sensitivity-weighted nuqX codebooks minimise
// against, Σ F_ii·(A − Q(A))² (KVQuant §3.3, App. C), computed here with the backward pass of
// grad_model.h and streamed to a safetensors file (issue 15's k-means reads it).
//
// Definition (the empirical Fisher, as KVQuant uses it): for each sample s and activation element
// a (layer l, token t, channel c of K before RoPE or of V), F = (∂ℓ_s/∂a)² with ℓ_s the sample's
// summed next-token NLL (the sum, not the mean, so F does not depend on the sample's length). The
// activations themselves are stored beside it: the codebooks are fitted to (A, F) pairs. Every
// token is kept, the first ([BOS], the attention sink) included; KVQuant §3.6 leaves it out of the
// calibration, which the consumer does (its position is 0 of each sample).
//
// File: tensors "sample.<s>.layer.<l>.{k_pre_rope, k_fisher, v, v_fisher}" F32 [tokens of sample s,
// kv_dim] (zero-padded indices: the file's data order is sample-major, so it is written one sample
// at a time and memory stays at one sample's tape); __metadata__ "format" = "sinkq-fisher",
// "layers", "kv_dim", "samples", "definition", plus what the caller adds (model, calibration).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/grad_model.h"

namespace sinkq::train {

struct FisherResult {
  int64_t samples = 0, tokens = 0;
  uint64_t bytes = 0;                     // of the file written
  std::vector<double> mean_k, mean_v;     // per layer: mean F over every element (a summary)
  std::vector<double> loss;               // per sample: mean NLL
};

// The Fisher information of one sample: per layer F = (∂ℓ/∂a)² of K before RoPE (k) and of V (v),
// [T, kv_dim], with the activations themselves (k_values, v_values); ℓ the summed NLL of the
// sample's next-token targets, the sample behind `prefix` (null: none; positions start at its
// size). The one definition write_fisher and KVQuant's codebook calibration (quant/kvquant.h) use.
struct FisherSample {
  std::vector<std::vector<float>> k, v, k_values, v_values;
  double loss = 0;  // mean NLL
};
// v_basis (optional): called with (layer, ∂ℓ/∂V [T, kv_dim]) before squaring, to carry the gradient
// into another basis of V (the rotated model's: ·R2 per head).
FisherSample fisher_sample(const ModelConfig& c, const Params<float>& p, const std::vector<int32_t>& tokens,
                           const PrefixKv<float>* prefix = nullptr,
                           const std::function<void(int, std::vector<float>&)>& v_basis = {});

// Computes and writes the file (atomically; `out` untouched on an error). samples: token ids, each
// at least 2 tokens. progress(done, total) after each sample.
FisherResult write_fisher(const Model& m, const std::vector<std::vector<int32_t>>& samples, const std::string& out,
                          const std::map<std::string, std::string>& metadata = {},
                          const std::function<void(int64_t, int64_t)>& progress = {});

// The tensor name of (sample, layer, what) in a Fisher file.
std::string fisher_tensor(int64_t sample, int layer, const char* what);

}  // namespace sinkq::train
