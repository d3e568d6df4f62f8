#include "model/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/env_switch.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/mmap.h"
#include "kernels/team.h"

namespace sinkq {

std::shared_ptr<Model> Model::load(const std::string& dir, LayerRange stage) {
  auto m = std::make_shared<Model>();
  ModelFiles f = ModelFiles::load(dir, stage);
  m->cfg_ = std::move(f.config);
  m->stage_ = {stage.begin, stage.end_of(m->cfg_.num_layers)};
  m->w_ = std::move(f.weights);
  m->make_ropes();
  m->dir_ = dir;
  return m;
}

void Model::make_ropes() {
  rope_ = RopeTable::make(cfg_.rope());
  if (cfg_.rope_local_theta > 0) rope_local_ = RopeTable::make(cfg_.rope_local());
}

namespace {

// splitmix64: a fast, seedable generator for filling gigabytes of benchmark weights.
inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills n elements of `dtype` with U(-a, a), in parallel, reproducibly for a given seed.
void fill_uniform(void* dst, DType dtype, int64_t n, float a, uint64_t seed) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    uint64_t s = seed * 0x100000001b3ull + uint64_t(c);
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      const float u = float(splitmix64(s) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      const float v = (2.0f * u - 1.0f) * a;
      switch (dtype) {
        case DType::F32: static_cast<float*>(dst)[i] = v; break;
        case DType::BF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
        case DType::F16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
        default: SINKQ_ASSERT(false);  // element types only
      }
    }
  }
}

// Steps of at most this many rows (decode, batched decode, short prompts) run in one thread team
// (kernels/team.h): their ~10 parallel loops per layer are each 5-100 us, where an OpenMP region
// per loop costs as much as the loop. Longer chunks keep a region per loop: their loops are
// milliseconds long and the per-region cost is below 1%.
constexpr int64_t kTeamMaxRows = 16;

// x[i] += y[i]: the residual connection.
inline void add_inplace(float* x, const float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// One linear layer: its LinearImpl (LayerWeights::impl, e.g. packed low-bit) when set, else matmul.
inline void linear(const float* x, int64_t T, const Mat& w, const LinearImpl* impl, const float* bias, float* y) {
  if (impl) impl->apply(x, T, bias, y); else matmul(x, T, w, bias, y);
}

EnvSwitch g_site_sharing("SINKQ_SITE_SHARING");

// The linears of one site over the same input (q/k/v, gate/up): through the first one's
// apply_shared when every one has a LinearImpl (e.g. packed: the activations quantized once) and
// sharing is on (site_sharing()), else one by one.
template <size_t N>
void site_linears(const float* x, int64_t T, const Mat* const (&w)[N], const LinearImpl* const (&impl)[N],
                  const float* const (&bias)[N], float* const (&y)[N]) {
  bool all = site_sharing();
  for (const LinearImpl* i : impl) all = all && i != nullptr;
  if (all) {
    impl[0]->apply_shared(x, T, impl, bias, y);
    return;
  }
  for (size_t m = 0; m < N; ++m) linear(x, T, *w[m], impl[m], bias[m], y[m]);
}

}  // namespace

void set_site_sharing(bool on) { g_site_sharing.set(on); }

bool site_sharing() { return g_site_sharing.on(); }

std::shared_ptr<Model> Model::random(const ModelConfig& cfg, DType dtype, uint64_t seed) {
  auto m = std::make_shared<Model>();
  m->cfg_ = cfg;
  m->stage_ = {0, cfg.num_layers};
  m->make_ropes();
  uint64_t next_seed = seed;
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    std::vector<uint8_t>& buf = m->storage_.emplace_back(size_t(rows * cols) * dtype_size(dtype));
    fill_uniform(buf.data(), dtype, rows * cols, 1.0f / std::sqrt(float(cols)), next_seed++);
    return Mat{dtype, rows, cols, buf.data(), name};
  };
  auto ones = [&](int64_t n) { return m->w_.own(std::vector<float>(size_t(n), 1.0f)); };
  const int64_t H = cfg.hidden_size;
  m->w_.embed = mat("model.embed_tokens.weight", cfg.vocab_size, H);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights lw;
    for (const LinearRoleInfo& r : kLinearRoles)
      lw.mat(r.role) = mat(p + r.hf + ".weight", role_dim(r.out, cfg), role_dim(r.in, cfg));
    // Norm weights 1, biases 0.
    for (const VecRoleInfo& r : kVecRoles)
      if (has_vec(r, cfg))
        lw.vec(r.role) = r.kind == VecRoleInfo::Kind::Bias ? m->w_.own(std::vector<float>(size_t(vec_dim(r, cfg)), 0.0f))
                                                           : ones(vec_dim(r, cfg));
    m->w_.layers.push_back(lw);
  }
  m->w_.final_norm = ones(H);
  m->w_.lm_head = cfg.tie_word_embeddings ? m->w_.embed : mat("lm_head.weight", cfg.vocab_size, H);
  return m;
}

