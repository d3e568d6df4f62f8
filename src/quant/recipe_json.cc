// sinkq/quant/recipe_json.cc — the Recipe's one JSON serialise (to_json) and one parse
// (from_json), and the JSON helpers they share with the artifact (json_float,
// json_first_difference). The rest of the Recipe is in recipe.cc.
#include <fmt/format.h>

#include <climits>
#include <string>

#include "core/error.h"
#include "quant/recipe.h"

namespace sinkq::quant {

std::string json_first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path) {
  if (a.is_number() && b.is_number()) return a == b ? "" : path;  // 8 parses as unsigned, is written as int
  if (a.type() != b.type()) return path;
  if (a.is_object()) {
    for (const auto& [k, v] : a.items()) {
      if (!b.contains(k)) return path + "." + k;
      if (std::string d = json_first_difference(v, b.at(k), path + "." + k); !d.empty()) return d;
    }
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) return path + "." + k;
    return "";
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return path;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::string d = json_first_difference(a[i], b[i], fmt::format("{}[{}]", path, i)); !d.empty()) return d;
    return "";
  }
  return a == b ? "" : path;
}
void Recipe::check_layers(int num_layers) const
 { check_rule_layers(weight_rules, num_layers); }

namespace {

const char* const kLinearSites[] = {"attn_in", "o_in", "mlp_in", "down_in"};

}  // namespace

double json_float(float f) { return std::stod(fmt::format("{}", f)); }

nlohmann::json Recipe::to_json() const {
  using nlohmann::json;
  json j;
  j["preset"] = preset.empty() ? json(nullptr) : json(preset);
  json jw{{"bits", w.bits}};
  if (weights_on()) {  // rules may quantize matrices of an "off" default: its fields then matter
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
  json rules = json::array();
  for (const WeightRule& r : weight_rules) {
    json jr;
    jr["layers"] = r.layers.empty() ? json("all") : json(r.layers);
    if (r.roles == 0) {
      jr["roles"] = "all";
    } else {
      jr["roles"] = json::array();
      for (int i = 0; i < kNumLinearRoles; ++i)
        if (r.roles & (1u << i)) jr["roles"].push_back(kLinearRoles[i].name);
    }
    if (r.bits) jr["bits"] = *r.bits;
    if (r.group) jr["group_size"] = *r.group;
    if (r.symmetric) jr["symmetric"] = *r.symmetric;
    if (r.clip_grid && *r.clip_grid) jr["clip_ratio"] = "grid";
    else if (r.clip) jr["clip_ratio"] = json_float(*r.clip);
    rules.push_back(jr);
  }
  j["weight_rules"] = rules;
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
  if (kv.vector()) {
    jk["codebook"] = kv_codebook_name(kv.codebook);
    jk["keys"] = kv.keys_name();
    jk["values"] = kv_axis_name(kv.value_axis);
    jk["outliers"] = kv.outliers;
    jk["qnorm"] = kv.qnorm;
    if (kv.recent > 0) jk["recent"] = {{"tokens", kv.recent}, {"bits", kv.recent_bits}};
    jk["sites"] = {kv.key_pre_rope ? "k_pre_rope" : "k", "v"};
  } else if (kv.on()) {
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
                   {"eta", prefix.eta},
                   {"bos_id", prefix.bos_id},
                   {"computed_by", prefix.source == PrefixSim::Source::Fp
                                       ? "full-precision model (rotated, with online rotations, if rotation is on)"
                                       : "the quantized model itself (IntactKV off baseline)"},
                   {"calibration_behind_prefix", prefix.source == PrefixSim::Source::Fp},
                   {"body_drops_leading_bos", prefix.strips_bos()}};
    if (prefix.train_epochs > 0)
      j["prefix"]["train"] = {{"epochs", prefix.train_epochs}, {"lr", prefix.train_lr}, {"batch", prefix.train_batch}};
  } else {
    j["prefix"] = nullptr;
  }
  if (finetune.on())
    j["finetune"] = {{"method", "blockwise"},
                     {"epochs", finetune.epochs},
                     {"target", finetune.target == FinetuneSim::Target::FpTrajectory ? "fp_trajectory" : "quant_input"},
                     {"lr_weights", finetune.lr_weights},
                     {"lr_scales", finetune.lr_scales},
                     {"batch", finetune.batch}};  // absent when off: recipes from before it read back unchanged
  if (head.on())  // absent when off, as finetune
    j["head"] = {{"bits", head.bits},
                 {"weights", head.group > 0 ? fmt::format("g{}_symmetric", head.group) : "per_row_symmetric"},
                 {"activations", "dynamic_per_token_symmetric"},
                 {"matrices", {"embed_tokens", "lm_head"}}};
  if (head.on() && head.bits != 8) j["head"]["group_size"] = head.group;  // int8 heads: per row, key absent as before
  if (needs_calibration()) {
    json g = json::array();
    for (float r : calib.grid) g.push_back(json_float(r));
    j["calibration"] = {{"file", calib.file}, {"samples", calib.samples}, {"len", calib.len},
                        {"seed", calib.seed}, {"grid", g}, {"weight_rows", calib.weight_rows},
                        {"statistic", calib_statistic_name(calib.statistic)}};
    // Absent at their defaults: recipes (and artifacts) from before them read and write unchanged.
    if (calib.search_samples != 0) j["calibration"]["search_samples"] = calib.search_samples;
    if (calib.refine_steps != 0)
      j["calibration"]["refine"] = {{"steps", calib.refine_steps}, {"width", json_float(calib.refine_width)}};
  } else {
    j["calibration"] = nullptr;
  }
  return j;
}

