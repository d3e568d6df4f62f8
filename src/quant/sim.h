// sinkq/quant/sim.h — simulated (fake) quantization of a whole model: one declarative Recipe,
// weight fake-quant into owned fp32 matrices, activation / KV fake-quant as site hooks, and the
// calibrated pipeline (SimModel, build_sim): Hadamard rotation, weight clip grid search, static
// activation / KV scales found by grid search on calibration samples.
//
// What is quantized (as in PrefixQuant §6.1 / CrossQuant §5, see docs/quant.md "Simulation"):
//   weights      q/k/v/o/gate/up/down_proj of every layer, [out, in]; embeddings and lm_head stay
//                full precision unless recipe.head is on (then int8 per row: recipe.h HeadSim). Per output channel (a row), or groups of `group` input columns.
//                Clip ratio fixed, or chosen per (row, group) by grid search on the layer output.
//   activations  the inputs of those linear layers: sites attn_in [T, hidden] (q/k/v), o_in
//                [T, heads·head_dim], mlp_in [T, hidden] (gate/up), down_in [T, intermediate].
//                Dynamic per-token (one scale per row, from that row), CrossQuant, or static
//                per-tensor (one calibrated scale per site and layer for every token).
//   KV cache     sites k (after RoPE: what the cache stores) and v, [T, kv_heads·head_dim];
//                dynamic per-token (a row) or per-head (each head_dim slice of a row), or static
//                per-head (one scale per head for all tokens) or per-tensor.
// bits = 16 means "off" for that part (the tensor stays fp32, untouched).
//
// Everything goes through quantizer.h / crossquant.h: this file only decides which tensor gets
// which QuantSpec (and, for static parts, which calibrated Params); calibrate.h holds the searches.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/quantizer.h"
#include "quant/recipe.h"
#include "model/kv_prefix.h"
#include "model/model.h"
#include "quant/crossquant.h"
#include "quant/kvquant.h"
#include "quant/rotate.h"

namespace sinkq::quant {

// The QuantSpec a weight matrix [out, in] gets (PerRow, or PerGroup when group divides in);
// exposed for tests. For a group that does not divide `in`, see fake_quant_weight.
QuantSpec weight_spec(const WeightSim& w, int64_t in);

// Scale groups of a weight matrix with `cols` input columns: 1 per output channel (group 0 or
// G >= cols), else ceil(cols / G) (the last one is the ragged tail when G does not divide).
int64_t weight_groups(const WeightSim& w, int64_t cols);

// Per-(row, group) clip ratios of one weight matrix, row-major [rows, groups] (weight_groups).
struct ClipRatios {
  int64_t rows = 0, groups = 0;
  std::vector<float> r;
  float at(int64_t i, int64_t g) const { return r[size_t(i * groups + g)]; }
};

// Fake-quantizes one weight matrix w[rows, cols] (fp32, in place) as the simulator does.
// group > 0 that does not divide cols: columns [0, G·⌊cols/G⌋) are PerGroup, the remaining
// cols mod G columns form one more group per row (the whole row when G > cols).
// clip == nullptr: every group uses w.clip. Otherwise each (row, group) uses its own ratio: the
// Params of that entry are the entries of compute_params(spec with that ratio) — the one scale
// definition of quantizer.h, only picked per entry — then fake_quant applies them.
void fake_quant_weight(const WeightSim& w, float* x, int64_t rows, int64_t cols,
                       const ClipRatios* clip = nullptr);

// The (scale, zero) that fake_quant_weight gives each (row, group) of w[rows, cols] (the same clip
// rule), [rows, groups = weight_groups(w, cols)] row-major; zero empty when symmetric. So
// fake_quant_weight(x) = s·clamp(rne(x/s), qmin − z, qmax − z) entry by entry with these (s, z):
// the starting point of the trained step sizes of block-wise fine-tuning (quant/finetune.h).
struct WeightGrid {
  int64_t rows = 0, groups = 0;
  std::vector<float> scale;
  std::vector<int32_t> zero;
};
WeightGrid weight_grid(const WeightSim& w, const float* x, int64_t rows, int64_t cols,
                       const ClipRatios* clip = nullptr);

// Chosen clip ratios of every matrix: [layer][q, k, v, o, gate, up, down].
using ModelClipRatios = std::vector<std::vector<ClipRatios>>;

// CrossQuant's static column maxima, folded (crossquant.h CrossFold): one per (layer, linear
// input site), [layer * 4 + linear_input_index(site)] (attn_in, o_in, mlp_in, down_in). Empty
// unless recipe.act_cross_static().
using CrossFolds = std::vector<CrossFold>;


// A model whose q/k/v/o/gate/up/down matrices are widened to fp32 and fake-quantized (owned), and
// with cfg.head on its embeddings / lm_head too (one table when tied); the rest (norms, biases,
// an fp head) is shared with `base`, which the result keeps alive.
// With weights off it returns `base` itself (same object: logits bit-identical). Does not rotate
// (build_sim does). With cfg.w.clip_grid the searched ratios must be given (else an error naming
// --w-clip and --calib). With cfg.act_cross_static() the folds must be given: every linear's
// weights are multiplied by its input site's b (crossquant.h), then fake-quantized (or, where a
// weight rule leaves a matrix unquantized, kept folded in fp32).
std::shared_ptr<const Model> fake_quantize_weights(std::shared_ptr<const Model> base,
                                                   const Recipe& cfg,
                                                   const ModelClipRatios* clips = nullptr,
                                                   const CrossFolds* folds = nullptr);

// Layer l of `m` fake-quantized in place, to the values fake_quantize_weights gives it (bit for
// bit): for build_sim's static search on its own rotated copy, so that the fp and the fake-quantized
// linears of the model are never held at once (each layer is quantized once its fp targets exist).
// Only for a model whose every matrix this touches is fp32 in m's own store (can_fake_quantize_in_place;
// else sinkq::Error) and that nothing else reads as full precision afterwards. Heads: not touched.
void fake_quantize_layer_in_place(const Model& m, const Recipe& cfg, int l, const ModelClipRatios* clips = nullptr,
                                  const CrossFolds* folds = nullptr);
bool can_fake_quantize_in_place(const Model& m, const Recipe& cfg, const CrossFolds* folds = nullptr);

// Registers the dynamic activation and KV hooks of `cfg` on fwd.hooks() (validates cfg first).
// Returns the hook handles (for SiteHooks::remove). Nothing is registered for parts that are off.
// CrossQuant state (RunningMax) lives in the hooks and restarts when a call begins at position 0.
// A config with static parts or rotation cannot be attached this way (sinkq::Error naming the
// flag): it needs build_sim.
std::vector<int> attach(Forward& fwd, const Recipe& cfg);

// One calibrated static quantizer: the spec (its clip_ratio is the chosen one) and the Params
// applied with fake_quant to every row the hook at (site, layer) sees.
struct StaticQuant {
  Site site = Site::AttnIn;
  int layer = 0;
  QuantSpec spec;
  Params params;
};

// The whole pipeline's result: the model to run (rotated if asked, weights fake-quantized with
// the chosen clip ratios), the calibrated static quantizers, and a report of what was chosen.
struct SimModel {
  std::shared_ptr<const Model> model;
  Recipe cfg;
  ModelClipRatios weight_clip;       // empty unless cfg.w.clip_grid
  std::vector<StaticQuant> statics;  // static activation / KV quantizers, forward order per layer
  CrossFolds cross;                  // CrossQuant's folded static column maxima (cfg.act_cross_static())
  std::vector<KvQuantLayer> kvq;     // per layer: the K and V codebook quantizers (cfg.kv.vector())
  // The KV prefix every Forward of this model runs behind (null = none): cfg.prefix.tokens run
  // through the rotated fp model (source Fp) or through this quantized model (source Quant).
  std::shared_ptr<const KvPrefix> prefix;
  // null when nothing was calibrated; else {"seconds", "weights": {...}, "activations": {...},
  // "kv": {...}}: chosen ratios (compact: per-layer means and a histogram for weights; per site
  // and layer for statics) and the search objective at the chosen ratio and at r = 1.
  nlohmann::json calibration_report;

