// sinkq/runtime/artifact_write.cc — write_artifact: temp directory, then rename (artifact.h).
#include "runtime/artifact.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <csignal>
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

#ifndef SINKQ_VERSION
#define SINKQ_VERSION "unknown"
#endif

namespace sinkq::runtime {

namespace fs = std::filesystem;
using json = nlohmann::json;
using lowbit::PackedFormat;
using lowbit::PackedTensor;
using namespace schema;

namespace {

// OUT.tmp-PID directories of earlier runs that were killed before their rename (issue 18): removed
// when their process is gone (kill(pid, 0) fails with ESRCH), so they do not pile up; a live
// process's (another quantize writing the same OUT right now) is left alone.
void remove_stale_temporaries(const fs::path& out) {
  std::error_code ec;
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const std::string stem = out.filename().string() + ".tmp-";
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= stem.size() || name.compare(0, stem.size(), stem) != 0) continue;
    const std::string digits = name.substr(stem.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) std::fprintf(stderr, "quantize: removed %s, left by an interrupted run (pid %d)\n", e.path().c_str(), int(pid));
  }
}


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

// A tensor's dtype as the file and the inventory name it ("U8", "I32" for raw integer tensors).
std::string dtype_str(const SafetensorsStreamWriter::TensorSpec& t) {
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
  const lowbit::FormatDesc& t = p.info();
  tl.add_copy(base + ".codes", DType::F32, {p.rows, lowbit::row_bytes(t, p.cols)}, p.codes, "U8");
  tl.add_copy(base + ".scales", DType::F32, {p.rows, p.groups()}, p.scales);
  if (!t.symmetric) tl.add_copy(base + ".zeros", DType::F32, {p.rows, p.groups()}, p.zeros, "U8");
}

void write_json_file(const std::string& path, const json& j) { write_file_atomic(path, j.dump(2) + "\n"); }

}  // namespace

std::string fp_dtype_label(const ModelWeights& w) {
  // (a pipeline's first stage of an untied model holds the packed embeddings only)
  const LinearImpl* table = w.lm_head_impl ? w.lm_head_impl.get() : w.embed_impl.get();
  if (!table) return std::string(dtype_name(w.embed.dtype));
  const auto* pl = dynamic_cast<const PackedLinear*>(table);
  SINKQ_CHECK(pl != nullptr && !pl->blocks().empty(), "fp_dtype_label: the LM head is not a packed table");
  return fmt::format("int{}", lowbit::traits(pl->blocks()[0].w.format).bits);
}

bool is_artifact(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kRecipe, ec);
}

