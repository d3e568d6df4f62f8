// sinkq/quant/finetune.h — a calibrated simulation in the training forward (train/grad_layer.h),
// and PrefixQuant's block-wise fine-tuning on it (PrefixQuant §5.2 / §6.1, EfficientQAT Block-AP).
//
// Block-wise fine-tuning (build_sim step 5, Recipe::finetune). Every quantization parameter starts
// where the grid search left it (weight clip ratios → per-(row, group) step sizes, the static
// activation / KV scales). Then, block by block in order, for `epochs` passes over the calibration
// samples in batches of `batch`:
//   trained     the block's seven full-precision linear weights (AdamW, lr_weights) and all its
//               quantization parameters — weight step sizes, static activation and KV scales
//               (AdamW, lr_scales) — through the straight-through estimator (train/ste.h: LSQ's
//               step-size gradient, without LSQ's gradient scale: Adam normalises it away, and
//               PrefixQuant's code trains the plain gradient). Norms and biases stay as they are
//               (EfficientQAT trains the linear weights only). Integer zero points stay fixed.
//   objective   the mean squared error of the block output against the fp block's.
//   input       the output of the already fine-tuned quantized blocks before it (what the block
//               sees at inference), through the fp prefix when there is one.
//   target      the fp block on the fp model's own input (the fp trajectory), as EfficientQAT's
//               Block-AP: the block may also undo error that earlier blocks left. Or (target
//               quant_input, --finetune-target quant) the fp block on the block's quantized input,
//               the static grid search's objective (calibrate.h): only the error this block adds.
//   schedule    cosine decay of both learning rates to 0 over the block's steps; no weight decay.
//   quantizers  in the forward as the engine runs them (grad_layer.h LayerSites): online
//               rotations, dynamic quantizers as hooks (identity backward), static ones by STE.
// The result replaces the simulation's weights (the trained weights fake-quantized with the
// trained step sizes: the values are on each group's trained grid, so the packer recovers the
// codes exactly, runtime/quantized_model.h pack_exact) and its static scales. Deterministic: a
// fixed sample order, no randomness.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <span>
#include <vector>

#include "quant/sim.h"
#include "train/grad_layer.h"

namespace sinkq::quant {

// The online rotation of cfg for train::LayerSites (x ← x·H/√n, transpose x ← x·Hᵀ/√n, on each
// n-wide row): null without rotation.
std::function<void(float*, int64_t, int64_t, bool)> training_rotation(const RotateConfig& cfg);

// What the simulated quantized model runs at each layer's sites, for the training forward: the
// online rotations, the dynamic quantizers of cfg registered on `hooks` (sized to the model; must
// outlive the result), and the static quantizers of `statics` with their scales (pointed to:
// statics must outlive the result and keep its size).
std::vector<train::LayerSites<float>> training_sites(const Recipe& cfg, const ModelConfig& mc,
                                                     const std::vector<StaticQuant>& statics, SiteHooks& hooks);
// The full-precision (rotated) model's: the online rotations only.
std::vector<train::LayerSites<float>> fp_training_sites(const Recipe& cfg, const ModelConfig& mc);

struct FinetuneResult {
  std::shared_ptr<const Model> model;  // `fp`'s embeddings / norms / biases, the trained weights fake-quantized
  std::vector<StaticQuant> statics;    // the trained static scales (same order as given)
  nlohmann::json report;               // per block: MSE before and after, per-epoch means, seconds
};

// Block-wise fine-tuning as above. fp: the rotated full-precision model (build_sim's `rotated`);
// clips: the weight clip ratios (null or empty: cfg's fixed ratios); statics: the grid-searched
// static quantizers; prefix: the fp prefix the calibration runs behind (null: none); calib: the
// samples as build_sim feeds them (behind the prefix). progress(stage, block, blocks).
FinetuneResult finetune_blockwise(std::shared_ptr<const Model> fp, const Recipe& cfg, const ModelClipRatios* clips,
                                  const std::vector<StaticQuant>& statics,
                                  const std::shared_ptr<const KvPrefix>& prefix,
                                  std::span<const std::vector<int32_t>> calib, const CalibProgress& progress = {});

}  // namespace sinkq::quant
