// sinkq/quant/recipe.h — the one quantization setting of sinkq: a declarative Recipe, its name
// tables, its one parse (JSON, preset names, the short names) and its one serialise. The
// simulator (sim.h), the calibration (calibrate.h, pipeline.h), the packed runtime
// (runtime/quantized_model.h), the artifact (its sinkq_recipe.json holds Recipe::to_json and is
// read back with Recipe::from_json), bench and every CLI flag (cli/quant_flags.h) speak it.
//
// Keyed by role and layer. The defaults (`w`, `a`, `kv`) apply everywhere; `weight_rules` override
// the weight setting of chosen (layer, role) pairs — mixed precision such as `down_proj` at 8 bits
// or the first and last layer at 8 bits. Roles are io/weights.h kLinearRoles' names (q_proj,
// k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj); embed_tokens and lm_head are named in
// the table (kFixedRoles) but have their own setting (`head`: int8 or full precision, whose
// storage type is `sinkq quantize --fp-dtype`), and the KV cache has one setting for keys and values of every
// layer (the codebook quantizer sets keys and values apart: KvSim; per-layer codebooks are
// calibrated, not configured): a rule naming them is an error that says so, never ignored.
//
// JSON (what --dump-recipe prints and --recipe FILE reads; the artifact's "sim" object):
//   {"preset": null|"name",
//    "weights": {"bits", "granularity", "group_size", "symmetric", "clip_ratio": r|"grid"},
//    "weight_rules": [{"layers": [0, -1] | "all", "roles": ["down_proj"] | "all",
//                      "bits"?, "group_size"?, "symmetric"?, "clip_ratio"?}, ...],
//    "activations": {"bits", "mode", "granularity", "symmetric", "clip_ratio", "alpha", "columns"},
//    "kv": {"bits", "mode", "granularity", "symmetric", "clip_ratio"}   (the integer quantizer)
//        | {"bits", "codebook": "uniform|nf|kmeans|fisher", "keys": "pre_rope_channel|...",
//           "values": "token|channel", "outliers": p, "qnorm": bool}   (KVQuant's, issue 15),
//    "rotation": {"on", "seed"},
//    "prefix": null|{"spec", "tokens", "source", "eta", "bos_id", "train"?: {"epochs", "lr", "batch"}},
//    "calibration": null|{"file", "samples", "len", "seed", "grid", "weight_rows"},
//    "head"?: {"bits": 8}}   (absent = off: recipes from before it read back unchanged)
// Keys that only describe (clip_search, matrices, sites, computed_by, ...) are written for the
// reader and skipped on parse; any other unknown key is an error naming its path (a typo in a
// hand-edited recipe must not be silently ignored). Negative layer indices count from the end
// (-1 = the last layer). Rules apply in order; a later rule wins for the fields it sets.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/quantizer.h"
#include "io/weights.h"
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
  // running max, restarted at position 0; Static = calibrated (needs --calib) and folded into the
  // weights (crossquant.h CrossFold): the form the packed runtime runs.
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

// KVQuant's per-vector codebook quantizer (formats/nuq.h, quant/kvquant.h) instead of the integer
// one: Int = the integer quantizer above (mode, granularity, symmetric, clip); the others code each
// K / V vector normalised to [−1, 1] with a codebook: Uniform (2^b even levels: min-max integer in
// the per-vector framework), Nf (NormalFloat), Kmeans (k-means of the calibration values, per
// layer and per K / V), Fisher (the same weighted by the diagonal Fisher information: nuqX).
enum class KvCodebook : uint8_t { Int, Uniform, Nf, Kmeans, Fisher };
std::string_view kv_codebook_name(KvCodebook c);
KvCodebook parse_kv_codebook(std::string_view s);  // error names --kv-codebook
// A vector of the codebook quantizer: a token (a row; range online from the row) or a channel (a
// column over tokens; range calibrated offline: KVQuant §3.7).
enum class KvAxis : uint8_t { Token, Channel };
std::string_view kv_axis_name(KvAxis a);
KvAxis parse_kv_values(std::string_view s);  // "token" | "channel"; error names --kv-values

