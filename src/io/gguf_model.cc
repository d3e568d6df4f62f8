// sinkq/io/gguf_model.cc — a GGUF file (llama.cpp's format) as a sinkq model: config from the
// `{arch}.*` metadata, every matrix dequantized to fp32 or held as stored, Q/K rows back in the HF layout.
//
// Decisions:
// - The config goes through ModelConfig::from_json as an HF config.json object built from the
//   metadata, so defaults and validation have one definition; the GGUF keys themselves are read
//   with GgufFile's typed getters, whose errors name the file and the key.
// - "Full precision" for a GGUF model is its dequantized weights in fp32 (what llama.cpp computes
//   with, and what transformers' GGUF loader gives): the model sinkq quantizes further and the
//   reference its KLD is measured against. A Q4_1 file is therefore not the original bf16 model.
// - How the matrices are held (io/weights.h GgufWeights, SINKQ_GGUF_WEIGHTS): by default as the
//   file stores them (mmap'd blocks, DType's ggml block types) and decoded by the kernels where
//   used — in registers for a decode GEMV, rows into a bounded scratch for a prefill — into the
//   reference dequantizer's fp32 values, so the results are the same bits as over the model
//   dequantized at load (f32 / fit) (tests/model/gguf_stored_test.cc,
//   tests/kernels/block_weights_test.cc). A 1.5B Q4_K_M model is then 1.1 GB resident instead of
//   7.1 GB. Quantization and rotation widen the matrices they rewrite.
// - Memory is checked before anything is allocated: the fp32 copy of every tensor must fit in the
//   memory the machine has (MemAvailable) when it is made, else a clear error.
// - llama.cpp's converter permutes the rows of q and k per head so that RoPE pairs are adjacent
//   (rotary dims (2i, 2i+1)); sinkq's RoPE is HF's rotate_half (pairs (i, i + d/2)). Within each
//   head of d rows: GGUF row 2i + j  <->  HF row j·d/2 + i  (i < d/2, j ∈ {0, 1}).
// - Architectures: the family table's GGUF names (io/config.h kFamilies): `llama` (Llama, Mistral,
//   SmolLM2 — llama.cpp writes them all as llama), `qwen2`, `qwen3`, `gemma2`, `gemma3`, `phi3`;
//   tensor names from the layer schema (io/weights.h kLinearRoles, kVecRoles). Llama-3's
//   `rope_freqs.weight` becomes rope_scaling "freq_factors". What the converter does not write is
//   llama.cpp's rule: Gemma's attention scale is head_dim's (hidden / heads for the 27B models),
//   Gemma 3 slides on 5 layers of 6 unless attention.sliding_window_pattern says otherwise.
//   Anything else, partial rotary (rope.dimension_count ≠ head_dim) and unknown tensors are errors
//   naming the key or tensor.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/mmap.h"
#include "io/gguf.h"
#include "core/gguf_quants.h"
#include "io/weights.h"

