#include "quant/sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "quant/calibrate.h"

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
  QuantSpec spec;
  if (s == Site::K || s == Site::V) {
    spec.bits = c.kv.bits;
    spec.symmetric = c.kv.symmetric;
    if (c.kv.granularity == KvGranularity::Head) {
      spec.granularity = Granularity::PerHeadShared;
      spec.head_dim = mc.head_dim;
    } else {
      spec.granularity = Granularity::PerTensor;
    }
  } else {
    spec.bits = c.a.bits;
    spec.symmetric = c.a.symmetric;
    spec.granularity = Granularity::PerTensor;
  }
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

QuantSpec weight_spec(const WeightSim& w, int64_t in) {
  QuantSpec s;
  s.bits = w.bits;
  s.symmetric = w.symmetric;
  s.clip_ratio = w.clip;
  if (w.group > 0 && w.group < in && in % w.group == 0) {
    s.granularity = Granularity::PerGroup;
    s.group_size = w.group;
  } else {
    s.granularity = Granularity::PerRow;  // per channel; also a group >= in (one group per row)
  }
  return s;
}

int64_t weight_groups(const WeightSim& w, int64_t cols) {
  const int64_t G = w.group;
  return G <= 0 || G >= cols ? 1 : (cols + G - 1) / G;
}

namespace {

// Params of one block of a weight matrix where entry k (row-major over [prow, pcol]) uses the
// ratio ratio_of(k): for every distinct ratio, compute_params with spec.clip_ratio = that ratio
// on the whole block, and take the entries that chose it. compute_params is the only place a
// scale is computed; entries are independent (per row / per row-and-group), so an entry of the
// whole-block params equals the params that entry would get alone.
template <class RatioOf>
Params mixed_params(QuantSpec spec, const float* x, int64_t rows, int64_t cols, RatioOf&& ratio_of) {
  spec.clip_ratio = ratio_of(0);
  Params out = compute_params(spec, x, rows, cols);
  const int64_t n = out.prow * out.pcol;
  std::vector<float> done{spec.clip_ratio};
  for (int64_t k = 1; k < n; ++k) {
    const float r = ratio_of(k);
    if (std::find(done.begin(), done.end(), r) != done.end()) continue;
    done.push_back(r);
    spec.clip_ratio = r;
    const Params p = compute_params(spec, x, rows, cols);
    for (int64_t e = k; e < n; ++e) {
      if (ratio_of(e) != r) continue;
      out.scale[size_t(e)] = p.scale[size_t(e)];
      if (!p.zero.empty()) out.zero[size_t(e)] = p.zero[size_t(e)];
    }
  }
  return out;
}

}  // namespace

void fake_quant_weight(const WeightSim& w, float* x, int64_t rows, int64_t cols, const ClipRatios* clip) {
  const int64_t groups = weight_groups(w, cols);
  if (clip) {
    SINKQ_CHECK(clip->rows == rows && clip->groups == groups && clip->r.size() == size_t(rows * groups),
                "weight clip ratios are [{}, {}], the matrix needs [{}, {}]", clip->rows, clip->groups, rows, groups);
    for (float r : clip->r) SINKQ_CHECK(r > 0.0f && r <= 1.0f, "weight clip ratio {} is outside (0, 1]", r);
  }
  // Quantizes the block x[:, c0 : c0 + width] (copied out contiguously when it is not the whole
  // row: the quantizer works on dense row-major blocks) whose groups start at group index g0.
  auto block = [&](int64_t c0, int64_t width, int64_t g0) {
    const QuantSpec spec = weight_spec(w, width);
    const bool whole = width == cols;
    std::vector<float> buf;
    float* b = x;
    if (!whole) {
      buf.resize(size_t(rows * width));
      for (int64_t r = 0; r < rows; ++r)
        std::copy(x + r * cols + c0, x + r * cols + c0 + width, buf.data() + r * width);
      b = buf.data();
    }
    if (!clip) {
      fake_quant_dynamic(spec, b, rows, width);
    } else {
      const int64_t pcol = spec.granularity == Granularity::PerGroup ? width / spec.group_size : 1;
      // Params entry e = (row e / pcol, group g0 + e % pcol).
      const Params p = mixed_params(spec, b, rows, width, [&](int64_t e) { return clip->at(e / pcol, g0 + e % pcol); });
      fake_quant(spec, p, b, rows, width);
    }
    if (!whole)
      for (int64_t r = 0; r < rows; ++r)
        std::copy(buf.data() + r * width, buf.data() + (r + 1) * width, x + r * cols + c0);
  };
  const int64_t G = w.group;
  if (G <= 0 || G >= cols || cols % G == 0) {
    block(0, cols, 0);
    return;
  }
  // Ragged: [rows, main] PerGroup (groups 0 .. main/G − 1) and the [rows, tail] rest as one more
  // group per row (group main/G).
  const int64_t main = cols / G * G;
  block(0, main, 0);
  block(main, cols - main, main / G);
}

