// sinkq/model/model.h — a loaded model (config + weights + RoPE table) and its forward pass.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/weights.h"
#include "kernels/ops.h"
#include "model/kv_cache.h"
#include "model/kv_prefix.h"
#include "model/kv_store.h"
#include "model/sites.h"

namespace sinkq {

class Model {
 public:
  // Loads and validates an HF model directory (config.json + safetensors, mmap) or a GGUF file;
  // `stage`: only those layers (and ends) are read (io/weights.h LayerRange; MPI pipeline stages).
  static std::shared_ptr<Model> load(const std::string& dir, LayerRange stage = {});
  // A model with random weights of the given shape, held in memory (benchmarks, tests).
  // Weights ~ U(-a, a) with a = 1/sqrt(fan_in) so activations stay O(1); norms = 1.
  static std::shared_ptr<Model> random(const ModelConfig& cfg, DType dtype, uint64_t seed);
  // A model with base's config, RoPE table and directory but the weights `w` (e.g. fake-quantized
  // matrices in w.owned). `w` may point into base's buffers (embeddings, norms, the mmap): the new
  // model holds `base` alive for as long as it lives, so those pointers stay valid.
  static std::shared_ptr<Model> with_weights(std::shared_ptr<const Model> base, ModelWeights w);
  // A model from a validated config and weights built elsewhere (e.g. a sinkq artifact: packed
  // linears in LayerWeights::impl, the rest pointing into w.store's mapping, which `w` owns).
  // The RoPE table is made from cfg; dir is informational ("" for none). Checks the layer count.
  static std::shared_ptr<Model> from_weights(const ModelConfig& cfg, ModelWeights w, std::string dir = "",
                                             LayerRange stage = {});

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }
  ModelWeights& mutable_weights() { return w_; }
  const RopeTable& rope() const { return rope_; }
  // Layer l's RoPE: rope() but on Gemma 3's sliding layers (ModelConfig::local_rope), whose base differs.
  const RopeTable& rope(int l) const { return cfg_.local_rope(l) ? rope_local_ : rope_; }
  const std::string& dir() const { return dir_; }  // "" for in-memory models
  // The layers whose weights this model holds (resolved: end >= 0); the whole model but under MPI.
  const LayerRange& stage() const { return stage_; }
  bool whole() const { return stage_.whole(cfg_.num_layers); }
  // Bytes of weights one decode step reads (all matrices, a linear with a LinearImpl counted by
  // its impl's bytes(); the embedding row is negligible).
  int64_t decode_weight_bytes() const;

 private:
  void make_ropes();  // rope_ (and rope_local_) from cfg_
  ModelConfig cfg_;
  ModelWeights w_;
  RopeTable rope_, rope_local_;
  std::string dir_;
  LayerRange stage_;
  std::vector<std::vector<uint8_t>> storage_;  // backing of random()'s matrices
  std::shared_ptr<const Model> base_;          // with_weights(): owner of borrowed weight memory
};

// A layer's q/k/v and gate/up through LinearImpl::apply_shared (on, the default: packed linears
// quantize their input once per site and run one GEMM dispatch) or one apply each (off:
// SINKQ_SITE_SHARING=0 in the environment, or set_site_sharing(false): benchmarks compare the two;
// the results are the same bit for bit). Applies to the next layer a Forward runs.
void set_site_sharing(bool on);
bool site_sharing();

// The later stages of a pipeline, seen from the first (dist/pipeline.h implements it over MPI):
// set on a Forward whose model is the first stage, it takes each chunk after that stage's layers
// and, when logits are wanted, returns them from the last stage.
class StageLink {
 public:
  virtual ~StageLink() = default;
  // The chunk `tokens` at body rows [body_past, body_past + T), x [T, hidden] after this stage's
  // layers; logits_out: nullptr (none wanted) or [T − first_row, vocab], the rows from first_row.
  virtual void forward(std::span<const int32_t> tokens, int64_t body_past, const float* x, int64_t first_row,
                       float* logits_out) = 0;
};

