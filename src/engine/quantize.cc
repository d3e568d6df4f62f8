// sinkq/engine/quantize.cc — quantize_artifact (include/sinkq/engine.h): what `sinkq quantize` and
// sinkq.quantize() run.
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "dist/mpi.h"
#include "runtime/artifact.h"
#include "sinkq/engine.h"

namespace sinkq {

namespace {

using nlohmann::json;

// Under mpirun (dist/): the ranks after the first send rank 0 their stage's tensor list (names,
// dtypes, shapes, linears' metadata), then each tensor's bytes in the file's data order — the
// order in which rank 0's writer asks for them, so no request message is needed.
void send_stage(const runtime::StageTensors& st) {
  json specs = json::array();
  for (const TensorToWrite& t : st.tensors)
    specs.push_back({t.name, std::string(dtype_name(t.dtype)), t.shape, t.raw_dtype});
  dist::send_text(json{{"tensors", specs}, {"meta_linears", st.meta_linears}}.dump(), 0, dist::kTagSpecs,
                  "the stage's tensor list");
  for (const TensorToWrite& t : st.tensors) dist::send(t.bytes.data(), t.bytes.size(), 0, dist::kTagTensor, t.name);
}

// The prefix's KV rows of every layer on rank 0 (each stage computed its own layers'); the other
// ranks send theirs. Rank 0 returns the whole prefix, the others their own.
std::shared_ptr<const KvPrefix> gather_prefix(const std::shared_ptr<const KvPrefix>& p, const Model& m) {
  if (!p || !dist::active()) return p;
  const int64_t rows = p->size() * p->kv_dim();  // one layer's
  const LayerRange& st = m.stage();
  if (dist::rank() > 0) {
    const int64_t range[2] = {st.begin, st.end};
    dist::send(range, sizeof range, 0, dist::kTagPrefix, "the stage's prefix layers");
    for (int l = st.begin; l < st.end; ++l) {
      const KvSegment s = p->segment(l);
      dist::send(s.k, size_t(rows) * sizeof(float), 0, dist::kTagPrefix, "the prefix's K rows");
      dist::send(s.v, size_t(rows) * sizeof(float), 0, dist::kTagPrefix, "the prefix's V rows");
    }
    return p;
  }
  const int L = p->num_layers();
  std::vector<float> k(size_t(L * rows)), v(size_t(L * rows));
  auto take = [&](int l, const float* ks, const float* vs) {
    std::copy(ks, ks + rows, k.data() + l * rows);
    std::copy(vs, vs + rows, v.data() + l * rows);
  };
  for (int l = st.begin; l < st.end; ++l) take(l, p->segment(l).k, p->segment(l).v);
  for (int r = 1; r < dist::size(); ++r) {
    int64_t range[2] = {0, 0};
    dist::recv(range, sizeof range, r, dist::kTagPrefix, "a stage's prefix layers");
    SINKQ_CHECK(range[0] >= 0 && range[0] < range[1] && range[1] <= L, "rank {}: prefix layers [{}, {})", r, range[0],
                range[1]);
    std::vector<float> ks(static_cast<size_t>(rows)), vs(static_cast<size_t>(rows));
    for (int64_t l = range[0]; l < range[1]; ++l) {
      dist::recv(ks.data(), ks.size() * sizeof(float), r, dist::kTagPrefix, "a stage's prefix K rows");
      dist::recv(vs.data(), vs.size() * sizeof(float), r, dist::kTagPrefix, "a stage's prefix V rows");
      take(int(l), ks.data(), vs.data());
    }
  }
  return KvPrefix::from_rows(p->tokens(), L, p->kv_dim(), std::move(k), std::move(v));
}

// Rank 0: the other stages' tensors for write_artifact.
runtime::WriteOptions::Remote receive_stages() {
  runtime::WriteOptions::Remote r;
  for (int rank = 1; rank < dist::size(); ++rank) {
    const json j = json::parse(dist::recv_text(rank, dist::kTagSpecs, "a stage's tensor list"));
    for (const json& t : j.at("tensors")) {
      const std::optional<DType> dt = parse_dtype(t.at(1).get<std::string>());
      SINKQ_CHECK(dt.has_value(), "rank {}: tensor {} has dtype {}", rank, t.at(0).dump(), t.at(1).dump());
      r.specs.push_back({{t.at(0).get<std::string>(), *dt, t.at(2).get<std::vector<int64_t>>(),
                          t.at(3).get<std::string>()}, rank});
    }
    for (const auto& [k, v] : j.at("meta_linears").items()) r.meta_linears[k] = v;
  }
  r.read = [](int rank, const SafetensorsStreamWriter::TensorSpec& spec, std::span<std::byte> out) {
    dist::recv(out.data(), out.size(), rank, dist::kTagTensor, spec.name);
  };
  return r;
}

DType resolve_fp_dtype(const std::string& value, DType source, const std::string& name) {
  // auto: an fp32 (or GGUF-block) table as f16, a bf16 / f16 one as it is.
  if (value == "auto") return source == DType::F32 || dtype_is_block(source) ? DType::F16 : source;
  if (value == "f32") return DType::F32;
  if (value == "f16") return DType::F16;
  if (value == "bf16") return DType::BF16;
  fail("unknown {} '{}': expected auto, f32, f16 or bf16", name, value);
}
}  // namespace

nlohmann::json quantize_artifact(const std::string& model_path, const std::string& out, const quant::Recipe& recipe,
                                 const QuantizeArtifactOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  // Everything that can be refused without loading is refused first.
  runtime::check_runnable(recipe);
  resolve_fp_dtype(opt.fp_dtype, DType::F32, opt.fp_dtype_name);
  SINKQ_CHECK(!recipe.head.on() || opt.fp_dtype == "auto", "{} {} with --head-bits {}: the embeddings and the LM head "
              "are stored in int{}, so no full-precision table is left to store", opt.fp_dtype_name, opt.fp_dtype,
              recipe.head.bits, recipe.head.bits);
  std::error_code ec;
  SINKQ_CHECK(opt.force || !std::filesystem::exists(out, ec),
              "'{}' already exists: refusing to overwrite it (use {} to replace it)", out, opt.force_name);

  OpenOptions oo;
  oo.recipe = recipe;
  oo.pipeline = opt.pipeline;
  oo.serve_stages = false;  // under mpirun: every rank packs its stage, rank 0 writes
  const std::shared_ptr<const Engine> engine = Engine::open(model_path, oo);
  const Model& model = *engine->source_model();
  std::fprintf(stderr, "quantize: packing the linear layers\n");
  runtime::QuantizeOptions qo;
  qo.fp_dtype = resolve_fp_dtype(opt.fp_dtype, model.weights().embed.dtype, opt.fp_dtype_name);
  runtime::QuantizedModel qm = engine->pack(qo);
  qm.prefix = gather_prefix(qm.prefix, *qm.model);  // under mpirun: every layer's rows on rank 0
  // The whole model's packed bytes (each stage counts what the artifact takes from it).
  const int64_t packed_bytes = dist::sum_over_ranks(int64_t(qm.packed_bytes()));
  runtime::WriteOptions wo;
  wo.force = opt.force;
  if (dist::active() && dist::rank() > 0) {
    send_stage(runtime::stage_tensors(qm));
    return nullptr;  // rank 0 writes and reports
  }
  if (dist::active()) wo.remote = receive_stages();
  std::fprintf(stderr, "quantize: writing %s\n", out.c_str());
  const runtime::ArtifactInfo info = runtime::write_artifact(qm, model_path, out, wo);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const double fp16 = 2.0 * double(model.weights().parameter_count(model.config()));
  uint64_t tensors = 0;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, bytes] : info.files) {
    files[name] = bytes;
    if (name == "model.safetensors") tensors = bytes;
  }
  return {{"out", info.dir},
          {"model", model_path},
          {"config", qm.describe()},
          {"files", files},
          {"total_bytes", info.total_bytes},
          {"tensor_bytes", tensors},
          {"packed_weight_bytes", packed_bytes},
          {"fp16_bytes", int64_t(fp16)},
          {"ratio_to_fp16", double(tensors) / fp16},
          {"fp_dtype", runtime::fp_dtype_label(qm.model->weights())},
          {"seconds", seconds}};
}

}  // namespace sinkq
