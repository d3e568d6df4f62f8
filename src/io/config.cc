// sinkq/io/config.cc — HF config.json -> ModelConfig, following transformers' defaults.
//
// The family table (kFamilies) maps config.json's architectures[0] to an Arch and its LayerSpec.
// Defaults (transformers LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config / Gemma2Config /
// Gemma3TextConfig / Phi3Config):
//   num_key_value_heads = num_attention_heads (absent or null); head_dim = hidden / heads (absent
//   or null); rms_norm_eps 1e-6; rope_theta 10000; tie_word_embeddings false; hidden_act silu.
//   Mistral: sliding_window 4096 when the key is absent, none when null.
//   Qwen2 / Qwen3: sliding window only with use_sliding_window true, and then HF applies it to
//   layers i >= max_window_layers (default 28), or as layer_types says.
//   Gemma 2 / 3: head_dim 256, query_pre_attn_scalar = head_dim, sliding_window 4096 on the layers
//   layer_types names (else layer i slides when (i + 1) % 2 (Gemma 2) / % 6 (Gemma 3) != 0),
//   soft-caps absent = none; Gemma 3's sliding layers use rope_local_base_freq (10000), its full
//   layers rope_theta (1e6) and rope_scaling — or rope_parameters.{sliding,full}_attention.
//   Phi-3: sliding_window when written; partial_rotary_factor must be 1 (Phi-3 has full rotary).
// Every error names the file (`source`) and the field.
#include "io/config.h"

#include <fmt/format.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <algorithm>

#include "core/error.h"
#include "core/mmap.h"

namespace sinkq {

using json = nlohmann::json;

namespace {

// The family table: one row per architecture (io/config.h Family, LayerSpec).
constexpr Family kFamilies[] = {
    {Arch::Llama, "LlamaForCausalLM", "llama", "llama", {.gguf_permuted_qk = true}},
    {Arch::Mistral, "MistralForCausalLM", "mistral", "llama", {.gguf_permuted_qk = true}},
    {Arch::Qwen2, "Qwen2ForCausalLM", "qwen2", "qwen2", {}},
    {Arch::Qwen3, "Qwen3ForCausalLM", "qwen3", "qwen3", {.qk_norm = true}},
    {Arch::Gemma2, "Gemma2ForCausalLM", "gemma2", "gemma2",
     {.post_norms = true, .norm_offset = true, .act = Activation::GeluTanh, .embed_scale = true}},
    {Arch::Gemma3, "Gemma3ForCausalLM", "gemma3_text", "gemma3",
     {.qk_norm = true, .post_norms = true, .norm_offset = true, .act = Activation::GeluTanh, .embed_scale = true}},
    {Arch::Phi3, "Phi3ForCausalLM", "phi3", "phi3", {.fused_linears = true}},
};

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
  if (type == "freq_factors") {  // sinkq's own: a GGUF file's rope_freqs.weight (core/rope.h)
    r.type = "freq_factors";
    const json& v = f.req("factors");
    if (!v.is_array() || v.empty()) f.bad("factors", "must be a non-empty list of positive numbers");
    for (const json& e : v) {
      if (!e.is_number() || !(e.get<double>() > 0) || !std::isfinite(e.get<double>()))
        f.bad("factors", fmt::format("holds {}; every factor must be a positive number", e.dump()));
      r.freq_factors.push_back(e.get<float>());
    }
    return r;
  }
  fail("{}: field '{}': rope type '{}' is not supported (supported: default, linear, llama3)", src,
       key, type);
}

// A float as the shortest decimal that reads back to it (1e-05, not 9.999999747378752e-06).
json decimal(float f) { return std::stod(fmt::format("{}", f)); }

// HF layer_types ("sliding_attention" | "full_attention" per layer) as layer_sliding.
std::vector<uint8_t> parse_layer_types(const Fields& f, int layers) {
  const json& v = f.req("layer_types");
  if (!v.is_array() || int(v.size()) != layers)
    f.bad("layer_types", fmt::format("must list one type per layer ({}), got {}", layers, v.dump()));
  std::vector<uint8_t> out;
  for (const json& e : v) {
    const std::string t = e.is_string() ? e.get<std::string>() : "";
    if (t == "sliding_attention") out.push_back(1);
    else if (t == "full_attention") out.push_back(0);
    else f.bad("layer_types", fmt::format("holds {}; supported: \"sliding_attention\", \"full_attention\"", e.dump()));
  }
  return out;
}

}  // namespace

const Family* family_of_hf(std::string_view architecture) {
  for (const Family& f : kFamilies)
    if (architecture == f.architecture) return &f;
  return nullptr;
}

const Family* family_of_gguf(std::string_view gguf_arch) {
  for (const Family& f : kFamilies)
    if (gguf_arch == f.gguf) return &f;
  return nullptr;
}

const Family& family(Arch a) {
  for (const Family& f : kFamilies)
    if (f.arch == a) return f;
  SINKQ_ASSERT(false);
  return kFamilies[0];
}

