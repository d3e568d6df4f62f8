// sinkq/quant/sim_config.cc — the simulator's configuration as data: names and parsing of its
// enums, validation, presets, the JSON and one-line descriptions (sim.h SimConfig). The
// fake-quant machinery that runs a configuration is in sim.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "quant/sim.h"

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

void SimConfig::validate() const {
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
  SINKQ_CHECK(a.mode != ActMode::Cross || a.cross_columns != ColumnMode::Static,
              "CrossQuant with static column maxima (--a-cross-cols) is not implemented; use per_call or running_max");
  SINKQ_CHECK(kv.mode == KvMode::Static || (kv.clip_grid && kv.clip == 1.0f) || !kv.on(),
              "--kv-clip applies to --kv-quant static only (dynamic scales are not clipped)");
  SINKQ_CHECK(kv.mode != KvMode::Static || kv.granularity != KvGranularity::Token || !kv.on(),
              "--kv-gran token is dynamic only: static KV scales are per head or per tensor "
              "(--kv-gran head|tensor)");
  SINKQ_CHECK(kv.mode != KvMode::Dynamic || kv.granularity != KvGranularity::Tensor || !kv.on(),
              "--kv-gran tensor needs --kv-quant static (a dynamic per-tensor scale would depend "
              "on how many tokens one call holds)");
  SINKQ_CHECK(calib.samples >= 1, "--calib-samples must be >= 1, got {}", calib.samples);
  SINKQ_CHECK(calib.len >= 0 && calib.len != 1, "--calib-len must be >= 2, got {}", calib.len);
  SINKQ_CHECK(calib.weight_rows >= 1, "calibration: weight_rows must be >= 1, got {}", calib.weight_rows);
  SINKQ_CHECK(!calib.grid.empty(), "calibration: the clip grid is empty");
  for (float r : calib.grid)
    SINKQ_CHECK(r > 0.0f && r <= 1.0f, "calibration: clip grid entry {} is outside (0, 1]", r);
  SINKQ_CHECK(prefix.requested() || prefix.source == PrefixSim::Source::Fp,
              "--prefix-source quant needs a prefix (--prefix)");
  for (int32_t t : prefix.tokens) SINKQ_CHECK(t >= 0, "--prefix: negative token id {}", t);
}

namespace {

const char* const kLinearSites[] = {"attn_in", "o_in", "mlp_in", "down_in"};

std::string sym_name(bool s) { return s ? "sym" : "asym"; }

std::string clip_text(bool grid, float r) { return grid ? "grid" : fmt::format("{}", r); }

}  // namespace

double json_float(float f) { return std::stod(fmt::format("{}", f)); }

bool static_site(const SimConfig& c, Site s) {
  if (s == Site::K || s == Site::V) return c.kv_static();
  return c.act_static() && (s == Site::AttnIn || s == Site::OIn || s == Site::MlpIn || s == Site::DownIn);
}

QuantSpec static_spec(const SimConfig& c, Site s, const ModelConfig& mc) {
  SINKQ_ASSERT(static_site(c, s));
  if (s == Site::K || s == Site::V) return c.kv.spec(mc.head_dim);
  QuantSpec spec;
  spec.bits = c.a.bits;
  spec.symmetric = c.a.symmetric;
  spec.granularity = Granularity::PerTensor;
  return spec;
}

