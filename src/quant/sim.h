// sinkq/quant/sim.h — simulated (fake) quantization of a whole model: one declarative SimConfig,
// weight fake-quant into owned fp32 matrices, activation / KV fake-quant as site hooks, and the
// calibrated pipeline (SimModel, build_sim): Hadamard rotation, weight clip grid search, static
// activation / KV scales found by grid search on calibration samples.
//
// What is quantized (as in PrefixQuant §6.1 / CrossQuant §5, see docs/quant.md "Simulation"):
//   weights      q/k/v/o/gate/up/down_proj of every layer, [out, in]; embeddings and lm_head stay
//                full precision. Per output channel (a row), or groups of `group` input columns.
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
#include "model/kv_prefix.h"
#include "model/model.h"
#include "quant/crossquant.h"
#include "quant/rotate.h"

namespace sinkq::quant {

inline constexpr int kBitsOff = 16;  // "not quantized"; otherwise bits are 2..8

// The clip-ratio grid of every calibrated search (weights, static activations, static KV):
// r_i = 1 − 0.025·i, i = 0..20, i.e. 21 ratios from 1.0 (no clipping, first) down to 0.5.
// AWQ's auto_clip uses 1 − i/20 for i < 10 (down to 0.55); PrefixQuant's grid search asks for
// about 20 ratios down to 0.5, which a step of 0.025 gives with 1.0 and 0.5 both exact.
std::vector<float> default_clip_grid();

// Parses a clip setting for `flag` ("--w-clip", "--a-clip", "--kv-clip"): "grid" (search the
// calibration grid) or a ratio in (0, 1]. Anything else: sinkq::Error naming the flag.
struct ClipSetting {
  bool grid = false;
  float ratio = 1.0f;  // used when !grid
};
ClipSetting parse_clip(std::string_view flag, std::string_view value);

enum class ActMode : uint8_t {
  Dynamic,  // per-token: scale from each row's abs-max (or min/max), every call
  Static,   // per-tensor, calibrated (build_sim with calibration samples, --calib)
  Cross,    // CrossQuant: s_ij from the row max^α and a column max^(1-α)
};
std::string_view act_mode_name(ActMode m);
ActMode parse_act_mode(std::string_view s);  // "dynamic" | "static" | "cross"; error names --a-quant

enum class KvMode : uint8_t {
  Dynamic,  // scales from each call's rows (per token or per token-and-head)
  Static,   // calibrated scales shared by every token (per head or per tensor)
};
std::string_view kv_mode_name(KvMode m);
KvMode parse_kv_mode(std::string_view s);  // "dynamic" | "static"; error names --kv-quant

// Token: one scale per row (dynamic only). Head: per head of each row (dynamic, PerHead) or per
// head for all rows (static, PerHeadShared). Tensor: one scale for all (static only, PerTensor).
enum class KvGranularity : uint8_t { Token, Head, Tensor };
std::string_view kv_granularity_name(KvGranularity g);
// "token" | "head" | "tensor" (and the per_* spellings); error names --kv-gran
KvGranularity parse_kv_granularity(std::string_view s);

struct WeightSim {
  int bits = kBitsOff;
  int group = 0;           // 0 = per output channel; G > 0 = groups of G input columns per row
                           // (a last, smaller group when G does not divide `in`: see docs)
  bool symmetric = true;
  float clip = 1.0f;       // fixed clip ratio (0, 1], used when !clip_grid
  bool clip_grid = false;  // choose the ratio per (row, group) by grid search (needs calibration)
  bool on() const { return bits != kBitsOff; }
};

struct ActSim {
  int bits = kBitsOff;
  ActMode mode = ActMode::Dynamic;
  bool symmetric = true;   // Dynamic and Static (CrossQuant is symmetric by definition)
  float alpha = 0.15f;     // Cross only: 0 <= α <= 1 (1 = per-token)
  // Cross only: where column maxima come from. PerCall (default) = over the rows of one forward
  // call, the paper's whole-sequence evaluation (not causal within a window); RunningMax = causal
  // running max, restarted at position 0. Static column maxima are not implemented.
  ColumnMode cross_columns = ColumnMode::PerCall;
  // Static only: the clip ratio of the per-tensor scale, searched on the block output (default)
  // or fixed (1 = plain max calibration).
  bool clip_grid = true;
  float clip = 1.0f;       // used when !clip_grid
  bool on() const { return bits != kBitsOff; }
};

// The quantizer granularity of a KV setting: dynamic per (token, head) / per token, static per
// head shared by every token / per tensor. One mapping for the simulator and the packed KV store.
inline Granularity kv_granularity(KvMode mode, KvGranularity g) {
  if (mode == KvMode::Dynamic) return g == KvGranularity::Head ? Granularity::PerHead : Granularity::PerRow;
  return g == KvGranularity::Head ? Granularity::PerHeadShared : Granularity::PerTensor;
}

struct KvSim {
  int bits = kBitsOff;
  KvMode mode = KvMode::Dynamic;
  KvGranularity granularity = KvGranularity::Head;
  bool symmetric = true;
  bool clip_grid = true;   // Static only, as ActSim
  float clip = 1.0f;
  bool on() const { return bits != kBitsOff; }
  // The QuantSpec of the K and V sites (clip ratio 1; a static search sets its own).
  QuantSpec spec(int head_dim) const {
    QuantSpec s;
    s.bits = bits;
    s.symmetric = symmetric;
    s.granularity = kv_granularity(mode, granularity);
    if (granularity == KvGranularity::Head) s.head_dim = head_dim;
    return s;
  }
};

// Where the calibration samples come from and how the searches use them. The samples themselves
// are passed to build_sim; file/samples/len/seed are recorded here so the printed configuration
// states them (the CLI fills them from --calib, --calib-samples, --calib-len, --calib-seed).
struct CalibSim {
  std::string file;            // "" = no calibration data
  int64_t samples = 8;         // N sequences ...
  int64_t len = 0;             // ... of L tokens (0 = the CLI's default, min(512, max_position))
  uint64_t seed = 0;
  int64_t weight_rows = 512;   // rows of X (tokens) per layer for the weight clip search
  std::vector<float> grid = default_clip_grid();  // candidates of every grid search, in order
};

// The full-precision KV prefix (model/kv_prefix.h) in front of every sequence: PrefixQuant's
// prefixed outlier tokens, IntactKV's pivot tokens. `spec` is the --prefix value as given
// (calib/prefix.h: bos | auto | ids:.. | text:.. | system:..); the CLI resolves it to `tokens`
// (auto: PrefixQuant §5.1 on the calibration samples) before build_sim, which only reads tokens.
//
// Decisions (docs/prefix.md):
//   * Rotation × prefix. The prefix KV is computed by the rotated fp model WITH its online
//     rotations (KvPrefix::compute(rotated, tokens, attach_online_rotation)): the body's keys are
//     R3-rotated before they are cached, so the prefix rows must be in the same basis; the rotated
//     fp model is computationally invariant, so these are the original model's fp keys/values
//     expressed in the rotated basis (what "the rotated model's own weights at full precision"
//     produce).
//   * Source Fp (default; IntactKV on, PrefixQuant): computed as above, never quantized.
//     Source Quant (the "IntactKV off" baseline): the prefix KV is produced by the quantized model
//     itself (rotation, quantized weights, every activation / KV hook of the config), i.e. exactly
//     the rows the quantized model writes when it reads the prefix tokens inline — only the
//     scoring (which targets) is the prefix protocol's, so fp and quant rows compare on the same
//     targets. This deliberately breaks kv_prefix.h's "no quantization hooks" rule: that is the
//     baseline being measured.
//   * Calibration behind the prefix. Source Fp: every calibration Forward (weight clip inputs,
//     static activation / KV block-output searches, their fp targets) runs with the fp prefix in
//     front, so hooks see body tokens only and static scales are fitted to the body (the outlier
//     tokens live in the prefix and never reach a quantizer: PrefixQuant §5). Source Quant: the
//     prefix tokens are part of what the quantized model processes, so calibration samples are
//     prefix tokens + body, with no KvPrefix (static scales then cover the prefix tokens too,
//     as a plain quantized model's would).
//   * [BOS]. Calibration samples start with [BOS] (calib/calib_data.h). When the prefix contains
//     the tokenizer's [BOS] (`bos_id`; PrefixQuant's prefixes end in it, IntactKV[B] is it, a
//     rendered system prompt starts with it), a sample's leading [BOS] is dropped: a second [BOS]
//     in the body would be an outlier / sink again (PrefixQuant §5.1) and the prefix protocol and
//     generate feed the body without BOS too. A prefix without [BOS] keeps the samples as they are.
//   * Length: P + (body length of the longest sample) must fit max_position_embeddings (error
//     naming --prefix and --calib-len).
struct PrefixSim {
  enum class Source : uint8_t { Fp, Quant };
  std::string spec;              // "" = no prefix (unless tokens are given directly)
  std::vector<int32_t> tokens;   // resolved; empty = no prefix
  Source source = Source::Fp;
  int32_t bos_id = -1;           // the tokenizer's [BOS] (-1: none): see "[BOS]" above
  bool on() const { return !tokens.empty(); }
  bool requested() const { return !spec.empty() || !tokens.empty(); }
  // Whether a body sample's leading [BOS] is dropped behind this prefix.
  bool strips_bos() const;
};
std::string_view prefix_source_name(PrefixSim::Source s);          // "fp" | "quant"
PrefixSim::Source parse_prefix_source(std::string_view s);          // error names --prefix-source

struct SimConfig {
  std::string preset;      // the preset it started from ("" = none); informational only
  WeightSim w;
  ActSim a;
  KvSim kv;
  RotateConfig rotate;     // Hadamard rotation (rotate.h), applied before everything else
  CalibSim calib;
  PrefixSim prefix;        // the full-precision KV prefix (none by default)

