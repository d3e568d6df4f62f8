// sinkq/engine.h — the library API of sinkq: open a model and run sessions over it. What the CLI
// commands, the HTTP server (issue 16) and the Python module call; nothing here depends on the CLI.
//
//   auto engine = sinkq::Engine::open("model-dir | model.gguf | artifact-dir", {.recipe = r});
//   auto s = engine->new_session(/*ctx=*/2048);           // own KV cache; weights shared
//   s->generate(engine->encode_prompt("Once"), opt, [](int32_t id) { ...; return true; });
//   s->perplexity(tokens, ppl_options);  s->logprobs(tokens);
//
// One Engine is one loaded model, immutable after open: a full-precision model quantized in
// process by a quant::Recipe (the simulator: rotation, calibration, fake-quantized weights and
// site hooks; the fp16 recipe runs the model as it is), or a sinkq artifact (the packed runtime:
// int8 / int4 kernels, packed KV cache, online rotations, its stored prefix). Either way it holds
// the full-precision KV prefix (PrefixQuant's outlier tokens, IntactKV's pivots) that every
// session runs behind. Sessions are independent: several over one Engine may run at once on
// different threads (each has its own Forward, KV cache and hooks; the weights are read-only), so
// a server serves N requests with N sessions and one copy of the weights.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "calib/prefix.h"
#include "eval/generate.h"
#include "eval/ppl.h"
#include "model/kv_prefix.h"
#include "model/model.h"
#include "quant/pipeline.h"
#include "quant/recipe.h"
#include "runtime/quantized_model.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

class Session;

struct OpenOptions {
  // A model directory or GGUF file: the recipe it is quantized with (nullopt = the fp16 preset:
  // nothing quantized). An artifact is already quantized: giving a recipe is an error.
  std::optional<quant::Recipe> recipe;
  quant::PipelineOptions pipeline;  // stderr notes and progress of the calibration
  // The path's tokenizer when the caller already loaded it (Engine::preview's); null: open loads it.
  std::shared_ptr<const Tokenizer> tokenizer;
  // Under mpirun -np N > 1 (dist/pipeline.h) open loads this rank's stage; then the ranks after the
  // first serve rank 0's sessions from inside open and never return (true), or every rank returns
  // its stage for collective work (false: quantize_artifact).
  bool serve_stages = true;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  enum class Runtime { Simulated, Packed };

  // Loads `path` (a model directory, a GGUF file or a sinkq artifact) and, for a model, runs the
  // quantization pipeline of opt.recipe (quant/pipeline.h: calibration data, prefix resolution,
  // build_sim). Errors (sinkq::Error) name the file, field or flag.
  static std::shared_ptr<const Engine> open(const std::string& path, const OpenOptions& opt = {});

  // What open(path, opt) will put in front of every sequence, known before anything slow runs
  // (so a command can check its --ctx before a calibration of minutes): the prefix's length, or
  // a lower bound of it (1 for `auto`, found on the calibration data).
  struct Preview {
    bool artifact = false;
    bool has_prefix = false;
    int64_t prefix_min = 0;
    std::string prefix_name;  // for messages: "of the artifact", "--prefix bos", ...
    std::shared_ptr<const Tokenizer> tokenizer;
    int64_t max_position = 0;
  };
  static Preview preview(const std::string& path, const OpenOptions& opt = {});