std::shared_ptr<Model> Model::from_weights(const ModelConfig& cfg, ModelWeights w, std::string dir,
                                           LayerRange stage) {
  SINKQ_CHECK(int64_t(w.layers.size()) == cfg.num_layers, "weights have {} layers, the config {}", w.layers.size(),
              cfg.num_layers);
  stage.check(cfg.num_layers);
  auto m = std::make_shared<Model>();
  m->cfg_ = cfg;
  m->stage_ = {stage.begin, stage.end_of(cfg.num_layers)};
  m->make_ropes();
  m->dir_ = std::move(dir);
  m->w_ = std::move(w);
  return m;
}

std::shared_ptr<Model> Model::with_weights(std::shared_ptr<const Model> base, ModelWeights w) {
  SINKQ_ASSERT(base != nullptr);
  SINKQ_CHECK(w.layers.size() == base->w_.layers.size(),
              "replacement weights have {} layers, the model has {}", w.layers.size(), base->w_.layers.size());
  auto m = std::make_shared<Model>();
  m->cfg_ = base->cfg_;
  m->stage_ = base->stage_;
  m->rope_ = base->rope_;
  m->rope_local_ = base->rope_local_;
  m->dir_ = base->dir_;
  m->w_ = std::move(w);
  m->base_ = std::move(base);
  return m;
}

int64_t Model::decode_weight_bytes() const {
  auto bytes = [](const Mat& m, const std::shared_ptr<const LinearImpl>& impl) {
    return impl ? int64_t(impl->bytes()) : m.rows * int64_t(dtype_row_bytes(m.dtype, m.cols));
  };
  const int N = cfg_.num_layers;
  int64_t total = stage_.last(N) ? bytes(w_.lm_head, w_.lm_head_impl) : 0;
  for (int i = stage_.begin; i < stage_.end_of(N); ++i)
    for (int r = 0; r < kNumLinearRoles; ++r) total += bytes(w_.layers[size_t(i)].mat(r), w_.layers[size_t(i)].impl_of(r));
  return total;
}

Forward::Forward(std::shared_ptr<const Model> model, int64_t max_ctx, int64_t max_batch)
    : model_(std::move(model)), max_batch_(std::max<int64_t>(1, max_batch)) {
  const ModelConfig& c = model_->config();
  SINKQ_CHECK(max_ctx >= 1, "context size must be at least 1 (got {})", max_ctx);
  SINKQ_CHECK(max_ctx <= c.max_position_embeddings,
              "context of {} tokens is longer than the model's max_position_embeddings ({})",
              max_ctx, c.max_position_embeddings);
  max_batch_ = std::min(max_batch_, max_ctx);
  // The fp32 cache is sized by the request (max_ctx), checked against memory before allocating; a
  // pipeline stage holds its own layers' rows.
  const LayerRange& st = model_->stage();
  const int held = st.end_of(c.num_layers) - st.begin;
  const uint64_t kv_bytes = uint64_t(held) * 2 * uint64_t(max_ctx) * uint64_t(c.kv_dim()) * sizeof(float);
  const uint64_t avail = mem_available_bytes();
  SINKQ_CHECK(avail == 0 || kv_bytes <= avail,
              "a KV cache of {} tokens needs {:.2f} GB ({} layers x 2 x {} x fp32), {:.2f} GB of memory is available: "
              "lower the context (--ctx)",
              max_ctx, double(kv_bytes) / 1e9, held, c.kv_dim(), double(avail) / 1e9);
  cache_ = KVCache(held, max_ctx, c.kv_dim(), st.begin);
  hooks_.resize(c.num_layers);
  // The window is set per layer (ModelConfig::window) where the layer runs.
  attn_shape_ = AttnShape{c.num_heads, c.num_kv_heads, c.head_dim, 0, c.attn_scale(), c.attn_softcap};
  const size_t B = size_t(max_batch_);
  x_.resize(B * size_t(c.hidden_size));
  xn_.resize(B * size_t(c.hidden_size));
  tmp_.resize(B * size_t(c.hidden_size));
  q_.resize(B * size_t(c.q_dim()));
  att_.resize(B * size_t(c.q_dim()));
  gate_.resize(B * size_t(c.intermediate_size));
  up_.resize(B * size_t(c.intermediate_size));
  pos_.resize(B);
  ids_.resize(B);
}

std::span<const float> Forward::step(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t T = int64_t(tokens.size());
  const int64_t V = model_->config().vocab_size;
  SINKQ_CHECK(T > 0, "no tokens to run");
  SINKQ_CHECK(n_past() + T <= max_ctx(),
              "{} tokens after {} already in the cache exceed the context of {} tokens", T,
              n_past(), max_ctx());
  logits_.resize(size_t(all_logits ? T : 1) * size_t(V));
  for (int64_t start = 0; start < T; start += max_batch_) {
    const int64_t n = std::min(max_batch_, T - start);
    const bool last_chunk = start + n == T;
    float* out = all_logits ? logits_.data() + size_t(start * V) : (last_chunk ? logits_.data() : nullptr);
    run_chunk(tokens.subspan(size_t(start), size_t(n)), all_logits, out);
  }
  return logits_;
}

