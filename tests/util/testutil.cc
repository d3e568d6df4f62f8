// tests/util/testutil.cc — shared test helpers: paths, temp dirs, tiny random HF models.
#include "testutil.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <stdexcept>

#include "core/error.h"
#include "core/mmap.h"
#include "io/safetensors.h"

namespace sinkq::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string shared_dir() {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::path(SINKQ_SHARED_DIR), ec);
  return ec ? std::string(SINKQ_SHARED_DIR) : p.string();
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = fmt::format("{}/sinkq-test-XXXXXX", base && *base ? base : "/tmp");
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;  // never throw from a destructor; a leftover dir is not a test failure
  fs::remove_all(path_, ec);
}

namespace {

// U(-s, s) from the top 53 bits of the generator: the same numbers on every standard library
// (std::uniform_real_distribution's algorithm is implementation-defined).
float uniform(std::mt19937_64& rng, float s) {
  const double u = double(rng() >> 11) * 0x1.0p-53;  // [0, 1)
  return float(s * (2.0 * u - 1.0));
}

TinyTensor make(DType dt, std::vector<int64_t> shape, std::mt19937_64& rng, float scale, float center) {
  TinyTensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.bytes.resize(size_t(n) * dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) {
    const float v = center + uniform(rng, scale);
    std::byte* p = t.bytes.data() + size_t(i) * dtype_size(dt);
    if (dt == DType::F32) {
      std::memcpy(p, &v, 4);
    } else {
      const uint16_t h = dt == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(p, &h, 2);
    }
  }
  return t;
}

bool writes_qkv_bias(const TinyModelSpec& s) {
  if (s.architecture == "Qwen2ForCausalLM") return true;
  if (s.architecture == "MistralForCausalLM") return false;
  return s.qkv_bias;  // Llama (attention_bias) and unknown architectures
}

const char* torch_dtype(DType d) {
  return d == DType::F32 ? "float32" : d == DType::F16 ? "float16" : "bfloat16";
}

}  // namespace

std::map<std::string, TinyTensor> tiny_model_tensors(const TinyModelSpec& s) {
  // Draw order is structural (embed, layer 0 .. n-1, norm, lm_head), fixed forever: changing it
  // changes every tiny model.
  std::mt19937_64 rng(s.seed);
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.hidden / s.heads;
  const int64_t q = s.heads * hd, kv = s.kv_heads * hd, h = s.hidden, f = s.intermediate;
  const float w = s.init_scale;
  std::map<std::string, TinyTensor> m;
  m["model.embed_tokens.weight"] = make(s.dtype, {s.vocab, h}, rng, w, 0);
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    m[p + "input_layernorm.weight"] = make(s.dtype, {h}, rng, 0.1f, 1);
    m[p + "self_attn.q_proj.weight"] = make(s.dtype, {q, h}, rng, w, 0);
    m[p + "self_attn.k_proj.weight"] = make(s.dtype, {kv, h}, rng, w, 0);
    m[p + "self_attn.v_proj.weight"] = make(s.dtype, {kv, h}, rng, w, 0);
    m[p + "self_attn.o_proj.weight"] = make(s.dtype, {h, q}, rng, w, 0);
    if (writes_qkv_bias(s)) {
      m[p + "self_attn.q_proj.bias"] = make(s.dtype, {q}, rng, w, 0);
      m[p + "self_attn.k_proj.bias"] = make(s.dtype, {kv}, rng, w, 0);
      m[p + "self_attn.v_proj.bias"] = make(s.dtype, {kv}, rng, w, 0);
    }
    m[p + "post_attention_layernorm.weight"] = make(s.dtype, {h}, rng, 0.1f, 1);
    m[p + "mlp.gate_proj.weight"] = make(s.dtype, {f, h}, rng, w, 0);
    m[p + "mlp.up_proj.weight"] = make(s.dtype, {f, h}, rng, w, 0);
    m[p + "mlp.down_proj.weight"] = make(s.dtype, {h, f}, rng, w, 0);
  }
  m["model.norm.weight"] = make(s.dtype, {h}, rng, 0.1f, 1);
  if (!s.tied) m["lm_head.weight"] = make(s.dtype, {s.vocab, h}, rng, w, 0);
  return m;
}

