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
// samples. The quantized model is the simulator's fake-quantized-weight model with its dynamic
// activation / KV quantizers as site hooks (straight-through in the backward); static quantizers
// and online rotations are not in the training forward yet: quant::build_sim refuses them naming
// the flag.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/kv_prefix.h"
#include "model/model.h"

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
// quant_hooks: the quantized model's dynamic activation / KV quantizers (grad_model.h: run in the
// forward, straight-through in the backward); null for weight-only.
IntactKvCalResult train_intactkv(const Model& fp, const Model& quant, const KvPrefix& prefix,
                                 const std::vector<std::vector<int32_t>>& bodies, const IntactKvCalOptions& opt,
                                 const SiteHooks* quant_hooks = nullptr);

}  // namespace sinkq::train