  Runtime runtime() const { return runtime_; }
  const char* runtime_name() const { return runtime_ == Runtime::Packed ? "packed" : "simulated"; }
  const std::string& path() const { return path_; }
  // The model that runs (fake-quantized or packed), and the configuration's limits.
  const std::shared_ptr<const Model>& model() const { return model_; }
  const ModelConfig& config() const { return model_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::shared_ptr<const Tokenizer>& tokenizer_ptr() const { return tokenizer_; }
  const quant::Recipe& recipe() const { return recipe_; }
  // The full-precision KV prefix in front of every sequence (null: none) and its tokens.
  const std::shared_ptr<const KvPrefix>& prefix() const { return prefix_; }
  const std::vector<int32_t>& prefix_tokens() const { return prefix_tokens_; }
  int64_t prefix_size() const { return int64_t(prefix_tokens_.size()); }
  // Whether the prefix holds the tokenizer's [BOS] (then a prompt is encoded without its own).
  bool prefix_has_bos() const { return prefix_has_bos_; }
  // Positions left for a session's own tokens: max_position_embeddings − prefix size.
  int64_t max_context() const { return config().max_position_embeddings - prefix_size(); }
  // One line: "artifact DIR: W4 per-channel sym | ..." or the recipe's description.
  std::string describe() const { return describe_; }
  // The configuration that runs, as JSON: the artifact (path, describe, its sinkq_recipe.json) or
  // the simulated model (SimModel::to_json, with the calibration data loaded).
  nlohmann::json config_json() const;
  // How the prefix was resolved (simulated: quant::Pipeline::prefix_json) or stored (artifact:
  // its recipe's prefix); null without a prefix.
  const nlohmann::json& prefix_json() const { return prefix_json_; }
  // The simulator's pipeline result (calibration samples, report): null for an artifact.
  const quant::Pipeline* pipeline() const { return pipeline_ ? pipeline_.get() : nullptr; }
  // The artifact as loaded: null for a simulated engine.
  const runtime::QuantizedModel* packed() const { return packed_ ? packed_.get() : nullptr; }

  // Prepares a Forward over model(): online rotations, quantization hooks (simulated) or the
  // packed KV cache (packed), and the prefix in front. The Forward's body must be empty.
  void attach(Forward& fwd) const;
  // A session of `ctx` positions after the prefix (1 <= ctx <= max_context(); error otherwise).
  std::unique_ptr<Session> new_session(int64_t ctx) const;

  // The full-precision reference of this engine, for KL divergence: the source model (an
  // artifact's recipe names it: source.model_dir) behind the same prefix tokens, their KV computed
  // at full precision by that model, so both score the same targets. Error naming the path when
  // an artifact's source is not here.
  std::shared_ptr<const Engine> reference() const;

  // A prompt's tokens: [BOS] + text, or the text alone when the prefix holds [BOS].
  std::vector<int32_t> encode_prompt(std::string_view text) const;
  // The stop ids of generation: the config's eos_token_ids and the tokenizer's [EOS].
  std::vector<int32_t> stop_ids() const;
  // A conversation's prompt tokens: the model's chat template rendered with the generation prompt
  // (calib/prefix.h render_chat) and encoded. The prefix is in front of every session: when the
  // rendered conversation starts with its tokens (IntactKV[P]: the same system prompt; a [BOS]
  // prefix and a template that writes [BOS]) they are not fed twice; with an IntactKV[P] prefix a
  // conversation without a system message runs behind the prefix's, and one with another system
  // message is an error (it would answer a conversation nobody sent). Error when the model has no
  // chat template or the template cannot render the messages.
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages) const;
  // The template's end-of-turn token ("<|im_end|>", ...), which ends a chat reply; -1: none.
  int32_t end_of_turn_id() const;

  // The packed model of a simulated engine (runtime::build_quantized), ready for
  // runtime::write_artifact; its recipe JSON records the calibration data and the prefix
  // resolution. Error for what the kernels cannot run.
  runtime::QuantizedModel pack(const runtime::QuantizeOptions& opt = {}) const;
  // The full-precision model it came from (simulated: the loaded model; artifact: null until
  // reference() loads it).
  const std::shared_ptr<const Model>& source_model() const { return source_; }

  // Whether this engine is one stage of an MPI pipeline (mpirun -np N > 1, dist/pipeline.h): its
  // model holds a range of the layers; sessions on rank 0 run the other stages through the ranks.
  bool distributed() const;

  Engine() = default;  // use open()

