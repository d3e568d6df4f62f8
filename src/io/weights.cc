// sinkq/io/weights.cc — the one place where HF tensor names become roles.
//
// Names (HF Llama / Mistral / Qwen2 layout, all three identical apart from biases):
//   model.embed_tokens.weight                      [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight        [hidden]
//   model.layers.{i}.self_attn.q_proj.weight       [heads*head_dim, hidden]   (+ .bias [q_dim])
//   model.layers.{i}.self_attn.{k,v}_proj.weight   [kv_heads*head_dim, hidden] (+ .bias [kv_dim])
//   model.layers.{i}.self_attn.o_proj.weight       [hidden, heads*head_dim]
//   model.layers.{i}.post_attention_layernorm.weight [hidden]
//   model.layers.{i}.mlp.{gate,up}_proj.weight     [inter, hidden]
//   model.layers.{i}.mlp.down_proj.weight          [hidden, inter]
//   model.norm.weight                              [hidden]
//   lm_head.weight                                 [vocab, hidden]  (absent when tied)
// Decisions: with tie_word_embeddings true an lm_head.weight in the files is accepted and ignored
// (HF ties after loading, so the embedding wins there too). `*.rotary_emb.inv_freq` buffers (old
// checkpoints) are ignored. Any other unused tensor is an error: a model of another architecture
// or with biases we would silently drop must not load.
#include "io/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

namespace sinkq {

namespace fs = std::filesystem;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

class Loader {
 public:
  Loader(ModelWeights& w, const std::string& dir) : w_(w), dir_(dir) {}

  // Another pipeline stage's tensors from here on (LayerRange): names and shapes are checked, the
  // data is not read — mat() gives the shape alone (data nullptr), vec() nullptr.
  void skip_data(bool skip) { skip_ = skip; }

  // A matrix in its on-disk dtype, viewed in place (copied only if misaligned for its dtype).
  Mat mat(const std::string& name, int64_t rows, int64_t cols) {
    const TensorInfo& t = take(name);
    check_shape(t, {rows, cols});
    if (skip_) return Mat{t.dtype, rows, cols, nullptr, name};
    Mat m{t.dtype, rows, cols, t.data, name};
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
      std::vector<float> buf((t.nbytes + 3) / 4);  // float storage: aligned for every dtype
      std::memcpy(buf.data(), t.data, t.nbytes);
      m.data = w_.own(std::move(buf));
    }
    return m;
  }

  // Rows [r0, r0 + n) of the matrix `name` [total, cols] (a fused tensor's part), viewed in place.
  Mat rows(const std::string& name, int64_t total, int64_t cols, int64_t r0, int64_t n, std::string as) {
    Mat whole = mat(name, total, cols);
    Mat m{whole.dtype, n, cols, nullptr, std::move(as)};
    if (whole.data) m.data = static_cast<const char*>(whole.data) + size_t(r0 * cols) * dtype_size(whole.dtype);
    return m;
  }

  // A vector widened to fp32 and owned; `offset` added to every element (Gemma's 1 + w norms).
  const float* vec(const std::string& name, int64_t n, float offset = 0.0f) {
    const TensorInfo& t = take(name);
    check_shape(t, {n});
    if (skip_) return nullptr;
    std::vector<uint8_t> raw(t.nbytes);  // aligned copy: the mapping may not be
    std::memcpy(raw.data(), t.data, t.nbytes);
    std::vector<float> out(static_cast<size_t>(n));
    to_f32(t.dtype, raw.data(), out.data(), size_t(n));
    if (offset != 0.0f)
      for (float& v : out) v += offset;
    return w_.own(std::move(out));
  }

  bool has(const std::string& name) const { return w_.store.find(name) != nullptr; }
  void mark_used(const std::string& name) { used_.insert(name); }

  // Everything in the files that no role took.
  void reject_unused(const ModelConfig& cfg) {
    std::vector<std::string> extra;
    for (const TensorInfo* t : w_.store.all()) {
      if (used_.count(t->name) || ends_with(t->name, ".rotary_emb.inv_freq")) continue;
      if (ends_with(t->name, ".o_proj.bias"))
        fail("{}: tensor '{}': o_proj bias is not supported (HF Llama with attention_bias true has "
             "one; sinkq supports q/k/v biases only)", t->file, t->name);
      if (ends_with(t->name, "_proj.bias"))
        fail("{}: tensor '{}': a bias that config {} does not declare (qkv_bias {}); {} biases are "
             "not supported", t->file, t->name, cfg.architecture, cfg.qkv_bias,
             ends_with(t->name, "q_proj.bias") || ends_with(t->name, "k_proj.bias") ||
                     ends_with(t->name, "v_proj.bias")
                 ? "undeclared q/k/v"
                 : "MLP");
      extra.push_back(t->name);
    }
    if (extra.empty()) return;
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 8; ++i) list += fmt::format("{}'{}'", i ? ", " : "", extra[i]);
    if (extra.size() > 8) list += fmt::format(" and {} more", extra.size() - 8);
    fail("{}: {} tensor(s) that a {} model with {} layers does not have: {}", dir_, extra.size(),
         cfg.architecture, cfg.num_layers, list);
  }

 private:
  const TensorInfo& take(const std::string& name) {
    const TensorInfo* t = w_.store.find(name);
    if (!t) fail("missing tensor '{}' in {}", name, dir_);
    used_.insert(name);
    return *t;
  }
  static void check_shape(const TensorInfo& t, const std::vector<int64_t>& want) {
    if (t.shape != want)
      fail("{}: tensor '{}' has shape {}, expected [{}]", t.file, t.name, t.shape_str(),
           fmt::join(want, ", "));
  }

  ModelWeights& w_;
  const std::string& dir_;
  std::set<std::string> used_;
  bool skip_ = false;
};

}  // namespace