struct KvSim {
  int bits = kBitsOff;
  KvMode mode = KvMode::Dynamic;
  KvGranularity granularity = KvGranularity::Head;
  bool symmetric = true;
  bool clip_grid = true;   // Static only, as ActSim
  float clip = 1.0f;
  // The codebook quantizer (codebook != Int; KVQuant). Keys: per channel before RoPE by default
  // (KVQuant §3.1–3.2; the quantizer sits at site k_pre_rope, RoPE runs on the dequantized keys),
  // or at site k after RoPE; Values per token (§3.1). outliers: the dense-and-sparse fraction p
  // per vector (§3.4; 0 = none); qnorm: Q-Norm of the levels (§3.5).
  KvCodebook codebook = KvCodebook::Int;
  KvAxis key_axis = KvAxis::Channel;
  bool key_pre_rope = true;
  KvAxis value_axis = KvAxis::Token;
  double outliers = 0.0;
  bool qnorm = false;
  // The most recent `recent` tokens of the body in int`recent_bits` (per token and KV head,
  // symmetric) instead of the codebook: a query at body position t sees rows t−recent+1..t in that
  // precision, older rows coded (runtime::CodebookKvStore holds them in a ring of int8 rows).
  // 0 = off. Codebook quantizer only.
  int recent = 0;
  int recent_bits = 8;
  bool on() const { return bits != kBitsOff; }
  bool vector() const { return on() && codebook != KvCodebook::Int; }
  // Whether the codebook quantizer needs calibration samples (an offline range or learned levels).
  bool vector_calibrated() const {
    return vector() && (key_axis == KvAxis::Channel || value_axis == KvAxis::Channel || qnorm ||
                        codebook == KvCodebook::Kmeans || codebook == KvCodebook::Fisher);
  }
  // "pre_rope_channel" | "post_rope_channel" | "pre_rope_token" | "post_rope_token" (--kv-keys).
  std::string keys_name() const;
  void parse_keys(std::string_view s);  // error names --kv-keys
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
  // The range statistic of static activation and KV scales (formats/quantizer.h CalibStatistic):
  // the mean over samples of each sample's range (default; docs/quant.md "The static statistic"
  // says why) or the range over every calibration token.
  CalibStatistic statistic = CalibStatistic::SampleMean;
  std::vector<float> grid = default_clip_grid();  // candidates of every grid search, in order
  // The static activation / KV searches (calibrate.h): candidates scored on the block output of the
  // first `search_samples` samples only (0 = all); their ranges still come from every sample.
  int64_t search_samples = 0;
  // Then `refine_steps` more ratios evenly over [best − refine_width, best + refine_width] ∩ (0, 1]
  // around the best grid entry (PrefixQuant's code: 8 coarse ratios, then 10 fine within ±0.05);
  // 0 = none. Static searches around the site's best; the weight search around each row's (group's).
  int refine_steps = 0;
  float refine_width = 0.05f;
  bool default_search() const { return search_samples == 0 && refine_steps == 0; }
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
  double eta = 64.0;             // --prefix auto: the outlier threshold η (calib/prefix.h)
  // IntactKV+Cal (train/intactkv_cal.h): the prefix KV trained on the calibration samples after
  // build_sim; 0 epochs = off (--prefix-train N, --prefix-train-lr, --prefix-train-batch).
  int train_epochs = 0;
  double train_lr = 2e-4;
  int train_batch = 16;
  bool on() const { return !tokens.empty(); }
  bool requested() const { return !spec.empty() || !tokens.empty(); }
  // Whether a body sample's leading [BOS] is dropped behind this prefix.
  bool strips_bos() const;
};
std::string_view prefix_source_name(PrefixSim::Source s);          // "fp" | "quant"
PrefixSim::Source parse_prefix_source(std::string_view s);          // error names --prefix-source

// PrefixQuant §5.2 block-wise fine-tuning (quant/finetune.h): after the grid search initialises
// every quantization parameter, each block in order trains its full-precision linear weights and
// all its quantization parameters (weight step sizes, static activation and KV scales) through the
// straight-through estimator to minimise the block-output MSE against the fp block (EfficientQAT
// Block-AP). epochs = 0: off (--finetune blockwise, --finetune-epochs, --finetune-lr,
// --finetune-scale-lr, --finetune-batch). Defaults are the paper's (§6.1: lr 5e-6 for the weights,
// 5e-5 for the step sizes, batch 4; 10 epochs at W4A8KV4, 20 at W4A4KV4).
struct FinetuneSim {
  // The block's target: the fp block on the fp model's own trajectory (EfficientQAT Block-AP, the
  // default), or on the quantized input the block sees (the objective of the static grid search,
  // calibrate.h: only the error this block adds).
  enum class Target : uint8_t { FpTrajectory, QuantInput };
  int epochs = 0;
  Target target = Target::FpTrajectory;
  double lr_weights = 5e-6;
  double lr_scales = 5e-5;
  int batch = 4;
  bool on() const { return epochs > 0; }
};