json tiny_model_config(const TinyModelSpec& s) {
  json c;
  c["architectures"] = {s.architecture};
  c["model_type"] = s.architecture == "Qwen2ForCausalLM"     ? "qwen2"
                    : s.architecture == "MistralForCausalLM" ? "mistral"
                                                             : "llama";
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  if (s.head_dim > 0) c["head_dim"] = s.head_dim;
  c["vocab_size"] = s.vocab;
  c["max_position_embeddings"] = s.max_pos;
  c["rms_norm_eps"] = 1e-5;
  c["rope_theta"] = s.rope_theta;
  c["rope_scaling"] = s.rope_scaling;
  c["hidden_act"] = "silu";
  c["tie_word_embeddings"] = s.tied;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  c["torch_dtype"] = torch_dtype(s.dtype);
  const json window = s.sliding_window > 0 ? json(s.sliding_window) : json(nullptr);
  if (s.architecture == "Qwen2ForCausalLM") {
    c["use_sliding_window"] = s.sliding_window > 0;
    c["sliding_window"] = window;
    c["max_window_layers"] = s.sliding_window > 0 ? 0 : s.layers;  // 0: every layer windowed
  } else if (s.architecture == "MistralForCausalLM") {
    c["sliding_window"] = window;  // explicit null: HF's default when absent is 4096
  } else {
    // Llama: attention_bias here means q/k/v biases only (a real HF Llama would also have an
    // o_proj bias); bias tests should prefer Qwen2.
    c["attention_bias"] = s.qkv_bias;
    c["mlp_bias"] = false;
  }
  return c;
}

void write_tiny_model(const std::string& dir, const TinyModelSpec& s) { write_tiny_model(dir, s, nullptr); }

void write_tiny_model(const std::string& dir, const TinyModelSpec& s, const TinyTensorEdit& edit) {
  auto tensors = tiny_model_tensors(s);
  if (edit) edit(tensors);
  write_file_atomic(dir + "/config.json", tiny_model_config(s).dump(2) + "\n");

  std::vector<std::string> names;
  for (const auto& [name, _] : tensors) names.push_back(name);
  if (s.shards < 1 || size_t(s.shards) > names.size())
    fail("write_tiny_model: shards = {} must be in [1, {}]", s.shards, names.size());
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  json weight_map = json::object();
  uint64_t total = 0;
  for (int k = 0; k < s.shards; ++k) {  // contiguous name ranges, as HF's sharding does
    const size_t lo = names.size() * size_t(k) / size_t(s.shards);
    const size_t hi = names.size() * size_t(k + 1) / size_t(s.shards);
    const std::string file = s.shards == 1 ? "model.safetensors"
                                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, s.shards);
    std::vector<TensorToWrite> out;
    for (size_t i = lo; i < hi; ++i) {
      const TinyTensor& t = tensors.at(names[i]);
      out.push_back({names[i], t.dtype, t.shape, t.bytes});
      weight_map[names[i]] = file;
      total += t.bytes.size();
    }
    write_safetensors(dir + "/" + file, out, meta);
  }
  if (s.shards > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  }

  if (s.link_tokenizer) {
    const std::string src = shared_dir() + "/models/stories260K";
    for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) {
      if (!fs::exists(src + "/" + f)) fail("write_tiny_model: '{}/{}' is missing", src, f);
      std::error_code ec;
      fs::remove(dir + "/" + f, ec);  // rewriting a model dir in place replaces the links
      fs::create_symlink(src + "/" + f, dir + "/" + f);
    }
  }
}

