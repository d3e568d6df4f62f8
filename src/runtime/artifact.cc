// sinkq/runtime/artifact.cc — writer (temp directory + rename) and validating loader.
#include "runtime/artifact.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/mmap.h"
#include "io/config.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "quant/rotate.h"

#ifndef SINKQ_VERSION
#define SINKQ_VERSION "unknown"
#endif

namespace sinkq::runtime {

namespace fs = std::filesystem;
using json = nlohmann::json;
using lowbit::PackedFormat;
using lowbit::PackedTensor;

namespace {

constexpr const char* kRecipe = "sinkq_recipe.json";
constexpr const char* kTensors = "model.safetensors";
constexpr const char* kConfig = "config.json";
// Tokenizer (and generation) files copied from the source directory when present.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",   "tokenizer.model",        "tokenizer_config.json",
                                           "special_tokens_map.json", "generation_config.json", "added_tokens.json",
                                           "vocab.json",       "merges.txt"};

std::string layer_prefix(int l) { return fmt::format("model.layers.{}.", l); }


// Removes every "seconds" / "*_seconds" key (wall-clock times) so that the recipe is deterministic.
void strip_times(json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      const std::string& k = it.key();
      if (k == "seconds" || (k.size() > 8 && k.compare(k.size() - 8, 8, "_seconds") == 0))
        it = j.erase(it);
      else
        ++it;
    }
    for (auto& [k, v] : j.items()) strip_times(v);
  } else if (j.is_array()) {
    for (json& v : j) strip_times(v);
  }
}

std::string dtype_str(const TensorToWrite& t) {
  return t.raw_dtype.empty() ? std::string(dtype_name(t.dtype)) : t.raw_dtype;
}

// Tensors to write plus the storage of the bytes they point to.
struct TensorList {
  std::vector<TensorToWrite> tensors;
  std::deque<std::vector<std::byte>> storage;

  void add_view(std::string name, DType dt, std::vector<int64_t> shape, const void* data, size_t n,
                std::string raw = "") {
    tensors.push_back({std::move(name), dt, std::move(shape),
                       std::span<const std::byte>(static_cast<const std::byte*>(data), n), std::move(raw)});
  }
  template <class T>
  void add_copy(std::string name, DType dt, std::vector<int64_t> shape, const std::vector<T>& v, std::string raw = "") {
    auto& b = storage.emplace_back(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    add_view(std::move(name), dt, std::move(shape), b.data(), b.size(), std::move(raw));
  }
};

void add_packed(TensorList& tl, const std::string& base, const PackedTensor& p) {
  const lowbit::FormatTraits& t = p.info();
  tl.add_copy(base + ".codes", DType::F32, {p.rows, lowbit::row_bytes(t, p.cols)}, p.codes, "U8");
  tl.add_copy(base + ".scales", DType::F32, {p.rows, p.groups()}, p.scales);
  if (!t.symmetric) tl.add_copy(base + ".zeros", DType::F32, {p.rows, p.groups()}, p.zeros, "U8");
}

void write_json_file(const std::string& path, const json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

}  // namespace

std::string fnv1a64_file(const std::string& path) {
  const std::string s = read_file(path);
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

bool is_artifact(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kRecipe, ec);
}

ArtifactInfo write_artifact(const QuantizedModel& qm, const std::string& model_dir, const std::string& out_dir,
                            const WriteOptions& opt) {
  SINKQ_ASSERT(qm.model != nullptr);
  std::error_code ec;
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.has_filename() == false) out = out.parent_path();  // "dir/" -> "dir"
  SINKQ_CHECK(!out.empty(), "artifact output directory is empty");
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  SINKQ_CHECK(fs::is_directory(parent, ec), "cannot write artifact '{}': its parent directory '{}' does not exist",
              out.string(), parent.string());
  const bool exists = fs::exists(fs::symlink_status(out, ec));
  SINKQ_CHECK(!exists || opt.force, "'{}' already exists: refusing to overwrite it (use --force to replace it)",
              out.string());

