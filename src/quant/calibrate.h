// sinkq/quant/calibrate.h — the grid searches of the calibrated simulator (PrefixQuant §6.1:
// "we initialize both s_W and s_X through grid search … minimize the layer outputs for
// fine-grained quantization (per-channel/per-head) and block outputs for per-tensor
// quantization"). build_sim (sim.h) drives them; this header exposes the pure pieces for tests.
//
// Grid: Recipe::calib.grid, by default r_i = 1 − 0.025·i, i = 0..20 (sim.h default_clip_grid).
// Every search scores every candidate with one objective and keeps the smallest; ties keep the
// earlier grid entry (1.0 comes first: the least clipping wins a tie). With 1.0 in the grid the
// result is therefore never worse than no clipping on the calibration data.
//
// Weights (per output channel, or per (row, group)): the layer-output error
//     e_i(r)  = Σ_n ( X_n · (w_i − Q_r(w)_i) )²                      per output channel i
//     e_ig(r) = Σ_n ( X_n,g · (w_i,g − Q_r(w)_i,g) )²                 per (row i, group g)
// over calibration inputs X [n, in] of that linear layer (the group form is the error of the
// group's partial dot product: the groups of a row are chosen independently). X are at most
// `weight_rows` (512) tokens per layer, evenly spaced over all calibration tokens (select_rows),
// taken from the full-precision model (rotated, if rotation is on), layer by layer. Decision: fp
// inputs (not the inputs of the already quantized earlier layers) keep the weight search
// independent of the activation / KV settings and of the order of the layers, as AWQ's auto_clip
// does; the static activation search that follows runs on the quantized-weight model and sees
// whatever error the weights leave.
//
// Static activations (per-tensor at attn_in, o_in, mlp_in, down_in) and static KV (per head or
// per tensor at k, v): the block-output MSE, layer by layer (Forward::run_layer, no earlier layer
// is re-run per candidate):
//   block input   the output of the already quantized previous blocks (quantized weights,
//                 chosen static scales, dynamic parts on). Decision: this is what the block sees
//                 at inference, so its scales are fitted to the ranges the quantized model really
//                 produces (drift from earlier quantization included), as OmniQuant /
//                 EfficientQAT block-wise pipelines (PrefixQuant's code base) propagate the
//                 quantized inputs.
//   target        the full-precision block (fp weights, no quantization; rotated if on) on that
//                 same input: the objective measures only the error this block adds, which its
//                 own scales can act on (a target on the fp trajectory would also score
//                 upstream error that no scale of this block can undo).
//   order         the static sites of a block one after the other in forward order (attn_in,
//                 k, v, o_in, mlp_in, down_in): earlier sites fixed at their chosen scale, later
//                 static sites off (unquantized); non-searched quantizers (dynamic activations or
//                 KV, CrossQuant) stay on throughout.
//   candidates    for each ratio r: the Params of Calibrator(spec with clip_ratio r,
//                 cfg.calib.statistic) over every row the site's hook saw on all samples (the site
//                 itself unquantized in that pass); each sample is one run_layer call, so one
//                 observe() call: sample_mean averages the samples' ranges (formats/quantizer.h).
//   cost          a candidate at o_in, mlp_in or down_in reruns the block only from that site
//                 (Forward::resume_layer on the state saved in the observe pass: what precedes the
//                 site does not depend on the candidate, so the same bits as the whole block;
//                 down_in runs only down_proj). Two recipe settings trade accuracy of the search
//                 for time on large models (CalibSim; off by default): search_samples scores the
//                 candidates on the first N samples only (ranges and the next block's inputs still
//                 from all), refine_steps adds ratios within ±refine_width of the best grid entry
//                 (PrefixQuant's code: a coarse grid of 8, then 10 fine; the weight search refines
//                 each row / group around its own best), so a coarse grid can stand in for the
//                 21-ratio one.
// Statistics come only from the rows a hook sees: a full-precision prefix already in the cache
// (n_past() > 0) is never observed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "quant/sim.h"

