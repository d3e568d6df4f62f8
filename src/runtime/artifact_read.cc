// sinkq/runtime/artifact_read.cc — load_artifact: the validating loader (artifact.h).
#include "runtime/artifact.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
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

QuantizedModel load_artifact(const std::string& dir, LayerRange stage) {
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
    L.bad_field("format_version",
                fmt::format("{} is not supported (this sinkq reads version {}){}", version, kArtifactFormatVersion,
                            version < kArtifactFormatVersion && version > 0
                                ? ": written by an older sinkq; run sinkq quantize on the source model again"
                                : ""));
  // config.json as written by quantize: the packed tensors were made for that model.
  const std::string config_path = dir + "/" + kConfig;
  if (const std::string want = L.get_str(r, "", "config_checksum"), have = checksum(read_file(config_path));
      have != want)
    fail("{}: changed after quantize: its checksum is {}, {} records {} (the packed tensors were made for the "
         "recorded config)", config_path, have, L.recipe_path, want);
  // The tokenizer and generation files: each one present must be the one quantize wrote (an edited
  // vocabulary loaded and answered wrongly with exit 0), each one recorded must be present.
  // recipe_checksum (below) binds the record itself to the tensors' file.
  if (r.contains("files")) {
    const json& files = r.at("files");
    if (!files.is_object()) L.bad_field("files", "must be an object (file name -> checksum)");
    for (const std::string& f : side_files()) {
      const std::string path = dir + "/" + f;
      const bool present = fs::exists(path, ec), recorded = files.contains(f);
      if (present && !recorded)
        fail("{}: not written by quantize ({} records no such file): the tokenizer would read it; remove it", path,
             L.recipe_path);
      if (!present && recorded) fail("{}: missing ({} records it)", path, L.recipe_path);
      if (!present) continue;
      if (const std::string want = L.get_str(files, "files", f.c_str()), have = checksum(read_file(path)); have != want)
        fail("{}: changed after quantize: its checksum is {}, {} records {} (the tokenizer would encode and decode "
             "differently from the model it was quantized with)", path, have, L.recipe_path, want);
    }
    for (const auto& [name, v] : files.items())
      if (const auto known = side_files(); std::find(known.begin(), known.end(), name) == known.end())
        L.bad_field("files." + name, "not a file an artifact holds");
  }
  const ModelConfig mc = ModelConfig::load(config_path);
  const int N = mc.num_layers;
  stage.check(N);

  QuantizedModel qm;
  // The recipe: the one parse (quant::Recipe::from_json), and it must be in the form to_json
  // writes — a field dropped or added by hand is an error, not a default.
  const json& rj = L.field(r, "", "recipe");
  qm.cfg = quant::Recipe::from_json(rj, L.recipe_path, "recipe");
  if (const std::string d = quant::json_first_difference(qm.cfg.to_json(), rj, "recipe"); !d.empty())
    fail("{}: field '{}': not as this recipe writes it (edited by hand?): the artifact does not match its recipe",
         L.recipe_path, d);
  qm.recipe = rj;  // and what the writer recorded beside it
  if (r.contains("provenance") && r.at("provenance").is_object())
    for (const auto& [k, v] : r.at("provenance").items()) qm.recipe[k] = v;
  const bool tied = L.get_bool(r, "", "lm_head_tied");
  // A pipeline stage (LayerRange) reads, copies and checksums its own tensors only; the others'
  // names, dtypes and shapes are still checked against the recipe and the inventory.
  const bool need_embed = stage.holds_embed(N, tied), need_head = stage.last(N);
  auto owned = [&](const std::string& name) {
    if (const int l = tensor_layer(name); l >= 0) return stage.holds(l, N);
    if (name.rfind("model.embed_tokens.", 0) == 0) return need_embed;
    if (name.rfind("lm_head.", 0) == 0) return need_head || (tied && need_embed);
    if (name.rfind("model.norm.", 0) == 0) return need_head;
    return true;  // the prefix
  };
  try {
    qm.cfg.check_layers(mc.num_layers);
    check_runnable(qm.cfg);
  } catch (const Error& e) {
    fail("{}: field 'recipe': {}", L.recipe_path, e.what());
  }

  // Tensors.
  L.store = TensorStore::open_files({L.tensors_path}, /*allow_raw=*/true);
  const SafetensorsFile& sf = *L.store.files().at(0);
  const auto meta_it = sf.metadata().find("format");
  SINKQ_CHECK(meta_it != sf.metadata().end() && meta_it->second == "sinkq-artifact",
              "{}: __metadata__ lacks \"format\": \"sinkq-artifact\"", L.tensors_path);
  std::set<std::string> expected;
  auto want = [&](const std::string& n) -> const std::string& { return *expected.insert(n).first; };

  // One packed block <tb>.codes / .scales (/ .zeros) of format ft, [rows, cols].
  auto read_packed = [&](const std::string& tb, const lowbit::FormatDesc& ft, int64_t rows, int64_t cols) {
    PackedTensor pt;
    pt.format = ft.format;
    pt.rows = rows;
    pt.cols = cols;
    pt.codes = L.copy<uint8_t>(L.tensor(want(tb + ".codes"), "U8", {rows, lowbit::row_bytes(ft, pt.cols)}));
    pt.scales = L.copy<float>(L.tensor(want(tb + ".scales"), "F32", {rows, pt.groups()}));
    for (size_t k = 0; k < pt.scales.size(); ++k)
      SINKQ_CHECK(pt.scales[k] >= FLT_MIN && pt.scales[k] <= FLT_MAX,
                  "{}: tensor '{}.scales': entry {} = {} is not a positive normal fp32 scale", L.tensors_path, tb, k,
                  pt.scales[k]);
    if (!ft.symmetric) pt.zeros = L.copy<uint8_t>(L.tensor(want(tb + ".zeros"), "U8", {rows, pt.groups()}));
    return pt;
  };

  ModelWeights w;
  const int64_t H = mc.hidden_size;
  if (qm.cfg.head.on()) {
    // The int8 / int4 head (quant/recipe.h HeadSim): packed tables, no fp copy; their column
    // blocks follow from the recipe and the hidden size (weight_blocks: a ragged last group is a
    // second block, <base>.tail, as a linear's).
    auto table = [&](const std::string& base) -> std::shared_ptr<const LinearImpl> {
      std::vector<PackedLinear::PlanarBlock> blocks;
      try {
        const std::vector<WeightBlock> layout = weight_blocks(qm.cfg.head.weights(), H, base + ".weight");
        for (size_t b = 0; b < layout.size(); ++b)
          blocks.push_back({layout[b].col0, read_packed(b == 0 ? base : base + ".tail", lowbit::traits(layout[b].format),
                                                        mc.vocab_size, layout[b].cols)});
        return std::make_shared<const PackedLinear>(base + ".weight", mc.vocab_size, H, std::move(blocks),
                                                    head_act_format());
      } catch (const Error& e) {
        fail("{}: {}", L.tensors_path, e.what());
      }
    };
    w.embed = Mat{DType::F32, mc.vocab_size, H, nullptr, "model.embed_tokens.weight"};
    w.lm_head = Mat{DType::F32, mc.vocab_size, H, nullptr, "lm_head.weight"};
    if (owned("lm_head.")) w.lm_head_impl = table("lm_head");
    if (need_embed) w.embed_impl = tied ? w.lm_head_impl : table("model.embed_tokens");
  } else {
    auto mat = [&](const std::string& name) {
      if (owned(name)) return L.mat(w, want(name), mc.vocab_size, H);
      const TensorInfo& t = L.tensor(want(name), "float", {mc.vocab_size, H});
      return Mat{t.dtype, mc.vocab_size, H, nullptr, name};
    };
    w.embed = mat("model.embed_tokens.weight");
    w.lm_head = tied ? w.embed : mat("lm_head.weight");
  }
  if (need_head) w.final_norm = L.f32(w, want("model.norm.weight"), H);
  const bool act_static = qm.cfg.act_static();
  std::vector<quant::StaticQuant> statics;  // activation and KV params, as build_sim's
  const bool act_cross = qm.cfg.act_cross_static();
  quant::CrossFolds cross;  // CrossQuant's folds, [layer * 4 + site]
  ActScheme as;
  as.bits = qm.cfg.a.bits;
  as.mode = qm.cfg.a.mode;
  if (act_static) as.scales.resize(1);
  if (act_cross) as.cross.push_back(quant::make_cross_fold(qm.cfg.a.bits, qm.cfg.a.alpha, {1.0f}));  // format only
  const lowbit::PackedFormat act = activation_format(as);
  // The width of each linear input (the in-dimension of the roles it feeds).
  int64_t input_width[4] = {};
  for (const LinearRoleInfo& r : kLinearRoles) input_width[r.input] = role_dim(r.in, mc);
  for (int l = 0; l < mc.num_layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerWeights lw;
    if (!stage.holds(l, N)) {  // another stage's layer: shapes only; CrossQuant keeps its [layer * 4 + site] index
      for (int i = 0; i < kNumLinearRoles; ++i)
        lw.mat(i) = Mat{DType::F32, role_dim(kLinearRoles[i].out, mc), role_dim(kLinearRoles[i].in, mc), nullptr,
                        p + kLinearRoles[i].hf + ".weight"};
      if (act_cross)
        for (int s = 0; s < 4; ++s) cross.push_back(quant::make_cross_fold(qm.cfg.a.bits, qm.cfg.a.alpha, {1.0f}));
      w.layers.push_back(lw);
      continue;
    }
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, mc)) lw.vec(r.role) = L.f32(w, want(hf_vec_name(r, mc, l)), vec_dim(r, mc));
    quant::Params act_params[4];
    if (act_static) {
      for (int s = 0; s < 4; ++s) {
        const std::string n = fmt::format("{}{}.act_scale", p, site_name(kLinearInputSites[s]));
        const TensorInfo& t = L.tensor(want(n), "F32", {1});
        float v = 0.0f;
        std::memcpy(&v, t.data, 4);
        quant::Params& q = act_params[s];
        q.granularity = quant::Granularity::PerTensor;
        q.bits = qm.cfg.a.bits;
        q.symmetric = true;
        q.prow = q.pcol = 1;
        q.col_block = input_width[s];
        q.scale = {v};
        quant::StaticQuant sq{kLinearInputSites[s], l, {}, q};
        sq.spec.bits = q.bits;
        sq.spec.granularity = quant::Granularity::PerTensor;
        statics.push_back(std::move(sq));
      }
    }
    std::shared_ptr<const quant::CrossFold> folds[4];
    if (act_cross) {
      for (int s = 0; s < 4; ++s) {
        const std::string n = fmt::format("{}{}.cross_col_max", p, site_name(kLinearInputSites[s]));
        const TensorInfo& t = L.tensor(want(n), "F32", {input_width[s]});
        std::vector<float> c(size_t(input_width[s]));
        std::memcpy(c.data(), t.data, c.size() * 4);
        try {
          cross.push_back(quant::make_cross_fold(qm.cfg.a.bits, qm.cfg.a.alpha, std::move(c)));
        } catch (const Error& e) {
          fail("{}: tensor '{}': {}", L.tensors_path, n, e.what());
        }
        folds[s] = std::make_shared<const quant::CrossFold>(cross.back());
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
      WeightScheme ws = qm.cfg.weights(l, i, mc.num_layers);
      ws.clip = 1.0f;  // what is stored carries its clip already
      const std::vector<WeightBlock> layout = weight_blocks(ws, cols, base);
      if (m["blocks"].size() != layout.size())
        bad_meta(fmt::format("{} blocks, the recipe's weights ({}) give {}", m["blocks"].size(), qm.cfg.describe(),
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
                               qm.cfg.describe(), layout[b].col0, layout[b].cols, int(layout[b].format),
                               lowbit::traits(layout[b].format).name));
        blocks.push_back({layout[b].col0, read_packed(b == 0 ? base : base + ".tail", *ft, rows, layout[b].cols)});
      }
      try {
        lw.impl_of(i) = std::make_shared<const PackedLinear>(
            base + ".weight", rows, cols, std::move(blocks), act,
            act_static ? act_params[kLinearRoles[i].input] : quant::Params{}, folds[kLinearRoles[i].input]);
      } catch (const Error& e) {
        fail("{}: {}", L.tensors_path, e.what());
      }
    }
    w.layers.push_back(lw);
  }

  // KV cache: static params per (layer, k / v), their shape from the recipe's spec and the config.
  if (qm.cfg.kv_static()) {
    const quant::QuantSpec spec = qm.cfg.kv.spec(mc.head_dim);
    quant::Params p0;
    p0.granularity = spec.granularity;
    p0.bits = spec.bits;
    p0.symmetric = spec.symmetric;
    p0.prow = 1;
    p0.pcol = spec.granularity == quant::Granularity::PerHeadShared ? mc.num_kv_heads : 1;
    p0.col_block = mc.kv_dim() / p0.pcol;
    for (int l = 0; l < mc.num_layers; ++l) {
      for (Site site : {Site::K, Site::V}) {
        const std::string base = fmt::format("{}{}", layer_prefix(l), site_name(site));
        quant::StaticQuant q{site, l, spec, p0};
        if (!stage.holds(l, N)) {  // another stage's layer: valid placeholder params
          q.params.scale.assign(size_t(p0.pcol), 1.0f);
          if (!spec.symmetric) q.params.zero.assign(size_t(p0.pcol), 0);
          statics.push_back(std::move(q));
          continue;
        }
        q.params.scale = L.copy<float>(L.tensor(want(base + ".kv_scale"), "F32", {p0.pcol}));
        if (!spec.symmetric) q.params.zero = L.copy<int32_t>(L.tensor(want(base + ".kv_zero"), "I32", {p0.pcol}));
        std::memcpy(&q.spec.clip_ratio, L.tensor(want(base + ".kv_clip"), "F32", {1}).data, sizeof(float));
        statics.push_back(std::move(q));
      }
    }
  }
  // KVQuant's codebook KV: levels (ascending, finite) and channel ranges (finite, lo <= hi).
  if (qm.cfg.kv.vector()) {
    CodebookKvScheme cs;
    cs.key_pre_rope = qm.cfg.kv.key_pre_rope;
    cs.r3 = qm.cfg.rotate.on;
    cs.recent = qm.cfg.kv.recent;
    const int64_t n_levels = int64_t(1) << qm.cfg.kv.bits, KV = mc.kv_dim();
    for (int l = 0; l < mc.num_layers; ++l) {
      quant::KvQuantLayer layer;
      for (const bool value : {false, true}) {
        quant::KvCodec& c = value ? layer.v : layer.k;
        const std::string base = fmt::format("{}kv_codebook.{}", layer_prefix(l), value ? "v" : "k");
        c.outliers = qm.cfg.kv.outliers;
        if (!stage.holds(l, N)) {  // another stage's layer: valid placeholder levels
          c.levels.resize(size_t(n_levels));
          for (int64_t i = 0; i < n_levels; ++i) c.levels[size_t(i)] = float(i);
          continue;
        }
        c.per_channel = (value ? qm.cfg.kv.value_axis : qm.cfg.kv.key_axis) == quant::KvAxis::Channel;
        c.levels = L.copy<float>(L.tensor(want(base + ".levels"), "F32", {n_levels}));
        for (size_t i = 0; i < c.levels.size(); ++i)
          SINKQ_CHECK(std::isfinite(c.levels[i]) && (i == 0 || c.levels[i] >= c.levels[i - 1]),
                      "{}: tensor '{}.levels': entry {} = {} is not finite and ascending", L.tensors_path, base, i,
                      c.levels[i]);
        if (c.per_channel) {
          c.lo = L.copy<float>(L.tensor(want(base + ".lo"), "F32", {KV}));
          c.hi = L.copy<float>(L.tensor(want(base + ".hi"), "F32", {KV}));
          for (int64_t j = 0; j < KV; ++j)
            SINKQ_CHECK(std::isfinite(c.lo[size_t(j)]) && std::isfinite(c.hi[size_t(j)]) && c.lo[size_t(j)] <= c.hi[size_t(j)],
                        "{}: tensors '{}.lo' / '.hi': channel {} range [{}, {}] is not finite and ordered", L.tensors_path,
                        base, j, c.lo[size_t(j)], c.hi[size_t(j)]);
        }
      }
      cs.layers.push_back(std::move(layer));
    }
    qm.kv_codebook = std::move(cs);
  }
  try {
    qm.rt = runtime_config(qm.cfg, statics, cross);  // as build_quantized derives it
    if (qm.kv_codebook) {
      codebook_cache(mc, /*capacity=*/1, *qm.kv_codebook);  // the quantizers against the model
    } else if (qm.cfg.kv.on()) {
      qm.kv = KvScheme::from_sim(qm.cfg.kv, statics);
      PackedKvStore check(mc, /*capacity=*/1, *qm.kv);  // the scheme and its params against the model
    }
  } catch (const Error& e) {
    fail("{}: {}", L.tensors_path, e.what());
  }

  // Prefix: the recipe's tokens, their KV rows from the tensors.
  std::vector<float> prefix_k, prefix_v;
  if (qm.cfg.prefix.requested()) {
    const std::vector<int32_t>& ids = qm.cfg.prefix.tokens;
    if (ids.empty()) L.bad_field("recipe.prefix.tokens", "must be a non-empty list of token ids");
    const int64_t P = int64_t(ids.size()), KV = mc.kv_dim();
    const std::vector<int32_t> stored = L.copy<int32_t>(L.tensor(want("sinkq.prefix.tokens"), "I32", {P}));
    for (size_t i = 0; i < ids.size(); ++i)
      if (stored[i] != ids[i])
        L.bad_field("recipe.prefix.tokens", fmt::format("token {} is {}, the tensor sinkq.prefix.tokens holds {}", i,
                                                        ids[i], stored[i]));
    for (int32_t id : ids)
      SINKQ_CHECK(id >= 0 && id < mc.vocab_size, "{}: tensor 'sinkq.prefix.tokens': id {} is outside the vocabulary",
                  L.tensors_path, id);
    prefix_k = L.copy<float>(L.tensor(want("sinkq.prefix.k"), "F32", {mc.num_layers, P, KV}));
    prefix_v = L.copy<float>(L.tensor(want("sinkq.prefix.v"), "F32", {mc.num_layers, P, KV}));
  }
  // Nothing unexpected in the file.
  for (const TensorInfo* t : L.store.all())
    SINKQ_CHECK(expected.count(t->name) || !owned(t->name),
                "{}: unexpected tensor '{}' (not part of this artifact's recipe)", L.tensors_path, t->name);
  // Integrity, after the structure (whose messages say more when they apply): what an edit or a
  // corruption that keeps the structure valid still changes.
  if (const std::string fp = L.get_str(r, "", "fp_dtype"), emb{fp_dtype_label(w)};
      (w.lm_head_impl || w.embed_impl || !qm.cfg.head.on()) && fp != emb)
    L.bad_field("fp_dtype", fmt::format("'{}', but model.embed_tokens.weight is {}", fp, emb));
  // The inventory lists exactly the file's tensors, with their dtypes, shapes and checksums.
  const json& inv = L.field(r, "", "tensors");
  if (!inv.is_object()) L.bad_field("tensors", "must be an object (tensor name -> dtype, shape, checksum)");
  for (const auto& [name, e] : inv.items())
    if (!L.store.find(name))
      L.bad_field("tensors", fmt::format("lists '{}', which {} does not hold", name, L.tensors_path));
  for (const TensorInfo* t : L.store.all()) {
    const std::string path = "tensors." + t->name;
    if (!inv.contains(t->name))
      L.bad_field("tensors", fmt::format("does not list '{}' ({} holds it)", t->name, L.tensors_path));
    const json& e = inv.at(t->name);
    const std::string dtype = t->raw_dtype.empty() ? std::string(dtype_name(t->dtype)) : t->raw_dtype;
    if (L.get_str(e, path, "dtype") != dtype || L.field(e, path, "shape") != json(t->shape))
      L.bad_field(path, fmt::format("lists {} {}, but the tensor in {} is {} {}", e.at("dtype").get<std::string>(),
                                    e.at("shape").dump(), L.tensors_path, dtype, t->shape_str()));
    if (!owned(t->name)) continue;  // another stage's: not read
    const std::string have = tensor_checksum(dtype, t->shape, {t->data, t->nbytes});
    if (const std::string want = L.get_str(e, path, "checksum"); have != want)
      fail("{}: tensor '{}': checksum {} differs from the {} recorded in {} (the file is corrupted or was edited "
           "after quantize)", L.tensors_path, t->name, have, want, L.recipe_path);
  }
  // The recipe is the one the tensors were packed with.
  const auto rc = sf.metadata().find("recipe_checksum");
  SINKQ_CHECK(rc != sf.metadata().end(), "{}: __metadata__ lacks \"recipe_checksum\"", L.tensors_path);
  if (const std::string have = recipe_checksum(r); have != rc->second)
    fail("{}: not the recipe {} was packed with (checksum {}, its __metadata__ records {}): format_version, "
         "config_checksum, lm_head_tied, fp_dtype or recipe was edited after quantize", L.recipe_path,
         L.tensors_path, have, rc->second);
  w.store = std::move(L.store);  // keeps the mapping (embeddings, norms) alive
  qm.model = Model::from_weights(mc, std::move(w), dir, stage);
  if (!qm.cfg.prefix.tokens.empty())
    qm.prefix = KvPrefix::from_rows(qm.cfg.prefix.tokens, mc.num_layers, mc.kv_dim(), std::move(prefix_k),
                                    std::move(prefix_v));
  return qm;
}

}  // namespace sinkq::runtime