  // Registers on fwd (which must run `model`): the online rotations first, then the activation
  // and KV quantization hooks (static ones with their calibrated Params), and puts `prefix` on it
  // (Forward::set_prefix; fwd's body must be empty). Returns the hook handles.
  std::vector<int> attach(Forward& fwd) const;
  // The hooks only (no prefix): what computes a source-Quant prefix. kv_codecs = false leaves the
  // codebook KV quantizers out (the caller attaches runtime::CodebookKvStore instead: the engine
  // does for kv.recent > 0, whose per-query window per-row hooks cannot express — with it,
  // kv_codecs = true is an error).
  std::vector<int> attach_hooks(Forward& fwd, bool kv_codecs = true) const;
  // cfg.to_json() plus "calibration_result" (the report).
  nlohmann::json to_json() const;
  // cfg.describe() and, when calibrated, a short summary of the chosen ratios.
  std::string describe() const;
};

// Progress of build_sim: (stage, done, total), e.g. ("weight clip", 3, 6) after layer 3 of 6.
using CalibProgress = std::function<void(std::string_view stage, int64_t done, int64_t total)>;

// The pipeline, in this order:
//   0. prefix (cfg.prefix.tokens non-empty; see PrefixSim for every decision): source Fp computes
//      the prefix KV with the rotated fp model and its online rotations, and steps 2 and 4 run
//      every calibration sample behind it (body only: a leading [BOS] dropped when the prefix
//      holds one); source Quant feeds prefix + body inline to the searches and, at the end,
//      computes the prefix KV with the finished quantized model and its hooks;
//   1. rotate (cfg.rotate; rotate.h) — everything below sees the rotated model;
//   2. weight clip grid search (cfg.w.clip_grid) on the inputs of each linear layer taken from
//      the full-precision (rotated) model, layer by layer (calibrate.h);
//   3. fake-quantize the weights (fixed ratio or the chosen ones);
//   4. static activation / KV scales (cfg.a / cfg.kv static) by grid search on the block output
//      of the quantized-weight model, layer by layer, sites in forward order (calibrate.h).
//   4b. the KV codebook quantizers (cfg.kv.vector(); kvquant.h): ranges, levels, Fisher weights
//      on the model as steps 1-4 made it;
//   5. block-wise fine-tuning (cfg.finetune; finetune.h): per block in order, the fp weights and
//      every quantization parameter trained from the values steps 2-4 chose;
//   6. the prefix KV (source Quant: by the finished quantized model);
//   7. IntactKV+Cal (cfg.prefix.train_epochs; train/intactkv_cal.h): the fp prefix trained with
//      the finished quantized model (its rotations, dynamic and static quantizers) in the forward.
// `calib`: N token sequences (calib_data.h load_calib); required, non-empty, when
// cfg.needs_calibration() (else sinkq::Error naming --calib); each at most
// max_position_embeddings tokens, the prefix included (error naming --prefix and --calib-len).
// Deterministic: the same inputs give the same ratios, scales and prefix KV.
SimModel build_sim(std::shared_ptr<const Model> base, const Recipe& cfg,
                   std::span<const std::vector<int32_t>> calib, const CalibProgress& progress = {});

}  // namespace sinkq::quant
