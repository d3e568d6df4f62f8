// sinkq/quant/rotate.cc — R1/R2/R4 fused into the weights, R3/R4 as online hooks (rotate.h).
#include "quant/rotate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"

namespace sinkq::quant {

namespace {

// The (k+1)-th output of splitmix64 seeded with `seed` (Steele et al.; fully specified, so the
// derived seeds are the same everywhere).
uint64_t splitmix64_at(uint64_t seed, uint64_t k) {
  uint64_t z = seed + (k + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Runs rotate(x + r0·n, count) over blocks of rows of x[rows, n] on the kernel threads. The
// transforms of hadamard.h are row-independent, so the result does not depend on the split.
// Small jobs (a decode step) stay on the calling thread.
template <class F>
void parallel_rows(float* x, int64_t rows, int64_t n, const F& rotate) {
  constexpr int64_t kTaskElements = 1 << 14;
  const int64_t block = std::max<int64_t>(1, kTaskElements / n);
  const int64_t tasks = (rows + block - 1) / block;
  if (tasks <= 1) {
    rotate(x, rows);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r0 = t * block;
    rotate(x + r0 * n, std::min(block, rows - r0));
  }
}

// A matrix widened to fp32, row-major [rows, cols].
struct Buf {
  std::vector<float> v;
  int64_t rows, cols;
  explicit Buf(const Mat& m) : v(static_cast<size_t>(m.rows * m.cols)), rows(m.rows), cols(m.cols) {
    to_f32(m.dtype, m.data, v.data(), v.size());
  }

  // W ← W·diag(g): an RMSNorm gain moved into the input columns of the layer it feeds.
  void scale_columns(const float* g) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] *= g[c];
  }

  // Input side, W ← W·R: every row x ← x·R. `rotate(x, n)` rotates the rows of x[n, cols].
  template <class F>
  void rotate_input(const F& rotate) {
    parallel_rows(v.data(), rows, cols, rotate);
  }

  // Output side, W ← Rᵀ·W = (Wᵀ·R)ᵀ. `rotate(x, n)` rotates the rows of x[n, rows].
  template <class F>
  void rotate_output(const F& rotate) {
    std::vector<float> t(v.size());
    transpose(v.data(), rows, cols, t.data());
    parallel_rows(t.data(), cols, rows, rotate);
    transpose(t.data(), cols, rows, v.data());
  }

  // Stores the buffer in w.owned and points m (same shape) at it, fp32 from now on.
  void store(ModelWeights& w, Mat& m) {
    SINKQ_ASSERT(m.rows == rows && m.cols == cols);
    m.dtype = DType::F32;
    m.data = w.own(std::move(v));
  }

 private:
  static void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dst[static_cast<size_t>(c * rows + r)] = src[static_cast<size_t>(r * cols + c)];
  }
};

}  // namespace

nlohmann::json to_json(const RotateConfig& cfg) {
  using nlohmann::json;
  if (!cfg.on) return json{{"on", false}};
  auto r = [](const char* kind, const char* placement, const char* acts_on) {
    return json{{"kind", kind}, {"placement", placement}, {"acts_on", acts_on}};
  };
  return json{{"on", true},
              {"seed", cfg.seed},
              {"r1", r("random_hadamard", "fused", "residual stream (hidden_size)")},
              {"r2", r("random_hadamard", "fused", "v_proj output / o_proj input, per head (head_dim)")},
              {"r3", r("hadamard", "online", "q and k after RoPE, per head (head_dim)")},
              {"r4", r("hadamard", "online + fused", "down_proj input (intermediate_size)")}};
}

void check_rotatable(const ModelConfig& cfg) {
  // Computational invariance per family feature (io/config.h LayerSpec): q/k norms act on q and k
  // after their projection (R1 is folded into its input side, R3 preserves q·kᵀ), soft-caps act
  // on scores and logits (unchanged by R1..R4), the embedding scale is a scalar, Gemma's (1 + w)
  // is folded into w when loading, the GeGLU gate is left alone (R4 rotates down_proj's input).
  // Post-norms are the exception: a gain applied to a block's output before the residual add does
  // not commute with a rotation of the residual stream (R1), and has nowhere to be folded.
  SINKQ_CHECK(!cfg.spec().post_norms,
              "cannot rotate {}: its post-attention and post-FFN norms (RMSNorm with a gain on each block's output, "
              "before the residual add) do not commute with a rotation of the residual stream (R1); quantize it "
              "without --rotate",
              cfg.architecture);
  const std::pair<const char*, int> dims[] = {
      {"hidden_size", cfg.hidden_size}, {"intermediate_size", cfg.intermediate_size}, {"head_dim", cfg.head_dim}};
  for (const auto& [name, n] : dims)
    SINKQ_CHECK(hadamard_supported(n),
                "cannot rotate the model: {} = {} is not a supported Hadamard size; supported sizes are "
                "2^k · m with m in {{{}}}",
                name, n, fmt::join(kHadamardBaseSizes, ", "));
}

RandomHadamard r1_rotation(const ModelConfig& model, const RotateConfig& cfg) {
  return RandomHadamard(model.hidden_size, cfg.seed);
}

RandomHadamard r2_rotation(const ModelConfig& model, const RotateConfig& cfg, int layer) {
  SINKQ_ASSERT(layer >= 0 && layer < model.num_layers);
  return RandomHadamard(model.head_dim, splitmix64_at(cfg.seed, static_cast<uint64_t>(layer)));
}