std::string supported_architectures() {
  std::string out;
  for (const Family& f : kFamilies) out += fmt::format("{}{}", out.empty() ? "" : ", ", f.architecture);
  return out;
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& src) {
  if (!j.is_object()) fail("{}: config must be a JSON object", src);
  Fields f{j, src, ""};
  ModelConfig c;

  const json& archs = f.req("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    f.bad("architectures", fmt::format("must be a non-empty list of names, got {}", archs.dump()));
  c.architecture = archs[0].get<std::string>();
  const Family* fam = family_of_hf(c.architecture);
  if (!fam) {
    if (c.architecture == "Gemma3ForConditionalGeneration")
      fail("{}: architecture '{}' is Gemma 3 with its vision tower; sinkq runs the text model "
           "(Gemma3ForCausalLM, model_type gemma3_text)", src, c.architecture);
    fail("unsupported architecture '{}' in {}: supported are {}", c.architecture, src, supported_architectures());
  }
  c.arch = fam->arch;
  const LayerSpec& spec = fam->spec;

  // The activation: silu for the SwiGLU families, the tanh form of gelu for Gemma (HF reads
  // hidden_activation there; gelu_pytorch_tanh and gelu_new are the same function).
  const char* act_key = f.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string act = f.string_or(act_key, spec.act == Activation::Silu ? "silu" : "gelu_pytorch_tanh");
  const bool act_ok = spec.act == Activation::Silu ? act == "silu"
                                                   : act == "gelu_pytorch_tanh" || act == "gelu_new";
  if (!act_ok)
    f.bad(act_key, fmt::format("is '{}'; {} is supported for {}", act,
                               spec.act == Activation::Silu ? "silu" : "gelu_pytorch_tanh", c.architecture));

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
  // Gemma 3 nests them per layer type: rope_parameters.{full_attention, sliding_attention}.
  const bool per_type = has_params && j["rope_parameters"].contains("full_attention");
  if (per_type) {
    const json& full = j["rope_parameters"]["full_attention"];
    Fields fp{full, src, "rope_parameters.full_attention."};
    c.rope_theta = fp.pos_float_or("rope_theta", 10000.0f);
    c.rope_scaling = parse_rope_scaling(full, src, "rope_parameters.full_attention");
    if (j["rope_parameters"].contains("sliding_attention")) {
      const json& loc = j["rope_parameters"]["sliding_attention"];
      Fields fl{loc, src, "rope_parameters.sliding_attention."};
      c.rope_local_theta = fl.pos_float_or("rope_theta", 10000.0f);
      if (parse_rope_scaling(loc, src, "rope_parameters.sliding_attention").type != "none")
        fail("{}: field 'rope_parameters.sliding_attention': RoPE scaling on the sliding layers is not supported", src);
    }
  } else {
    c.rope_theta = f.has("rope_theta") ? f.pos_float("rope_theta")
                   : has_params        ? rp.pos_float_or("rope_theta", 10000.0f)
                                       : 10000.0f;
    if (f.has("rope_scaling")) c.rope_scaling = parse_rope_scaling(j["rope_scaling"], src, "rope_scaling");
    else if (has_params) c.rope_scaling = parse_rope_scaling(j["rope_parameters"], src, "rope_parameters");
  }
  if (c.rope_scaling.type == "freq_factors" && int(c.rope_scaling.freq_factors.size()) != c.head_dim / 2)
    fail("{}: rope_scaling.factors has {} factors; head_dim {} needs {}", src, c.rope_scaling.freq_factors.size(),
         c.head_dim, c.head_dim / 2);
  if (f.has("partial_rotary_factor") && f.j["partial_rotary_factor"] != 1.0 && f.j["partial_rotary_factor"] != 1)
    f.bad("partial_rotary_factor", fmt::format("is {}; partial rotary embeddings are not supported",
                                               j["partial_rotary_factor"].dump()));

  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  // Per family: biases, windows, the Gemma constants (transformers' defaults where a key is absent).
  auto gemma = [&](int pattern) {
    // Gemma 2 slides on every other layer from layer 0, Gemma 3 on 5 of every 6 (transformers:
    // layer i slides when (i + 1) % pattern != 0); layer_types, when written, says it per layer.
    c.sliding_window = f.pos_int_or("sliding_window", 4096);
    if (f.has("layer_types")) {
      c.layer_sliding = parse_layer_types(f, c.num_layers);
    } else {
      const int p = f.has("sliding_window_pattern") ? f.pos_int("sliding_window_pattern") : pattern;
      for (int i = 0; i < c.num_layers; ++i) c.layer_sliding.push_back((i + 1) % p != 0);
    }
    c.query_pre_attn_scalar = f.pos_float_or("query_pre_attn_scalar", float(c.head_dim));
    // Gemma 3 has the key but transformers' Gemma 3 attention never applies it (checked on 5.24):
    // nor does sinkq.
    if (f.has("attn_logit_softcapping") && c.arch == Arch::Gemma2) c.attn_softcap = f.pos_float("attn_logit_softcapping");
    if (f.has("final_logit_softcapping")) c.final_softcap = f.pos_float("final_logit_softcapping");
    if (f.boolean_or("attention_bias", false)) f.bad("attention_bias", "is true; Gemma biases are not supported");
  };
  // Qwen2 / Qwen3: a window only with use_sliding_window, on layers i >= max_window_layers.
  auto qwen_window = [&] {
    if (!f.boolean_or("use_sliding_window", false)) return;
    c.sliding_window = f.pos_int_or("sliding_window", 4096);
    if (f.has("layer_types")) {
      c.layer_sliding = parse_layer_types(f, c.num_layers);
      return;
    }
    const int from = f.has("max_window_layers") ? f.to_int("max_window_layers", j["max_window_layers"]) : 28;
    if (from <= 0) return;  // every layer
    for (int i = 0; i < c.num_layers; ++i) c.layer_sliding.push_back(i >= from);
  };
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
      qwen_window();
      break;
    case Arch::Qwen3:
      c.qkv_bias = f.boolean_or("attention_bias", false);
      qwen_window();
      break;
    case Arch::Gemma2: gemma(2); break;
    case Arch::Gemma3: gemma(6); break;
    case Arch::Phi3:
      if (f.has("sliding_window")) c.sliding_window = f.pos_int("sliding_window");
      break;
  }
  if (c.arch != Arch::Gemma3 && c.rope_local_theta > 0)
    fail("{}: per-layer-type RoPE parameters are supported for Gemma 3 only", src);
  if (c.arch == Arch::Gemma3) {
    if (c.rope_local_theta == 0) c.rope_local_theta = f.pos_float_or("rope_local_base_freq", 10000.0f);
    if (!f.has("rope_theta") && !per_type) c.rope_theta = 1000000.0f;  // Gemma3TextConfig's default
  }
  // A layer list that makes every layer alike is the plain form (from_json(to_json()) == *this).
  if (!c.layer_sliding.empty() &&
      std::all_of(c.layer_sliding.begin(), c.layer_sliding.end(), [](uint8_t s) { return s == 1; }))
    c.layer_sliding.clear();
  if (!c.layer_sliding.empty() &&
      std::all_of(c.layer_sliding.begin(), c.layer_sliding.end(), [](uint8_t s) { return s == 0; })) {
    c.layer_sliding.clear();
    c.sliding_window = 0;
  }

  const auto bos = f.ids("bos_token_id", c.vocab_size);
  if (bos.size() > 1) f.bad("bos_token_id", "lists several ids; one is supported");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.eos_token_ids = f.ids("eos_token_id", c.vocab_size);
  c.torch_dtype = f.string_or("torch_dtype", f.string_or("dtype", ""));
  return c;
}

