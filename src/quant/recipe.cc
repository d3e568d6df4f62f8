// sinkq/quant/recipe.cc — the Recipe as data (recipe.h): the names and parsing of its enums, the
// per-(layer, role) weight rules, validation, presets and short names, the one JSON serialise /
// parse and the one-line description. The fake-quant machinery that runs a recipe is in sim.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <utility>

#include "core/error.h"
#include "quant/recipe.h"

namespace sinkq::quant {

std::string_view act_mode_name(ActMode m) {
  switch (m) {
    case ActMode::Dynamic: return "dynamic";
    case ActMode::Static: return "static";
    case ActMode::Cross: return "cross";
  }
  return "?";
}

ActMode parse_act_mode(std::string_view s) {
  if (s == "dynamic") return ActMode::Dynamic;
  if (s == "static") return ActMode::Static;
  if (s == "cross") return ActMode::Cross;
  fail("unknown activation quantization '{}' (--a-quant): expected dynamic, static or cross", s);
}

std::string_view kv_mode_name(KvMode m) { return m == KvMode::Static ? "static" : "dynamic"; }

KvMode parse_kv_mode(std::string_view s) {
  if (s == "dynamic") return KvMode::Dynamic;
  if (s == "static") return KvMode::Static;
  fail("unknown KV quantization '{}' (--kv-quant): expected dynamic or static", s);
}

std::string_view kv_granularity_name(KvGranularity g) {
  switch (g) {
    case KvGranularity::Token: return "per_token";
    case KvGranularity::Head: return "per_head";
    case KvGranularity::Tensor: return "per_tensor";
  }
  return "?";
}

KvGranularity parse_kv_granularity(std::string_view s) {
  if (s == "token" || s == "per_token") return KvGranularity::Token;
  if (s == "head" || s == "per_head") return KvGranularity::Head;
  if (s == "tensor" || s == "per_tensor") return KvGranularity::Tensor;
  fail("unknown KV granularity '{}' (--kv-gran): expected token, head or tensor", s);
}

std::string_view kv_codebook_name(KvCodebook c) {
  switch (c) {
    case KvCodebook::Int: return "int";
    case KvCodebook::Uniform: return "uniform";
    case KvCodebook::Nf: return "nf";
    case KvCodebook::Kmeans: return "kmeans";
    case KvCodebook::Fisher: return "fisher";
  }
  return "?";
}

KvCodebook parse_kv_codebook(std::string_view s) {
  for (KvCodebook c : {KvCodebook::Int, KvCodebook::Uniform, KvCodebook::Nf, KvCodebook::Kmeans, KvCodebook::Fisher})
    if (s == kv_codebook_name(c)) return c;
  fail("unknown KV codebook '{}' (--kv-codebook): expected int (the integer quantizer), uniform, nf, kmeans or "
       "fisher (KVQuant's nuqX)", s);
}

std::string_view kv_axis_name(KvAxis a) { return a == KvAxis::Channel ? "channel" : "token"; }

KvAxis parse_kv_values(std::string_view s) {
  if (s == "token") return KvAxis::Token;
  if (s == "channel") return KvAxis::Channel;
  fail("unknown value quantization '{}' (--kv-values): expected token (online per-token ranges, KVQuant's) or "
       "channel (calibrated per-channel ranges)", s);
}

std::string KvSim::keys_name() const {
  return fmt::format("{}_{}", key_pre_rope ? "pre_rope" : "post_rope", kv_axis_name(key_axis));
}

void KvSim::parse_keys(std::string_view s) {
  for (bool pre : {true, false})
    for (KvAxis a : {KvAxis::Channel, KvAxis::Token})
      if (s == fmt::format("{}_{}", pre ? "pre_rope" : "post_rope", kv_axis_name(a))) {
        key_pre_rope = pre;
        key_axis = a;
        return;
      }
  fail("unknown key quantization '{}' (--kv-keys): expected pre_rope_channel, post_rope_channel, pre_rope_token "
       "or post_rope_token", s);
}

std::string_view prefix_source_name(PrefixSim::Source s) { return s == PrefixSim::Source::Quant ? "quant" : "fp"; }

PrefixSim::Source parse_prefix_source(std::string_view s) {
  if (s == "fp") return PrefixSim::Source::Fp;
  if (s == "quant") return PrefixSim::Source::Quant;
  fail("unknown --prefix-source '{}': expected fp (IntactKV on: full-precision prefix KV) or quant "
       "(IntactKV off: the quantized model's own prefix KV)", s);
}

bool PrefixSim::strips_bos() const {
  return bos_id >= 0 && std::find(tokens.begin(), tokens.end(), bos_id) != tokens.end();
}

std::vector<float> default_clip_grid() {
  std::vector<float> g;
  // In double, rounded once: 1.0 and 0.5 are exact, every other entry is the fp32 nearest to
  // 1 − 0.025·i (printed back as that decimal).
  for (int i = 0; i <= 20; ++i) g.push_back(float(1.0 - 0.025 * i));
  return g;
}

ClipSetting parse_clip(std::string_view flag, std::string_view value) {
  ClipSetting c;
  if (value == "grid") {
    c.grid = true;
    return c;
  }
  const std::string v(value);
  size_t used = 0;
  float r = 0.0f;
  try {
    r = std::stof(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  SINKQ_CHECK(used == v.size() && !v.empty(), "{} expects a ratio in (0, 1] or 'grid', got '{}'", flag, value);
  SINKQ_CHECK(r > 0.0f && r <= 1.0f, "{} must be in (0, 1] (or 'grid'), got {}", flag, value);
  c.ratio = r;
  return c;
}

int parse_bits(std::string_view flag, int bits) {
  SINKQ_CHECK((bits >= 2 && bits <= 8) || bits == kBitsOff,
              "{} must be 2..8, or 16 for full precision (got {})", flag, bits);
  return bits;
}

std::string Recipe::calibration_needed_by() const {
  std::string s;
  auto add = [&s](const std::string& w) { s += (s.empty() ? "" : ", ") + w; };
  if (weight_clip_grid()) add("--w-clip grid");
  if (act_static()) add("--a-quant static");
  if (act_cross_static()) add("--a-cross-cols static");
  if (kv_static()) add("--kv-quant static");
  if (kv.vector_calibrated()) add(fmt::format("--kv-codebook {}", kv_codebook_name(kv.codebook)));
  if (finetune.on()) add("--finetune blockwise");
  if (prefix.train_epochs > 0) add("--prefix-train");
  return s;
}

void Recipe::validate() const {
  SINKQ_CHECK(head.bits == 8 || head.bits == 4 || head.bits == kBitsOff, "--head-bits must be 8 or 4 (int8 / int4 "
              "embeddings and LM head) or 16 (full precision), got {}", head.bits);
  SINKQ_CHECK(head.bits != 8 || head.group == 0, "--head-group {} with --head-bits 8: the int8 table has one scale per "
              "row (--head-group 0)", head.group);
  SINKQ_CHECK(head.bits != 4 || head.group == 0 || head.group == 32 || head.group == 64 || head.group == 128,
              "--head-group must be 0 (per row), 32, 64 or 128 (the packed W4 formats), got {}", head.group);
  SINKQ_CHECK(!head.on() || prefix.train_epochs == 0, "--head-bits {} with --prefix-train: IntactKV+Cal's training "
              "model (train/grad_model.h) runs the LM head in full precision; train the prefix without --head-bits", head.bits);
  parse_bits("--w-bits", w.bits);
  parse_bits("--a-bits", a.bits);
  parse_bits("--kv-bits", kv.bits);
  SINKQ_CHECK(w.group >= 0, "--w-group must be >= 0 (0 = per output channel), got {}", w.group);
  SINKQ_CHECK(w.clip > 0.0f && w.clip <= 1.0f, "--w-clip must be in (0, 1], got {}", w.clip);
  SINKQ_CHECK(a.alpha >= 0.0f && a.alpha <= 1.0f, "--a-alpha must be in [0, 1], got {}", a.alpha);
  SINKQ_CHECK(a.clip > 0.0f && a.clip <= 1.0f, "--a-clip must be in (0, 1], got {}", a.clip);
  SINKQ_CHECK(kv.clip > 0.0f && kv.clip <= 1.0f, "--kv-clip must be in (0, 1], got {}", kv.clip);
  // A setting that would have no effect is an error, not silently ignored: the printed
  // configuration must be what ran.
  SINKQ_CHECK(a.mode == ActMode::Static || (a.clip_grid && a.clip == 1.0f) || !a.on(),
              "--a-clip applies to --a-quant static only (dynamic scales are not clipped)");
  SINKQ_CHECK(a.mode != ActMode::Cross || a.symmetric,
              "--a-asym: CrossQuant (--a-quant cross) is symmetric by definition");
  // Static column maxima fold into the weights (crossquant.h CrossFold). The two training stages
  // model the element-wise rule's quantizers (train/grad_layer.h), not a folded basis: refused
  // rather than trained on something else than what runs.
  SINKQ_CHECK(!act_cross_static() || !finetune.on(),
              "--finetune blockwise with --a-cross-cols static is not implemented: the trained block does not fold the "
              "column factors into its weights; fine-tune with --a-quant static or dynamic");
  SINKQ_CHECK(!act_cross_static() || prefix.train_epochs == 0,
              "--prefix-train with --a-cross-cols static is not implemented: IntactKV+Cal's training model does not "
              "fold the column factors into its weights; train the prefix with --a-quant static or dynamic");
  SINKQ_CHECK(kv.mode == KvMode::Static || (kv.clip_grid && kv.clip == 1.0f) || !kv.on(),
              "--kv-clip applies to --kv-quant static only (dynamic scales are not clipped)");
  SINKQ_CHECK(kv.mode != KvMode::Static || kv.granularity != KvGranularity::Token || !kv.on(),
              "--kv-gran token is dynamic only: static KV scales are per head or per tensor "
              "(--kv-gran head|tensor)");
  SINKQ_CHECK(kv.mode != KvMode::Dynamic || kv.granularity != KvGranularity::Tensor || !kv.on(),
              "--kv-gran tensor needs --kv-quant static (a dynamic per-tensor scale would depend "
              "on how many tokens one call holds)");
  if (kv.codebook != KvCodebook::Int && kv.on()) {
    SINKQ_CHECK(kv.bits >= 2 && kv.bits <= 4, "--kv-bits {} with --kv-codebook {}: KVQuant's codebooks are 2, 3 or 4 "
                "bits (a lookup table of 2^bits levels per layer)", kv.bits, kv_codebook_name(kv.codebook));
    SINKQ_CHECK(kv.mode == KvMode::Dynamic && kv.granularity == KvGranularity::Head && kv.symmetric && kv.clip_grid &&
                    kv.clip == 1.0f,
                "--kv-quant / --kv-gran / --kv-asym / --kv-clip set the integer KV quantizer; with --kv-codebook {} "
                "the vectors are chosen by --kv-keys and --kv-values (a channel's range is calibrated, a token's online)",
                kv_codebook_name(kv.codebook));
    SINKQ_CHECK(kv.outliers >= 0.0 && kv.outliers <= 0.1, "--kv-outliers must be in [0, 0.1] (a fraction per vector; "
                "KVQuant uses 0.01), got {}", kv.outliers);
    SINKQ_CHECK(kv.codebook != KvCodebook::Fisher || kv.key_pre_rope,
                "--kv-codebook fisher weighs keys by the Fisher information of K before RoPE: it needs --kv-keys "
                "pre_rope_channel or pre_rope_token");
    SINKQ_CHECK(kv.recent >= 0 && kv.recent <= (1 << 20), "--kv-recent must be in [0, 2^20] tokens, got {}",
                kv.recent);
    SINKQ_CHECK(kv.recent_bits == 8, "--kv-recent-bits {}: the recent window is held as int8 rows (8)", kv.recent_bits);
    SINKQ_CHECK(!finetune.on(), "--finetune blockwise with --kv-codebook {}: the codebook quantizer has no "
                "straight-through form in the training forward yet; use the integer KV quantizer", kv_codebook_name(kv.codebook));
    SINKQ_CHECK(prefix.train_epochs == 0, "--prefix-train with --kv-codebook {}: the codebook quantizer has no "
                "form in the training forward yet; use the integer KV quantizer", kv_codebook_name(kv.codebook));
  } else {
    SINKQ_CHECK(kv.outliers == 0.0 && !kv.qnorm && kv.key_axis == KvAxis::Channel && kv.key_pre_rope &&
                    kv.value_axis == KvAxis::Token && kv.recent == 0,
                "--kv-keys / --kv-values / --kv-outliers / --kv-qnorm / --kv-recent apply to the codebook quantizer: "
                "give --kv-codebook uniform|nf|kmeans|fisher and --kv-bits 2..4");
  }
  SINKQ_CHECK(calib.samples >= 1, "--calib-samples must be >= 1, got {}", calib.samples);
  SINKQ_CHECK(calib.len >= 0 && calib.len != 1, "--calib-len must be >= 2, got {}", calib.len);
  SINKQ_CHECK(calib.weight_rows >= 1, "calibration: weight_rows must be >= 1, got {}", calib.weight_rows);
  SINKQ_CHECK(!calib.grid.empty(), "calibration: the clip grid is empty");
  SINKQ_CHECK(calib.search_samples >= 0, "--calib-search-samples must be >= 0 (0 = all), got {}", calib.search_samples);
  SINKQ_CHECK(calib.refine_steps >= 0 && calib.refine_steps <= 64, "--calib-refine must be in 0..64, got {}",
              calib.refine_steps);
  SINKQ_CHECK(calib.refine_width > 0.0f && calib.refine_width < 1.0f,
              "calibration: refine_width must be in (0, 1), got {}", calib.refine_width);
  for (float r : calib.grid)
    SINKQ_CHECK(r > 0.0f && r <= 1.0f, "calibration: clip grid entry {} is outside (0, 1]", r);
  SINKQ_CHECK(prefix.requested() || prefix.source == PrefixSim::Source::Fp,
              "--prefix-source quant needs a prefix (--prefix)");
  for (int32_t t : prefix.tokens) SINKQ_CHECK(t >= 0, "--prefix: negative token id {}", t);
  SINKQ_CHECK(prefix.eta > 0, "--prefix-eta must be > 0 (got {})", prefix.eta);
  SINKQ_CHECK(prefix.train_epochs >= 0, "--prefix-train must be >= 0 epochs (got {})", prefix.train_epochs);
  SINKQ_CHECK(prefix.train_lr > 0, "--prefix-train-lr must be > 0 (got {})", prefix.train_lr);
  SINKQ_CHECK(prefix.train_batch >= 1, "--prefix-train-batch must be >= 1 (got {})", prefix.train_batch);
  SINKQ_CHECK(prefix.train_epochs == 0 || prefix.requested(),
              "--prefix-train trains the KV prefix (IntactKV+Cal): give a prefix (--prefix bos|auto|ids:..|text:..|system:..)");
  SINKQ_CHECK(prefix.train_epochs == 0 || prefix.source == PrefixSim::Source::Fp,
              "--prefix-train trains the full-precision prefix: it needs --prefix-source fp");
  SINKQ_CHECK(finetune.epochs >= 0, "--finetune-epochs must be >= 0 (got {})", finetune.epochs);
  SINKQ_CHECK(finetune.lr_weights >= 0, "--finetune-lr must be >= 0 (got {})", finetune.lr_weights);
  SINKQ_CHECK(finetune.lr_scales >= 0, "--finetune-scale-lr must be >= 0 (got {})", finetune.lr_scales);
  SINKQ_CHECK(finetune.batch >= 1, "--finetune-batch must be >= 1 (got {})", finetune.batch);
  SINKQ_CHECK(!finetune.on() || weights_on() || act_static() || kv_static(),
              "--finetune blockwise trains the weights and the quantization parameters of a quantized model: quantize "
              "the weights (--w-bits 8|4) or use static activations / KV");
  for (size_t i = 0; i < weight_rules.size(); ++i) {
    const WeightRule& r = weight_rules[i];
    const std::string f = fmt::format("weight_rules[{}]", i);
    SINKQ_CHECK(r.bits || r.group || r.symmetric || r.clip || r.clip_grid, "{}: sets nothing", f);
    if (r.bits) parse_bits(f + ".bits", *r.bits);
    SINKQ_CHECK(!r.group || *r.group >= 0, "{}.group_size must be >= 0 (0 = per output channel), got {}", f, *r.group);
    SINKQ_CHECK(!r.clip || (*r.clip > 0.0f && *r.clip <= 1.0f), "{}.clip_ratio must be in (0, 1], got {}", f, *r.clip);
    SINKQ_CHECK(r.roles < (1u << kNumLinearRoles), "{}: role mask {:#x} names no linear role", f, r.roles);
  }
}

// ---- weight rules ----------------------------------------------------------------------------

bool WeightRule::matches(int layer, int role, int num_layers) const {
  if (roles != 0 && !(roles & (1u << role))) return false;
  if (layers.empty()) return true;
  for (int l : layers)
    if ((l >= 0 ? l : num_layers + l) == layer) return true;
  return false;
}

std::string HeadSim::describe() const {
  if (!on()) return "fp";
  return fmt::format("W{} {}", bits, group > 0 ? fmt::format("g{}", group) : std::string("per-row"));
}

std::string WeightRule::describe() const {
  std::string who;
  if (layers.empty()) {
    who = "all layers";
  } else {
    who = "layers ";
    for (size_t i = 0; i < layers.size(); ++i) who += fmt::format("{}{}", i ? "," : "", layers[i]);
  }
  if (roles == 0) {
    who += " all roles";
  } else {
    for (int i = 0, n = 0; i < kNumLinearRoles; ++i)
      if (roles & (1u << i)) who += fmt::format("{}{}", n++ ? "," : " ", kLinearRoles[i].name);
  }
  std::string what;
  if (bits) what += fmt::format(" W{}", *bits);
  if (group) what += *group > 0 ? fmt::format(" g{}", *group) : std::string(" per-channel");
  if (symmetric) what += *symmetric ? " sym" : " asym";
  if (clip_grid && *clip_grid) what += " clip=grid";
  else if (clip) what += fmt::format(" clip={}", *clip);
  return who + ":" + what;
}

WeightSim WeightRule::apply(WeightSim w) const {
  if (bits) w.bits = *bits;
  if (group) w.group = *group;
  if (symmetric) w.symmetric = *symmetric;
  if (clip) {
    w.clip = *clip;
    w.clip_grid = false;
  }
  if (clip_grid) w.clip_grid = *clip_grid;
  return w;
}

WeightSim resolve_weights(const WeightSim& base, std::span<const WeightRule> rules, int layer, int role,
                          int num_layers) {
  WeightSim w = base;
  for (const WeightRule& r : rules)
    if (r.matches(layer, role, num_layers)) w = r.apply(w);
  return w;
}

int parse_linear_role(std::string_view name, std::string_view where) {
  for (int i = 0; i < kNumLinearRoles; ++i)
    if (name == kLinearRoles[i].name) return i;
  for (const char* f : kFixedRoles)
    SINKQ_CHECK(name != f, "{}: role '{}' has its own setting, not a weight rule (embed_tokens / lm_head: --head-bits "
                "8 | 16, recipe 'head'; the KV cache has one setting, 'kv', for keys and values of every "
                "layer)", where, name);
  std::string names;
  for (const LinearRoleInfo& r : kLinearRoles) names += (names.empty() ? "" : ", ") + std::string(r.name);
  fail("{}: unknown role '{}': expected one of {} (or \"all\")", where, name, names);
}

bool Recipe::weights_on() const {
  if (w.on()) return true;
  for (const WeightRule& r : weight_rules)
    if (r.bits && *r.bits != kBitsOff) return true;
  return false;
}

bool Recipe::weight_clip_grid() const {
  if (w.on() && w.clip_grid) return true;
  for (const WeightRule& r : weight_rules)
    if (r.clip_grid && *r.clip_grid) return true;
  return false;
}

void check_rule_layers(std::span<const WeightRule> rules, int num_layers) {
  for (size_t i = 0; i < rules.size(); ++i)
    for (int l : rules[i].layers)
      SINKQ_CHECK(l >= -num_layers && l < num_layers,
                  "weight_rules[{}]: layer {} does not exist (the model has {} layers: 0..{}, or -1..-{} from the end)",
                  i, l, num_layers, num_layers - 1, num_layers);
}

namespace {

std::string sym_name(bool s) { return s ? "sym" : "asym"; }

std::string clip_text(bool grid, float r) { return grid ? "grid" : fmt::format("{}", r); }

}  // namespace

std::string Recipe::describe() const {
  std::string s;
  if (!w.on()) {
    s = "W16";
  } else {
    s = fmt::format("W{} {} {}", w.bits, w.group > 0 ? fmt::format("g{}", w.group) : "per-channel",
                    sym_name(w.symmetric));
    if (w.clip_grid || w.clip != 1.0f) s += " clip=" + clip_text(w.clip_grid, w.clip);
  }
  if (!a.on()) {
    s += " | A16";
  } else if (a.mode == ActMode::Cross) {
    s += fmt::format(" | A{} cross alpha={} columns={}", a.bits, a.alpha, column_mode_name(a.cross_columns));
  } else if (a.mode == ActMode::Static) {
    s += fmt::format(" | A{} static per-tensor {} clip={}", a.bits, sym_name(a.symmetric), clip_text(a.clip_grid, a.clip));
  } else {
    s += fmt::format(" | A{} {} per-token {}", a.bits, act_mode_name(a.mode), sym_name(a.symmetric));
  }
  if (!kv.on()) {
    s += " | KV16";
  } else {
    const std::string gran = kv.granularity == KvGranularity::Head    ? "per-head"
                             : kv.granularity == KvGranularity::Token ? "per-token"
                                                                      : "per-tensor";
    if (kv.vector()) {
      s += fmt::format(" | KV{} {} keys {} values per {}", kv.bits, kv_codebook_name(kv.codebook), kv.keys_name(),
                       kv_axis_name(kv.value_axis));
      if (kv.outliers > 0) s += fmt::format(" outliers {}%", 100.0 * kv.outliers);
      if (kv.qnorm) s += " q-norm";
      if (kv.recent > 0) s += fmt::format(" recent {} at int{}", kv.recent, kv.recent_bits);
    } else {
      s += fmt::format(" | KV{} {} {} {}", kv.bits, kv_mode_name(kv.mode), gran, sym_name(kv.symmetric));
      if (kv.mode == KvMode::Static) s += " clip=" + clip_text(kv.clip_grid, kv.clip);
    }
  }
  for (const WeightRule& r : weight_rules) s += " | " + r.describe();
  if (head.on()) s += " | head " + head.describe() + " A8 per-token";
  if (rotate.on) s += fmt::format(" | rotate seed={}", rotate.seed);
  const bool train = prefix.train_epochs > 0;
  if (prefix.requested()) {
    std::string ids;
    for (int32_t t : prefix.tokens) ids += fmt::format("{}{}", ids.empty() ? "" : ",", t);
    s += fmt::format(" | prefix {}{} source={}", prefix.spec.empty() ? "ids" : prefix.spec,
                     ids.empty() ? "" : " [" + ids + "]", prefix_source_name(prefix.source));
    if (train)
      s += fmt::format(" trained {} epochs lr={} batch={}", prefix.train_epochs, prefix.train_lr, prefix.train_batch);
  }
  if (finetune.on())
    s += fmt::format(" | finetune blockwise {} epochs lr={}/{} batch={} target={}", finetune.epochs, finetune.lr_weights,
                     finetune.lr_scales, finetune.batch,
                     finetune.target == FinetuneSim::Target::FpTrajectory ? "fp" : "quant");
  if (needs_calibration())
    s += fmt::format(" | calib {} {}x{} seed={}", calib.file.empty() ? "(none)" : calib.file, calib.samples,
                     calib.len, calib.seed);
  return s;
}

std::vector<std::string> Recipe::preset_names() {
  return {"fp16",  "w8a8kv8", "w4a8kv4",   "w4a4kv4",           "w8a8",
          "w4a16", "w4a16g128", "prefixquant-w8a8kv8", "prefixquant-w4a8kv4", "prefixquant-w4a4kv4",
          "kvquant-4bit", "kvquant-3bit", "kvquant-2bit", "kvquant-4bit-1pct", "kvquant-3bit-1pct", "kvquant-2bit-1pct"};
}

namespace {

// w{8|4}a{8|4}[kv{8|4}][-g{32|64|128}][-asym][-static][-head8|-head4] into c (weights per output
// channel or groups of G, sym or asym; activations dynamic per-token, or static per-tensor with the
// clip grid; KV dynamic per-head sym; -head8: int8 embeddings and LM head per row, -head4: int4 g32).
// False when `name` is not of that form.
bool parse_short_name(std::string_view name, Recipe& c) {
  static const std::regex re("w(8|4)a(8|4)(kv(8|4))?(-g(32|64|128))?(-asym)?(-static)?(-head(8|4))?");
  std::cmatch m;
  if (!std::regex_match(name.begin(), name.end(), m, re)) return false;
  c.w.bits = std::stoi(m[1]);
  c.a.bits = std::stoi(m[2]);
  c.kv.bits = m[4].matched ? std::stoi(m[4]) : kBitsOff;
  c.w.group = m[6].matched ? std::stoi(m[6]) : 0;
  c.w.symmetric = !m[7].matched;
  if (m[8].matched) {
    c.a.mode = ActMode::Static;
    c.a.clip_grid = true;
  }
  if (m[9].matched) {
    c.head.bits = std::stoi(m[10]);
    c.head.group = c.head.bits == 4 ? 32 : 0;
  }
  return true;
}

}  // namespace

Recipe Recipe::from_preset(std::string_view name) {
  // Weights per output channel symmetric (PrefixQuant §6.1, CrossQuant §5) unless a group is
  // named; activations dynamic per-token symmetric; KV dynamic per-head symmetric.
  Recipe c;
  c.preset = std::string(name);
  auto set = [&c](int wb, int ab, int kvb, int group) {
    c.w.bits = wb;
    c.a.bits = ab;
    c.kv.bits = kvb;
    c.w.group = group;
  };
  if (name == "fp16") set(16, 16, 16, 0);
  else if (name == "w8a8kv8") set(8, 8, 8, 0);
  else if (name == "w4a8kv4") set(4, 8, 4, 0);
  else if (name == "w4a4kv4") set(4, 4, 4, 0);
  else if (name == "w8a8") set(8, 8, 16, 0);
  else if (name == "w4a16") set(4, 16, 16, 0);
  else if (name == "w4a16g128") set(4, 16, 16, 128);
  else if (name == "prefixquant-w8a8kv8" || name == "prefixquant-w4a8kv4" || name == "prefixquant-w4a4kv4") {
    // PrefixQuant §6.1: rotation, prefixed outliers, per-channel symmetric weights (grid-searched
    // clip), static per-tensor activations, static per-head KV (per-tensor at 8 bits), all scales
    // initialised by grid search (block-wise fine-tuning is a later issue).
    if (name == "prefixquant-w8a8kv8") set(8, 8, 8, 0);
    else if (name == "prefixquant-w4a8kv4") set(4, 8, 4, 0);
    else set(4, 4, 4, 0);
    c.w.clip_grid = true;
    c.a.mode = ActMode::Static;
    c.a.clip_grid = true;
    c.kv.mode = KvMode::Static;
    c.kv.granularity = c.kv.bits == 8 ? KvGranularity::Tensor : KvGranularity::Head;
    c.kv.clip_grid = true;
    c.rotate.on = true;
    c.prefix.spec = "auto";
  } else if (name.starts_with("kvquant-")) {
    // KVQuant Table 2's rows (KV only, weights and activations full precision): nuqX with the Fisher
    // k-means codebook, keys per channel before RoPE, values per token, 1% dense-and-sparse in the
    // -1pct rows, Q-Norm at 2 bits, the first token ([BOS], the sink) in full precision (§3.6).
    static const std::regex re("kvquant-([234])bit(-1pct)?");
    std::cmatch m;
    if (!std::regex_match(name.begin(), name.end(), m, re)) fail("unknown preset '{}' (--preset): the KVQuant presets are "
                                                                 "kvquant-{{4|3|2}}bit[-1pct]", name);
    c.kv.bits = std::stoi(m[1]);
    c.kv.codebook = KvCodebook::Fisher;
    c.kv.outliers = m[2].matched ? 0.01 : 0.0;
    c.kv.qnorm = c.kv.bits == 2;
    c.prefix.spec = "bos";
  } else if (!parse_short_name(name, c)) {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown preset '{}' (--preset): expected one of {}, or a short name "
         "w{{8|4}}a{{8|4}}[kv{{8|4}}][-g{{32|64|128}}][-asym][-static][-head8|-head4] (e.g. w4a8kv4, w4a8-g128, w4a4-static, "
         "w8a8-head8)",
         name, names);
  }
  return c;
}

}  // namespace sinkq::quant