  // The source (a model directory or a GGUF file): its config must be the model's.
  std::shared_ptr<GgufFile> gguf;
  if (GgufFile::looks_like_gguf(model_dir)) gguf = GgufFile::open(model_dir);
  const std::string src_config = gguf ? model_dir : model_dir + "/" + kConfig;
  const ModelConfig mc = gguf ? model_config_from_gguf(*gguf) : ModelConfig::load(src_config);
  SINKQ_CHECK(mc == qm.model->config(),
              "'{}' is not the source of this quantized model: its config describes another model", model_dir);

  // ---- tensors -------------------------------------------------------------------------------
  const ModelWeights& w = qm.model->weights();
  TensorList tl;
  json meta_linears = json::object();
  auto add_mat = [&](const std::string& name, const Mat& m) {
    tl.add_view(name, m.dtype, {m.rows, m.cols}, m.data, size_t(m.rows * m.cols) * dtype_size(m.dtype));
  };
  auto add_vec = [&](const std::string& name, const float* v, int64_t n) {
    tl.add_view(name, DType::F32, {n}, v, size_t(n) * sizeof(float));
  };
  const bool tied = w.lm_head.data == w.embed.data;
  add_mat("model.embed_tokens.weight", w.embed);
  if (!tied) add_mat("lm_head.weight", w.lm_head);
  add_vec("model.norm.weight", w.final_norm, mc.hidden_size);
  for (int l = 0; l < mc.num_layers; ++l) {
    const LayerWeights& lw = w.layers[size_t(l)];
    const std::string p = layer_prefix(l);
    add_vec(p + "input_layernorm.weight", lw.attn_norm, mc.hidden_size);
    add_vec(p + "post_attention_layernorm.weight", lw.mlp_norm, mc.hidden_size);
    if (lw.bq) add_vec(p + "self_attn.q_proj.bias", lw.bq, mc.q_dim());
    if (lw.bk) add_vec(p + "self_attn.k_proj.bias", lw.bk, mc.kv_dim());
    if (lw.bv) add_vec(p + "self_attn.v_proj.bias", lw.bv, mc.kv_dim());
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const auto* pl = dynamic_cast<const PackedLinear*>(lw.impl_of(i).get());
      SINKQ_CHECK(pl != nullptr, "write_artifact: layer {} {} is not a packed linear", l, kLinearRoles[i].hf);
      const std::string base = p + kLinearRoles[i].hf;
      json blocks = json::array();
      for (size_t b = 0; b < pl->blocks().size(); ++b) {
        const PackedTensor pt = pl->planar(b);
        add_packed(tl, b == 0 ? base : base + ".tail", pt);
        blocks.push_back({pl->blocks()[b].col0, pl->blocks()[b].cols, int(pt.format)});
      }
      meta_linears[base] = json{{"shape", {pl->rows(), pl->cols()}}, {"blocks", blocks}};
    }
  }
  for (const StaticActScale& e : qm.rt.a.scales)
    tl.add_copy(fmt::format("{}{}.act_scale", layer_prefix(e.layer), site_name(e.site)), DType::F32, {1},
                std::vector<float>{e.params.scale.at(0)});
  json kv_json = nullptr;
  if (qm.kv) {
    const KvScheme& ks = *qm.kv;
    kv_json = {{"bits", ks.bits},
               {"mode", std::string(quant::kv_mode_name(ks.mode))},
               {"granularity", std::string(quant::kv_granularity_name(ks.granularity))},
               {"symmetric", ks.symmetric},
               {"describe", ks.describe()},
               {"static", nullptr}};
    for (const quant::StaticQuant& q : ks.statics) {
      const quant::Params& p = q.params;
      if (kv_json["static"].is_null())
        kv_json["static"] = {{"granularity", std::string(quant::granularity_name(p.granularity))},
                             {"head_dim", q.spec.head_dim},
                             {"prow", p.prow},
                             {"pcol", p.pcol},
                             {"col_block", p.col_block}};
      const std::string base = fmt::format("{}{}", layer_prefix(q.layer), site_name(q.site));
      tl.add_copy(base + ".kv_scale", DType::F32, {int64_t(p.scale.size())}, p.scale);
      if (!p.symmetric) tl.add_copy(base + ".kv_zero", DType::F32, {int64_t(p.zero.size())}, p.zero, "I32");
      tl.add_copy(base + ".kv_clip", DType::F32, {1}, std::vector<float>{q.spec.clip_ratio});
    }
  }
  json prefix_json = nullptr;
  if (qm.prefix) {
    const KvPrefix& pf = *qm.prefix;
    const int64_t P = pf.size(), KV = pf.kv_dim();
    std::vector<float> k, v;
    for (int l = 0; l < pf.num_layers(); ++l) {
      const KvSegment s = pf.segment(l);
      k.insert(k.end(), s.k, s.k + P * KV);
      v.insert(v.end(), s.v, s.v + P * KV);
    }
    tl.add_copy("sinkq.prefix.tokens", DType::F32, {P}, pf.tokens(), "I32");
    tl.add_copy("sinkq.prefix.k", DType::F32, {int64_t(pf.num_layers()), P, KV}, k);
    tl.add_copy("sinkq.prefix.v", DType::F32, {int64_t(pf.num_layers()), P, KV}, v);
    prefix_json = {{"tokens", pf.tokens()},
                   {"size", P},
                   {"source", std::string(quant::prefix_source_name(qm.cfg.prefix.source))},
                   {"spec", qm.cfg.prefix.spec}};
  }

  std::map<std::string, std::string> meta{{"format", "sinkq-artifact"},
                                          {"format_version", std::to_string(kArtifactFormatVersion)}};
  for (const auto& [name, j] : meta_linears.items()) meta[name] = j.dump();

  // ---- recipe --------------------------------------------------------------------------------
  json inventory = json::object();
  for (const TensorToWrite& t : tl.tensors) inventory[t.name] = {{"dtype", dtype_str(t)}, {"shape", t.shape}};
  json sim = qm.recipe;
  strip_times(sim);
  const json recipe{
      {"format", "sinkq-artifact"},
      {"format_version", kArtifactFormatVersion},
      {"sinkq_version", SINKQ_VERSION},
      {"source", {{"model_dir", model_dir}, {"config_fnv1a64", fnv1a64_file(src_config)}}},
      {"runtime",
       {{"describe", qm.rt.describe()},
        {"weights", {{"bits", qm.rt.w.bits}, {"group", qm.rt.w.group}, {"symmetric", qm.rt.w.symmetric}}},
        {"activations",
         {{"bits", qm.rt.a.bits},
          {"mode", qm.rt.a.mode == ActMode::Static ? "static" : "dynamic"},
          {"symmetric", qm.rt.a.symmetric}}},
        {"kv", kv_json}}},
      {"rotation", {{"on", qm.cfg.rotate.on}, {"seed", qm.cfg.rotate.seed}}},
      {"prefix", prefix_json},
      {"lm_head_tied", tied},
      {"fp_dtype", std::string(dtype_name(w.embed.dtype))},
      {"preset", qm.cfg.preset},
      {"sim", sim},
      {"tensors", inventory}};

  // ---- files, into a temp directory, then one rename ----------------------------------------
  const fs::path tmp = fs::path(out.string() + fmt::format(".tmp-{}", ::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  SINKQ_CHECK(!ec, "cannot create the temporary artifact directory '{}': {}", tmp.string(), ec.message());
  ArtifactInfo info;
  info.dir = out.string();
  try {
    auto file = [&](const std::string& name) {
      if (opt.before_file) opt.before_file(name);
      return (tmp / name).string();
    };
    write_safetensors(file(kTensors), tl.tensors, meta);
    write_file_atomic(file(kConfig), gguf ? mc.to_json().dump(2) + "\n" : read_file(src_config));
    write_json_file(file(kRecipe), recipe);
    if (gguf) {
      // A GGUF source carries its tokenizer in its metadata: the artifact keeps those keys in a
      // tensor-less GGUF file, which Tokenizer::load reads like the source's.
      write_file_atomic(file("tokenizer.gguf"), gguf_metadata_file(*gguf, [](const std::string& k) {
                          return k.rfind("tokenizer.", 0) == 0;
                        }));
    } else {
      for (const char* f : kTokenizerFiles) {
        const std::string src = model_dir + "/" + f;
        if (fs::exists(src, ec)) write_file_atomic(file(f), read_file(src));
      }
    }
    for (const auto& e : fs::directory_iterator(tmp)) {
      info.files.emplace_back(e.path().filename().string(), uint64_t(e.file_size()));
      info.total_bytes += info.files.back().second;
    }
    std::sort(info.files.begin(), info.files.end());
    if (exists) {
      // Replace: old away, new in, old deleted. A failure between the renames puts the old back.
      const fs::path old = fs::path(out.string() + fmt::format(".old-{}", ::getpid()));
      fs::remove_all(old, ec);
      fs::rename(out, old, ec);
      SINKQ_CHECK(!ec, "cannot move the existing '{}' aside: {}", out.string(), ec.message());
      fs::rename(tmp, out, ec);
      if (ec) {
        std::error_code ec2;
        fs::rename(old, out, ec2);
        fail("cannot rename '{}' to '{}': {}", tmp.string(), out.string(), ec.message());
      }
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, out, ec);
      SINKQ_CHECK(!ec, "cannot rename '{}' to '{}': {}", tmp.string(), out.string(), ec.message());
    }
  } catch (...) {
    std::error_code ec2;
    fs::remove_all(tmp, ec2);
    throw;
  }
  return info;
}