void Forward::truncate(int64_t rows) {
  SINKQ_CHECK(rows >= 0 && rows <= body_size(), "Forward::truncate: {} rows asked, {} in the cache", rows, body_size());
  SINKQ_CHECK(rewindable(), "the KV store ({}) cannot be rewound to an earlier row", store_->describe());
  if (store_)
    store_rows_ = rows;
  else
    cache_.truncate(rows);
}

void Forward::set_prefix(std::shared_ptr<const KvPrefix> prefix) {
  SINKQ_CHECK(body_size() == 0, "a KV prefix can only be set between sequences ({} body tokens are in the cache)",
              body_size());
  if (prefix) {
    const ModelConfig& c = model_->config();
    SINKQ_CHECK(prefix->num_layers() == c.num_layers && prefix->kv_dim() == c.kv_dim(),
                "the KV prefix has {} layers of width {}, the model {} of width {}", prefix->num_layers(),
                prefix->kv_dim(), c.num_layers, c.kv_dim());
    SINKQ_CHECK(prefix->size() + body_capacity() <= c.max_position_embeddings,
                "a prefix of {} tokens plus a context of {} tokens exceeds the model's max_position_embeddings "
                "({}); use a shorter context",
                prefix->size(), body_capacity(), c.max_position_embeddings);
  }
  prefix_ = std::move(prefix);
}

void Forward::set_kv_store(std::unique_ptr<KvStore> store) {
  SINKQ_CHECK(body_size() == 0, "a KV store can only be set between sequences ({} body tokens are in the cache)",
              body_size());
  const ModelConfig& c = model_->config();
  if (!store) {
    if (store_) cache_ = KVCache(c.num_layers, store_->capacity(), c.kv_dim());
    store_.reset();
    store_rows_ = 0;
    k_new_ = {};
    v_new_ = {};
    return;
  }
  SINKQ_CHECK(store->num_layers() == c.num_layers && store->kv_dim() == c.kv_dim(),
              "the KV store has {} layers of width {}, the model {} of width {}", store->num_layers(),
              store->kv_dim(), c.num_layers, c.kv_dim());
  SINKQ_CHECK(store->capacity() >= 1, "the KV store holds no rows");
  SINKQ_CHECK(prefix_size() + store->capacity() <= c.max_position_embeddings,
              "a prefix of {} tokens plus a KV store of {} rows exceeds the model's max_position_embeddings ({})",
              prefix_size(), store->capacity(), c.max_position_embeddings);
  max_batch_ = std::min(max_batch_, store->capacity());
  cache_ = KVCache();  // the fp32 body is released: the store holds it now
  store_ = std::move(store);
  store_rows_ = 0;
  k_new_.assign(size_t(max_batch_ * c.kv_dim()), 0.0f);
  v_new_.assign(size_t(max_batch_ * c.kv_dim()), 0.0f);
}

std::shared_ptr<const KvPrefix> KvPrefix::from_rows(std::vector<int32_t> tokens, int num_layers, int64_t kv_dim,
                                                    std::vector<float> k, std::vector<float> v) {
  SINKQ_CHECK(!tokens.empty(), "the KV prefix is empty");
  SINKQ_CHECK(num_layers >= 1 && kv_dim >= 1, "KV prefix of {} layers of width {}", num_layers, kv_dim);
  const size_t want = size_t(num_layers) * tokens.size() * size_t(kv_dim);
  SINKQ_CHECK(k.size() == want && v.size() == want,
              "KV prefix rows: K has {} and V {} values, {} layers x {} tokens x {} = {} expected", k.size(), v.size(),
              num_layers, tokens.size(), kv_dim, want);
  auto p = std::make_shared<KvPrefix>();
  p->tokens_ = std::move(tokens);
  p->num_layers_ = num_layers;
  p->kv_dim_ = kv_dim;
  p->k_ = std::move(k);
  p->v_ = std::move(v);
  return p;
}

namespace {
std::shared_ptr<StageHandoff> g_handoff;
}  // namespace

void set_stage_handoff(std::shared_ptr<StageHandoff> h) { g_handoff = std::move(h); }

StageHandoff& stage_handoff() {
  SINKQ_CHECK(g_handoff != nullptr, "this model is one pipeline stage, and no other stage is connected (mpirun)");
  return *g_handoff;
}

std::vector<std::vector<float>> stage_inputs(Forward& fwd, std::span<const std::vector<int32_t>> seqs) {
  const int64_t H = fwd.model().config().hidden_size;
  std::vector<std::vector<float>> xs;
  for (const auto& s : seqs) {
    std::vector<float> x(s.size() * size_t(H));
    if (fwd.model().stage().first()) fwd.embed(s, x.data());
    else stage_handoff().receive(x.data(), x.size());
    xs.push_back(std::move(x));
  }
  return xs;
}

void stage_outputs(const Model& m, const std::vector<std::vector<float>>& xs) {
  if (m.stage().last(m.config().num_layers)) return;
  for (const auto& x : xs) stage_handoff().send(x.data(), x.size());
}