namespace sinkq {

namespace {

using json = nlohmann::json;

// The family of general.architecture (io/config.h kFamilies; "llama" covers Mistral too).
const Family& gguf_family(const GgufFile& g, const std::string& arch) {
  if (const Family* f = family_of_gguf(arch)) return *f;
  fail("{}: general.architecture '{}' is not supported (supported: llama, qwen2, qwen3, gemma2, gemma3, phi3)",
       g.path(), arch);
}

}  // namespace

ModelConfig model_config_from_gguf(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  const Family& fam = gguf_family(g, arch);
  auto key = [&arch](const char* k) { return arch + "." + k; };
  // A count the model is sized by, named by its GGUF key when it is out of range (before anything
  // is allocated from it: a block_count of 10^9 was a bare "out of memory").
  auto count = [&](const char* k, int64_t hi, const std::string& why) {
    const int64_t v = g.get_int(key(k));
    SINKQ_CHECK(v >= 1 && v <= hi, "{}: {} = {} is out of range 1..{}{}", g.path(), key(k), v, hi, why);
    return v;
  };
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  int64_t layers_in_file = 0;  // blk.N.* tensors: N + 1 at most
  for (const GgufTensor& t : g.tensors()) layers_in_file = std::max<int64_t>(layers_in_file, tensor_layer(t.name) + 1);
  json c;
  c["architectures"] = json::array({fam.architecture});
  c["model_type"] = fam.model_type;
  const int64_t hidden = count("embedding_length", kIntMax, "");
  const int64_t heads = count("attention.head_count", hidden, " (at most embedding_length)");
  c["hidden_size"] = hidden;
  c["intermediate_size"] = count("feed_forward_length", kIntMax, "");
  c["num_hidden_layers"] =
      count("block_count", layers_in_file,
            fmt::format(": the file holds tensors of {} layer{}", layers_in_file, layers_in_file == 1 ? "" : "s"));
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = g.has(key("attention.head_count_kv")) ? count("attention.head_count_kv", heads, " (at most "
                                                                           "attention.head_count)")
                                                                     : heads;
  SINKQ_CHECK(heads > 0 && hidden > 0, "{}: {} = {} and {} = {} must be positive", g.path(),
              key("attention.head_count"), heads, key("embedding_length"), hidden);
  const int64_t head_dim = g.has(key("attention.key_length")) ? g.get_int(key("attention.key_length")) : hidden / heads;
  if (g.has(key("attention.value_length")))
    SINKQ_CHECK(g.get_int(key("attention.value_length")) == head_dim, "{}: {} = {} differs from the key length {}: "
                "not supported", g.path(), key("attention.value_length"), g.get_int(key("attention.value_length")), head_dim);
  if (g.has(key("rope.dimension_count")))
    SINKQ_CHECK(g.get_int(key("rope.dimension_count")) == head_dim, "{}: {} = {} but head_dim is {}: partial "
                "rotary embeddings are not supported", g.path(), key("rope.dimension_count"),
                g.get_int(key("rope.dimension_count")), head_dim);
  c["head_dim"] = head_dim;
  c["max_position_embeddings"] = count("context_length", kIntMax, "");
  c["rms_norm_eps"] = g.get_float(key("attention.layer_norm_rms_epsilon"));
  c["rope_theta"] = g.has(key("rope.freq_base")) ? g.get_float(key("rope.freq_base")) : 10000.0;
  if (g.has(key("rope.scaling.type"))) {
    const std::string t = g.get_string(key("rope.scaling.type"));
    if (t == "linear") {
      c["rope_scaling"] = {{"type", "linear"}, {"factor", g.get_float(key("rope.scaling.factor"))}};
    } else if (t != "none") {
      fail("{}: {} '{}' is not supported (supported: none, linear)", g.path(), key("rope.scaling.type"), t);
    }
  }
  // Llama-3's frequency scaling as llama.cpp's converter writes it: one divisor per frequency.
  if (const GgufTensor* rf = g.find("rope_freqs.weight")) {
    SINKQ_CHECK(rf->ne.size() == 1 && rf->ne[0] == head_dim / 2, "{}: tensor 'rope_freqs.weight' has shape {}, "
                "expected [{}] (head_dim / 2)", g.path(), rf->shape_str(), head_dim / 2);
    SINKQ_CHECK(gguf_can_dequantize(rf->type), "{}: tensor 'rope_freqs.weight' has type {}", g.path(),
                ggml_type_name(rf->type));
    std::vector<float> fs(size_t(head_dim / 2));
    gguf_dequantize(rf->type, rf->data, fs.data(), head_dim / 2, g.path() + ": tensor 'rope_freqs.weight'");
    SINKQ_CHECK(!g.has(key("rope.scaling.type")) || g.get_string(key("rope.scaling.type")) == "none",
                "{}: both rope_freqs.weight and {} are set", g.path(), key("rope.scaling.type"));
    c["rope_scaling"] = {{"rope_type", "freq_factors"}, {"factors", fs}};
  }
  const GgufTensor* emb = g.find("token_embd.weight");
  SINKQ_CHECK(emb != nullptr, "{}: missing tensor 'token_embd.weight'", g.path());
  SINKQ_CHECK(emb->ne.size() == 2, "{}: tensor 'token_embd.weight' has shape {}, expected 2 dimensions", g.path(),
              emb->shape_str());
  c["vocab_size"] = emb->ne[1];
  c["tie_word_embeddings"] = g.find("output.weight") == nullptr;
  if (fam.arch == Arch::Qwen2) c["attention_bias"] = true;
  if (fam.arch == Arch::Qwen3) c["attention_bias"] = g.find("blk.0.attn_q.bias") != nullptr;
  // Windows, soft-caps and the attention scale (llama.cpp's keys). Gemma 2 / 3 slide on the layers
  // transformers' pattern names (llama.cpp hard-codes the same: every other / 5 of 6).
  if (g.has(key("attention.sliding_window"))) c["sliding_window"] = g.get_int(key("attention.sliding_window"));
  else if (fam.arch == Arch::Phi3 || fam.arch == Arch::Mistral) c["sliding_window"] = nullptr;
  if (g.has(key("attn_logit_softcapping"))) c["attn_logit_softcapping"] = g.get_float(key("attn_logit_softcapping"));
  if (g.has(key("final_logit_softcapping"))) c["final_logit_softcapping"] = g.get_float(key("final_logit_softcapping"));
  if (fam.arch == Arch::Gemma2 || fam.arch == Arch::Gemma3) c["hidden_activation"] = "gelu_pytorch_tanh";
  // llama.cpp scales Gemma's queries by 1/sqrt(key_length) unless the file says otherwise: the
  // attention scale is head_dim's (query_pre_attn_scalar = head_dim); a file of a model whose
  // query_pre_attn_scalar differs (Gemma 2 27B) states it in attention.scale.
  if (g.has(key("attention.scale"))) {
    const double sc = g.get_float(key("attention.scale"));
    SINKQ_CHECK(sc > 0, "{}: {} = {} must be positive", g.path(), key("attention.scale"), sc);
    c["query_pre_attn_scalar"] = 1.0 / (sc * sc);
  }
  if (fam.arch == Arch::Gemma3 && g.has(key("rope.freq_base_swa")))
    c["rope_local_base_freq"] = g.get_float(key("rope.freq_base_swa"));
  // llama.cpp's Gemma attention scale: head_dim's, but hidden / heads for the 27B models (which it
  // recognizes by their layer count: Gemma 2 46, Gemma 3 62), whose query_pre_attn_scalar that is.
  if (!g.has(key("attention.scale"))) {
    const int64_t layers = g.get_int(key("block_count"));
    if ((fam.arch == Arch::Gemma2 && layers == 46) || (fam.arch == Arch::Gemma3 && layers == 62))
      c["query_pre_attn_scalar"] = double(hidden / heads);
  }
  // Gemma 3's windowed layers: per layer when the file says (a bool array), else every 6th global.
  if (fam.arch == Arch::Gemma3 && g.has(key("attention.sliding_window_pattern"))) {
    const json& pat = g.metadata().at(key("attention.sliding_window_pattern"));
    if (pat.is_array()) {
      json types = json::array();
      for (const json& e : pat) types.push_back(e.is_boolean() && e.get<bool>() ? "sliding_attention" : "full_attention");
      c["layer_types"] = types;
    } else {
      c["sliding_window_pattern"] = g.get_int(key("attention.sliding_window_pattern"));
    }
  }
  if (g.has("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = g.get_int("tokenizer.ggml.bos_token_id");
  if (g.has("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = g.get_int("tokenizer.ggml.eos_token_id");
  c["torch_dtype"] = "float32";
  return ModelConfig::from_json(c, g.path() + " (GGUF metadata)");
}

namespace {

class GgufLoader {
 public:
  GgufLoader(const GgufFile& g, ModelWeights& w, GgufWeights mode) : g_(g), w_(w), mode_(mode) {}

  // Another pipeline stage's tensors from here on (LayerRange): names, shapes and types are
  // checked, nothing is dequantized — mat() gives the shape alone (data nullptr), vec() nullptr.
  void skip_data(bool skip) { skip_ = skip; }

  // Tensor `name` [rows, cols] (ggml ne = [cols, rows]): fp32 owned by the weights, or (Stored,
  // a ggml block type) a view of the file's own blocks.
  Mat mat(const std::string& name, int64_t rows, int64_t cols, int unpermute_heads = 0) {
    const GgufTensor& t = take(name, {cols, rows});
    const std::optional<DType> dt = dtype_of_ggml(t.type);
    SINKQ_ASSERT(dt.has_value());  // take() checked gguf_can_dequantize: the same set
    if (mode_ == GgufWeights::Stored && dtype_is_block(*dt)) {
      Mat m{*dt, rows, cols, nullptr, name};
      if (skip_) return m;
      m.data = t.data;
      if (unpermute_heads > 0) {
        std::vector<std::byte>& b = w_.owned_bytes.emplace_back(t.data, t.data + t.nbytes);
        unpermute_rows(b.data(), rows, dtype_row_bytes(*dt, cols), unpermute_heads);
        m.data = b.data();
      }
      return m;
    }
    if (skip_) return Mat{DType::F32, rows, cols, nullptr, name};
    std::vector<float> out(size_t(rows * cols));
    gguf_dequantize(t.type, t.data, out.data(), rows * cols, g_.path() + ": tensor '" + name + "'");
    if (unpermute_heads > 0)
      unpermute_rows(reinterpret_cast<std::byte*>(out.data()), rows, size_t(cols) * sizeof(float), unpermute_heads);
    Mat m{DType::F32, rows, cols, nullptr, name};
    m.data = w_.own(std::move(out));
    return m;
  }
  const float* vec(const std::string& name, int64_t n) {
    const GgufTensor& t = take(name, {n});
    if (skip_) return nullptr;
    std::vector<float> out(static_cast<size_t>(n));
    gguf_dequantize(t.type, t.data, out.data(), n, g_.path() + ": tensor '" + name + "'");
    return w_.own(std::move(out));
  }
  // Rows [r0, r0 + n) of the fp32 matrix `name` [total, cols] (a fused tensor's part): a view into
  // the tensor, dequantized once for all its parts.
  Mat rows(const std::string& name, int64_t total, int64_t cols, int64_t r0, int64_t n, std::string as) {
    if (fused_name_ != name) {
      fused_ = mat(name, total, cols);
      fused_name_ = name;
    }
    Mat m{fused_.dtype, n, cols, nullptr, std::move(as)};
    if (fused_.data)
      m.data = static_cast<const std::byte*>(fused_.data) + size_t(r0) * dtype_row_bytes(fused_.dtype, cols);
    return m;
  }
  bool has(const std::string& name) const { return g_.find(name) != nullptr; }
  void reject_unused() const {
    for (const GgufTensor& t : g_.tensors())
      if (!used_.count(t.name))
        fail("{}: tensor '{}' ({}, {}) is not part of a supported {} model", g_.path(), t.name,
             ggml_type_name(t.type), t.shape_str(), g_.get_string("general.architecture"));
  }

 private:
  const GgufTensor& take(const std::string& name, std::vector<int64_t> ne) {
    const GgufTensor* t = g_.find(name);
    if (!t) fail("{}: missing tensor '{}'", g_.path(), name);
    if (t->ne != ne)
      fail("{}: tensor '{}' has shape {} (ggml order), expected [{}]", g_.path(), name, t->shape_str(),
           fmt::format("{}", fmt::join(ne, ", ")));
    if (!gguf_can_dequantize(t->type))
      fail("{}: tensor '{}' has type {}, which sinkq cannot dequantize (supported: F32, F16, BF16, Q8_0, Q4_0, "
           "Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)", g_.path(), name, ggml_type_name(t->type));
    used_.insert(name);
    return *t;
  }
  // llama.cpp's per-head interleave back to rotate_half order (see the file comment), on rows of
  // `row_bytes` bytes (fp32 values or a row's blocks: rows are whole blocks, so they move as bytes).
  static void unpermute_rows(std::byte* m, int64_t rows, size_t row_bytes, int heads) {
    SINKQ_ASSERT(rows % heads == 0 && (rows / heads) % 2 == 0);
    const int64_t d = rows / heads, half = d / 2;
    std::vector<std::byte> head(size_t(d) * row_bytes);
    for (int h = 0; h < heads; ++h) {
      std::byte* base = m + size_t(h) * size_t(d) * row_bytes;
      std::memcpy(head.data(), base, head.size());
      for (int64_t i = 0; i < half; ++i)
        for (int64_t j = 0; j < 2; ++j)
          std::memcpy(base + size_t(j * half + i) * row_bytes, head.data() + size_t(2 * i + j) * row_bytes, row_bytes);
    }
  }

  const GgufFile& g_;
  ModelWeights& w_;
  GgufWeights mode_;
  std::set<std::string> used_;
  bool skip_ = false;
  Mat fused_;  // the last fused tensor rows() dequantized
  std::string fused_name_;
};

}  // namespace

GgufWeights gguf_weights(uint64_t f32_bytes) {
  const char* v = std::getenv("SINKQ_GGUF_WEIGHTS");
  const std::string s = v ? v : "";
  if (s == "f32") return GgufWeights::F32;
  if (s == "stored") return GgufWeights::Stored;
  SINKQ_CHECK(s.empty() || s == "auto" || s == "fit", "SINKQ_GGUF_WEIGHTS='{}' is not one of f32, stored, auto, fit", s);
  if (s != "fit") return GgufWeights::Stored;
  const uint64_t limit = std::max(kGgufF32FitBytes, mem_available_bytes() / 3);
  return f32_bytes <= limit ? GgufWeights::F32 : GgufWeights::Stored;
}

ModelFiles ModelFiles::load_gguf(const std::string& path, LayerRange range) {
  auto g = GgufFile::open(path);
  ModelFiles m;
  m.dir = path;
  m.config = model_config_from_gguf(*g);
  const ModelConfig& cfg = m.config;
  const int N = cfg.num_layers;
  range.check(N);

  // What this stage dequantizes: its layers' blk.N.* tensors and the ends it holds.
  auto held = [&](const std::string& name) {
    if (const int l = tensor_layer(name); l >= 0) return range.holds(l, N);
    if (name == "token_embd.weight") return range.holds_embed(N, cfg.tie_word_embeddings);
    return range.last(N);  // output_norm, output
  };
  uint64_t f32_bytes = 0;
  for (const GgufTensor& t : g->tensors())
    if (held(t.name)) f32_bytes += uint64_t(t.numel()) * 4;
  const GgufWeights mode = gguf_weights(f32_bytes);
  const uint64_t avail = mem_available_bytes();
  SINKQ_CHECK(mode == GgufWeights::Stored || avail == 0 || f32_bytes < avail,
              "{}: the dequantized (fp32) model needs {:.2f} GB but only {:.2f} GB of memory is available "
              "(SINKQ_GGUF_WEIGHTS=stored keeps the file's own blocks)", path, double(f32_bytes) / 1e9,
              double(avail) / 1e9);

  ModelWeights& w = m.weights;
  if (mode == GgufWeights::Stored) w.keep_alive = g;  // Mats point into the mapping
  GgufLoader ld(*g, w, mode);
  const int64_t hidden = cfg.hidden_size, vocab = cfg.vocab_size;
  // llama.cpp permutes q/k rows for the llama architecture only (its rope type "norm"); the others
  // keep the HF order (rope type "neox" = rotate_half). Gemma's norms hold 1 + w already.
  const LayerSpec& spec = cfg.spec();
  const bool permuted = spec.gguf_permuted_qk;
  ld.skip_data(!range.holds_embed(N, cfg.tie_word_embeddings));
  w.embed = ld.mat("token_embd.weight", vocab, hidden);
  w.layers.resize(size_t(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    check_interrupt();  // (core/interrupt.h) a layer's dequantization is a check point
    LayerWeights& L = w.layers[size_t(i)];
    const std::string p = fmt::format("blk.{}.", i);
    ld.skip_data(!range.holds(i, N));
    for (const LinearRoleInfo& r : kLinearRoles) {
      // q / k rows un-permuted per head (llama.cpp's layout to rotate_half's); 0: as stored.
      const int heads = !permuted                    ? 0
                        : r.role == LinearRole::Q ? cfg.num_heads
                        : r.role == LinearRole::K ? cfg.num_kv_heads
                                                  : 0;
      const int64_t out = role_dim(r.out, cfg), in = role_dim(r.in, cfg);
      // Phi-3: llama.cpp keeps the fused attn_qkv ([q; k; v] rows) and ffn_up ([gate; up] rows).
      if (const auto f = fused_part(r, cfg)) {
        L.mat(r.role) = ld.rows(p + f->gguf + ".weight", f->rows, in, f->row0, out, p + r.gguf + ".weight");
        continue;
      }
      L.mat(r.role) = ld.mat(p + r.gguf + ".weight", out, in, heads);
    }
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, cfg)) L.vec(r.role) = ld.vec(gguf_vec_name(r, i), vec_dim(r, cfg));
  }
  ld.skip_data(!range.last(N));
  w.final_norm = ld.vec("output_norm.weight", hidden);
  if (ld.has("rope_freqs.weight")) ld.vec("rope_freqs.weight", cfg.head_dim / 2);  // read into the config
  w.lm_head = cfg.tie_word_embeddings ? w.embed : ld.mat("output.weight", vocab, hidden);
  ld.reject_unused();
  return m;
}

}  // namespace sinkq