// Layer-at-a-time work on a model split into pipeline stages (calibration, a prefix's KV rows):
// the activations entering a stage's first layer come from the previous stage, those leaving its
// last layer go to the next. dist/ installs it under mpirun (null otherwise: no stages).
class StageHandoff {
 public:
  virtual ~StageHandoff() = default;
  virtual void receive(float* x, size_t n) = 0;     // from the previous stage
  virtual void send(const float* x, size_t n) = 0;  // to the next stage
  // Per-layer records of a calibration report ([num_layers], null where another stage holds the
  // layer): every stage's filled in on the first stage (the others get theirs back unchanged).
  virtual nlohmann::json gather_layers(nlohmann::json records) = 0;
  // The first stage's `j` on every stage (what it alone could compute, e.g. the found prefix).
  virtual nlohmann::json from_first(nlohmann::json j) = 0;
};
void set_stage_handoff(std::shared_ptr<StageHandoff> h);
StageHandoff& stage_handoff();  // error when none is installed (a stage outside mpirun)

// The inputs of a stage's first layer for each sequence of `seqs` ([len, hidden] each): the
// embeddings on the first stage (fwd.embed), else received from the previous stage; and the
// outputs of its last layer handed to the next stage (nothing on the last stage).
std::vector<std::vector<float>> stage_inputs(Forward& fwd, std::span<const std::vector<int32_t>> seqs);
void stage_outputs(const Model& m, const std::vector<std::vector<float>>& xs);
// fwd.step(tokens) of one stage, every stage at once: step()'s chunks of max_batch() tokens, each
// through this stage's layers with its input from the previous stage and its output to the next.
void stage_step(Forward& fwd, std::span<const int32_t> tokens);

// A layer's state saved at a site by Forward::run_layer for resume_layer: the residual stream
// [T, hidden] at that point and the site's input [T, features] before its hook ran.
struct LayerResume {
  Site site = Site::MlpIn;
  std::vector<float> residual, input;
  static bool resumable(Site s) { return s == Site::OIn || s == Site::MlpIn || s == Site::DownIn; }
};

// One sequence's forward pass over preallocated buffers: prefill (T > 1) and decode (T = 1)
// share the code; the KV cache grows with every call.
class Forward {
 public:
  // max_ctx: cache rows (≤ max_position_embeddings, else sinkq::Error). max_batch: the most tokens
  // one step() processes at once (longer inputs are split into chunks of this size).
  Forward(std::shared_ptr<const Model> model, int64_t max_ctx, int64_t max_batch = 512);

  // Clears the sequence (the body); a prefix stays in place.
  void reset() {
    cache_.clear();
    store_rows_ = 0;
  }
  // Keeps the first `rows` body rows and drops the rest, so the next step() continues after them
  // (scoring several continuations of one context computes the context once). 0 <= rows <=
  // body_size(), and a KV store must be rewindable(); else sinkq::Error.
  void truncate(int64_t rows);
  bool rewindable() const { return !store_ || store_->rewindable(); }
  // Body rows in the cache (or the KV store).
  int64_t body_size() const { return store_ ? store_rows_ : cache_.size(); }
  // Body rows the cache (or the KV store) can hold.
  int64_t body_capacity() const { return store_ ? store_->capacity() : cache_.capacity(); }
  // Absolute position of the next token: prefix size + body rows in the cache.
  int64_t n_past() const { return prefix_size() + body_size(); }
  // Last absolute position + 1 this Forward can reach: prefix size + cache capacity.
  int64_t max_ctx() const { return prefix_size() + body_capacity(); }

  // Puts a full-precision KV prefix (kv_prefix.h) in front of every sequence: the body then
  // starts at position prefix->size(). Only between sequences (empty body, else sinkq::Error);
  // the prefix must come from a model of the same shape, and prefix + cache capacity must fit
  // max_position_embeddings (else sinkq::Error naming both). nullptr removes it.
  void set_prefix(std::shared_ptr<const KvPrefix> prefix);
  const std::shared_ptr<const KvPrefix>& prefix() const { return prefix_; }
  int64_t prefix_size() const { return prefix_ ? prefix_->size() : 0; }
  const Model& model() const { return *model_; }
  SiteHooks& hooks() { return hooks_; }
  // The fp32 body cache; empty (capacity 0, no memory) while a KV store is set.
  KVCache& cache() { return cache_; }