ModelWeights ModelWeights::load(const std::string& dir, const ModelConfig& cfg, LayerRange range) {
  range.check(cfg.num_layers);
  const int N = cfg.num_layers;
  ModelWeights w;
  w.store = TensorStore::open_dir(dir);
  Loader ld(w, dir);
  const int64_t hidden = cfg.hidden_size, vocab = cfg.vocab_size;

  ld.skip_data(!range.holds_embed(N, cfg.tie_word_embeddings));
  w.embed = ld.mat("model.embed_tokens.weight", vocab, hidden);
  // Every layer needs 7 tensors or more (2 norms, 5 linears when fused): a layer count the files cannot hold is refused
  // before the per-layer structures are allocated (num_hidden_layers 1e9 asked for ~600 GB first).
  size_t tensors = 0;
  for (const auto& f : w.store.files()) tensors += f->tensors().size();
  SINKQ_CHECK(int64_t(cfg.num_layers) * 7 <= int64_t(tensors),
              "{}: config.json num_hidden_layers {} needs at least {} tensors, the weights hold {}: the config does "
              "not match the weights",
              dir, cfg.num_layers, int64_t(cfg.num_layers) * 7, tensors);
  const LayerSpec& spec = cfg.spec();
  const float offset = spec.norm_offset ? 1.0f : 0.0f;  // Gemma: the engine's norm weight is 1 + w
  w.layers.resize(size_t(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    LayerWeights& L = w.layers[size_t(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    ld.skip_data(!range.holds(i, N));
    for (const LinearRoleInfo& r : kLinearRoles) {
      const std::string name = p + r.hf + ".weight";
      const int64_t out = role_dim(r.out, cfg), in = role_dim(r.in, cfg);
      if (const auto f = fused_part(r, cfg))  // Phi-3: its rows of qkv_proj / gate_up_proj, in place
        L.mat(r.role) = ld.rows(p + f->hf + ".weight", f->rows, in, f->row0, out, name);
      else
        L.mat(r.role) = ld.mat(name, out, in);
    }
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, cfg))
        L.vec(r.role) = ld.vec(hf_vec_name(r, cfg, i), vec_dim(r, cfg), r.kind == VecRoleInfo::Kind::Bias ? 0.0f : offset);
  }
  ld.skip_data(!range.last(N));
  w.final_norm = ld.vec("model.norm.weight", hidden, offset);

  if (cfg.tie_word_embeddings) {
    w.lm_head = w.embed;
    if (ld.has("lm_head.weight")) ld.mark_used("lm_head.weight");  // ignored, as HF does
  } else {
    if (!ld.has("lm_head.weight"))
      fail("{}: config has tie_word_embeddings false but there is no tensor 'lm_head.weight'", dir);
    w.lm_head = ld.mat("lm_head.weight", vocab, hidden);
  }
  ld.reject_unused(cfg);
  return w;
}

bool has_vec(const VecRoleInfo& r, const ModelConfig& c) {
  switch (r.when) {
    case VecRoleInfo::When::Always: return true;
    case VecRoleInfo::When::QkvBias: return c.qkv_bias;
    case VecRoleInfo::When::QkNorm: return c.spec().qk_norm;
    case VecRoleInfo::When::PostNorms: return c.spec().post_norms;
  }
  return false;
}

int64_t vec_dim(const VecRoleInfo& r, const ModelConfig& c) {
  switch (r.dim) {
    case VecRoleInfo::Dim::Hidden: return c.hidden_size;
    case VecRoleInfo::Dim::Q: return c.q_dim();
    case VecRoleInfo::Dim::Kv: return c.kv_dim();
    case VecRoleInfo::Dim::Head: return c.head_dim;
  }
  return 0;
}

std::string hf_vec_name(const VecRoleInfo& r, const ModelConfig& c, int l) {
  return fmt::format("model.layers.{}.{}.{}", l, c.spec().post_norms ? r.hf_post : r.hf,
                     r.kind == VecRoleInfo::Kind::Bias ? "bias" : "weight");
}

std::string gguf_vec_name(const VecRoleInfo& r, int l) {
  return fmt::format("blk.{}.{}.{}", l, r.gguf, r.kind == VecRoleInfo::Kind::Bias ? "bias" : "weight");
}

std::optional<FusedPart> fused_part(const LinearRoleInfo& r, const ModelConfig& c) {
  if (!c.spec().fused_linears) return std::nullopt;
  const int64_t q = c.q_dim(), kv = c.kv_dim(), inter = c.intermediate_size;
  switch (r.role) {
    case LinearRole::Q: return FusedPart{"self_attn.qkv_proj", "attn_qkv", q + 2 * kv, 0};
    case LinearRole::K: return FusedPart{"self_attn.qkv_proj", "attn_qkv", q + 2 * kv, q};
    case LinearRole::V: return FusedPart{"self_attn.qkv_proj", "attn_qkv", q + 2 * kv, q + kv};
    case LinearRole::Gate: return FusedPart{"mlp.gate_up_proj", "ffn_up", 2 * inter, 0};
    case LinearRole::Up: return FusedPart{"mlp.gate_up_proj", "ffn_up", 2 * inter, inter};
    default: return std::nullopt;
  }
}

int64_t role_dim(LinearRoleInfo::Dim d, const ModelConfig& c) {
  switch (d) {
    case LinearRoleInfo::Dim::Hidden: return c.hidden_size;
    case LinearRoleInfo::Dim::Q: return c.q_dim();
    case LinearRoleInfo::Dim::Kv: return c.kv_dim();
    case LinearRoleInfo::Dim::Inter: return c.intermediate_size;
  }
  return 0;
}

const float* ModelWeights::own(std::vector<float> v) {
  owned.push_back(std::move(v));  // deque: earlier elements never move
  return owned.back().data();
}

bool ModelWeights::owns(const void* p) const {
  for (const std::vector<float>& v : owned)
    if (!v.empty() && static_cast<const void*>(v.data()) == p) return true;
  return false;
}

int64_t ModelWeights::parameter_count(const ModelConfig& c) const {
  auto n = [](const Mat& m) { return m.rows * m.cols; };
  int64_t total = n(embed);
  for (const LayerWeights& L : layers) {
    for (int r = 0; r < kNumLinearRoles; ++r) total += n(L.mat(r));
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, c)) total += vec_dim(r, c);
  }
  total += c.hidden_size;            // the final norm (held by a pipeline's last stage only)
  if (!tied()) total += n(lm_head);  // tied: counted once
  return total;
}

