// sinkq/io/config.cc — HF config.json -> ModelConfig, following transformers' defaults.
//
// Defaults (transformers LlamaConfig / MistralConfig / Qwen2Config):
//   num_key_value_heads = num_attention_heads (absent or null); head_dim = hidden / heads (absent
//   or null); rms_norm_eps 1e-6; rope_theta 10000; tie_word_embeddings false; hidden_act silu.
//   Mistral: sliding_window 4096 when the key is absent, none when null.
//   Qwen2: sliding window only with use_sliding_window true, and then HF applies it to layers
//   i >= max_window_layers (default 28). sinkq has one window for all layers, so it accepts
//   max_window_layers == 0 (all layers) or >= num_hidden_layers (none) and rejects a mix.
// Every error names the file (`source`) and the field.
#include "io/config.h"

#include <fmt/format.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/mmap.h"

namespace sinkq {

using json = nlohmann::json;

namespace {

constexpr const char* kSupported = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";

// Field access with messages "<source>: field '<key>' ...". `obj` names the enclosing object for
// nested fields (rope_scaling.factor).
struct Fields {
  const json& j;
  const std::string& src;
  std::string prefix;  // "" or "rope_scaling."

  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  [[noreturn]] void bad(const char* k, std::string_view why) const {
    fail("{}: field '{}{}' {}", src, prefix, k, why);
  }
  const json& req(const char* k) const {
    if (!j.contains(k)) bad(k, "is missing");
    if (j[k].is_null()) bad(k, "is null");
    return j[k];
  }
  // Integers; an integral float (32.0) is accepted, booleans and strings are not.
  int to_int(const char* k, const json& v) const {
    double d = 0;
    if (v.is_number_integer() || v.is_number_unsigned()) {
      d = v.is_number_unsigned() ? double(v.get<uint64_t>()) : double(v.get<int64_t>());
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
      d = v.get<double>();
    } else {
      bad(k, fmt::format("must be an integer, got {}", v.dump()));
    }
    if (d < std::numeric_limits<int>::min() || d > std::numeric_limits<int>::max())
      bad(k, fmt::format("is out of range: {}", v.dump()));
    return int(d);
  }
  int pos_int(const char* k) const {
    const int v = to_int(k, req(k));
    if (v <= 0) bad(k, fmt::format("must be positive, got {}", v));
    return v;
  }
  int pos_int_or(const char* k, int def) const { return has(k) ? pos_int(k) : def; }
  float pos_float(const char* k) const {
    const json& v = req(k);
    if (!v.is_number()) bad(k, fmt::format("must be a number, got {}", v.dump()));
    const double d = v.get<double>();
    if (!(d > 0) || !std::isfinite(float(d))) bad(k, fmt::format("must be positive and finite, got {}", v.dump()));
    // Held as fp32: a value that rounds to 0 or a subnormal there (1e-300) is not the positive
    // number the file wrote.
    if (!(float(d) >= FLT_MIN))
      bad(k, fmt::format("{} is too small for fp32 (smallest normal {}): it would be taken as {}", v.dump(), FLT_MIN,
                         float(d)));
    return float(d);
  }
  float pos_float_or(const char* k, float def) const { return has(k) ? pos_float(k) : def; }
  bool boolean_or(const char* k, bool def) const {
    if (!has(k)) return def;
    if (!j[k].is_boolean()) bad(k, fmt::format("must be true or false, got {}", j[k].dump()));
    return j[k].get<bool>();
  }
  std::string string_or(const char* k, std::string def) const {
    if (!has(k)) return def;
    if (!j[k].is_string()) bad(k, fmt::format("must be a string, got {}", j[k].dump()));
    return j[k].get<std::string>();
  }
  // Token ids: int, list of ints, or null/absent (empty).
  std::vector<int> ids(const char* k, int vocab) const {
    std::vector<int> out;
    if (!has(k)) return out;
    const json& v = j[k];
    if (v.is_array()) {
      for (const json& e : v) out.push_back(to_int(k, e));
    } else {
      out.push_back(to_int(k, v));
    }
    for (int id : out)
      if (id < 0 || id >= vocab) bad(k, fmt::format("holds id {} outside [0, vocab_size {})", id, vocab));
    return out;
  }
};

RopeScaling parse_rope_scaling(const json& rs, const std::string& src, const char* key) {
  RopeScaling r;
  if (!rs.is_object()) fail("{}: field '{}' must be an object or null, got {}", src, key, rs.dump());
  Fields f{rs, src, std::string(key) + "."};
  // transformers renamed "type" to "rope_type"; both spellings occur in the wild.
  std::string type = f.string_or("rope_type", "");
  const std::string old = f.string_or("type", "");
  if (!type.empty() && !old.empty() && type != old)
    fail("{}: field '{}' has rope_type '{}' and type '{}', which disagree", src, key, type, old);
  if (type.empty()) type = old;
  if (type.empty()) fail("{}: field '{}' has no 'rope_type' (or 'type')", src, key);
  if (type == "default") return r;  // plain RoPE
  if (type == "linear") {
    r.type = "linear";
    r.factor = f.pos_float("factor");
    return r;
  }
  if (type == "llama3") {
    r.type = "llama3";
    r.factor = f.pos_float("factor");
    r.low_freq_factor = f.pos_float("low_freq_factor");
    r.high_freq_factor = f.pos_float("high_freq_factor");
    r.original_max_position_embeddings = f.pos_int("original_max_position_embeddings");
    // The llama3 rule interpolates over 1 / (high - low): equal factors would divide by zero.
    if (!(r.high_freq_factor > r.low_freq_factor))
      fail("{}: field '{}': high_freq_factor {} must exceed low_freq_factor {}", src, key,
           r.high_freq_factor, r.low_freq_factor);
    return r;
  }
  fail("{}: field '{}': rope type '{}' is not supported (supported: default, linear, llama3)", src,
       key, type);
}

// A float as the shortest decimal that reads back to it (1e-05, not 9.999999747378752e-06).
json decimal(float f) { return std::stod(fmt::format("{}", f)); }

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& src) {
  if (!j.is_object()) fail("{}: config must be a JSON object", src);
  Fields f{j, src, ""};
  ModelConfig c;

  const json& archs = f.req("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    f.bad("architectures", fmt::format("must be a non-empty list of names, got {}", archs.dump()));
  c.architecture = archs[0].get<std::string>();
  if (c.architecture == "LlamaForCausalLM") c.arch = Arch::Llama;
  else if (c.architecture == "MistralForCausalLM") c.arch = Arch::Mistral;
  else if (c.architecture == "Qwen2ForCausalLM") c.arch = Arch::Qwen2;
  else fail("unsupported architecture '{}' in {}: supported are {}", c.architecture, src, kSupported);

  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu") f.bad("hidden_act", fmt::format("is '{}'; only silu is supported", act));

  c.hidden_size = f.pos_int("hidden_size");
  c.intermediate_size = f.pos_int("intermediate_size");
  c.num_layers = f.pos_int("num_hidden_layers");
  c.num_heads = f.pos_int("num_attention_heads");
  c.num_kv_heads = f.pos_int_or("num_key_value_heads", c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    f.bad("num_key_value_heads", fmt::format("({}) must divide num_attention_heads ({})",
                                             c.num_kv_heads, c.num_heads));
  if (f.has("head_dim")) {
    c.head_dim = f.pos_int("head_dim");
  } else {
    if (c.hidden_size % c.num_heads != 0)
      f.bad("hidden_size", fmt::format("({}) is not divisible by num_attention_heads ({}) and "
                                       "there is no head_dim", c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) f.bad("head_dim", fmt::format("must be even for RoPE, got {}", c.head_dim));
  c.vocab_size = f.pos_int("vocab_size");
  c.max_position_embeddings = f.pos_int("max_position_embeddings");
  c.rms_norm_eps = f.pos_float_or("rms_norm_eps", 1e-6f);

  // RoPE: transformers >= 4.5x may nest theta and scaling in "rope_parameters".
  const bool has_params = f.has("rope_parameters");
  if (has_params && !j["rope_parameters"].is_object()) f.bad("rope_parameters", "must be an object");
  Fields rp{has_params ? j["rope_parameters"] : j, src, "rope_parameters."};
  c.rope_theta = f.has("rope_theta") ? f.pos_float("rope_theta")
                 : has_params        ? rp.pos_float_or("rope_theta", 10000.0f)
                                     : 10000.0f;
  if (f.has("rope_scaling")) c.rope_scaling = parse_rope_scaling(j["rope_scaling"], src, "rope_scaling");
  else if (has_params) c.rope_scaling = parse_rope_scaling(j["rope_parameters"], src, "rope_parameters");

  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  switch (c.arch) {
    case Arch::Llama:
      c.qkv_bias = f.boolean_or("attention_bias", false);
      if (f.boolean_or("mlp_bias", false)) f.bad("mlp_bias", "is true; MLP biases are not supported");
      break;
    case Arch::Mistral:  // no biases in HF Mistral; attention_bias, if present, is ignored there too
      if (!j.contains("sliding_window")) c.sliding_window = 4096;
      else if (!j["sliding_window"].is_null()) c.sliding_window = f.pos_int("sliding_window");
      break;
    case Arch::Qwen2:
      c.qkv_bias = true;
      if (f.boolean_or("use_sliding_window", false)) {
        const int window = f.pos_int_or("sliding_window", 4096);
        const int from = f.has("max_window_layers") ? f.to_int("max_window_layers", j["max_window_layers"]) : 28;
        if (from <= 0) c.sliding_window = window;
        else if (from < c.num_layers)
          f.bad("max_window_layers", fmt::format("({}) gives a sliding window to only some of the {} "
                                                 "layers, which is not supported", from, c.num_layers));
      }
      break;
  }

  const auto bos = f.ids("bos_token_id", c.vocab_size);
  if (bos.size() > 1) f.bad("bos_token_id", "lists several ids; one is supported");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.eos_token_ids = f.ids("eos_token_id", c.vocab_size);
  c.torch_dtype = f.string_or("torch_dtype", f.string_or("dtype", ""));
  return c;
}

RopeParams ModelConfig::rope() const {
  RopeParams p;
  p.head_dim = head_dim > 0 ? head_dim : (num_heads > 0 ? hidden_size / num_heads : 0);
  p.theta = rope_theta;
  p.scaling = rope_scaling;
  return p;
}

ModelConfig ModelConfig::load(const std::string& path) {
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  return from_json(j, path);
}

json ModelConfig::to_json() const {
  json j;
  j["architectures"] = {architecture};
  j["model_type"] = arch == Arch::Llama ? "llama" : arch == Arch::Mistral ? "mistral" : "qwen2";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = decimal(rms_norm_eps);
  j["rope_theta"] = decimal(rope_theta);
  if (rope_scaling.type == "none") {
    j["rope_scaling"] = nullptr;
  } else {
    json rs{{"rope_type", rope_scaling.type}, {"factor", decimal(rope_scaling.factor)}};
    if (rope_scaling.type == "llama3") {
      rs["low_freq_factor"] = decimal(rope_scaling.low_freq_factor);
      rs["high_freq_factor"] = decimal(rope_scaling.high_freq_factor);
      rs["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    j["rope_scaling"] = rs;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  switch (arch) {
    case Arch::Llama:
      // HF reads attention_bias as q/k/v *and* o_proj biases; sinkq has only q/k/v ones.
      j["attention_bias"] = qkv_bias;
      j["mlp_bias"] = false;
      break;
    case Arch::Mistral:
      j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
      break;
    case Arch::Qwen2:
      j["use_sliding_window"] = sliding_window > 0;
      j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
      j["max_window_layers"] = sliding_window > 0 ? 0 : num_layers;
      break;
  }
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  if (eos_token_ids.empty()) j["eos_token_id"] = nullptr;
  else if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  else j["eos_token_id"] = eos_token_ids;
  if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
  return j;
}

}  // namespace sinkq