 private:
  friend std::shared_ptr<const Engine> open_stage(const std::string&, const OpenOptions&);
  void open_stage(const std::string& path, const OpenOptions& opt, const LayerRange& stage);
  Runtime runtime_ = Runtime::Simulated;
  std::string path_, describe_;
  std::shared_ptr<const Model> model_, source_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  quant::Recipe recipe_;
  std::shared_ptr<const KvPrefix> prefix_;
  std::vector<int32_t> prefix_tokens_;
  bool prefix_has_bos_ = false;
  nlohmann::json prefix_json_, artifact_json_;
  std::shared_ptr<const quant::Pipeline> pipeline_;
  std::shared_ptr<const runtime::QuantizedModel> packed_;
  bool reference_of_ = false;  // reference()'s: under mpirun its sessions are model 1 of the stages
};

// `sinkq quantize` as one library call (the CLI and the Python module both run it): checks that
// the kernels run `recipe`, refuses an existing `out` unless force, opens `model` with the recipe
// (the calibration pipeline), packs it and writes the artifact atomically. fp_dtype is the storage
// of the embeddings / lm_head: "auto" (the source's when 16-bit, else f16), "f32", "f16", "bf16".
// `names` spell the options in errors ("--force" / "force=True", "--fp-dtype" / "fp_dtype").
// Returns the summary `sinkq quantize --json` prints (out, files, bytes, ratio to fp16, seconds).
// Under mpirun -np N > 1 every rank calibrates nothing it does not hold: each packs its stage,
// rank 0 writes the one artifact (the others' tensors streamed to it) and returns the summary; the
// other ranks return null.
struct QuantizeArtifactOptions {
  std::string fp_dtype = "auto";
  bool force = false;
  quant::PipelineOptions pipeline;
  std::string force_name = "--force", fp_dtype_name = "--fp-dtype";
};
nlohmann::json quantize_artifact(const std::string& model, const std::string& out, const quant::Recipe& recipe,
                                 const QuantizeArtifactOptions& opt = {});

// One sequence over an Engine: its own Forward (KV cache after the engine's prefix). Not
// thread-safe itself; use one per thread.
class Session {
 public:
  Session(std::shared_ptr<const Engine> engine, int64_t ctx);
  const Engine& engine() const { return *engine_; }
  Forward& forward() { return *fwd_; }
  int64_t capacity() const;  // positions after the prefix
  int64_t n_past() const;    // tokens of this session in the cache
  // Empties the cache (the prefix stays).
  void reset();
  // Appends `tokens` (at least one; n_past() + size <= capacity(), else sinkq::Error) and returns
  // the logits after the last one [vocab], valid until the next call.
  std::span<const float> eval(std::span<const int32_t> tokens);
  // Teacher-forced log-probabilities of tokens[i] given tokens[0..i) (and the prefix), for
  // i in [from, size): what a completion API's echo + logprobs and lm-eval's loglikelihood need.
  // Starts from an empty cache (reset) and leaves the tokens in it. 1 <= from <= size.
  std::vector<double> logprobs(std::span<const int32_t> tokens, int64_t from = 1);
  // The same with each position's top_n most likely tokens (a completion API's echo + logprobs);
  // score(t, f, 0)[i].logprob == logprobs(t, f)[i] bit for bit.
  std::vector<TokenLogprob> score(std::span<const int32_t> tokens, int64_t from, int top_n);
  // Prefills `prompt` into an empty cache and samples (eval/generate.h). on_token(id, logprob) is
  // called for every emitted token; returning false stops generation there (a client that went
  // away).
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& opt, const OnToken& on_token = {});
  // KV memory the session holds (fp32 cache or packed store), allocated for its capacity.
  size_t kv_bytes() const;
  // Perplexity of `tokens` in windows of this session's capacity (eval/ppl.h), and with a
  // reference session (engine().reference()) the KL divergence to it.
  PplResult perplexity(const std::vector<int32_t>& tokens, const PplOptions& opt, Session* reference = nullptr);

 private:
  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<Forward> fwd_;
};

}  // namespace sinkq
