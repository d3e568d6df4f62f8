// sinkq/runtime/artifact_read.cc — load_artifact: the validating loader (artifact.h).
#include "runtime/artifact.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
#include "runtime/artifact_schema.h"

namespace sinkq::runtime {

namespace fs = std::filesystem;
using json = nlohmann::json;
using lowbit::PackedFormat;
using lowbit::PackedTensor;
using namespace schema;

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
        const lowbit::FormatDesc* ft = nullptr;
        for (const lowbit::FormatDesc& t : lowbit::kFormats)
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