// The embeddings and the LM head in int8 or int4 (issue 19; off by default). Decision: one setting
// for both. bits 8: the table is W8 per output row (one symmetric scale per vocabulary entry, clip
// 1 — a row's absmax maps to ±127). bits 4: W4 symmetric in groups of `group` input columns (32 by
// default, llama.cpp's Q4_0 block; 64, 128, or 0 = per row), clip 1 — for artifacts whose table
// would otherwise be a fifth of the bytes (SmolLM2: 28 of 135M parameters); it costs fidelity that
// docs/results-smollm2.md measures, so it is never a preset's default. Either way the LM head's
// input (site head_in: the final norm's output) is quantized int8 per token, dynamic, symmetric,
// whatever `a` says — as llama.cpp's output matmul does. Tied embeddings stay tied: one table
// serves the lookup and the head (an embedding row is that row dequantized, exactly the simulated
// value). Static scales: no — the head's error reaches every logit directly.
struct HeadSim {
  int bits = kBitsOff;  // 8, 4, or kBitsOff (fp: the source's or --fp-dtype)
  int group = 0;        // bits 4: 0 (per row), 32, 64 or 128 input columns per scale; bits 8: 0
  bool on() const { return bits != kBitsOff; }
  // The table's weight setting (sim.h fake_quant_weight; the packed runtime's W8_PerRow / W4_*).
  WeightSim weights() const { return WeightSim{.bits = bits, .group = group, .symmetric = true, .clip = 1.0f}; }
  // The LM head input's quantizer (site head_in): int8 per token, dynamic, symmetric.
  QuantSpec activations() const {
    QuantSpec q;
    q.bits = 8;
    q.symmetric = true;
    q.granularity = Granularity::PerRow;
    return q;
  }
  // e.g. "W8 per-row", "W4 g32"
  std::string describe() const;
};

// ---- per-(layer, role) weight rules ----------------------------------------------------------

// Roles of the model that the recipe names but that weight rules cannot set: embed_tokens and
// lm_head have their own setting (HeadSim, --head-bits), the KV cache its own (KvSim).
inline constexpr const char* kFixedRoles[] = {"embed_tokens", "lm_head", "kv_keys", "kv_values"};

// One override of the weight setting (the fields that are set replace the default's).
struct WeightRule {
  std::vector<int> layers;  // empty = every layer; negative = from the end (-1 = last)
  uint32_t roles = 0;       // bit i = kLinearRoles[i]; 0 = every linear role
  std::optional<int> bits;
  std::optional<int> group;
  std::optional<bool> symmetric;
  std::optional<float> clip;  // a fixed ratio ...
  std::optional<bool> clip_grid;  // ... or the grid search (true)
  bool matches(int layer, int role, int num_layers) const;
  WeightSim apply(WeightSim w) const;  // w with the fields this rule sets replaced
  std::string describe() const;  // e.g. "layers 0,-1 down_proj: W8"
};

// The resolved weight setting of (layer, role): `base`, then every matching rule in order.
WeightSim resolve_weights(const WeightSim& base, std::span<const WeightRule> rules, int layer, int role,
                          int num_layers);

// Every layer a rule names exists in a model of `num_layers` (error naming the rule otherwise).
void check_rule_layers(std::span<const WeightRule> rules, int num_layers);

// The role index (kLinearRoles order) of a name ("q_proj", ...); sinkq::Error naming `where` and
// listing the names (and saying which roles are fixed in this version) otherwise.
int parse_linear_role(std::string_view name, std::string_view where);


struct Recipe {
  std::string preset;      // the preset it started from ("" = none); informational only
  WeightSim w;             // the weights of every (layer, role) without a matching rule
  std::vector<WeightRule> weight_rules;  // per-(layer, role) overrides, in order
  ActSim a;
  KvSim kv;
  RotateConfig rotate;     // Hadamard rotation (rotate.h), applied before everything else
  CalibSim calib;
  PrefixSim prefix;        // the full-precision KV prefix (none by default)
  FinetuneSim finetune;    // block-wise fine-tuning (off by default)
  HeadSim head;            // embeddings + LM head in int8 (off by default)