  // Keeps the body in `store` (kv_store.h, e.g. runtime/packed_kv.h's int8 / int4 cache) instead
  // of the fp32 KVCache, whose memory is released; nullptr goes back to an fp32 cache of the
  // store's capacity. New K/V rows are then produced in fp32 scratch [max_batch, kv_dim], pass the
  // k / v site hooks, and are handed to store->write(). Only between sequences (empty body, else
  // sinkq::Error); the store must match the model (layers, kv_dim) and, with the prefix, fit
  // max_position_embeddings (else sinkq::Error naming both). The prefix stays fp32 in front.
  void set_kv_store(std::unique_ptr<KvStore> store);
  const KvStore* kv_store() const { return store_.get(); }
  // Bytes held for the body: the fp32 cache's or the store's.
  size_t kv_bytes() const { return store_ ? store_->bytes() : cache_.bytes(); }

  // Feeds `tokens` at positions n_past().. and returns their logits, row-major:
  // [tokens.size(), vocab] when all_logits, else [1, vocab] for the last token.
  // Throws sinkq::Error when the cache would overflow. The span stays valid until the next call.
  std::span<const float> step(std::span<const int32_t> tokens, bool all_logits);

  // A pipeline (StageLink): the layers after this model's stage run there; step() hands every
  // chunk on. Only on a first stage that is not the whole model, between sequences.
  void set_link(std::shared_ptr<StageLink> link);
  const std::shared_ptr<StageLink>& link() const { return link_; }
  // One chunk of a pipeline stage (dist/pipeline.h): this model's layers over x [T, hidden] (the
  // previous stage's output — the first stage embeds `tokens` instead —, replaced by this stage's)
  // at body rows body_size()..; on the last stage then the final norm and LM head of rows
  // [first_row, T) into logits_out (nullptr: none). Advances the body like step(). T <= max_batch().
  void run_stage(std::span<const int32_t> tokens, float* x, int64_t first_row, float* logits_out);

  // Layer-at-a-time execution for layer-wise calibration (grid searches compare one block's
  // output under candidate quantizers without re-running the layers before it). Same code as
  // step(); tokens.size() = T <= max_batch, at positions n_past()..n_past()+T-1.
  //   embed(tokens, x)          x [T, hidden] = the embedding rows (the input of layer 0)
  //   run_layer(l, tokens, x)   x ← layer l (x) in place, hooks included; writes layer l's cache
  //                             rows at those positions and does NOT advance n_past(), so the
  //                             same layer can be run again on other inputs (a later candidate
  //                             overwrites the rows an earlier one wrote)
  void embed(std::span<const int32_t> tokens, float* x);
  void run_layer(int l, std::span<const int32_t> tokens, float* x);
  // The same with the layer's state saved just before the hook of site `at->site` runs (the
  // residual stream and that site's input), so resume_layer can rerun the rest of the layer under
  // other quantizers from there without recomputing what comes before (a grid search's candidates
  // at o_in / mlp_in / down_in). Only those three sites (LayerResume::resumable); else an error.
  // at == nullptr: the plain run_layer.
  void run_layer(int l, std::span<const int32_t> tokens, float* x, LayerResume* at);
  // x [T, hidden] ← layer l run from r.site (its hook included) on the state r saved, with the
  // same tokens and positions: bit for bit what run_layer gives when everything before r.site
  // computes what it computed then (the hooks before it unchanged). Writes no cache rows.
  void resume_layer(int l, std::span<const int32_t> tokens, const LayerResume& r, float* x);