namespace {

// Reads one Recipe JSON; every error names the source and the field's path.
struct JsonReader {
  std::string_view where;
  std::string_view root;  // the recipe object's own path in its file ("" = the top level)
  [[noreturn]] void bad(const std::string& path, const std::string& what) const {
    fail("{}: field '{}{}{}': {}", where, root, root.empty() || path.empty() ? "" : ".", path, what);
  }
  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
  // Every key of object `o` must be in `keys` (written and read) or `derived` (written for the
  // reader, skipped here).
  void keys(const nlohmann::json& o, const std::string& path, std::initializer_list<const char*> keys,
            std::initializer_list<const char*> derived = {}) const {
    if (!o.is_object()) bad(path, "must be a JSON object, got " + o.dump());
    for (const auto& [k, v] : o.items()) {
      bool ok = false;
      for (const char* n : keys) ok = ok || k == n;
      for (const char* n : derived) ok = ok || k == n;
      if (!ok) {
        std::string names;
        for (const char* n : keys) names += (names.empty() ? "" : ", ") + std::string(n);
        bad(join(path, k), "unknown key (expected one of: " + names + ")");
      }
    }
  }
  const nlohmann::json* find(const nlohmann::json& o, const char* key) const {
    const auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  }
  int integer(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_number_integer()) bad(path, "must be an integer, got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < INT32_MIN || x > INT32_MAX) bad(path, "out of range: " + v.dump());
    return int(x);
  }
  int64_t int64(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_number_integer()) bad(path, "must be an integer, got " + v.dump());
    return v.get<int64_t>();
  }
  bool boolean(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_boolean()) bad(path, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  double number(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_number()) bad(path, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  std::string str(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_string()) bad(path, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  // "grid" or a ratio in (0, 1].
  ClipSetting clip(const nlohmann::json& v, const std::string& path) const {
    if (v.is_string()) {
      if (v.get<std::string>() != "grid") bad(path, "must be a ratio in (0, 1] or \"grid\", got " + v.dump());
      return ClipSetting{true, 1.0f};
    }
    const double r = number(v, path);
    if (!(r > 0.0 && r <= 1.0)) bad(path, "must be in (0, 1] (or \"grid\"), got " + v.dump());
    return ClipSetting{false, float(r)};
  }
  // An optional "clip_ratio" of object `o` at `path` into (grid, ratio).
  void clip_field(const nlohmann::json& o, const std::string& path, bool& grid, float& ratio) const {
    if (const nlohmann::json* v = find(o, "clip_ratio")) {
      const ClipSetting cs = clip(*v, path + ".clip_ratio");
      grid = cs.grid;
      ratio = cs.ratio;
    }
  }
  uint64_t unsigned64(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      bad(path, "must be a non-negative integer, got " + v.dump());
    return v.get<uint64_t>();
  }
  // Calls f with the parsed value of an enum name; its sinkq::Error becomes one naming the field.
  template <typename F>
  auto name(const nlohmann::json& v, const std::string& path, F&& parse) const {
    const std::string s = str(v, path);
    try {
      return parse(s);
    } catch (const Error& e) {
      bad(path, e.what());
    }
  }
};

}  // namespace

Recipe Recipe::from_json(const nlohmann::json& j, std::string_view where, std::string_view root) {
  using nlohmann::json;
  const JsonReader R{where, root};
  Recipe c;
  R.keys(j, "", {"preset", "weights", "weight_rules", "activations", "kv", "rotation", "prefix", "finetune", "calibration", "head"},
         {"calibration_result", "prefix_resolution"});
  if (const json* p = R.find(j, "preset"); p && !p->is_null()) c.preset = R.str(*p, "preset");
  if (const json* jw = R.find(j, "weights")) {
    R.keys(*jw, "weights", {"bits", "group_size", "symmetric", "clip_ratio"},
           {"granularity", "clip_search", "matrices", "full_precision"});
    if (const json* v = R.find(*jw, "bits")) c.w.bits = R.integer(*v, "weights.bits");
    if (const json* v = R.find(*jw, "group_size")) c.w.group = R.integer(*v, "weights.group_size");
    if (const json* v = R.find(*jw, "symmetric")) c.w.symmetric = R.boolean(*v, "weights.symmetric");
    R.clip_field(*jw, "weights", c.w.clip_grid, c.w.clip);
  }
  if (const json* jr = R.find(j, "weight_rules")) {
    if (!jr->is_array()) R.bad("weight_rules", "must be an array of rules, got " + jr->dump());
    for (size_t i = 0; i < jr->size(); ++i) {
      const std::string path = fmt::format("weight_rules[{}]", i);
      const json& e = (*jr)[i];
      R.keys(e, path, {"layers", "roles", "bits", "group_size", "symmetric", "clip_ratio"});
      WeightRule r;
      const json* layers = R.find(e, "layers");
      const json* roles = R.find(e, "roles");
      if (!layers || !roles) R.bad(path, "needs \"layers\" (a list of layer indices, or \"all\") and \"roles\" "
                                         "(a list of role names, or \"all\")");
      if (!(layers->is_string() && layers->get<std::string>() == "all")) {
        if (!layers->is_array() || layers->empty())
          R.bad(path + ".layers", "must be \"all\" or a non-empty list of layer indices, got " + layers->dump());
        for (size_t k = 0; k < layers->size(); ++k)
          r.layers.push_back(R.integer((*layers)[k], fmt::format("{}.layers[{}]", path, k)));
      }
      if (!(roles->is_string() && roles->get<std::string>() == "all")) {
        if (!roles->is_array() || roles->empty())
          R.bad(path + ".roles", "must be \"all\" or a non-empty list of role names, got " + roles->dump());
        for (size_t k = 0; k < roles->size(); ++k) {
          const std::string rp = fmt::format("{}.roles[{}]", path, k);
          r.roles |= 1u << parse_linear_role(R.str((*roles)[k], rp),
                                             fmt::format("{}: field '{}{}{}'", where, root, root.empty() ? "" : ".", rp));
        }
      }
      if (const json* v = R.find(e, "bits")) r.bits = R.integer(*v, path + ".bits");
      if (const json* v = R.find(e, "group_size")) r.group = R.integer(*v, path + ".group_size");
      if (const json* v = R.find(e, "symmetric")) r.symmetric = R.boolean(*v, path + ".symmetric");
      if (const json* v = R.find(e, "clip_ratio")) {
        const ClipSetting cs = R.clip(*v, path + ".clip_ratio");
        if (cs.grid) r.clip_grid = true;
        else r.clip = cs.ratio;
      }
      c.weight_rules.push_back(std::move(r));
    }
  }
  if (const json* ja = R.find(j, "activations")) {
    R.keys(*ja, "activations", {"bits", "mode", "granularity", "symmetric", "clip_ratio", "alpha", "columns"},
           {"clip_search", "sites"});
    if (const json* v = R.find(*ja, "bits")) c.a.bits = R.integer(*v, "activations.bits");
    if (const json* v = R.find(*ja, "mode")) c.a.mode = R.name(*v, "activations.mode", parse_act_mode);
    if (const json* v = R.find(*ja, "symmetric")) c.a.symmetric = R.boolean(*v, "activations.symmetric");
    if (const json* v = R.find(*ja, "alpha")) c.a.alpha = float(R.number(*v, "activations.alpha"));
    if (const json* v = R.find(*ja, "columns"))
      c.a.cross_columns = R.name(*v, "activations.columns", [](const std::string& s) { return parse_column_mode(s); });
    R.clip_field(*ja, "activations", c.a.clip_grid, c.a.clip);
    if (const json* v = R.find(*ja, "granularity")) {
      const std::string g = R.str(*v, "activations.granularity");
      const char* want = c.a.mode == ActMode::Static ? "per_tensor" : "per_token";
      if (c.a.mode != ActMode::Cross && g != want)
        R.bad("activations.granularity", fmt::format("'{}' with mode {}: expected {}", g, act_mode_name(c.a.mode), want));
    }
  }
  if (const json* jk = R.find(j, "kv")) {
    R.keys(*jk, "kv", {"bits", "mode", "granularity", "symmetric", "clip_ratio", "codebook", "keys", "values", "outliers", "qnorm",
                          "recent"},
           {"dynamic", "clip_search", "sites"});
    if (const json* v = R.find(*jk, "codebook")) c.kv.codebook = R.name(*v, "kv.codebook", parse_kv_codebook);
    if (const json* v = R.find(*jk, "keys"))
      R.name(*v, "kv.keys", [&c](const std::string& s) { c.kv.parse_keys(s); return 0; });
    if (const json* v = R.find(*jk, "values"))
      c.kv.value_axis = R.name(*v, "kv.values", [](const std::string& s) { return parse_kv_values(s); });
    if (const json* v = R.find(*jk, "outliers")) c.kv.outliers = R.number(*v, "kv.outliers");
    if (const json* v = R.find(*jk, "qnorm")) c.kv.qnorm = R.boolean(*v, "kv.qnorm");
    if (const json* jr = R.find(*jk, "recent")) {
      R.keys(*jr, "kv.recent", {"tokens", "bits"}, {});
      if (const json* v = R.find(*jr, "tokens")) c.kv.recent = R.integer(*v, "kv.recent.tokens");
      if (const json* v = R.find(*jr, "bits")) c.kv.recent_bits = R.integer(*v, "kv.recent.bits");
    }
    if (const json* v = R.find(*jk, "bits")) c.kv.bits = R.integer(*v, "kv.bits");
    if (const json* v = R.find(*jk, "mode")) c.kv.mode = R.name(*v, "kv.mode", parse_kv_mode);
    if (const json* v = R.find(*jk, "granularity")) c.kv.granularity = R.name(*v, "kv.granularity", parse_kv_granularity);
    if (const json* v = R.find(*jk, "symmetric")) c.kv.symmetric = R.boolean(*v, "kv.symmetric");
    R.clip_field(*jk, "kv", c.kv.clip_grid, c.kv.clip);
  }
  if (const json* jr = R.find(j, "rotation")) {
    R.keys(*jr, "rotation", {"on", "seed"}, {"r1", "r2", "r3", "r4"});
    if (const json* v = R.find(*jr, "on")) c.rotate.on = R.boolean(*v, "rotation.on");
    if (const json* v = R.find(*jr, "seed")) c.rotate.seed = R.unsigned64(*v, "rotation.seed");
  }
  if (const json* jh = R.find(j, "head")) {
    R.keys(*jh, "head", {"bits", "group_size"}, {"weights", "activations", "matrices"});
    if (const json* v = R.find(*jh, "bits")) c.head.bits = R.integer(*v, "head.bits");
    if (const json* v = R.find(*jh, "group_size")) c.head.group = R.integer(*v, "head.group_size");  // absent: 0
  }
  if (const json* jp = R.find(j, "prefix"); jp && !jp->is_null()) {
    R.keys(*jp, "prefix", {"spec", "tokens", "source", "eta", "bos_id", "train"},
           {"computed_by", "calibration_behind_prefix", "body_drops_leading_bos"});
    if (const json* v = R.find(*jp, "spec")) c.prefix.spec = R.str(*v, "prefix.spec");
    if (const json* v = R.find(*jp, "tokens")) {
      if (!v->is_array()) R.bad("prefix.tokens", "must be a list of token ids, got " + v->dump());
      for (size_t k = 0; k < v->size(); ++k)
        c.prefix.tokens.push_back(R.integer((*v)[k], fmt::format("prefix.tokens[{}]", k)));
    }
    if (const json* v = R.find(*jp, "source")) c.prefix.source = R.name(*v, "prefix.source", parse_prefix_source);
    if (const json* v = R.find(*jp, "eta")) c.prefix.eta = R.number(*v, "prefix.eta");
    if (const json* v = R.find(*jp, "bos_id")) c.prefix.bos_id = R.integer(*v, "prefix.bos_id");
    if (const json* t = R.find(*jp, "train")) {
      R.keys(*t, "prefix.train", {"epochs", "lr", "batch"});
      if (const json* v = R.find(*t, "epochs")) c.prefix.train_epochs = R.integer(*v, "prefix.train.epochs");
      if (const json* v = R.find(*t, "lr")) c.prefix.train_lr = R.number(*v, "prefix.train.lr");
      if (const json* v = R.find(*t, "batch")) c.prefix.train_batch = R.integer(*v, "prefix.train.batch");
    }
    if (c.prefix.spec.empty() && c.prefix.tokens.empty()) R.bad("prefix", "needs a spec or tokens (or null for none)");
  }
  if (const json* jf = R.find(j, "finetune"); jf && !jf->is_null()) {
    R.keys(*jf, "finetune", {"method", "epochs", "target", "lr_weights", "lr_scales", "batch"});
    if (const json* v = R.find(*jf, "target")) {
      const std::string t = R.str(*v, "finetune.target");
      if (t != "fp_trajectory" && t != "quant_input")
        R.bad("finetune.target", "expected \"fp_trajectory\" or \"quant_input\", got " + v->dump());
      c.finetune.target = t == "fp_trajectory" ? FinetuneSim::Target::FpTrajectory : FinetuneSim::Target::QuantInput;
    }
    if (const json* v = R.find(*jf, "method"); v && R.str(*v, "finetune.method") != "blockwise")
      R.bad("finetune.method", "expected \"blockwise\", got " + v->dump());
    if (const json* v = R.find(*jf, "epochs")) c.finetune.epochs = R.integer(*v, "finetune.epochs");
    if (const json* v = R.find(*jf, "lr_weights")) c.finetune.lr_weights = R.number(*v, "finetune.lr_weights");
    if (const json* v = R.find(*jf, "lr_scales")) c.finetune.lr_scales = R.number(*v, "finetune.lr_scales");
    if (const json* v = R.find(*jf, "batch")) c.finetune.batch = R.integer(*v, "finetune.batch");
  }
  if (const json* jc = R.find(j, "calibration"); jc && !jc->is_null()) {
    R.keys(*jc, "calibration",
           {"file", "samples", "len", "seed", "grid", "weight_rows", "statistic", "search_samples", "refine"});
    if (const json* v = R.find(*jc, "search_samples"))
      c.calib.search_samples = R.int64(*v, "calibration.search_samples");
    if (const json* v = R.find(*jc, "refine")) {
      if (!v->is_object()) R.bad("calibration.refine", "must be an object {\"steps\": N, \"width\": W}, got " + v->dump());
      R.keys(*v, "calibration.refine", {"steps", "width"});
      if (const json* n = R.find(*v, "steps")) c.calib.refine_steps = R.integer(*n, "calibration.refine.steps");
      if (const json* w = R.find(*v, "width")) c.calib.refine_width = float(R.number(*w, "calibration.refine.width"));
    }
    if (const json* v = R.find(*jc, "statistic")) {
      const std::string t = R.str(*v, "calibration.statistic");
      if (t != "max" && t != "sample_mean")
        R.bad("calibration.statistic", "expected \"max\" or \"sample_mean\", got " + v->dump());
      c.calib.statistic = parse_calib_statistic(t);
    }
    if (const json* v = R.find(*jc, "weight_rows")) c.calib.weight_rows = R.int64(*v, "calibration.weight_rows");
    if (const json* v = R.find(*jc, "file")) c.calib.file = R.str(*v, "calibration.file");
    if (const json* v = R.find(*jc, "samples")) c.calib.samples = R.int64(*v, "calibration.samples");
    if (const json* v = R.find(*jc, "len")) c.calib.len = R.int64(*v, "calibration.len");
    if (const json* v = R.find(*jc, "seed")) c.calib.seed = R.unsigned64(*v, "calibration.seed");
    if (const json* v = R.find(*jc, "grid")) {
      if (!v->is_array() || v->empty()) R.bad("calibration.grid", "must be a non-empty list of ratios, got " + v->dump());
      c.calib.grid.clear();
      for (size_t k = 0; k < v->size(); ++k)
        c.calib.grid.push_back(float(R.number((*v)[k], fmt::format("calibration.grid[{}]", k))));
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: field '{}': {}", where, root.empty() ? "(recipe)" : root, e.what());
  }
  return c;
}


}  // namespace sinkq::quant