  // The weight setting of one matrix: w, then the matching weight_rules.
  WeightSim weights(int layer, int role, int num_layers) const {
    return resolve_weights(w, weight_rules, layer, role, num_layers);
  }
  // Whether any matrix of any layer is quantized / uses the clip grid (w or a rule).
  bool weights_on() const;
  bool weight_clip_grid() const;
  bool any() const { return weights_on() || a.on() || kv.on() || head.on(); }
  bool act_static() const { return a.on() && a.mode == ActMode::Static; }
  bool kv_static() const { return kv.on() && kv.mode == KvMode::Static; }
  // CrossQuant with calibrated column maxima folded into the weights (crossquant.h CrossFold).
  bool act_cross_static() const { return a.on() && a.mode == ActMode::Cross && a.cross_columns == ColumnMode::Static; }
  // Whether build_sim needs calibration samples: weight clip grid, static activations or KV,
  // CrossQuant's static column maxima, a calibrated KV codebook quantizer, training.
  bool needs_calibration() const {
    return weight_clip_grid() || act_static() || act_cross_static() || kv_static() || kv.vector_calibrated() || prefix.train_epochs > 0 ||
           finetune.on();
  }
  // The flags that make it need calibration, e.g. "--w-clip grid, --a-quant static" ("" if none).
  std::string calibration_needed_by() const;
  // Throws sinkq::Error naming the CLI flag of the offending field (--w-bits, --a-quant, ...).
  void validate() const;
  // The model-dependent check: every layer a weight rule names exists (error naming the rule).
  void check_layers(int num_layers) const;
  // The exact configuration: every field that has an effect, and the sites / matrices it touches,
  // the rotation, and the calibration data and grid when anything is calibrated. Recipe::from_json
  // reads it back to an equal Recipe (to_json(from_json(j)) == to_json of the original).
  nlohmann::json to_json() const;
  // The inverse of to_json. `where` names the source in errors (a file path) and `root` the
  // recipe's own path inside it ("recipe" in an artifact's sinkq_recipe.json): "<where>: field
  // 'recipe.weights.bits': must be an integer". Validates the result.
  static Recipe from_json(const nlohmann::json& j, std::string_view where, std::string_view root = "");
  // One line, e.g. "W4 per-channel sym | A8 dynamic per-token sym | KV4 dynamic per-head sym".
  std::string describe() const;

  // Named presets (docs/quant.md): fp16 (all off), w8a8kv8, w4a8kv4, w4a4kv4, w8a8, w4a16,
  // w4a16g128 (dynamic, RTN); and PrefixQuant's (docs/prefix.md) prefixquant-w8a8kv8,
  // prefixquant-w4a8kv4, prefixquant-w4a4kv4: rotation on, prefix "auto" (source fp), weights
  // per-channel symmetric with the clip grid, activations static per-tensor (grid), KV static
  // per-head (per-tensor at 8 bits, PrefixQuant §6.1) with the grid; all need --calib.
  // Besides the presets, the short names w{8|4}a{8|4}[kv{8|4}][-g{32|64|128}][-asym][-static][-head8] (as
  // bench has always spelled them, the packed runtime's settings: w4a8kv4-g128-static = W4 g128 sym, A8 static per-tensor, KV4 dynamic
  // per-head; static activations with the clip grid, as the presets).
  // Unknown name: sinkq::Error naming --preset and listing the names.
  static Recipe from_preset(std::string_view name);
  static std::vector<std::string> preset_names();
};

// The matrices' names in reports (io/weights.h kLinearRoles order).
inline constexpr std::array<const char*, kNumLinearRoles> kWeightNames = [] {
  std::array<const char*, kNumLinearRoles> n{};
  for (int i = 0; i < kNumLinearRoles; ++i) n[size_t(i)] = kLinearRoles[i].name;
  return n;
}();

// A float as the shortest decimal that reads back to it (0.15f -> 0.15 in JSON, not the double
// 0.15000000596046448).
double json_float(float f);

// The path of the first place where JSON values a and b differ ("" when equal; numbers compare by
// value, so 8 written as int equals 8 parsed as unsigned), for messages: `path` names a's root.
std::string json_first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path);

// Parses a bit width for `flag` ("--w-bits", ...): 2..8 or 16, else sinkq::Error naming the flag.
int parse_bits(std::string_view flag, int bits);

}  // namespace sinkq::quant