nlohmann::json SimConfig::to_json() const {
  using nlohmann::json;
  json j;
  j["preset"] = preset.empty() ? json(nullptr) : json(preset);
  json jw{{"bits", w.bits}};
  if (w.on()) {
    jw["granularity"] = w.group > 0 ? "per_group" : "per_output_channel";
    jw["group_size"] = w.group;
    jw["symmetric"] = w.symmetric;
    if (w.clip_grid) {
      jw["clip_ratio"] = "grid";
      jw["clip_search"] = {
          {"per", w.group > 0 ? "row_and_group" : "output_channel"},
          {"objective", w.group > 0 ? "sum_n (X_n,g . (w_i,g - Q_r(w)_i,g))^2 (the group's partial dot product)"
                                    : "sum_n (X_n . (w_i - Q_r(w)_i))^2 (the layer output)"},
          {"inputs", "inputs of each linear layer in the full-precision (rotated, if on) model"},
          {"rows_per_layer", calib.weight_rows}};
    } else {
      jw["clip_ratio"] = json_float(w.clip);
    }
    jw["matrices"] = kWeightNames;
    jw["full_precision"] = {"embed_tokens", "lm_head"};
  }
  j["weights"] = jw;
  // The block-output search of static activations and KV (calibrate.h).
  const json static_search{
      {"objective", "block output MSE"},
      {"block_input", "output of the already quantized previous blocks"},
      {"target", "full-precision block on the same input"},
      {"order", "forward order within a block: attn_in, k, v, o_in, mlp_in, down_in; earlier sites fixed, later ones off"}};
  json ja{{"bits", a.bits}};
  if (a.on()) {
    ja["mode"] = act_mode_name(a.mode);
    if (a.mode == ActMode::Cross) {
      ja["alpha"] = json_float(a.alpha);
      ja["columns"] = column_mode_name(a.cross_columns);
      ja["symmetric"] = true;
    } else if (a.mode == ActMode::Static) {
      ja["granularity"] = "per_tensor";
      ja["symmetric"] = a.symmetric;
      ja["clip_ratio"] = a.clip_grid ? json("grid") : json(json_float(a.clip));
      if (a.clip_grid) ja["clip_search"] = static_search;
    } else {
      ja["granularity"] = "per_token";
      ja["symmetric"] = a.symmetric;
    }
    ja["sites"] = kLinearSites;
  }
  j["activations"] = ja;
  json jk{{"bits", kv.bits}};
  if (kv.on()) {
    jk["mode"] = kv_mode_name(kv.mode);
    jk["granularity"] = kv_granularity_name(kv.granularity);
    jk["dynamic"] = kv.mode == KvMode::Dynamic;
    jk["symmetric"] = kv.symmetric;
    if (kv.mode == KvMode::Static) {
      jk["clip_ratio"] = kv.clip_grid ? json("grid") : json(json_float(kv.clip));
      if (kv.clip_grid) jk["clip_search"] = static_search;
    }
    jk["sites"] = {"k", "v"};
  }
  j["kv"] = jk;
  j["rotation"] = quant::to_json(rotate);
  if (prefix.requested()) {
    j["prefix"] = {{"spec", prefix.spec},
                   {"tokens", prefix.tokens},
                   {"source", prefix_source_name(prefix.source)},
                   {"computed_by", prefix.source == PrefixSim::Source::Fp
                                       ? "full-precision model (rotated, with online rotations, if rotation is on)"
                                       : "the quantized model itself (IntactKV off baseline)"},
                   {"calibration_behind_prefix", prefix.source == PrefixSim::Source::Fp},
                   {"body_drops_leading_bos", prefix.strips_bos()}};
  } else {
    j["prefix"] = nullptr;
  }
  if (needs_calibration()) {
    json g = json::array();
    for (float r : calib.grid) g.push_back(json_float(r));
    j["calibration"] = {{"file", calib.file}, {"samples", calib.samples}, {"len", calib.len},
                        {"seed", calib.seed}, {"grid", g}};
  } else {
    j["calibration"] = nullptr;
  }
  return j;
}

std::string SimConfig::describe() const {
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
    s += fmt::format(" | KV{} {} {} {}", kv.bits, kv_mode_name(kv.mode), gran, sym_name(kv.symmetric));
    if (kv.mode == KvMode::Static) s += " clip=" + clip_text(kv.clip_grid, kv.clip);
  }
  if (rotate.on) s += fmt::format(" | rotate seed={}", rotate.seed);
  if (prefix.requested()) {
    std::string ids;
    for (int32_t t : prefix.tokens) ids += fmt::format("{}{}", ids.empty() ? "" : ",", t);
    s += fmt::format(" | prefix {}{} source={}", prefix.spec.empty() ? "ids" : prefix.spec,
                     ids.empty() ? "" : " [" + ids + "]", prefix_source_name(prefix.source));
  }
  if (needs_calibration())
    s += fmt::format(" | calib {} {}x{} seed={}", calib.file.empty() ? "(none)" : calib.file, calib.samples,
                     calib.len, calib.seed);
  return s;
}

std::vector<std::string> SimConfig::preset_names() {
  return {"fp16",  "w8a8kv8", "w4a8kv4",   "w4a4kv4",           "w8a8",
          "w4a16", "w4a16g128", "prefixquant-w8a8kv8", "prefixquant-w4a8kv4", "prefixquant-w4a4kv4"};
}

SimConfig SimConfig::from_preset(std::string_view name) {
  // Weights per output channel symmetric (PrefixQuant §6.1, CrossQuant §5) unless a group is
  // named; activations dynamic per-token symmetric; KV dynamic per-head symmetric.
  SimConfig c;
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
  } else {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown preset '{}' (--preset): expected one of {}", name, names);
  }
  return c;
}

}  // namespace sinkq::quant
