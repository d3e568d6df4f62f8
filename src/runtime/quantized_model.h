// sinkq/runtime/quantized_model.h — a calibrated simulation (quant/sim.h SimModel) turned into the
// model the packed runtime runs: the seven linears of every layer on the lowbit kernels
// (packed_linear.h), the calibrated static activation scales inside them, the online rotations
// and the full-precision KV prefix on the Forward. What runs is what the simulator computed:
// the same integer codes and scales, only the fp32 summation order differs (runtime_test.cc and
// quantized_model_test.cc hold it to 1e-5·max|logit| teacher-forced).
//
// Weights. The simulator's model (SimModel::model) holds the rotated, fake-quantized fp32
// weights, whatever chose their clip (fixed ratio or per-(row, group) grid search). Re-quantizing
// a fake-quantized group ŵ = s·c with clip 1 gives back its codes and scale only when an element
// sits at +qmax: with clip < 1 the largest magnitude may be a negative outlier clamped to the code
// -2^(N-1) (one step beyond -qmax), and then max|ŵ|/qmax is not s (measured: most rows of an
// int8 matrix at clip 0.9). So pack_exact() recovers (s, z) per (row, group) from the values
// themselves — max|ŵ|/qmax or max|ŵ|/2^(N-1), nudged by a few ulps, and for a trained step size
// (block-wise fine-tuning, quant/finetune.h: no element need reach an end of the range) max|ŵ|/k
// for the largest level k below that — and keeps the one that reproduces every ŵ bit for bit,
// checked element by element: a group that no (s, z) of the format reproduces is a sinkq::Error,
// never an approximation. The result: the same codes and
// scales as the simulator's quantizer (tested against lowbit::quantize with the chosen clip).
//
// The packed head (recipe.head on): lm_head (and untied embeddings) packed exactly as the
// simulator's W8 per row / W4 g{G} table into ModelWeights::lm_head_impl / embed_impl (one PackedLinear when tied); nothing fp is kept.
// Full-precision tensors (embeddings, lm_head): the simulator's, or rounded to `fp_dtype` (the
// artifact's storage type, artifact.h) — then the in-memory model runs the rounded values too,
// so a written and re-loaded artifact gives the in-memory model's logits bit for bit. Norms and
// biases always stay fp32.
//
// CrossQuant with static columns (--a-cross-cols static): the simulator's weights are folded
// (W·diag(b)) already; each PackedLinear carries its input's fold for the activation side.
//
// Not runnable (sinkq::Error saying what and why, from build_quantized): weight-only (A16),
// CrossQuant with per-call or running column maxima, asymmetric activations, weight formats without a kernel (packed_linear.h), KV
// schemes the packed cache cannot store (packed_kv.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "lowbit/formats.h"
#include "model/kv_prefix.h"
#include "model/model.h"
#include "quant/sim.h"
#include "runtime/packed_kv.h"
#include "runtime/packed_linear.h"

namespace sinkq::runtime {

struct QuantizedModel {
  // The packed model: LayerWeights::impl of every layer holds a PackedLinear; embeddings, norms,
  // lm_head (and the Mats' shapes / names) are the simulator's model's, possibly rounded.
  std::shared_ptr<const Model> model;
  quant::Recipe cfg;                       // what was simulated (rotation, calibration, prefix)
  RuntimeConfig rt;                        // what the kernels run (derived from cfg + statics)
  std::optional<KvScheme> kv;              // the packed KV cache (with its static k / v params); none: fp32
  std::optional<CodebookKvScheme> kv_codebook;  // or KVQuant's packed codebook KV (cfg.kv.vector())
  std::shared_ptr<const KvPrefix> prefix;  // full-precision KV prefix; null = none
  // SimModel::to_json() (the configuration and "calibration_result"), plus whatever the caller
  // adds (calibration_data, prefix_resolution): the artifact writes cfg.to_json() as "recipe" and
  // the keys beyond it as "provenance".
  nlohmann::json recipe;

  // Registers on fwd (which must run `model`) the online rotations (R3 at q/k, R4 at down_in,
  // when cfg.rotate.on), puts `prefix` in front and, with `kv`, gives it the packed KV cache
  // (attach_packed_kv; fwd's body must be empty). Never activation or KV fake-quant hooks: the
  // packed linears and the packed cache quantize themselves. Returns the hook handles.
  std::vector<int> attach(Forward& fwd) const;
  // e.g. "W4 per-channel sym | A8 dynamic per-token sym | rotate seed=0 | prefix 3 tokens"
  std::string describe() const;
  // Packed weight bytes (codes, scales, zero points of every linear, and of the int8 head's tables)
  // this model holds; a pipeline stage counts the tables the artifact takes from it (stage_tensors),
  // so the stages' counts add up to the whole model's.
  size_t packed_bytes() const;
  // Whether one table serves the embeddings and the LM head. A pipeline stage holds at most one
  // end, so it cannot compare the two: the source's tying, which only the rotation undoes (the
  // embeddings and the norm-scaled head rotate differently), says it there.
  bool tied() const;
};

struct QuantizeOptions {
  // Storage type of the full-precision matrices (embeddings, lm_head); nullopt = as the
  // simulator holds them (its dtype; rotated: fp32). Rounded values are what the model runs.
  std::optional<DType> fp_dtype;
};

// The runtime configuration of a simulated one (weights at clip 1, see the top of this file;
// static activation Params per (layer, site) from statics; CrossQuant's folds from cross). Throws
// sinkq::Error for what the kernels cannot run.
RuntimeConfig runtime_config(const quant::Recipe& cfg, const std::vector<quant::StaticQuant>& statics,
                             const quant::CrossFolds& cross = {});

// The same checks before anything is calibrated (static scales not needed yet): what a command
// calls before it loads a model. Throws as runtime_config.
void check_runnable(const quant::Recipe& cfg);

// `m` with its embeddings and lm_head rounded to `dtype` (as an artifact of that --fp-dtype stores
// them), everything else (packed linears included) shared with `m`, which the result keeps alive.
// `m` itself when both already have that dtype.
std::shared_ptr<const Model> with_fp_dtype(std::shared_ptr<const Model> m, DType dtype);

// SimModel -> QuantizedModel (see the top of this file). Throws sinkq::Error for configurations
// the kernels cannot run, naming the part and why.
QuantizedModel build_quantized(const quant::SimModel& sim, const QuantizeOptions& opt = {});

// Packs w[rows, cols] (fp32, values already on a quantization grid of `f`, e.g. fake-quantized
// with any clip or a trained step size) so that lowbit::dequantize(result) == w bit for bit:
// quantize with clip 1, then per (row, group) nudge the scale by a few ulps (and re-derive the
// codes and zero point), or try the coarser grids above, until every element is reproduced. Throws sinkq::Error naming `name`, the row and group when no nearby
// (s, z) reproduces the group (the values are not on a grid of this format).
lowbit::PackedTensor pack_exact(lowbit::PackedFormat f, const float* w, int64_t rows, int64_t cols,
                                const std::string& name);

}  // namespace sinkq::runtime
