// sinkq/engine/engine.cc — Engine (include/sinkq/engine.h): a model directory / GGUF file run
// through the quantization pipeline of a Recipe, or an artifact on the packed runtime; the one
// place that knows the difference, so commands, the server and the bindings do not.
#include "sinkq/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "calib/prefix.h"
#include "core/error.h"
#include "core/mmap.h"
#include "dist/mpi.h"
#include "dist/pipeline.h"
#include "io/gguf.h"
#include "io/weights.h"
#include "runtime/artifact.h"

namespace sinkq {

namespace {

bool holds(const std::vector<int32_t>& v, int32_t id) { return id >= 0 && std::find(v.begin(), v.end(), id) != v.end(); }

// Whether `path` is an artifact; a recipe for one is an error (it is already quantized).
bool artifact_without_recipe(const std::string& path, const OpenOptions& opt) {
  if (!runtime::is_artifact(path)) return false;
  SINKQ_CHECK(!opt.recipe, "{} is a sinkq artifact (already quantized): a recipe applies to a model directory or "
              "GGUF file", path);
  return true;
}

std::shared_ptr<const Tokenizer> tokenizer_of(const std::string& path, const OpenOptions& opt) {
  return opt.tokenizer ? opt.tokenizer : std::shared_ptr<const Tokenizer>(Tokenizer::load(path));
}

}  // namespace

Engine::Preview Engine::preview(const std::string& path, const OpenOptions& opt) {
  Preview p;
  p.artifact = artifact_without_recipe(path, opt);
  p.tokenizer = tokenizer_of(path, opt);
  if (p.artifact) {
    const nlohmann::json r = nlohmann::json::parse(read_file(path + "/sinkq_recipe.json"), nullptr, false);
    const nlohmann::json* pj = nullptr;
    if (r.is_object() && r.contains("recipe") && r["recipe"].is_object() && r["recipe"].contains("prefix"))
      pj = &r["recipe"]["prefix"];
    p.has_prefix = pj && pj->is_object() && pj->contains("tokens") && (*pj)["tokens"].is_array();
    p.prefix_min = p.has_prefix ? int64_t((*pj)["tokens"].size()) : 0;  // load_artifact validates it
    p.prefix_name = "of the artifact";
    p.max_position = model_config_of(path).max_position_embeddings;
    return p;
  }
  const quant::Recipe r = opt.recipe ? *opt.recipe : quant::Recipe::from_preset("fp16");
  p.has_prefix = r.prefix.requested();
  p.prefix_name = "--prefix " + r.prefix.spec;
  if (!r.prefix.tokens.empty()) p.prefix_min = int64_t(r.prefix.tokens.size());
  else if (p.has_prefix)
    p.prefix_min = r.prefix.spec == "auto" ? 1 : int64_t(sinkq::prefix_tokens(parse_prefix_spec(r.prefix.spec), *p.tokenizer, path).size());
  p.max_position = model_config_of(path).max_position_embeddings;
  return p;
}

// Under mpirun -np N > 1 (dist/pipeline.h): this rank's stage of `path` (an artifact, or a model
// with its recipe built over the stages) and, when opt.serve_stages, on the ranks after the first
// their worker loop, which never returns.
std::shared_ptr<const Engine> open_stage(const std::string& path, const OpenOptions& opt) {
  auto e = std::make_shared<Engine>();
  const LayerRange stage = dist::stage_of(path);
  e->open_stage(path, opt, stage);
  if (!opt.serve_stages) return e;
  if (dist::rank() == 0) dist::set_serving();
  if (dist::rank() > 0) {
    const std::shared_ptr<const Engine> engine = e;
    auto reference = std::make_shared<std::shared_ptr<const Engine>>();  // --kld: opened with rank 0
    dist::worker(
        [engine, reference](int model, int64_t capacity, int64_t max_batch) {
          SINKQ_CHECK(model == 0 || *reference, "rank 0 runs the reference model, which this rank has not opened");
          const Engine& en = model == 0 ? *engine : **reference;
          auto f = std::make_unique<Forward>(en.model(), capacity, max_batch);
          en.attach(*f);
          return f;
        },
        [engine, reference] { *reference = engine->reference(); });
  }
  return e;
}

// The one loading path of open(): `stage` is the whole model, or under mpirun this rank's stage.
void Engine::open_stage(const std::string& path, const OpenOptions& opt, const LayerRange& stage) {
  path_ = path;
  if (artifact_without_recipe(path, opt)) {
    runtime_ = Runtime::Packed;
    tokenizer_ = tokenizer_of(path, opt);
    packed_ = std::make_shared<const runtime::QuantizedModel>(runtime::load_artifact(path, stage));
    model_ = packed_->model;
    recipe_ = packed_->cfg;
    prefix_ = packed_->prefix;
    describe_ = "artifact " + path + ": " + packed_->describe();
    artifact_json_ = nlohmann::json::parse(read_file(path + "/sinkq_recipe.json"));
    if (prefix_) prefix_json_ = artifact_json_.at("recipe").at("prefix");
  } else {
    // build_sim on each stage: rotation, weights, the packed head and the prefix's KV rows per
    // layer; the clip grid and the static scale searches layer by layer, each stage's inputs from
    // the previous one (model.h StageHandoff); CrossQuant's column maxima per stage; block-wise
    // fine-tuning block by block on the stage that holds the block. Not over stages yet: what
    // needs a backward pass through every layer (KVQuant's Fisher codebooks, IntactKV+Cal's
    // prefix training).
    const quant::Recipe r = opt.recipe ? *opt.recipe : quant::Recipe::from_preset("fp16");
    const char* whole = !dist::active()             ? nullptr
                        : r.kv.vector()             ? "--kv-codebook"
                        : r.prefix.train_epochs > 0 ? "--prefix-train"
                                                    : nullptr;
    SINKQ_CHECK(!whole, "under mpirun, {} is not distributed yet ({}): quantize in one process (sinkq quantize) and "
                "run the artifact over the ranks", whole, r.describe());
    runtime_ = Runtime::Simulated;
    source_ = Model::load(path, stage);
    tokenizer_ = tokenizer_of(path, opt);
    pipeline_ = std::make_shared<const quant::Pipeline>(quant::run_pipeline(r, source_, *tokenizer_, opt.pipeline));
    model_ = pipeline_->sim.model;
    recipe_ = pipeline_->sim.cfg;
    prefix_ = pipeline_->sim.prefix;
    prefix_json_ = pipeline_->prefix_json;
    describe_ = recipe_.describe();
  }
  if (prefix_) prefix_tokens_ = prefix_->tokens();
  prefix_has_bos_ = holds(prefix_tokens_, tokenizer_->bos_id());
}

std::shared_ptr<const Engine> Engine::open(const std::string& path, const OpenOptions& opt) {
  if (dist::active()) return sinkq::open_stage(path, opt);
  auto e = std::make_shared<Engine>();
  e->open_stage(path, opt, LayerRange::all());
  return e;
}

nlohmann::json Engine::config_json() const {
  if (runtime_ == Runtime::Packed) return {{"artifact", path_}, {"describe", describe_}, {"recipe", artifact_json_}};
  nlohmann::json j = pipeline_->sim.to_json();
  if (!pipeline_->calib_json.is_null()) j["calibration"]["data"] = pipeline_->calib_json;
  return j;
}

void Engine::attach(Forward& fwd) const {
  SINKQ_CHECK(&fwd.model() == model_.get(), "Engine::attach: the Forward runs another model");
  if (packed_) {
    packed_->attach(fwd);
  } else if (pipeline_->sim.cfg.kv.recent > 0) {
    // The recent int8 window is per query: the simulated model's other hooks, its prefix, and the
    // codebook KV store (its fused kernels run the same values the simulator would).
    const quant::SimModel& sim = pipeline_->sim;
    sim.attach_hooks(fwd, /*kv_codecs=*/false);
    fwd.set_prefix(sim.prefix);
    runtime::attach_codebook_kv(fwd, runtime::CodebookKvScheme::from_sim(sim));
  } else {
    pipeline_->sim.attach(fwd);
  }
  // The first stage of a pipeline (mpirun) hands its chunks on to the other ranks.
  if (!model_->whole() && model_->stage().first()) fwd.set_link(dist::make_link(fwd, reference_of_ ? 1 : 0));
}

bool Engine::distributed() const { return !model_->whole(); }

std::unique_ptr<Session> Engine::new_session(int64_t ctx) const {
  return std::make_unique<Session>(shared_from_this(), ctx);
}

std::shared_ptr<const Engine> Engine::reference() const {
  // Under mpirun: every rank loads its stage of the source model and computes its layers' prefix
  // rows (collective), the other ranks when rank 0 tells them (dist::worker).
  if (distributed() && dist::rank() == 0) dist::open_reference_on_workers();
  auto ref = std::make_shared<Engine>();
  ref->reference_of_ = true;
  ref->runtime_ = Runtime::Simulated;
  ref->tokenizer_ = tokenizer_;
  ref->recipe_ = quant::Recipe::from_preset("fp16");
  std::shared_ptr<const Model> fp = source_;
  std::string src = path_;
  if (!fp) {
    const nlohmann::json& so = artifact_json_.contains("source") ? artifact_json_.at("source") : nlohmann::json();
    if (so.is_object() && so.contains("model_dir") && so.at("model_dir").is_string())
      src = so.at("model_dir").get<std::string>();
    else
      src.clear();
    SINKQ_CHECK(!src.empty() && (std::filesystem::is_directory(src) || GgufFile::looks_like_gguf(src)),
                "--kld on an artifact needs its source model: the recipe's source.model_dir '{}' is not a model "
                "directory or GGUF file here", src);
    // Under mpirun the source's own stages (its bytes, not the artifact's: an int4 artifact with
    // fp16 tables splits its layers very unevenly, its fp32 source would not).
    fp = Model::load(src, dist::active() ? dist::stage_of(src, /*report=*/false) : LayerRange::all());
    SINKQ_CHECK(fp->config().vocab_size == config().vocab_size && fp->config().hidden_size == config().hidden_size,
                "--kld: the source model {} does not match the artifact's shape", src);
  }
  ref->path_ = src;
  ref->source_ = ref->model_ = fp;
  ref->describe_ = "full precision " + src;
  // The fp model behind the same prefix tokens, computed by itself at full precision (unrotated:
  // the fp model is the reference, whatever basis the quantized one runs in).
  if (!prefix_tokens_.empty()) ref->prefix_ = KvPrefix::compute(fp, prefix_tokens_);
  ref->prefix_tokens_ = prefix_tokens_;
  ref->prefix_has_bos_ = prefix_has_bos_;
  auto sim = std::make_shared<quant::Pipeline>();
  sim->sim.model = fp;
  sim->sim.cfg = ref->recipe_;
  sim->sim.prefix = ref->prefix_;
  ref->pipeline_ = std::move(sim);
  return ref;
}

std::vector<int32_t> Engine::encode_prompt(std::string_view text) const {
  EncodeOptions enc;
  enc.add_special = !prefix_has_bos_;  // the prefix carries [BOS]
  return tokenizer_->encode(std::string(text), enc);
}

std::vector<int32_t> Engine::stop_ids() const {
  std::vector<int32_t> ids(config().eos_token_ids.begin(), config().eos_token_ids.end());
  if (tokenizer_->eos_id() >= 0 && !holds(ids, tokenizer_->eos_id())) ids.push_back(tokenizer_->eos_id());
  return ids;
}

std::vector<int32_t> Engine::encode_chat(const std::vector<ChatMessage>& messages_in) const {
  const std::string tpl = tokenizer_->chat_template();
  SINKQ_CHECK(!tpl.empty(), "the model ({}) has no chat template: write the prompt out and generate from it", path());
  SINKQ_CHECK(!messages_in.empty(), "the conversation has no messages");
  // The prefix's spec, read by the one --prefix parser (calib/prefix.h): a system prompt or not.
  const std::string spec_text = prefix_json_.is_object() ? prefix_json_.value("spec", "") : "";
  const std::optional<PrefixSpec> spec = spec_text.empty() ? std::nullopt : std::optional(parse_prefix_spec(spec_text));
  const bool system_prefix = spec && spec->kind == PrefixSpec::Kind::System;
  std::vector<ChatMessage> messages = messages_in;
  // IntactKV[P]: a conversation without a system message runs behind the prefix's.
  if (system_prefix && messages.front().role != "system") messages.insert(messages.begin(), {"system", spec->text});
  const std::string text = render_chat(tpl, "the model's chat template", messages, /*add_generation_prompt=*/true,
                                       ChatSpecials::of(*tokenizer_));
  // As transformers tokenizes a rendered chat: special tokens parsed, no BOS added (the template
  // writes its own).
  std::vector<int32_t> ids = tokenizer_->encode(text, EncodeOptions{.add_special = false, .parse_special = true});
  const std::vector<int32_t>& pre = prefix_tokens();
  if (!pre.empty() && ids.size() >= pre.size() && std::equal(pre.begin(), pre.end(), ids.begin()))
    return {ids.begin() + long(pre.size()), ids.end()};
  SINKQ_CHECK(!system_prefix,
              "this model runs behind the system prompt it was quantized with (IntactKV[P], '{}'): send that system "
              "message first, or none (it is then taken as given)",
              spec->text);
  if (prefix_has_bos_ && !ids.empty() && ids.front() == tokenizer_->bos_id()) ids.erase(ids.begin());
  return ids;
}

int32_t Engine::end_of_turn_id() const {
  const std::string e = chat_end_of_turn(tokenizer_->chat_template(), ChatSpecials::of(*tokenizer_));
  return e.empty() ? -1 : tokenizer_->token_to_id(e);
}

runtime::QuantizedModel Engine::pack(const runtime::QuantizeOptions& opt) const {
  SINKQ_CHECK(runtime_ == Runtime::Simulated && pipeline_, "{} is already packed (a sinkq artifact)", path_);
  runtime::QuantizedModel qm = runtime::build_quantized(pipeline_->sim, opt);
  if (!pipeline_->calib_json.is_null()) qm.recipe["calibration_data"] = pipeline_->calib_json;
  if (!pipeline_->prefix_json.is_null()) qm.recipe["prefix_resolution"] = pipeline_->prefix_json;
  return qm;
}

}  // namespace sinkq