  // One step of several sequences of one model together: chunk b (1..seqs[b]->max_batch() tokens:
  // a decode token, or a chunk of a prompt as step() cuts it) is fed to seqs[b] at its n_past(),
  // and the logits after its last token [vocab] are then seqs[b]->logits(). The norms, residuals
  // and the LM head run over all rows at once; RoPE, the site hooks, the KV writes and attention
  // per sequence over its own cache, prefix and KV store. The linears run over groups of rows
  // (linear_groups): consecutive sequences while the group holds at most matmul_rowwise_rows()
  // rows (kernels/ops.h: the active ISA's multi-token GEMV, each row summed in its own order; the packed
  // low-bit GEMMs sum in int32), and a chunk longer than that as a call of its own, the call
  // step() makes for it. So the weights are read once per group, not once per sequence (decode is
  // bound by weight bytes: B decode rows cost little more than one), and each sequence's logits
  // are exactly seqs[b]->step(chunk b)'s, at any batch size and mix of prefill chunks and decode
  // rows (tests/engine: Engine.BatchedStepEqualsEachAlone). The first sequence's activation
  // buffers are the batch's workspace (the rows in all <= its max_batch); every sequence must be
  // distinct and have room for its chunk; else sinkq::Error naming the sequence's index in the
  // batch, before anything runs. An error while computing (e.g. a non-finite activation in a
  // packed linear) fails the whole step.
  static void step_batch(std::span<Forward* const> seqs, std::span<const std::span<const int32_t>> chunks);
  // The decode step of several sequences: token b to seqs[b] (step_batch with one-token chunks).
  static void step_batch(std::span<Forward* const> seqs, std::span<const int32_t> tokens);
  // The most tokens one step() chunk or step_batch() (as the first sequence) takes.
  int64_t max_batch() const { return max_batch_; }
  // The logits of the last step() / step_batch() row of this sequence.
  std::span<const float> logits() const { return logits_; }

 private:
  // Rows [row0, row0 + n) of a layer's batch belong to sequence f (step_batch; step() is one part);
  // they are its positions / ids from index `first` on (the head of step_batch: the last row of a
  // chunk; run_chunk: its rows from first_row).
  struct Part {
    Forward* f;
    int64_t row0, n, first = 0;
  };
  // Row ranges [row0, row0 + n) of parts that one linear call takes: step_batch's groups, computed
  // once a step and handed to every layer and the head.
  struct Rows {
    int64_t row0, n;
  };
  static std::vector<Rows> linear_groups(std::span<const Part> parts);
  void run_chunk(std::span<const int32_t> tokens, bool all_logits, float* logits_out);
  void chunk(std::span<const int32_t> tokens, float* x_io, int64_t first_row, float* logits_out);
  // Embedding rows of `ids` (× sqrt(hidden) where the family scales them: LayerSpec::embed_scale).
  static void embed_ids(const Model& m, std::span<const int32_t> ids, float* out);
  // groups: the row ranges of one linear call each (linear_groups; one part: all its rows).
  static void head(const float* x, std::span<const Part> parts, std::span<const Rows> groups, float* xn,
                   float* logits);
  void layer(int l, int64_t T);
  // from: the site the layer starts at (AttnIn = the whole layer; OIn / MlpIn / DownIn: x_ holds the
  // residual and that site's buffer its input, as resume_layer sets them); save: the state to keep
  // before save->site's hook (nullptr: none).
  void layer(int l, int64_t T, std::span<const Part> parts, std::span<const Rows> groups, float* k_scratch,
             float* v_scratch, Site from = Site::AttnIn, LayerResume* save = nullptr);
  float* site_input(Site s);  // the activation buffer a resumable site's hook sees
  void advance(int64_t T);  // T new body rows are in the cache / store
  void site(Site s, int layer, float* data, int64_t T, int64_t features);

  std::shared_ptr<const Model> model_;
  KVCache cache_;                          // the body: row r = absolute position prefix_size() + r
  std::unique_ptr<KvStore> store_;         // when set: holds the body instead of cache_
  int64_t store_rows_ = 0;                 // body rows in store_
  std::vector<float> k_new_, v_new_;       // store_ only: the chunk's new rows [max_batch, kv_dim]
  std::shared_ptr<const KvPrefix> prefix_;  // shared, read in place; never copied
  std::shared_ptr<StageLink> link_;        // the later stages of a pipeline (first stage only)
  SiteHooks hooks_;
  int64_t max_batch_;
  AttnShape attn_shape_;
  // Activations, [max_batch, features] each.
  std::vector<float> x_, xn_, q_, att_, tmp_, gate_, up_;
  std::vector<int32_t> pos_, ids_;
  std::vector<float> logits_;
};

}  // namespace sinkq