RopeParams ModelConfig::rope_local() const {
  RopeParams p = rope();
  p.theta = rope_local_theta;
  p.scaling = RopeScaling{};
  return p;
}

float ModelConfig::attn_scale() const {
  return float(1.0 / std::sqrt(query_pre_attn_scalar > 0 ? double(query_pre_attn_scalar) : double(head_dim)));
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
  j["model_type"] = family(arch).model_type;
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
    if (rope_scaling.type == "freq_factors") {
      rs.erase("factor");
      json fs = json::array();
      for (float x : rope_scaling.freq_factors) fs.push_back(decimal(x));
      rs["factors"] = fs;
    }
    if (rope_scaling.type == "llama3") {
      rs["low_freq_factor"] = decimal(rope_scaling.low_freq_factor);
      rs["high_freq_factor"] = decimal(rope_scaling.high_freq_factor);
      rs["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    j["rope_scaling"] = rs;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j[spec().act == Activation::Silu ? "hidden_act" : "hidden_activation"] =
      spec().act == Activation::Silu ? "silu" : "gelu_pytorch_tanh";
  auto layer_types = [&] {
    if (layer_sliding.empty()) return;
    json t = json::array();
    for (uint8_t s : layer_sliding) t.push_back(s ? "sliding_attention" : "full_attention");
    j["layer_types"] = t;
  };
  auto qwen_window = [&] {
    j["use_sliding_window"] = sliding_window > 0;
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    j["max_window_layers"] = 0;  // the layers are in layer_types when not all
    layer_types();
  };
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
      qwen_window();
      break;
    case Arch::Qwen3:
      j["attention_bias"] = qkv_bias;
      qwen_window();
      break;
    case Arch::Gemma2:
    case Arch::Gemma3:
      j["sliding_window"] = sliding_window > 0 ? sliding_window : 4096;
      if (sliding_window > 0) {
        layer_types();
        if (layer_sliding.empty()) j["layer_types"] = std::vector<std::string>(size_t(num_layers), "sliding_attention");
      } else {
        j["layer_types"] = std::vector<std::string>(size_t(num_layers), "full_attention");
      }
      j["query_pre_attn_scalar"] = decimal(query_pre_attn_scalar);
      j["attn_logit_softcapping"] = attn_softcap > 0 ? json(decimal(attn_softcap)) : json(nullptr);
      j["final_logit_softcapping"] = final_softcap > 0 ? json(decimal(final_softcap)) : json(nullptr);
      if (arch == Arch::Gemma3) j["rope_local_base_freq"] = decimal(rope_local_theta);
      break;
    case Arch::Phi3:
      j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
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