namespace sinkq::quant {

// Result of the weight clip search on one matrix.
struct WeightClipResult {
  ClipRatios ratios;              // the chosen ratio per (row, group)
  std::vector<double> objective;  // [grid.size(), rows·groups]: e(r) of every candidate and entry
  std::vector<double> chosen;     // [rows·groups]: e at the chosen ratio
};

// The weight clip search on one matrix W [rows, cols] fp32 with calibration inputs X [n, cols]
// (definitions above; groups = weight_groups(w, cols), the ragged tail included). w.clip and
// w.clip_grid are ignored; bits, group and symmetric are used. Candidate r is scored with every
// entry at ratio r (fake_quant_weight with all ratios r), which is exact per entry since entries
// are independent. refine_steps > 0 (CalibSim::refine_steps): then refine_steps more ratios per
// entry, evenly over [best − refine_width, best + refine_width] around that entry's best grid
// ratio (ratios outside (0, 1] re-score the best: no change), each pass one evaluation with
// per-entry ratios; an entry takes a refined ratio only when strictly better. `objective` holds the
// grid candidates only.
WeightClipResult search_weight_clip(const WeightSim& w, const float* W, int64_t rows, int64_t cols,
                                    const float* X, int64_t n, std::span<const float> grid, int refine_steps = 0,
                                    float refine_width = 0.05f);

// e per (row, group) for the given ratios: the objective the search minimizes, computed the same
// way (W quantized by fake_quant_weight with `ratios`, the error multiplied by X in fp32 by the
// matmul kernel, squares summed in double).
std::vector<double> weight_clip_objective(const WeightSim& w, const float* W, int64_t rows, int64_t cols,
                                          const float* X, int64_t n, const ClipRatios& ratios);

// Static activation quantizers by plain abs-max (clip 1, no search) over the rows each static
// activation site of `fwd` (a full-precision Forward; its hooks are left as they were) sees in one
// forward of `tokens`: one per (layer, site) of every layer, spec = static_spec(cfg, site). What
// bench times packed static configurations with (speed does not depend on the scale values);
// build_sim's block-output search is the calibration that quantize and ppl use.
std::vector<StaticQuant> calibrate_static_max(Forward& fwd, const Recipe& cfg, std::span<const int32_t> tokens);

// Which of `total` rows (calibration tokens, in the order the hooks see them: sample by sample)
// the weight search uses: all when total <= max_rows, else max_rows rows ⌊k·total/max_rows⌋,
// k = 0..max_rows−1 (evenly spaced, distinct, increasing; no RNG: reproducible by construction).
std::vector<int64_t> select_rows(int64_t total, int64_t max_rows);

// --- shared by sim.cc, calibrate.cc and build_sim.cc ----------------------------------------

// Rounds for the reports (4 significant decimals are plenty for ratios and relative errors).
double round4(double v);
// The weight clip grid search of every matrix whose resolved setting asks for it (build_sim step
// 2), on the fp (rotated) model `fp` behind `prefix`; adds "weights" to report.
// With folds (CrossQuant static columns) each matrix is searched as it will be quantized: W·diag(b)
// against its folded inputs x / b.
ModelClipRatios search_weight_clips(std::shared_ptr<const Model> fp, const Recipe& cfg,
                                    std::span<const std::vector<int32_t>> calib,
                                    const std::shared_ptr<const KvPrefix>& prefix, const CalibProgress& progress,
                                    nlohmann::json& report, const CrossFolds* folds = nullptr);
// CrossQuant's static column maxima (build_sim step 1b): the column abs-max of every linear input
// site over the calibration samples run through the fp (rotated) model `fp` behind `prefix`,
// folded (make_cross_fold with cfg.a.bits / alpha); adds "cross_columns" to report.
CrossFolds calibrate_cross_columns(std::shared_ptr<const Model> fp, const Recipe& cfg,
                                   std::span<const std::vector<int32_t>> calib,
                                   const std::shared_ptr<const KvPrefix>& prefix, const CalibProgress& progress,
                                   nlohmann::json& report);
// The static activation / KV block-output searches (build_sim step 4) on the quantized-weight
// model `qmodel`, targets from `fp`; adds "activations" / "kv" to report.
// folds: cfg.act_cross_static()'s (qmodel's weights are folded with them).
// prepare(l), when set, runs once per layer after that layer's fp targets are computed and before
// qmodel runs it: build_sim passes fp == qmodel and fake-quantizes the layer in place there
// (fake_quantize_layer_in_place), so one copy of the model is held.
std::vector<StaticQuant> search_statics(std::shared_ptr<const Model> fp, std::shared_ptr<const Model> qmodel,
                                        const Recipe& cfg, std::span<const std::vector<int32_t>> calib,
                                        const std::shared_ptr<const KvPrefix>& prefix, const CalibProgress& progress,
                                        nlohmann::json& report, const CrossFolds* folds = nullptr,
                                        const std::function<void(int)>& prepare = {});

// Whether cfg quantizes site s statically (attn_in/o_in/mlp_in/down_in: static activations;
// k/v: static KV), and the QuantSpec of that site (clip_ratio 1; the search sets it).
bool static_site(const Recipe& cfg, Site s);
QuantSpec static_spec(const Recipe& cfg, Site s, const ModelConfig& mc);
// The dynamic activation (per-token, CrossQuant) and dynamic KV hooks of cfg; static parts are
// left out (SimModel::attach adds them with their Params). No validation, no rotation.
// CrossQuant with static columns needs its folds (the hook feeds the folded weights ẑ); without
// them it is a sinkq::Error.
std::vector<int> attach_dynamic_hooks(Forward& fwd, const Recipe& cfg, const CrossFolds* folds = nullptr);
// The same hooks on a hook table of their own (the training forward runs them: build_sim's
// IntactKV+Cal step).
std::vector<int> attach_dynamic_hooks(SiteHooks& hooks, const ModelConfig& mc, const Recipe& cfg,
                                      const CrossFolds* folds = nullptr);

}  // namespace sinkq::quant