std::string xml_wellformedness_error(std::string_view d) {
  size_t i = 0;
  const auto err = [&](std::string_view what) { return fmt::format("{} at byte {}", what, i); };
  const auto is_name = [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == ':' || c == '.'; };
  // Checks the character data d[a, b): no '<', entities well formed.
  const auto check_text = [&](size_t a, size_t b) -> std::string {
    for (size_t k = a; k < b; ++k) {
      if (d[k] == '<') return fmt::format("'<' in text at byte {}", k);
      if (d[k] != '&') continue;
      const size_t semi = d.find(';', k);
      if (semi == std::string_view::npos || semi > b) return fmt::format("unterminated entity at byte {}", k);
      const std::string_view ent = d.substr(k + 1, semi - k - 1);
      const bool numeric = ent.size() > 1 && ent[0] == '#';
      if (!numeric && ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos")
        return fmt::format("unknown entity '&{};' at byte {}", ent, k);
      k = semi;
    }
    return "";
  };
  std::vector<std::string> open;
  int roots = 0;
  while (i < d.size()) {
    const size_t lt = d.find('<', i);
    const size_t text_end = lt == std::string_view::npos ? d.size() : lt;
    if (open.empty()) {
      for (size_t k = i; k < text_end; ++k)
        if (!std::isspace(uint8_t(d[k]))) return fmt::format("text outside the root element at byte {}", k);
    } else if (std::string e = check_text(i, text_end); !e.empty()) {
      return e;
    }
    if (lt == std::string_view::npos) break;
    i = lt;
    if (d.substr(i, 2) == "<?" || d.substr(i, 4) == "<!--") {
      const std::string_view end = d[i + 1] == '?' ? "?>" : "-->";
      const size_t e = d.find(end, i);
      if (e == std::string_view::npos) return err("unterminated declaration or comment");
      i = e + end.size();
      continue;
    }
    if (d.substr(i, 2) == "</") {
      size_t k = i + 2;
      while (k < d.size() && is_name(d[k])) ++k;
      const std::string name(d.substr(i + 2, k - i - 2));
      if (k >= d.size() || d[k] != '>') return err("malformed end tag");
      if (open.empty() || open.back() != name) return err(fmt::format("end tag </{}> does not match", name));
      open.pop_back();
      i = k + 1;
      continue;
    }
    size_t k = i + 1;
    while (k < d.size() && is_name(d[k])) ++k;
    const std::string name(d.substr(i + 1, k - i - 1));
    if (name.empty()) return err("'<' without a tag name");
    std::set<std::string> attrs;
    while (true) {
      const size_t ws = k;
      while (k < d.size() && std::isspace(uint8_t(d[k]))) ++k;
      if (k >= d.size()) return err(fmt::format("unterminated tag <{}>", name));
      if (d[k] == '>' || d.substr(k, 2) == "/>") break;
      if (k == ws) return err(fmt::format("no space before an attribute of <{}>", name));
      const size_t a = k;
      while (k < d.size() && is_name(d[k])) ++k;
      const std::string attr(d.substr(a, k - a));
      if (attr.empty() || k >= d.size() || d[k] != '=') return err(fmt::format("malformed attribute in <{}>", name));
      if (!attrs.insert(attr).second) return err(fmt::format("duplicate attribute '{}' in <{}>", attr, name));
      ++k;
      if (k >= d.size() || (d[k] != '"' && d[k] != '\'')) return err(fmt::format("unquoted value of '{}'", attr));
      const size_t close = d.find(d[k], k + 1);
      if (close == std::string_view::npos) return err(fmt::format("unterminated value of '{}'", attr));
      if (std::string e = check_text(k + 1, close); !e.empty()) return e;
      k = close + 1;
    }
    const bool empty_elem = d[k] == '/';
    if (open.empty()) ++roots;
    if (roots > 1) return err("more than one root element");
    if (!empty_elem) open.push_back(name);
    i = k + (empty_elem ? 2 : 1);
  }
  if (!open.empty()) return fmt::format("<{}> is never closed", open.back());
  if (roots != 1) return "no root element";
  return "";
}

std::string raw_safetensors(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);  // little-endian hosts only (as the reader)
  out.append(header);
  out.append(data);
  return out;
}

}  // namespace sinkq::testing
