// sinkq/train/intactkv_cal.h — IntactKV+Cal (IntactKV §3.2, App. E): the pivot tokens' KV cache
// (the full-precision prefix) trained as extra parameters so that the quantized model's layer
// outputs on the tokens after the prefix match the full-precision model's: minimise
// 1/2·Σ_l ||f_l(w, x) − f_l(ŵ, x; Θ)||² (eq. 2; per token here) over the prefix K and V with AdamW
// (the paper: lr 2e-4, 20 epochs over 128 samples, gradient accumulation 16).
//
// Decisions. The trained parameters are the prefix's stored rows (K after RoPE, V), exactly what
// the runtime attends to. The targets f_l(w, x) are the full-precision model's layer outputs behind
// the untrained full-precision prefix, computed once per sample. Samples are visited in a fixed
// order (deterministic for a given input); each optimiser step averages the gradients of `batch`
// samples. The quantized model is the simulator's fake-quantized-weight model with everything it
// runs at its sites (grad_layer.h LayerSites): the online rotations, the dynamic activation / KV
// quantizers as hooks (straight-through in the backward), the calibrated static quantizers (their
// STE backward; their scales stay fixed here).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/kv_prefix.h"
#include "model/model.h"
#include "train/grad_layer.h"

namespace sinkq::train {

struct IntactKvCalOptions {
  int epochs = 20;
  double lr = 2e-4;
  int batch = 16;  // samples per optimiser step (the last step of an epoch may have fewer)
  std::function<void(int epoch, int epochs, double loss)> progress;  // after each epoch
};

struct IntactKvCalResult {
  std::shared_ptr<const KvPrefix> prefix;  // the trained prefix (same tokens)
  double initial_loss = 0;                 // the objective of the untrained prefix, mean over samples
  std::vector<double> epoch_loss;          // mean over each epoch's samples, before their steps
};

// bodies: the calibration tokens that follow the prefix (each non-empty; prefix + body within
// max_position_embeddings). fp and quant must have the same shapes.
// quant_sites: what the quantized model runs at each layer's sites (null: nothing, weight-only
// without rotation); fp_sites: the fp model's (its online rotations; null: none).
IntactKvCalResult train_intactkv(const Model& fp, const Model& quant, const KvPrefix& prefix,
                                 const std::vector<std::vector<int32_t>>& bodies, const IntactKvCalOptions& opt,
                                 const std::vector<LayerSites<float>>* quant_sites = nullptr,
                                 const std::vector<LayerSites<float>>* fp_sites = nullptr);

}  // namespace sinkq::train