  bool any() const { return w.on() || a.on() || kv.on(); }
  bool act_static() const { return a.on() && a.mode == ActMode::Static; }
  bool kv_static() const { return kv.on() && kv.mode == KvMode::Static; }
  // Whether build_sim needs calibration samples: weight clip grid, static activations or KV.
  bool needs_calibration() const { return (w.on() && w.clip_grid) || act_static() || kv_static(); }
  // Throws sinkq::Error naming the CLI flag of the offending field (--w-bits, --a-quant, ...).
  void validate() const;
  // The exact configuration: every field that has an effect, and the sites / matrices it touches,
  // the rotation, and the calibration data and grid when anything is calibrated.
  nlohmann::json to_json() const;
  // One line, e.g. "W4 per-channel sym | A8 dynamic per-token sym | KV4 dynamic per-head sym".
  std::string describe() const;

  // Named presets (docs/quant.md): fp16 (all off), w8a8kv8, w4a8kv4, w4a4kv4, w8a8, w4a16,
  // w4a16g128 (dynamic, RTN); and PrefixQuant's (docs/prefix.md) prefixquant-w8a8kv8,
  // prefixquant-w4a8kv4, prefixquant-w4a4kv4: rotation on, prefix "auto" (source fp), weights
  // per-channel symmetric with the clip grid, activations static per-tensor (grid), KV static
  // per-head (per-tensor at 8 bits, PrefixQuant §6.1) with the grid; all need --calib.
  // Unknown name: sinkq::Error naming --preset and listing the names.
  static SimConfig from_preset(std::string_view name);
  static std::vector<std::string> preset_names();
};

// Parses a bit width for `flag` ("--w-bits", ...): 2..8 or 16, else sinkq::Error naming the flag.
int parse_bits(std::string_view flag, int bits);

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

// Chosen clip ratios of every matrix: [layer][q, k, v, o, gate, up, down].
using ModelClipRatios = std::vector<std::vector<ClipRatios>>;
// The matrices' names in reports (io/weights.h kLinearRoles order).
inline constexpr std::array<const char*, kNumLinearRoles> kWeightNames = [] {
  std::array<const char*, kNumLinearRoles> n{};
  for (int i = 0; i < kNumLinearRoles; ++i) n[size_t(i)] = kLinearRoles[i].name;
  return n;
}();

// A model whose q/k/v/o/gate/up/down matrices are widened to fp32 and fake-quantized (owned);
// embeddings, lm_head, norms and biases are shared with `base`, which the result keeps alive.
// With weights off it returns `base` itself (same object: logits bit-identical). Does not rotate
// (build_sim does). With cfg.w.clip_grid the searched ratios must be given (else an error naming
// --w-clip and --calib).
std::shared_ptr<const Model> fake_quantize_weights(std::shared_ptr<const Model> base,
                                                   const SimConfig& cfg,
                                                   const ModelClipRatios* clips = nullptr);

// Registers the dynamic activation and KV hooks of `cfg` on fwd.hooks() (validates cfg first).
// Returns the hook handles (for SiteHooks::remove). Nothing is registered for parts that are off.
// CrossQuant state (RunningMax) lives in the hooks and restarts when a call begins at position 0.
// A config with static parts or rotation cannot be attached this way (sinkq::Error naming the
// flag): it needs build_sim.
std::vector<int> attach(Forward& fwd, const SimConfig& cfg);

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
  SimConfig cfg;
  ModelClipRatios weight_clip;       // empty unless cfg.w.clip_grid
  std::vector<StaticQuant> statics;  // static activation / KV quantizers, forward order per layer
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
  // The hooks only (no prefix): what computes a source-Quant prefix.
  std::vector<int> attach_hooks(Forward& fwd) const;
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
// `calib`: N token sequences (calib_data.h load_calib); required, non-empty, when
// cfg.needs_calibration() (else sinkq::Error naming --calib); each at most
// max_position_embeddings tokens, the prefix included (error naming --prefix and --calib-len).
// Deterministic: the same inputs give the same ratios, scales and prefix KV.
SimModel build_sim(std::shared_ptr<const Model> base, const SimConfig& cfg,
                   std::span<const std::vector<int32_t>> calib, const CalibProgress& progress = {});

}  // namespace sinkq::quant