// ---------------------------------------------------------------------------------------------
// Loader

namespace {

struct Loader {
  std::string dir, recipe_path, tensors_path;
  json recipe;
  TensorStore store;

  [[noreturn]] void bad_field(const std::string& field, const std::string& what) const {
    fail("{}: field '{}': {}", recipe_path, field, what);
  }
  const json& field(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) bad_field(path.empty() ? key : path + "." + key, "missing");
    return obj.at(key);
  }
  int64_t get_int(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_number_integer()) bad_field(path + "." + key, "must be an integer, got " + v.dump());
    return v.get<int64_t>();
  }
  bool get_bool(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_boolean()) bad_field(path + "." + key, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string get_str(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_string()) bad_field(path + "." + key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }

  const TensorInfo& tensor(const std::string& name, const char* dtype, std::vector<int64_t> shape) const {
    const TensorInfo* t = store.find(name);
    SINKQ_CHECK(t != nullptr, "{}: missing tensor '{}'", tensors_path, name);
    const std::string have = t->raw_dtype.empty() ? std::string(dtype_name(t->dtype)) : t->raw_dtype;
    SINKQ_CHECK(std::string(dtype) == have || (std::string(dtype) == "float" && t->raw_dtype.empty()),
                "{}: tensor '{}' has dtype {}, expected {}", tensors_path, name, have, dtype);
    SINKQ_CHECK(t->shape == shape, "{}: tensor '{}' has shape {}, expected [{}]", tensors_path, name, t->shape_str(),
                fmt::join(shape, ", "));
    return *t;
  }
  // An F32 vector: in place when aligned, else copied into w.owned.
  const float* f32(ModelWeights& w, const std::string& name, int64_t n) const {
    const TensorInfo& t = tensor(name, "F32", {n});
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) return reinterpret_cast<const float*>(t.data);
    std::vector<float> v(static_cast<size_t>(n));
    std::memcpy(v.data(), t.data, t.nbytes);
    return w.own(std::move(v));
  }
  Mat mat(ModelWeights& w, const std::string& name, int64_t rows, int64_t cols) const {
    const TensorInfo& t = tensor(name, "float", {rows, cols});
    Mat m{t.dtype, rows, cols, t.data, name};
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
      std::vector<float> v((t.nbytes + 3) / 4);
      std::memcpy(v.data(), t.data, t.nbytes);
      m.data = w.own(std::move(v));
    }
    return m;
  }
  template <class T>
  std::vector<T> copy(const TensorInfo& t) const {
    std::vector<T> v(t.nbytes / sizeof(T));
    if (t.nbytes) std::memcpy(v.data(), t.data, t.nbytes);
    return v;
  }
};


}  // namespace