void stage_step(Forward& fwd, std::span<const int32_t> tokens) {
  const Model& m = fwd.model();
  const LayerRange& st = m.stage();
  const int64_t H = m.config().hidden_size, T = int64_t(tokens.size());
  std::vector<float> x;
  for (int64_t start = 0; start < T; start += fwd.max_batch()) {  // step()'s chunks
    const int64_t n = std::min(fwd.max_batch(), T - start);
    x.resize(size_t(n * H));
    if (!st.first()) stage_handoff().receive(x.data(), x.size());
    fwd.run_stage(tokens.subspan(size_t(start), size_t(n)), x.data(), n - 1, nullptr);
    if (!st.last(m.config().num_layers)) stage_handoff().send(x.data(), x.size());
  }
}

std::shared_ptr<const KvPrefix> KvPrefix::compute(std::shared_ptr<const Model> model, std::vector<int32_t> tokens,
                                                  const std::function<void(Forward&)>& prepare) {
  SINKQ_CHECK(!tokens.empty(), "the KV prefix is empty");
  const ModelConfig& c = model->config();
  const int64_t P = int64_t(tokens.size());
  SINKQ_CHECK(P < c.max_position_embeddings, "a KV prefix of {} tokens leaves no room in max_position_embeddings ({})",
              P, c.max_position_embeddings);
  Forward fwd(model, P);
  if (prepare) prepare(fwd);
  const LayerRange& st = model->stage();
  if (model->whole()) {
    fwd.step(tokens, false);
  } else {
    // A pipeline stage: its own layers' rows (the same chunks and per-layer code as step()); the
    // rows of the other stages' layers stay zero here — each stage reads only its own.
    stage_step(fwd, tokens);
  }
  auto p = std::make_shared<KvPrefix>();
  p->num_layers_ = c.num_layers;
  p->kv_dim_ = c.kv_dim();
  const size_t per_layer = size_t(P * c.kv_dim());
  p->k_.resize(per_layer * size_t(c.num_layers));
  p->v_.resize(per_layer * size_t(c.num_layers));
  for (int l = st.begin; l < st.end_of(c.num_layers); ++l) {
    std::copy(fwd.cache().k(l), fwd.cache().k(l) + per_layer, p->k_.data() + per_layer * size_t(l));
    std::copy(fwd.cache().v(l), fwd.cache().v(l) + per_layer, p->v_.data() + per_layer * size_t(l));
  }
  p->tokens_ = std::move(tokens);
  return p;
}

KvSegment KvPrefix::segment(int layer) const {
  SINKQ_ASSERT(layer >= 0 && layer < num_layers_);
  const size_t off = size_t(layer) * size_t(size() * kv_dim_);
  return KvSegment{k_.data() + off, v_.data() + off, size()};
}

void Forward::embed(std::span<const int32_t> tokens, float* x) {
  SINKQ_CHECK(!tokens.empty(), "no tokens to embed");
  SINKQ_CHECK(model_->stage().first(), "embed: this pipeline stage does not hold the embeddings");
  embed_ids(*model_, tokens, x);
}

void Forward::run_layer(int l, std::span<const int32_t> tokens, float* x) { run_layer(l, tokens, x, nullptr); }

void Forward::run_layer(int l, std::span<const int32_t> tokens, float* x, LayerResume* at) {
  SINKQ_CHECK(at == nullptr || LayerResume::resumable(at->site),
              "run_layer: a layer state is saved only at o_in, mlp_in or down_in");
  const ModelConfig& c = model_->config();
  const int64_t T = int64_t(tokens.size());
  SINKQ_CHECK(l >= 0 && l < c.num_layers, "layer {} out of range (the model has {})", l, c.num_layers);
  SINKQ_CHECK(model_->stage().holds(l, c.num_layers), "layer {} is another pipeline stage's", l);
  SINKQ_CHECK(T > 0 && T <= max_batch_, "run_layer takes 1..{} tokens (max_batch), got {}", max_batch_, T);
  SINKQ_CHECK(n_past() + T <= max_ctx(), "{} tokens after {} already in the cache exceed the context of {} tokens",
              T, n_past(), max_ctx());
  for (int64_t t = 0; t < T; ++t) {
    pos_[size_t(t)] = int32_t(n_past() + t);
    ids_[size_t(t)] = tokens[size_t(t)];
  }
  const size_t n = size_t(T * c.hidden_size);
  std::copy(x, x + n, x_.data());
  const Part self{this, 0, T};
  const Rows all{0, T};
  layer(l, T, std::span(&self, 1), std::span(&all, 1), nullptr, nullptr, Site::AttnIn, at);
  std::copy(x_.data(), x_.data() + n, x);
}

float* Forward::site_input(Site s) {
  switch (s) {
    case Site::OIn: return att_.data();
    case Site::MlpIn: return xn_.data();
    case Site::DownIn: return gate_.data();
    default: SINKQ_ASSERT(false && "not a resumable site"); return nullptr;
  }
}