std::shared_ptr<const Model> fake_quantize_weights(std::shared_ptr<const Model> base,
                                                   const SimConfig& cfg, const ModelClipRatios* clips) {
  SINKQ_ASSERT(base != nullptr);
  cfg.validate();
  if (!cfg.w.on()) return base;
  SINKQ_CHECK(!cfg.w.clip_grid || clips != nullptr,
              "--w-clip grid needs the searched ratios (calibration data, --calib): use build_sim");
  const ModelWeights& src = base->weights();
  if (clips)
    SINKQ_CHECK(clips->size() == src.layers.size(), "weight clip ratios for {} layers, the model has {}",
                clips->size(), src.layers.size());
  ModelWeights w;  // empty store: every borrowed pointer points into `base`, kept alive
  w.embed = src.embed;
  w.lm_head = src.lm_head;
  w.final_norm = src.final_norm;
  w.layers = src.layers;  // norms and biases shared; matrices replaced below
  for (size_t l = 0; l < w.layers.size(); ++l) {
    LayerWeights& L = w.layers[l];
    for (int i = 0; i < kNumLinearRoles; ++i) {
      Mat& m = L.mat(i);
      std::vector<float> buf(size_t(m.rows * m.cols));
      to_f32(m.dtype, m.data, buf.data(), buf.size());
      fake_quant_weight(cfg.w, buf.data(), m.rows, m.cols, clips ? &(*clips)[l].at(size_t(i)) : nullptr);
      m.data = w.own(std::move(buf));
      m.dtype = DType::F32;
    }
  }
  return Model::with_weights(std::move(base), std::move(w));
}

namespace {

// Per-token dynamic fake quant of a whole [T, F] view.
SiteFn dynamic_hook(QuantSpec spec) {
  return [spec](SiteView& v) { fake_quant_dynamic(spec, v.data, v.tokens, v.features); };
}

// CrossQuant at one (site, layer): its own quantizer (column state), created on first use since
// the width is only known from the view; a call starting at position 0 is a new sequence.
SiteFn cross_hook(CrossQuantSpec spec) {
  auto q = std::make_shared<std::unique_ptr<CrossQuantizer>>();
  return [spec, q](SiteView& v) {
    if (!*q) *q = std::make_unique<CrossQuantizer>(spec, v.features);
    if (!v.positions.empty() && v.positions[0] == 0) (*q)->reset();
    (*q)->apply(v.data, v.tokens, v.features);
  };
}

}  // namespace

std::vector<int> attach_dynamic_hooks(Forward& fwd, const SimConfig& cfg) {
  const ModelConfig& mc = fwd.model().config();
  std::vector<int> handles;
  SiteHooks& hooks = fwd.hooks();
  if (cfg.a.on() && cfg.a.mode != ActMode::Static) {
    for (Site s : {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn}) {
      for (int l = 0; l < mc.num_layers; ++l) {
        if (cfg.a.mode == ActMode::Cross) {
          handles.push_back(hooks.add(s, l, cross_hook(CrossQuantSpec{cfg.a.bits, cfg.a.alpha, cfg.a.cross_columns})));
        } else {
          QuantSpec spec;
          spec.bits = cfg.a.bits;
          spec.symmetric = cfg.a.symmetric;
          spec.granularity = Granularity::PerRow;
          handles.push_back(hooks.add(s, l, dynamic_hook(spec)));
        }
      }
    }
  }
  if (cfg.kv.on() && cfg.kv.mode == KvMode::Dynamic) {
    QuantSpec spec;
    spec.bits = cfg.kv.bits;
    spec.symmetric = cfg.kv.symmetric;
    if (cfg.kv.granularity == KvGranularity::Head) {
      spec.granularity = Granularity::PerHead;
      spec.head_dim = mc.head_dim;
    } else {
      spec.granularity = Granularity::PerRow;
    }
    // layer -1: every layer; the logits site is never K or V, so only k/v of each layer run it.
    for (Site s : {Site::K, Site::V}) handles.push_back(hooks.add(s, -1, dynamic_hook(spec)));
  }
  return handles;
}

std::vector<int> attach(Forward& fwd, const SimConfig& cfg) {
  cfg.validate();
  SINKQ_CHECK(!cfg.act_static(), "--a-quant static needs calibrated scales (--calib): use build_sim / SimModel::attach");
  SINKQ_CHECK(!cfg.kv_static(), "--kv-quant static needs calibrated scales (--calib): use build_sim / SimModel::attach");
  SINKQ_CHECK(!cfg.rotate.on, "--rotate needs the rotated model and its online rotations: use build_sim / SimModel::attach");
  return attach_dynamic_hooks(fwd, cfg);
}

std::vector<int> SimModel::attach(Forward& fwd) const {
  std::vector<int> handles = attach_hooks(fwd);
  fwd.set_prefix(prefix);
  return handles;
}

std::vector<int> SimModel::attach_hooks(Forward& fwd) const {
  SINKQ_CHECK(&fwd.model() == model.get(), "SimModel::attach: the Forward must run SimModel::model "
              "(the rotated, weight-quantized model its hooks belong to)");
  cfg.validate();
  std::vector<int> handles = attach_online_rotation(fwd, cfg.rotate);
  for (int h : attach_dynamic_hooks(fwd, cfg)) handles.push_back(h);
  for (const StaticQuant& q : statics) {
    SINKQ_ASSERT(static_site(cfg, q.site));
    handles.push_back(fwd.hooks().add(q.site, q.layer, [spec = q.spec, p = q.params](SiteView& v) {
      fake_quant(spec, p, v.data, v.tokens, v.features);
    }));
  }
  return handles;
}

nlohmann::json SimModel::to_json() const {
  nlohmann::json j = cfg.to_json();
  j["calibration_result"] = calibration_report;
  return j;
}

std::string SimModel::describe() const {
  std::string s = cfg.describe();
  if (calibration_report.is_object() && calibration_report.contains("summary"))
    s += " ; chosen " + calibration_report.at("summary").get<std::string>();
  return s;
}

}  // namespace sinkq::quant
