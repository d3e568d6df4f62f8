#include "quant/sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"

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

std::string_view kv_granularity_name(KvGranularity g) { return g == KvGranularity::Token ? "per_token" : "per_head"; }

KvGranularity parse_kv_granularity(std::string_view s) {
  if (s == "token" || s == "per_token") return KvGranularity::Token;
  if (s == "head" || s == "per_head") return KvGranularity::Head;
  fail("unknown KV granularity '{}' (--kv-gran): expected token or head", s);
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
  // Static is rejected whatever the bits: asking for it and silently getting something else (or
  // nothing) would make the printed configuration a lie.
  SINKQ_CHECK(a.mode != ActMode::Static,
              "--a-quant static needs calibration (--calib), which is not implemented yet; "
              "use --a-quant dynamic or cross");
  SINKQ_CHECK(a.mode != ActMode::Cross || a.cross_columns != ColumnMode::Static,
              "CrossQuant with static column maxima needs calibration (--calib), not implemented yet");
}

namespace {

const char* const kLinearSites[] = {"attn_in", "o_in", "mlp_in", "down_in"};

std::string sym_name(bool s) { return s ? "sym" : "asym"; }

// A float field as the shortest decimal that reads back to it (0.15f -> 0.15, not the double
// 0.15000000596046448 a plain float -> double conversion would print in the JSON).
double json_float(float f) { return std::stod(fmt::format("{}", f)); }

}  // namespace

nlohmann::json SimConfig::to_json() const {
  using nlohmann::json;
  json j;
  j["preset"] = preset.empty() ? json(nullptr) : json(preset);
  json jw{{"bits", w.bits}};
  if (w.on()) {
    jw["granularity"] = w.group > 0 ? "per_group" : "per_output_channel";
    jw["group_size"] = w.group;
    jw["symmetric"] = w.symmetric;
    jw["clip_ratio"] = json_float(w.clip);
    jw["matrices"] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    jw["full_precision"] = {"embed_tokens", "lm_head"};
  }
  j["weights"] = jw;
  json ja{{"bits", a.bits}};
  if (a.on()) {
    ja["mode"] = act_mode_name(a.mode);
    if (a.mode == ActMode::Cross) {
      ja["alpha"] = json_float(a.alpha);
      ja["columns"] = column_mode_name(a.cross_columns);
      ja["symmetric"] = true;
    } else {
      ja["granularity"] = "per_token";
      ja["symmetric"] = a.symmetric;
    }
    ja["sites"] = kLinearSites;
  }
  j["activations"] = ja;
  json jk{{"bits", kv.bits}};
  if (kv.on()) {
    jk["granularity"] = kv_granularity_name(kv.granularity);
    jk["dynamic"] = true;
    jk["symmetric"] = kv.symmetric;
    jk["sites"] = {"k", "v"};
  }
  j["kv"] = jk;
  return j;
}

std::string SimConfig::describe() const {
  std::string s;
  if (!w.on()) {
    s = "W16";
  } else {
    s = fmt::format("W{} {} {}", w.bits, w.group > 0 ? fmt::format("g{}", w.group) : "per-channel",
                    sym_name(w.symmetric));
    if (w.clip != 1.0f) s += fmt::format(" clip={}", w.clip);
  }
  if (!a.on()) {
    s += " | A16";
  } else if (a.mode == ActMode::Cross) {
    s += fmt::format(" | A{} cross alpha={} columns={}", a.bits, a.alpha, column_mode_name(a.cross_columns));
  } else {
    s += fmt::format(" | A{} {} per-token {}", a.bits, act_mode_name(a.mode), sym_name(a.symmetric));
  }
  if (!kv.on()) {
    s += " | KV16";
  } else {
    s += fmt::format(" | KV{} dynamic {} {}", kv.bits,
                     kv.granularity == KvGranularity::Head ? "per-head" : "per-token", sym_name(kv.symmetric));
  }
  return s;
}

std::vector<std::string> SimConfig::preset_names() {
  return {"fp16", "w8a8kv8", "w4a8kv4", "w4a4kv4", "w8a8", "w4a16", "w4a16g128"};
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
  else {
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

void fake_quant_weight(const WeightSim& w, float* x, int64_t rows, int64_t cols) {
  const int64_t G = w.group;
  if (G <= 0 || G >= cols || cols % G == 0) {
    fake_quant_dynamic(weight_spec(w, cols), x, rows, cols);
    return;
  }
  // Ragged: [rows, main] PerGroup and [rows, tail] PerRow, each copied out contiguously
  // (the quantizer works on dense row-major blocks), quantized, and copied back.
  const int64_t main = cols / G * G, tail = cols - main;
  auto slice = [&](int64_t c0, int64_t width, const QuantSpec& spec) {
    std::vector<float> buf(size_t(rows * width));
    for (int64_t r = 0; r < rows; ++r)
      std::copy(x + r * cols + c0, x + r * cols + c0 + width, buf.data() + r * width);
    fake_quant_dynamic(spec, buf.data(), rows, width);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(buf.data() + r * width, buf.data() + (r + 1) * width, x + r * cols + c0);
  };
  slice(0, main, weight_spec(w, main));
  slice(main, tail, weight_spec(w, tail));
}

std::shared_ptr<const Model> fake_quantize_weights(std::shared_ptr<const Model> base,
                                                   const SimConfig& cfg) {
  SINKQ_ASSERT(base != nullptr);
  cfg.validate();
  if (!cfg.w.on()) return base;
  const ModelWeights& src = base->weights();
  ModelWeights w;  // empty store: every borrowed pointer points into `base`, kept alive
  w.embed = src.embed;
  w.lm_head = src.lm_head;
  w.final_norm = src.final_norm;
  w.layers = src.layers;  // norms and biases shared; matrices replaced below
  auto requant = [&](Mat& m) {
    std::vector<float> buf(size_t(m.rows * m.cols));
    to_f32(m.dtype, m.data, buf.data(), buf.size());
    fake_quant_weight(cfg.w, buf.data(), m.rows, m.cols);
    m.data = w.own(std::move(buf));
    m.dtype = DType::F32;
  };
  for (LayerWeights& l : w.layers)
    for (Mat* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) requant(*m);
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

std::vector<int> attach(Forward& fwd, const SimConfig& cfg) {
  cfg.validate();
  const ModelConfig& mc = fwd.model().config();
  std::vector<int> handles;
  SiteHooks& hooks = fwd.hooks();
  if (cfg.a.on()) {
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
  if (cfg.kv.on()) {
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

}  // namespace sinkq::quant