void Forward::resume_layer(int l, std::span<const int32_t> tokens, const LayerResume& r, float* x) {
  const ModelConfig& c = model_->config();
  const int64_t T = int64_t(tokens.size());
  SINKQ_CHECK(LayerResume::resumable(r.site), "resume_layer: a layer resumes only at o_in, mlp_in or down_in");
  SINKQ_CHECK(l >= 0 && l < c.num_layers && model_->stage().holds(l, c.num_layers),
              "resume_layer: layer {} is not this model's", l);
  const int64_t features = r.site == Site::OIn ? c.q_dim() : r.site == Site::MlpIn ? c.hidden_size : c.intermediate_size;
  SINKQ_CHECK(T > 0 && T <= max_batch_ && r.residual.size() == size_t(T * c.hidden_size) &&
                  r.input.size() == size_t(T * features),
              "resume_layer: the saved state does not hold {} tokens of this model", T);
  for (int64_t t = 0; t < T; ++t) {
    pos_[size_t(t)] = int32_t(n_past() + t);
    ids_[size_t(t)] = tokens[size_t(t)];
  }
  std::copy(r.residual.begin(), r.residual.end(), x_.data());
  std::copy(r.input.begin(), r.input.end(), site_input(r.site));
  const Part self{this, 0, T};
  const Rows all{0, T};
  layer(l, T, std::span(&self, 1), std::span(&all, 1), nullptr, nullptr, r.site, nullptr);
  std::copy(x_.data(), x_.data() + T * c.hidden_size, x);
}

void Forward::site(Site s, int layer, float* data, int64_t T, int64_t features) {
  if (!hooks_.active(s, layer)) return;
  SiteView v{s, layer, data, T, features, std::span(pos_.data(), size_t(T)),
             std::span(ids_.data(), size_t(T))};
  hooks_.run(v);
}

// logits_out: nullptr = no logits needed (an inner chunk of a long prompt); else all rows
// (all_logits) or only the last row.
void Forward::run_chunk(std::span<const int32_t> tokens, bool all_logits, float* logits_out) {
  chunk(tokens, nullptr, all_logits ? 0 : int64_t(tokens.size()) - 1, logits_out);
}

void Forward::run_stage(std::span<const int32_t> tokens, float* x, int64_t first_row, float* logits_out) {
  const int64_t T = int64_t(tokens.size());
  SINKQ_CHECK(x != nullptr, "run_stage: no activations");
  SINKQ_CHECK(T > 0 && T <= max_batch_ && first_row >= 0 && first_row < T,
              "run_stage: {} tokens (1..{}), logits from row {}", T, max_batch_, first_row);
  SINKQ_CHECK(n_past() + T <= max_ctx(), "{} tokens after {} already in the cache exceed the context of {} tokens", T,
              n_past(), max_ctx());
  chunk(tokens, x, first_row, logits_out);
}

void Forward::set_link(std::shared_ptr<StageLink> link) {
  SINKQ_CHECK(body_size() == 0, "a pipeline link can only be set between sequences");
  SINKQ_CHECK(!link || (model_->stage().first() && !model_->whole()),
              "a pipeline link goes on the first stage of a model split into stages");
  link_ = std::move(link);
}

// One chunk through this model's stage (the whole model but in a pipeline): embed (first stage) or
// take x_io (a later one), the stage's layers, then the final norm and LM head of rows [first_row,
// T) into logits_out (last stage; nullptr: no logits). A first stage with a link hands x on there
// (and gets the logits back); a later stage that is not the last returns its output in x_io.
void Forward::chunk(std::span<const int32_t> tokens, float* x_io, int64_t first_row, float* logits_out) {
  const ModelConfig& c = model_->config();
  const LayerRange& st = model_->stage();
  const int N = c.num_layers;
  SINKQ_CHECK(st.last(N) || link_ || x_io, "this model holds layers [{}, {}) of {}: it runs as a pipeline stage "
              "(mpirun), not on its own", st.begin, st.end_of(N), N);
  const int64_t T = int64_t(tokens.size());
  const int64_t H = c.hidden_size;
  for (int64_t t = 0; t < T; ++t) {
    pos_[size_t(t)] = int32_t(n_past() + t);
    ids_[size_t(t)] = tokens[size_t(t)];
  }
  auto body = [&] {
    if (st.first()) embed_ids(*model_, tokens, x_.data());
    else std::copy(x_io, x_io + T * H, x_.data());
    for (int l = st.begin; l < st.end_of(N); ++l) {
      check_interrupt();  // (core/interrupt.h; run_in_team rethrows on the caller)
      layer(l, T);
    }
    if (!logits_out || !st.last(N)) return;
    // Final norm and LM head only for the rows whose logits are wanted.
    const Part self{this, 0, T - first_row, first_row};
    const Rows all{0, T - first_row};
    head(x_.data() + first_row * H, std::span(&self, 1), std::span(&all, 1), xn_.data(), logits_out);
  };
  if (T <= kTeamMaxRows) run_in_team(0, body);
  else body();
  if (link_) link_->forward(tokens, body_size(), x_.data(), first_row, logits_out);
  advance(T);
  if (x_io && !st.last(N)) std::copy(x_.data(), x_.data() + T * H, x_io);
}