StageTensors stage_tensors(const QuantizedModel& qm) {
  const ModelWeights& w = qm.model->weights();
  const ModelConfig& mc = qm.model->config();
  const LayerRange& stage = qm.model->stage();
  const int N = mc.num_layers;
  TensorList tl;
  json meta_linears = json::object();
  auto add_mat = [&](const std::string& name, const Mat& m) {
    // fp tables are F32 / F16 / BF16 here (with_fp_dtype widened a GGUF's blocks).
    SINKQ_ASSERT(!dtype_is_block(m.dtype));
    tl.add_view(name, m.dtype, {m.rows, m.cols}, m.data, size_t(m.rows * m.cols) * dtype_size(m.dtype));
  };
  auto add_vec = [&](const std::string& name, const float* v, int64_t n) {
    tl.add_view(name, DType::F32, {n}, v, size_t(n) * sizeof(float));
  };
  const bool tied = qm.tied();
  const bool first = stage.first(), last = stage.last(N);
  if (qm.cfg.head.on()) {  // the int8 / int4 head: its packed tables (artifact.h), blocks as a linear's
    auto table = [&](const std::string& base, const LinearImpl* impl) {
      const auto* pl = dynamic_cast<const PackedLinear*>(impl);
      SINKQ_CHECK(pl != nullptr, "write_artifact: {} is not a packed table", base);
      for (size_t b = 0; b < pl->blocks().size(); ++b) add_packed(tl, b == 0 ? base : base + ".tail", pl->planar(b));
    };
    if ((first && (tied || last)) || (last && !tied)) table("lm_head", w.lm_head_impl.get());
    if (first && !tied) table("model.embed_tokens", w.embed_impl.get());
  } else {
    if (first) add_mat("model.embed_tokens.weight", w.embed);
    if (last && !tied) add_mat("lm_head.weight", w.lm_head);
  }
  if (last) add_vec("model.norm.weight", w.final_norm, mc.hidden_size);
  for (int l = 0; l < mc.num_layers; ++l) {
    if (!stage.holds(l, N)) continue;
    const LayerWeights& lw = w.layers[size_t(l)];
    const std::string p = layer_prefix(l);
    // Norms and biases under the model's own HF names (io/weights.h kVecRoles); Gemma's norms as
    // the engine holds them (1 + w).
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, mc)) add_vec(hf_vec_name(r, mc, l), lw.vec(r.role), vec_dim(r, mc));
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
    if (stage.holds(e.layer, N))
      tl.add_copy(fmt::format("{}{}.act_scale", layer_prefix(e.layer), site_name(e.site)), DType::F32, {1},
                std::vector<float>{e.params.scale.at(0)});
  // CrossQuant's static column maxima (b follows from them and the recipe's alpha).
  for (size_t k = 0; k < qm.rt.a.cross.size(); ++k) {
    if (!stage.holds(int(k / 4), N)) continue;
    const quant::CrossFold& f = qm.rt.a.cross[k];
    tl.add_copy(fmt::format("{}{}.cross_col_max", layer_prefix(int(k / 4)), site_name(kLinearInputSites[k % 4])),
                DType::F32, {f.cols()}, f.col_max);
  }
  // Static KV params (their layout follows from the recipe and config.json: artifact_read.cc).
  if (qm.kv)
    for (const quant::StaticQuant& q : qm.kv->statics) {
      if (!stage.holds(q.layer, N)) continue;
      const quant::Params& p = q.params;
      const std::string base = fmt::format("{}{}", layer_prefix(q.layer), site_name(q.site));
      tl.add_copy(base + ".kv_scale", DType::F32, {int64_t(p.scale.size())}, p.scale);
      if (!p.symmetric) tl.add_copy(base + ".kv_zero", DType::F32, {int64_t(p.zero.size())}, p.zero, "I32");
      tl.add_copy(base + ".kv_clip", DType::F32, {1}, std::vector<float>{q.spec.clip_ratio});
    }
  // KVQuant's codebook KV: per layer and K / V its levels and, for channel vectors, their ranges
  // (the rest — bits, axes, outlier fraction — is in the recipe).
  if (qm.kv_codebook)
    for (size_t l = 0; l < qm.kv_codebook->layers.size(); ++l)
      for (const bool value : {false, true}) {
        if (!stage.holds(int(l), N)) continue;
        const quant::KvCodec& c = value ? qm.kv_codebook->layers[l].v : qm.kv_codebook->layers[l].k;
        const std::string base = fmt::format("{}kv_codebook.{}", layer_prefix(int(l)), value ? "v" : "k");
        tl.add_copy(base + ".levels", DType::F32, {int64_t(c.levels.size())}, c.levels);
        if (c.per_channel) {
          tl.add_copy(base + ".lo", DType::F32, {int64_t(c.lo.size())}, c.lo);
          tl.add_copy(base + ".hi", DType::F32, {int64_t(c.hi.size())}, c.hi);
        }
      }
  if (qm.prefix && first) {  // (a pipeline's first stage holds every layer's rows: dist gathers them)
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
  }
  StageTensors out;
  std::vector<SafetensorsStreamWriter::TensorSpec> order;
  std::map<std::string, TensorToWrite*> by_name;
  for (TensorToWrite& t : tl.tensors) {
    order.push_back({t.name, t.dtype, t.shape, t.raw_dtype});
    by_name[t.name] = &t;
  }
  SafetensorsStreamWriter::data_order(order);
  for (const auto& s : order) out.tensors.push_back(*by_name.at(s.name));
  out.storage = std::move(tl.storage);  // deque: the bytes stay where the views point
  out.meta_linears = std::move(meta_linears);
  return out;
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
  const bool tied = qm.tied();
  StageTensors own = stage_tensors(qm);
  std::vector<std::pair<SafetensorsStreamWriter::TensorSpec, int>> specs;  // every tensor, its stage
  for (const TensorToWrite& t : own.tensors) specs.push_back({{t.name, t.dtype, t.shape, t.raw_dtype}, 0});
  json meta_linears = own.meta_linears;
  if (opt.remote) {
    specs.insert(specs.end(), opt.remote->specs.begin(), opt.remote->specs.end());
    for (const auto& [k, v] : opt.remote->meta_linears.items()) meta_linears[k] = v;
  }
  std::map<std::string, const TensorToWrite*> local;
  for (const TensorToWrite& t : own.tensors) local[t.name] = &t;

  // ---- recipe --------------------------------------------------------------------------------
  const std::string config_bytes = gguf ? mc.to_json().dump(2) + "\n" : read_file(src_config);
  // The recipe: Recipe::to_json (what load_artifact parses back with Recipe::from_json), the
  // prefix tokens those of the KV rows stored; whatever else the caller recorded beside it in
  // qm.recipe (calibration_result, prefix_resolution, ...) goes under "provenance", wall-clock
  // times removed (deterministic bytes).
  quant::Recipe cfg = qm.cfg;
  cfg.prefix.tokens = qm.prefix ? qm.prefix->tokens() : std::vector<int32_t>{};
  if (!qm.prefix) cfg.prefix.spec.clear();
  const json recipe_json = cfg.to_json();
  if (const std::string d = quant::json_first_difference(
          quant::Recipe::from_json(recipe_json, "write_artifact").to_json(), recipe_json, "recipe");
      !d.empty())
    fail("write_artifact: the recipe does not read back to itself at '{}' (a bug: Recipe::to_json / from_json "
         "disagree)", d);
  json provenance = json::object();
  if (qm.recipe.is_object())
    for (const auto& [k, v] : qm.recipe.items())
      if (!recipe_json.contains(k)) provenance[k] = v;
  strip_times(provenance);
  json recipe{
      {"format", "sinkq-artifact"},
      {"format_version", kArtifactFormatVersion},
      {"sinkq_version", SINKQ_VERSION},
      {"source", {{"model_dir", model_dir}}},
      {"config_checksum", checksum(config_bytes)},
      {"describe", qm.describe()},
      {"lm_head_tied", tied},
      {"fp_dtype", fp_dtype_label(w)},
      {"recipe", recipe_json},
      {"provenance", provenance},
      {"tensors", json::object()}};  // the inventory: filled in while the tensors are written
  // The tokenizer (and generation) files, read now so that their checksums are in the recipe
  // that recipe_checksum binds: an edited vocabulary no longer loads.
  std::vector<std::pair<std::string, std::string>> side;  // name, bytes
  if (gguf) {
    // A GGUF source carries its tokenizer in its metadata: the artifact keeps those keys in a
    // tensor-less GGUF file, which Tokenizer::load reads like the source's.
    side.emplace_back(kTokenizerGguf, gguf_metadata_file(*gguf, [](const std::string& k) {
                        return k.rfind("tokenizer.", 0) == 0;
                      }));
  } else {
    std::error_code fec;
    for (const char* f : kTokenizerFiles)
      if (const std::string src = model_dir + "/" + f; fs::exists(src, fec)) side.emplace_back(f, read_file(src));
  }
  recipe["files"] = json::object();
  for (const auto& [name, bytes] : side) recipe["files"][name] = checksum(bytes);
  std::map<std::string, std::string> meta{{"format", "sinkq-artifact"},
                                          {"format_version", std::to_string(kArtifactFormatVersion)},
                                          {"recipe_checksum", recipe_checksum(recipe)}};
  for (const auto& [name, j] : meta_linears.items()) meta[name] = j.dump();

  // ---- files, into a temp directory, then one rename ----------------------------------------
  const fs::path tmp = fs::path(out.string() + fmt::format(".tmp-{}", ::getpid()));
  remove_stale_temporaries(out);
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
    {
      // The tensors in data order, each from this stage or the one that holds it, checksummed
      // for the inventory on the way (recipe_checksum does not cover the inventory).
      std::vector<SafetensorsStreamWriter::TensorSpec> all;
      std::map<std::string, std::pair<SafetensorsStreamWriter::TensorSpec, int>> by_name;
      for (const auto& e : specs) {
        all.push_back(e.first);
        by_name[e.first.name] = e;
      }
      SafetensorsStreamWriter sw(file(kTensors), all, meta);
      std::vector<std::byte> buf;
      json& inventory = recipe["tensors"];
      while (!sw.done()) {
        const auto& [spec, stage] = by_name.at(sw.next_name());
        std::span<const std::byte> bytes;
        if (stage == 0) {
          bytes = local.at(spec.name)->bytes;
        } else {
          uint64_t n = SafetensorsStreamWriter::element_size(spec);
          for (int64_t d : spec.shape) n *= uint64_t(d);
          buf.resize(n);
          opt.remote->read(stage, spec, buf);
          bytes = buf;
        }
        const std::string dt = dtype_str(spec);
        inventory[spec.name] = {{"dtype", dt}, {"shape", spec.shape}, {"checksum", tensor_checksum(dt, spec.shape, bytes)}};
        sw.write(spec.name, bytes);
      }
      sw.commit();
    }
    write_file_atomic(file(kConfig), config_bytes);
    write_json_file(file(kRecipe), recipe);
    for (const auto& [name, bytes] : side) write_file_atomic(file(name), bytes);
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

}  // namespace sinkq::runtime