QuantizedModel load_artifact(const std::string& dir) {
  Loader L;
  L.dir = dir;
  L.recipe_path = dir + "/" + kRecipe;
  L.tensors_path = dir + "/" + kTensors;
  std::error_code ec;
  SINKQ_CHECK(fs::is_directory(dir, ec), "artifact directory '{}' does not exist", dir);
  SINKQ_CHECK(is_artifact(dir), "'{}' is not a sinkq artifact: it has no {}", dir, kRecipe);
  try {
    L.recipe = json::parse(read_file(L.recipe_path));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", L.recipe_path, e.what());
  }
  const json& r = L.recipe;
  SINKQ_CHECK(r.is_object(), "{}: must be a JSON object", L.recipe_path);
  if (L.get_str(r, "", "format") != "sinkq-artifact") L.bad_field("format", "expected \"sinkq-artifact\"");
  const int64_t version = L.get_int(r, "", "format_version");
  if (version != kArtifactFormatVersion)
    L.bad_field("format_version", fmt::format("{} is not supported (this sinkq reads version {})", version,
                                              kArtifactFormatVersion));
  const ModelConfig mc = ModelConfig::load(dir + "/" + kConfig);

  QuantizedModel qm;
  qm.recipe = r.contains("sim") ? r.at("sim") : json(nullptr);
  // Runtime configuration.
  const json& rt = L.field(r, "", "runtime");
  const json& rw = L.field(rt, "runtime", "weights");
  const json& ra = L.field(rt, "runtime", "activations");
  qm.rt.w.bits = int(L.get_int(rw, "runtime.weights", "bits"));
  qm.rt.w.group = int(L.get_int(rw, "runtime.weights", "group"));
  qm.rt.w.symmetric = L.get_bool(rw, "runtime.weights", "symmetric");
  qm.rt.a.bits = int(L.get_int(ra, "runtime.activations", "bits"));
  qm.rt.a.symmetric = L.get_bool(ra, "runtime.activations", "symmetric");
  const std::string mode = L.get_str(ra, "runtime.activations", "mode");
  if (mode != "static" && mode != "dynamic")
    L.bad_field("runtime.activations.mode", fmt::format("'{}' is neither static nor dynamic", mode));
  qm.rt.a.mode = mode == "static" ? ActMode::Static : ActMode::Dynamic;
  const json& rot = L.field(r, "", "rotation");
  qm.cfg.rotate.on = L.get_bool(rot, "rotation", "on");
  {
    const json& s = L.field(rot, "rotation", "seed");
    if (!s.is_number_unsigned() && !(s.is_number_integer() && s.get<int64_t>() >= 0))
      L.bad_field("rotation.seed", "must be a non-negative integer, got " + s.dump());
    qm.cfg.rotate.seed = s.get<uint64_t>();
  }
  const bool tied = L.get_bool(r, "", "lm_head_tied");
  if (r.contains("preset") && r.at("preset").is_string()) qm.cfg.preset = r.at("preset").get<std::string>();
  qm.cfg.w.bits = qm.rt.w.bits;
  qm.cfg.w.group = qm.rt.w.group;
  qm.cfg.w.symmetric = qm.rt.w.symmetric;
  qm.cfg.a.bits = qm.rt.a.bits;
  qm.cfg.a.symmetric = qm.rt.a.symmetric;
  qm.cfg.a.mode = qm.rt.a.mode == ActMode::Static ? quant::ActMode::Static : quant::ActMode::Dynamic;
  try {
    qm.rt.w.clip = 1.0f;
    RuntimeConfig check = qm.rt;
    if (check.a.mode == ActMode::Static) check.a.scales.resize(1);
    check.validate();
  } catch (const Error& e) {
    fail("{}: field 'runtime': {}", L.recipe_path, e.what());
  }

  // Tensors.
  L.store = TensorStore::open_files({L.tensors_path}, /*allow_raw=*/true);
  const SafetensorsFile& sf = *L.store.files().at(0);
  const auto meta_it = sf.metadata().find("format");
  SINKQ_CHECK(meta_it != sf.metadata().end() && meta_it->second == "sinkq-artifact",
              "{}: __metadata__ lacks \"format\": \"sinkq-artifact\"", L.tensors_path);
  std::set<std::string> expected;
  auto want = [&](const std::string& n) -> const std::string& { return *expected.insert(n).first; };

  ModelWeights w;
  const int64_t H = mc.hidden_size;
  w.embed = L.mat(w, want("model.embed_tokens.weight"), mc.vocab_size, H);
  w.lm_head = tied ? w.embed : L.mat(w, want("lm_head.weight"), mc.vocab_size, H);
  w.final_norm = L.f32(w, want("model.norm.weight"), H);
  const lowbit::PackedFormat act = activation_format([&] {
    ActScheme a = qm.rt.a;
    if (a.mode == ActMode::Static) a.scales.resize(1);
    return a;
  }());
  // The width of each linear input (the in-dimension of the roles it feeds).
  int64_t input_width[4] = {};
  for (const LinearRoleInfo& r : kLinearRoles) input_width[r.input] = role_dim(r.in, mc);
  for (int l = 0; l < mc.num_layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerWeights lw;
    lw.attn_norm = L.f32(w, want(p + "input_layernorm.weight"), H);
    lw.mlp_norm = L.f32(w, want(p + "post_attention_layernorm.weight"), H);
    if (mc.qkv_bias) {
      lw.bq = L.f32(w, want(p + "self_attn.q_proj.bias"), mc.q_dim());
      lw.bk = L.f32(w, want(p + "self_attn.k_proj.bias"), mc.kv_dim());
      lw.bv = L.f32(w, want(p + "self_attn.v_proj.bias"), mc.kv_dim());
    }
    quant::Params statics[4];
    if (qm.rt.a.mode == ActMode::Static) {
      for (int s = 0; s < 4; ++s) {
        const std::string n = fmt::format("{}{}.act_scale", p, site_name(kLinearInputSites[s]));
        const TensorInfo& t = L.tensor(want(n), "F32", {1});
        float v = 0.0f;
        std::memcpy(&v, t.data, 4);
        quant::Params& q = statics[s];
        q.granularity = quant::Granularity::PerTensor;
        q.bits = qm.rt.a.bits;
        q.symmetric = true;
        q.prow = q.pcol = 1;
        q.col_block = input_width[s];
        q.scale = {v};
        qm.rt.a.scales.push_back({l, kLinearInputSites[s], q});
      }
    }
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const std::string base = p + kLinearRoles[i].hf;
      const int64_t rows = role_dim(kLinearRoles[i].out, mc), cols = role_dim(kLinearRoles[i].in, mc);
      lw.mat(i) = Mat{DType::F32, rows, cols, nullptr, base + ".weight"};
      const auto mit = sf.metadata().find(base);
      SINKQ_CHECK(mit != sf.metadata().end(), "{}: __metadata__ has no entry for the packed linear '{}'",
                  L.tensors_path, base);
      json m;
      try {
        m = json::parse(mit->second);
      } catch (const json::exception& e) {
        fail("{}: __metadata__ '{}' is not valid JSON: {}", L.tensors_path, base, e.what());
      }
      auto bad_meta = [&](const std::string& what) { fail("{}: __metadata__ '{}': {}", L.tensors_path, base, what); };
      if (!m.is_object() || !m.contains("shape") || !m.contains("blocks") || !m["blocks"].is_array())
        bad_meta("expected {\"shape\": [rows, cols], \"blocks\": [[col0, cols, format], ...]}");
      if (m["shape"] != json{rows, cols})
        bad_meta(fmt::format("shape {} does not match the config's [{}, {}]", m["shape"].dump(), rows, cols));
      const WeightScheme ws{qm.rt.w.bits, qm.rt.w.group, qm.rt.w.symmetric, 1.0f};
      const std::vector<WeightBlock> layout = weight_blocks(ws, cols, base);
      if (m["blocks"].size() != layout.size())
        bad_meta(fmt::format("{} blocks, the recipe's weights ({}) give {}", m["blocks"].size(), qm.rt.describe(),
                             layout.size()));
      std::vector<PackedLinear::PlanarBlock> blocks;
      for (size_t b = 0; b < layout.size(); ++b) {
        const json& e = m["blocks"][b];
        if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
            !e[2].is_number_integer())
          bad_meta(fmt::format("block {} must be [col0, cols, format], got {}", b, e.dump()));
        const int64_t fid = e[2].get<int64_t>();
        const lowbit::FormatTraits* ft = nullptr;
        for (const lowbit::FormatTraits& t : lowbit::kFormats)
          if (int64_t(t.format) == fid) ft = &t;
        if (!ft) bad_meta(fmt::format("block {}: unknown packed format value {}", b, fid));
        if (e[0].get<int64_t>() != layout[b].col0 || e[1].get<int64_t>() != layout[b].cols ||
            ft->format != layout[b].format)
          bad_meta(fmt::format("block {} [{}, {}, {} ({})] does not match the recipe's weights ({}): expected "
                               "[{}, {}, {} ({})]", b, e[0].get<int64_t>(), e[1].get<int64_t>(), fid, ft->name,
                               qm.rt.describe(), layout[b].col0, layout[b].cols, int(layout[b].format),
                               lowbit::traits(layout[b].format).name));
        const std::string tb = b == 0 ? base : base + ".tail";
        PackedTensor pt;
        pt.format = ft->format;
        pt.rows = rows;
        pt.cols = layout[b].cols;
        pt.codes = L.copy<uint8_t>(L.tensor(want(tb + ".codes"), "U8", {rows, lowbit::row_bytes(*ft, pt.cols)}));
        pt.scales = L.copy<float>(L.tensor(want(tb + ".scales"), "F32", {rows, pt.groups()}));
        for (size_t k = 0; k < pt.scales.size(); ++k)
          SINKQ_CHECK(pt.scales[k] >= FLT_MIN && pt.scales[k] <= FLT_MAX,
                      "{}: tensor '{}.scales': entry {} = {} is not a positive normal fp32 scale", L.tensors_path, tb,
                      k, pt.scales[k]);
        if (!ft->symmetric) pt.zeros = L.copy<uint8_t>(L.tensor(want(tb + ".zeros"), "U8", {rows, pt.groups()}));
        blocks.push_back({layout[b].col0, std::move(pt)});
      }
      try {
        lw.impl_of(i) = std::make_shared<const PackedLinear>(
            base + ".weight", rows, cols, std::move(blocks), act,
            qm.rt.a.mode == ActMode::Static ? statics[kLinearRoles[i].input] : quant::Params{});
      } catch (const Error& e) {
        fail("{}: {}", L.tensors_path, e.what());
      }
    }
    w.layers.push_back(lw);
  }

  // KV cache.
  const json& kvj = L.field(rt, "runtime", "kv");
  if (!kvj.is_null()) {
    KvScheme ks;
    ks.bits = int(L.get_int(kvj, "runtime.kv", "bits"));
    ks.symmetric = L.get_bool(kvj, "runtime.kv", "symmetric");
    try {
      ks.mode = quant::parse_kv_mode(L.get_str(kvj, "runtime.kv", "mode"));
      ks.granularity = quant::parse_kv_granularity(L.get_str(kvj, "runtime.kv", "granularity"));
    } catch (const Error& e) {
      fail("{}: field 'runtime.kv': {}", L.recipe_path, e.what());
    }
    if (ks.mode == quant::KvMode::Static) {
      const json& st = L.field(kvj, "runtime.kv", "static");
      quant::Params p0;
      quant::QuantSpec spec;
      try {
        p0.granularity = quant::parse_granularity(L.get_str(st, "runtime.kv.static", "granularity"));
      } catch (const Error& e) {
        fail("{}: field 'runtime.kv.static.granularity': {}", L.recipe_path, e.what());
      }
      p0.bits = ks.bits;
      p0.symmetric = ks.symmetric;
      p0.prow = L.get_int(st, "runtime.kv.static", "prow");
      p0.pcol = L.get_int(st, "runtime.kv.static", "pcol");
      p0.col_block = L.get_int(st, "runtime.kv.static", "col_block");
      if (p0.prow != 1 || p0.pcol < 1 || p0.col_block < 1 || p0.pcol * p0.col_block != mc.kv_dim())
        L.bad_field("runtime.kv.static", fmt::format("[prow {}, pcol {}] x col_block {} does not cover kv_dim {}",
                                                     p0.prow, p0.pcol, p0.col_block, mc.kv_dim()));
      spec.bits = ks.bits;
      spec.symmetric = ks.symmetric;
      spec.granularity = p0.granularity;
      spec.head_dim = int(L.get_int(st, "runtime.kv.static", "head_dim"));
      for (int l = 0; l < mc.num_layers; ++l) {
        for (Site site : {Site::K, Site::V}) {
          const std::string base = fmt::format("{}{}", layer_prefix(l), site_name(site));
          quant::StaticQuant q{site, l, spec, p0};
          q.params.scale = L.copy<float>(L.tensor(want(base + ".kv_scale"), "F32", {p0.pcol}));
          if (!ks.symmetric) q.params.zero = L.copy<int32_t>(L.tensor(want(base + ".kv_zero"), "I32", {p0.pcol}));
          std::memcpy(&q.spec.clip_ratio, L.tensor(want(base + ".kv_clip"), "F32", {1}).data, sizeof(float));
          ks.statics.push_back(std::move(q));
        }
      }
    }
    try {
      PackedKvStore check(mc, /*capacity=*/1, ks);  // the scheme and its params against the model
    } catch (const Error& e) {
      fail("{}: field 'runtime.kv': {}", L.recipe_path, e.what());
    }
    qm.cfg.kv.bits = ks.bits;
    qm.cfg.kv.mode = ks.mode;
    qm.cfg.kv.granularity = ks.granularity;
    qm.cfg.kv.symmetric = ks.symmetric;
    qm.kv = std::move(ks);
  }

  // Prefix.
  std::vector<float> prefix_k, prefix_v;
  const json& pj = L.field(r, "", "prefix");
  if (!pj.is_null()) {
    const json& toks = L.field(pj, "prefix", "tokens");
    if (!toks.is_array() || toks.empty()) L.bad_field("prefix.tokens", "must be a non-empty array of token ids");
    const int64_t P = int64_t(toks.size()), KV = mc.kv_dim();
    const TensorInfo& ti = L.tensor(want("sinkq.prefix.tokens"), "I32", {P});
    std::vector<int32_t> ids = L.copy<int32_t>(ti);
    for (size_t i = 0; i < ids.size(); ++i)
      if (!toks[i].is_number_integer() || toks[i].get<int64_t>() != ids[i])
        L.bad_field("prefix.tokens", fmt::format("token {} is {}, the tensor sinkq.prefix.tokens holds {}", i,
                                                 toks[i].dump(), ids[i]));
    for (int32_t id : ids)
      SINKQ_CHECK(id >= 0 && id < mc.vocab_size, "{}: tensor 'sinkq.prefix.tokens': id {} is outside the vocabulary",
                  L.tensors_path, id);
    const TensorInfo& tk = L.tensor(want("sinkq.prefix.k"), "F32", {mc.num_layers, P, KV});
    const TensorInfo& tv = L.tensor(want("sinkq.prefix.v"), "F32", {mc.num_layers, P, KV});
    qm.cfg.prefix.tokens = ids;
    if (pj.contains("spec") && pj["spec"].is_string()) qm.cfg.prefix.spec = pj["spec"].get<std::string>();
    if (pj.contains("source") && pj["source"].is_string())
      qm.cfg.prefix.source = quant::parse_prefix_source(pj["source"].get<std::string>());
    prefix_k = L.copy<float>(tk);
    prefix_v = L.copy<float>(tv);
  }
  // Nothing unexpected in the file.
  for (const TensorInfo* t : L.store.all())
    SINKQ_CHECK(expected.count(t->name), "{}: unexpected tensor '{}' (not part of this artifact's recipe)",
                L.tensors_path, t->name);
  w.store = std::move(L.store);  // keeps the mapping (embeddings, norms) alive
  qm.model = Model::from_weights(mc, std::move(w), dir);
  if (!qm.cfg.prefix.tokens.empty())
    qm.prefix = KvPrefix::from_rows(qm.cfg.prefix.tokens, mc.num_layers, mc.kv_dim(), std::move(prefix_k),
                                    std::move(prefix_v));
  return qm;
}

}  // namespace sinkq::runtime