// Embedding rows: the int8 table's (embed_impl) or the fp matrix's; × sqrt(hidden) (Gemma).
void Forward::embed_ids(const Model& m, std::span<const int32_t> ids, float* out) {
  const ModelWeights& w = m.weights();
  if (w.embed_impl) w.embed_impl->gather_rows(ids, out);
  else embed_rows(w.embed, ids, out);
  if (m.config().spec().embed_scale) {
    const int64_t H = m.config().hidden_size;
    const float s = std::sqrt(float(H));
    for (int64_t i = 0; i < int64_t(ids.size()) * H; ++i) out[i] *= s;
  }
}

// The final norm, the head_in hooks, the LM head (one call per group of rows) and the logits hooks
// over the rows of `parts` (x [rows, hidden] → logits [rows, vocab]).
void Forward::head(const float* x, std::span<const Part> parts, std::span<const Rows> groups, float* xn,
                   float* logits) {
  const Model& m = *parts[0].f->model_;
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  const int64_t rows = parts.back().row0 + parts.back().n;
  auto hook = [&](Site s, float* data, int64_t features) {
    for (const Part& p : parts) {
      Forward& f = *p.f;
      if (!f.hooks_.active(s, -1)) continue;
      SiteView v{s, -1, data + p.row0 * features, p.n, features, std::span(f.pos_.data() + p.first, size_t(p.n)),
                 std::span(f.ids_.data() + p.first, size_t(p.n))};
      f.hooks_.run(v);
    }
  };
  rmsnorm(x, w.final_norm, xn, rows, c.hidden_size, c.rms_norm_eps);
  hook(Site::HeadIn, xn, c.hidden_size);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  for (const Rows& g : groups)
    linear(xn + g.row0 * H, g.n, w.lm_head, w.lm_head_impl.get(), nullptr, logits + g.row0 * V);
  if (const float cap = c.final_softcap; cap > 0)  // Gemma 2: logits -> cap * tanh(logits / cap)
    for (int64_t i = 0; i < rows * c.vocab_size; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  hook(Site::Logits, logits, c.vocab_size);
}

// One decoder layer, as in HF LlamaDecoderLayer, with the family's features (io/config.h LayerSpec):
//   x += [post_attn_norm] o_proj(attention(rope(q_norm(q_proj(norm(x)))), rope(k_norm(k_proj(norm(x)))), v_proj(norm(x))))
//   x += [post_mlp_norm] down_proj(act(gate_proj(norm(x))) * up_proj(norm(x)))
void Forward::layer(int l, int64_t T) {
  const Part self{this, 0, T};
  const Rows all{0, T};
  layer(l, T, std::span(&self, 1), std::span(&all, 1), nullptr, nullptr);
}

// The layer over T rows of this Forward's activation buffers that belong to `parts`: rows
// [row0, row0 + n) are sequence part.f's next n tokens (its pos_ / ids_ / hooks / cache / prefix /
// KV store). The norms, residuals and linears run over all T rows at once; RoPE, the site hooks,
// the cache writes and attention run per part. One part that is this Forward is step()'s chunk.
// Several parts: the new K / V rows go to k_scratch / v_scratch [T, kv_dim] first.
void Forward::layer(int l, int64_t T, std::span<const Part> parts, std::span<const Rows> groups, float* k_scratch,
                    float* v_scratch, Site from,
                    LayerResume* save) {
  const ModelConfig& c = model_->config();
  const LayerSpec& spec = c.spec();
  const LayerWeights& w = model_->weights().layers[size_t(l)];
  const int64_t H = c.hidden_size, I = c.intermediate_size, KV = c.kv_dim(), QD = c.q_dim();
  const RopeTable& rope = model_->rope(l);
  float* x = x_.data();
  float* xn = xn_.data();
  auto each = [&](Site s, float* data, int64_t features) {
    if (save && save->site == s) {  // run_layer(…, at): the state before this site's hook
      save->residual.assign(x, x + T * H);
      save->input.assign(data, data + T * features);
    }
    for (const Part& p : parts) p.f->site(s, l, data + p.row0 * features, p.n, features);
  };
  // resume_layer: x_ and from's input buffer hold the saved state; the layer starts at its hook.
  const int start = from == Site::DownIn ? 3 : from == Site::MlpIn ? 2 : from == Site::OIn ? 1 : 0;
  SINKQ_ASSERT(start == 0 || from == Site::OIn || from == Site::MlpIn || from == Site::DownIn);
  // New K/V rows go straight into the fp32 cache, or into scratch that the KV store quantizes (one
  // sequence); several sequences' rows go to batch scratch and are copied into each one's cache.
  const bool one = parts.size() == 1;
  Forward& f0 = *parts[0].f;
  SINKQ_ASSERT(one || (k_scratch && v_scratch));
  float* k = !one ? k_scratch : f0.store_ ? f0.k_new_.data() : f0.cache_.k(l) + f0.body_size() * KV;
  float* v = !one ? v_scratch : f0.store_ ? f0.v_new_.data() : f0.cache_.v(l) + f0.body_size() * KV;

  // Attention block.
  if (start == 0) {
    rmsnorm(x, w.vec(VecRole::AttnNorm), xn, T, H, c.rms_norm_eps);
    each(Site::AttnIn, xn, H);
    for (const Rows& g : groups)
      site_linears<3>(xn + g.row0 * H, g.n, {&w.mat(LinearRole::Q), &w.mat(LinearRole::K), &w.mat(LinearRole::V)},
                      {w.impl_of(LinearRole::Q).get(), w.impl_of(LinearRole::K).get(), w.impl_of(LinearRole::V).get()},
                      {w.bias(0), w.bias(1), w.bias(2)}, {q_.data() + g.row0 * QD, k + g.row0 * KV, v + g.row0 * KV});
    if (spec.qk_norm) {  // each head's row of q and k (Qwen3, Gemma 3), before the pre-RoPE k site
      rmsnorm(q_.data(), w.vec(VecRole::QNorm), q_.data(), T * c.num_heads, c.head_dim, c.rms_norm_eps);
      rmsnorm(k, w.vec(VecRole::KNorm), k, T * c.num_kv_heads, c.head_dim, c.rms_norm_eps);
    }
    each(Site::KPreRope, k, KV);
    for (const Part& p : parts) {
      Forward& f = *p.f;
      const std::span<const int32_t> pos(f.pos_.data(), size_t(p.n));
      float* q = q_.data() + p.row0 * QD;
      float* kp = k + p.row0 * KV;
      float* vp = v + p.row0 * KV;
      // A store that keeps keys before RoPE gets these rows and applies RoPE (and whatever the k site
      // would do) itself in attention(): post-RoPE keys are never formed, the k site does not run.
      const bool pre_rope_store = f.store_ && f.store_->keys_before_rope();
      rope_apply(rope, q, p.n, c.num_heads, pos);
      if (!pre_rope_store) rope_apply(rope, kp, p.n, c.num_kv_heads, pos);
      f.site(Site::Q, l, q, p.n, QD);
      if (!pre_rope_store) f.site(Site::K, l, kp, p.n, KV);
      f.site(Site::V, l, vp, p.n, KV);
      const int64_t body_past = f.body_size();  // body rows before these
      const KvSegment prefix = f.prefix_ ? f.prefix_->segment(l) : KvSegment{};
      float* att = att_.data() + p.row0 * QD;
      AttnShape shape = f.attn_shape_;
      shape.sliding_window = c.window(l);
      if (f.store_) {
        f.store_->write(l, body_past, kp, vp, p.n);
        f.store_->attention(l, shape, q, prefix, body_past, p.n, att);
      } else {
        if (!one) {
          std::copy(kp, kp + p.n * KV, f.cache_.k(l) + body_past * KV);
          std::copy(vp, vp + p.n * KV, f.cache_.v(l) + body_past * KV);
        }
        attention(shape, q, prefix, f.cache_.k(l), f.cache_.v(l), body_past, p.n, att);
      }
    }
  }
  if (start <= 1) {
    each(Site::OIn, att_.data(), QD);
    for (const Rows& g : groups)
      linear(att_.data() + g.row0 * QD, g.n, w.mat(LinearRole::O), w.impl_of(LinearRole::O).get(), nullptr,
             tmp_.data() + g.row0 * H);
    if (spec.post_norms) rmsnorm(tmp_.data(), w.vec(VecRole::PostAttnNorm), tmp_.data(), T, H, c.rms_norm_eps);
    add_inplace(x, tmp_.data(), T * H);
  }

  // MLP block (SwiGLU / GeGLU).
  if (start <= 2) {
    if (start < 2) rmsnorm(x, w.vec(VecRole::MlpNorm), xn, T, H, c.rms_norm_eps);
    each(Site::MlpIn, xn, H);
    for (const Rows& g : groups)
      site_linears<2>(xn + g.row0 * H, g.n, {&w.mat(LinearRole::Gate), &w.mat(LinearRole::Up)},
                      {w.impl_of(LinearRole::Gate).get(), w.impl_of(LinearRole::Up).get()}, {nullptr, nullptr},
                      {gate_.data() + g.row0 * I, up_.data() + g.row0 * I});
    if (spec.act == Activation::GeluTanh) gelu_tanh_mul(gate_.data(), up_.data(), T, I);
    else silu_mul(gate_.data(), up_.data(), T, I);
  }
  each(Site::DownIn, gate_.data(), I);
  for (const Rows& g : groups)
    linear(gate_.data() + g.row0 * I, g.n, w.mat(LinearRole::Down), w.impl_of(LinearRole::Down).get(), nullptr,
           tmp_.data() + g.row0 * H);
  if (spec.post_norms) rmsnorm(tmp_.data(), w.vec(VecRole::PostMlpNorm), tmp_.data(), T, H, c.rms_norm_eps);
  add_inplace(x, tmp_.data(), T * H);
  each(Site::Out, x, H);
}

void Forward::advance(int64_t T) {
  if (store_) {
    SINKQ_ASSERT(store_rows_ + T <= store_->capacity());
    store_rows_ += T;
  } else {
    cache_.advance(T);
  }
}

// Consecutive parts share a linear call while the call has at most matmul_rowwise_rows() rows (the
// active ISA's GEMV: each row gets the bits it gets alone); a longer part is a call of its own, as
// in its step(). One part: one call over its rows, whatever their number (step()).
std::vector<Forward::Rows> Forward::linear_groups(std::span<const Part> parts) {
  const int64_t R = matmul_rowwise_rows();
  std::vector<Rows> g;
  for (const Part& p : parts) {
    if (!g.empty() && p.n <= R && g.back().n + p.n <= R && g.back().row0 + g.back().n == p.row0) g.back().n += p.n;
    else g.push_back({p.row0, p.n});
  }
  return g;
}

void Forward::step_batch(std::span<Forward* const> seqs, std::span<const int32_t> tokens) {
  SINKQ_CHECK(tokens.size() == seqs.size(), "step_batch: {} tokens for {} sequences", tokens.size(), seqs.size());
  std::vector<std::span<const int32_t>> chunks;
  for (const int32_t& t : tokens) chunks.emplace_back(&t, 1);
  step_batch(seqs, chunks);
}

void Forward::step_batch(std::span<Forward* const> seqs, std::span<const std::span<const int32_t>> chunks) {
  const int64_t B = int64_t(seqs.size());
  SINKQ_CHECK(B >= 1, "step_batch: no sequences");
  SINKQ_CHECK(chunks.size() == seqs.size(), "step_batch: {} chunks for {} sequences", chunks.size(), seqs.size());
  Forward& ws = *seqs[0];
  SINKQ_CHECK(ws.model_->whole(), "step_batch: the model is one stage of a pipeline");
  const ModelConfig& c = ws.model_->config();
  const int64_t V = c.vocab_size, H = c.hidden_size;
  int64_t T = 0;
  for (int64_t b = 0; b < B; ++b) {
    Forward& f = *seqs[size_t(b)];
    const int64_t n = int64_t(chunks[size_t(b)].size());
    SINKQ_CHECK(f.model_ == ws.model_, "step_batch: sequence {} runs another model", b);
    for (int64_t o = 0; o < b; ++o) SINKQ_CHECK(seqs[size_t(o)] != &f, "step_batch: sequence {} is also sequence {}", b, o);
    SINKQ_CHECK(n >= 1 && n <= f.max_batch_, "step_batch: sequence {}: a chunk of {} tokens (1..{}: its max_batch)", b,
                n, f.max_batch_);
    SINKQ_CHECK(f.n_past() + n <= f.max_ctx(), "step_batch: sequence {}: {} token{} after {} already in the cache "
                "exceed{} the context of {} tokens", b, n, n == 1 ? "" : "s", f.n_past(), n == 1 ? "s" : "", f.max_ctx());
    T += n;
  }
  SINKQ_CHECK(T <= ws.max_batch_, "step_batch: {} rows, the first sequence's buffers hold {} (max_batch)", T,
              ws.max_batch_);
  if (B == 1) {  // one sequence: its own step (the same code, no batch scratch)
    ws.logits_.resize(size_t(V));
    ws.run_chunk(chunks[0], false, ws.logits_.data());
    return;
  }
  // The batch's own scratch lives on the calling thread (sinkq serve: one batcher thread), not in
  // whichever sequence happens to come first, so it is held once, not once per session.
  thread_local std::vector<float> k_scratch, v_scratch, last, logits;
  thread_local std::vector<int32_t> ids;
  k_scratch.resize(size_t(T * c.kv_dim()));
  v_scratch.resize(size_t(T * c.kv_dim()));
  ids.clear();
  std::vector<Part> parts, heads;
  for (int64_t b = 0, row = 0; b < B; ++b) {
    Forward& f = *seqs[size_t(b)];
    const std::span<const int32_t> ch = chunks[size_t(b)];
    const int64_t n = int64_t(ch.size());
    for (int64_t t = 0; t < n; ++t) {
      f.pos_[size_t(t)] = int32_t(f.n_past() + t);
      f.ids_[size_t(t)] = ch[size_t(t)];
    }
    ids.insert(ids.end(), ch.begin(), ch.end());
    parts.push_back(Part{&f, row, n});
    heads.push_back(Part{&f, b, 1, n - 1});  // the head sees each chunk's last row
    row += n;
  }
  const std::vector<Rows> groups = linear_groups(parts), head_groups = linear_groups(heads);
  last.resize(size_t(B * H));
  logits.resize(size_t(B * V));
  auto body = [&] {
    embed_ids(*ws.model_, ids, ws.x_.data());
    for (int l = 0; l < c.num_layers; ++l) ws.layer(l, T, parts, groups, k_scratch.data(), v_scratch.data());
    for (const Part& p : parts) p.f->advance(p.n);
    for (int64_t b = 0; b < B; ++b) {
      const float* row = ws.x_.data() + (parts[size_t(b)].row0 + parts[size_t(b)].n - 1) * H;
      std::copy(row, row + H, last.data() + b * H);
    }
    head(last.data(), heads, head_groups, ws.xn_.data(), logits.data());
  };
  if (T <= kTeamMaxRows) run_in_team(0, body);
  else body();
  for (int64_t b = 0; b < B; ++b)
    seqs[size_t(b)]->logits_.assign(logits.begin() + b * V, logits.begin() + (b + 1) * V);
}

}  // namespace sinkq