std::shared_ptr<const Model> rotate_model(std::shared_ptr<const Model> base, const RotateConfig& cfg) {
  SINKQ_ASSERT(base != nullptr);
  if (!cfg.on) return base;
  const ModelConfig& mc = base->config();
  check_rotatable(mc);
  const ModelWeights& src = base->weights();
  const int64_t H = mc.hidden_size, I = mc.intermediate_size;
  const RandomHadamard r1 = r1_rotation(mc, cfg);
  const auto R1 = [&r1](float* x, int64_t n) { r1.forward(x, n); };

  ModelWeights w;  // empty store: the q/k biases still point into `base`, which the model keeps alive
  w.layers = src.layers;
  const float* ones = w.own(std::vector<float>(static_cast<size_t>(H), 1.0f));

  // A pipeline stage (Model::stage()) rotates what it holds: the embeddings on the first stage, the
  // head on the last, its own layers (the rotations are per layer and seeded: the same everywhere).
  const LayerRange& stage = base->stage();
  const int N = mc.num_layers;
  w.embed = src.embed;
  if (stage.first()) {
    Buf embed(src.embed);
    embed.rotate_input(R1);
    embed.store(w, w.embed);
  }

  // Widened from the original (for a tied model: the un-rotated embedding).
  w.lm_head = src.lm_head;
  if (mc.tie_word_embeddings) w.lm_head.name = "lm_head.weight";
  if (stage.last(N)) {
    Buf head(src.lm_head);
    head.scale_columns(src.final_norm);
    head.rotate_input(R1);
    head.store(w, w.lm_head);
  } else {
    w.lm_head.data = nullptr;  // untied from the (unrotated) table, as on the whole model
  }
  w.final_norm = ones;

  for (int l = 0; l < mc.num_layers; ++l) {
    if (!stage.holds(l, N)) continue;
    const LayerWeights& s = src.layers[static_cast<size_t>(l)];
    LayerWeights& d = w.layers[static_cast<size_t>(l)];
    const RandomHadamard r2 = r2_rotation(mc, cfg, l);

    // Attention: R1 on q/k/v's input (with the norm gain), R2 on v's output per kv head.
    for (Mat* m : {&d.mat(LinearRole::Q), &d.mat(LinearRole::K), &d.mat(LinearRole::V)}) {
      Buf b(*m);
      b.scale_columns(s.vec(VecRole::AttnNorm));
      b.rotate_input(R1);
      if (m == &d.mat(LinearRole::V)) b.rotate_output([&](float* x, int64_t n) { r2.forward(x, n * mc.num_kv_heads); });
      b.store(w, *m);
    }
    if (s.vec(VecRole::VBias)) {
      std::vector<float> bv(s.vec(VecRole::VBias), s.vec(VecRole::VBias) + mc.kv_dim());
      r2.forward(bv.data(), mc.num_kv_heads);
      d.vec(VecRole::VBias) = w.own(std::move(bv));
    }
    // o_proj: R2 on its input per q head, R1 on its output.
    Buf wo(s.mat(LinearRole::O));
    wo.rotate_input([&](float* x, int64_t n) { r2.forward(x, n * mc.num_heads); });
    wo.rotate_output(R1);
    wo.store(w, d.mat(LinearRole::O));
    d.vec(VecRole::AttnNorm) = ones;

    // MLP: R1 on gate/up's input (with the norm gain); down_proj: R4 on its input, R1 on its output.
    for (Mat* m : {&d.mat(LinearRole::Gate), &d.mat(LinearRole::Up)}) {
      Buf b(*m);
      b.scale_columns(s.vec(VecRole::MlpNorm));
      b.rotate_input(R1);
      b.store(w, *m);
    }
    Buf down(s.mat(LinearRole::Down));
    down.rotate_input([I](float* x, int64_t n) { fwht_inplace(x, n, I); });
    down.rotate_output(R1);
    down.store(w, d.mat(LinearRole::Down));
    d.vec(VecRole::MlpNorm) = ones;
  }
  return Model::with_weights(std::move(base), std::move(w));
}

std::vector<int> attach_online_rotation(Forward& fwd, const RotateConfig& cfg) {
  if (!cfg.on) return {};
  const ModelConfig& mc = fwd.model().config();
  check_rotatable(mc);
  const int64_t hd = mc.head_dim;
  // R3: every head_dim slice of a [T, heads·head_dim] row block, i.e. the rows of [T·heads, hd].
  const auto per_head = [hd](SiteView& v) {
    parallel_rows(v.data, v.tokens * (v.features / hd), hd, [hd](float* x, int64_t n) { fwht_inplace(x, n, hd); });
  };
  // R4: whole rows of [T, intermediate].
  const auto whole_row = [](SiteView& v) {
    const int64_t n = v.features;
    parallel_rows(v.data, v.tokens, n, [n](float* x, int64_t rows) { fwht_inplace(x, rows, n); });
  };
  SiteHooks& hooks = fwd.hooks();
  const int q = hooks.add(Site::Q, -1, per_head);
  const int k = hooks.add(Site::K, -1, per_head);
  const int down = hooks.add(Site::DownIn, -1, whole_row);
  return {q, k, down};
}

}  // namespace sinkq::quant