int tensor_layer(const std::string& name) {
  int l = -1;
  if (std::sscanf(name.c_str(), "model.layers.%d.", &l) == 1 || std::sscanf(name.c_str(), "blk.%d.", &l) == 1) return l;
  return -1;
}

void LayerRange::check(int layers) const {
  SINKQ_CHECK(begin >= 0 && begin < end_of(layers) && end_of(layers) <= layers,
              "layer range [{}, {}) is not a stage of a model with {} layers", begin, end_of(layers), layers);
}

namespace {
// A model directory's config.json path, after checking the directory (errors name it).
std::string config_json_of(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("model directory '{}' does not exist", dir);
  if (!fs::is_directory(dir, ec)) fail("model path '{}' is neither a directory nor a GGUF file", dir);
  const std::string cfg_path = dir + "/config.json";
  if (!fs::exists(cfg_path, ec)) {
    // A folder of GGUF files (as llama.cpp users keep them): name them, sorted, so the user can pick.
    std::vector<std::string> ggufs;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".gguf") ggufs.push_back(e.path().string());
    std::sort(ggufs.begin(), ggufs.end());
    if (!ggufs.empty())
      fail("model directory '{}' has no config.json; it holds {} GGUF file(s): pass one as -m, e.g. -m {}", dir,
           ggufs.size(), ggufs.front());
    fail("model directory '{}' has no config.json", dir);
  }
  return cfg_path;
}
}  // namespace

ModelConfig model_config_of(const std::string& path) {
  if (GgufFile::looks_like_gguf(path)) return model_config_from_gguf(*GgufFile::open(path));
  return ModelConfig::load(config_json_of(path));
}

ModelFiles ModelFiles::load(const std::string& dir, LayerRange range) {
  if (GgufFile::looks_like_gguf(dir)) return load_gguf(dir, range);
  const std::string cfg_path = config_json_of(dir);
  ModelFiles m;
  m.dir = dir;
  m.config = ModelConfig::load(cfg_path);
  m.weights = ModelWeights::load(dir, m.config, range);
  return m;
}

}  // namespace sinkq
