#include "runtime/quantized_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <exception>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"
#include "quant/rotate.h"

namespace sinkq::runtime {

namespace {

using lowbit::PackedFormat;
using lowbit::PackedTensor;

bool is_act_site(Site s) { return linear_input_index(s) >= 0; }

// Whether every element j of the group (x[j], j in [0, n)) is fl(L_j · s) for an integer level
// L_j in [lo, hi]; fills the levels. quant::dequantize computes x̂ = float(L) · s.
bool reproduces(const float* x, int64_t n, float s, int lo, int hi, int* level) {
  for (int64_t j = 0; j < n; ++j) {
    const float l = std::nearbyint(x[j] / s);
    if (!(l >= float(lo) && l <= float(hi)) || float(l) * s != x[j]) return false;
    level[j] = int(l);
  }
  return true;
}

}  // namespace

PackedTensor pack_exact(PackedFormat f, const float* w, int64_t rows, int64_t cols, const std::string& name) {
  const lowbit::FormatDesc& t = lowbit::traits(f);
  SINKQ_CHECK(t.role == lowbit::Role::Weight, "pack_exact: {} is not a weight format", t.name);
  const PackedTensor first = lowbit::quantize(f, w, rows, cols, /*clip_ratio=*/1.0f);
  quant::Params p = lowbit::params_of(first);
  const quant::QuantSpec spec = lowbit::quant_spec(f);
  const int off = quant::code_offset(spec);
  const int64_t ng = first.groups(), gcols = cols / ng;
  std::vector<int8_t> q = lowbit::unpack_codes(first);
  std::vector<int> level(static_cast<size_t>(gcols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < ng; ++g) {
      const float* x = w + r * cols + g * gcols;
      float& s = p.scale[size_t(r * ng + g)];
      int z = t.symmetric ? 0 : p.zero[size_t(r * ng + g)];
      int lo = quant::qmin(spec) - z, hi = quant::qmax(spec) - z;
      // Candidates for the simulator's s: the scale clip 1 finds (max|ŵ|/qmax, within an ulp or two
      // of s when an element sits at +qmax or at both ends, asymmetric) and, symmetric, max|ŵ|/2^(N-1)
      // (with clip < 1 a negative outlier clamps to the code -2^(N-1), one step beyond -qmax).
      float amax = 0.0f;
      for (int64_t j = 0; j < gcols; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float s0 = s;
      const float bases[2] = {s0, t.symmetric ? amax / float(-quant::qmin(spec)) : s0};
      bool ok = false;
      // A scale within 8 ulps of `base` that reproduces the group with levels in [lo, hi].
      auto near = [&](float base, int lo_, int hi_) {
        for (int k = 0; k <= 8; ++k) {
          for (int sign : {1, -1}) {
            float c = base;
            for (int i = 0; i < k; ++i) c = std::nextafter(c, sign > 0 ? INFINITY : 0.0f);
            if (c >= FLT_MIN && reproduces(x, gcols, c, lo_, hi_, level.data())) {
              s = c;
              return true;
            }
            if (k == 0) break;
          }
        }
        return false;
      };
      for (int cand = 0; cand < 2 && !ok; ++cand) ok = near(bases[cand], lo, hi);
      // A trained step size (block-wise fine-tuning, quant/finetune.h) need not put any element at
      // an end of the range: the group's largest level magnitude k is then smaller, s = max|ŵ|/k
      // (symmetric) or s = (max − min)/k with the zero point that puts min at a code >= 0
      // (asymmetric). Finest grid first; every candidate is checked element by element as above.
      if (!ok && amax > 0.0f) {
        float mn = x[0], mx = x[0];
        for (int64_t j = 1; j < gcols; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
        const int span = quant::qmax(spec) - quant::qmin(spec);
        for (int k = t.symmetric ? -quant::qmin(spec) : span; k >= 1 && !ok; --k) {
          if (t.symmetric) {
            ok = near(amax / float(k), lo, hi);
          } else {
            const float c = (mx - mn) / float(k);
            if (!(c >= FLT_MIN)) continue;
            const int zc = int(std::nearbyint(-mn / c)) + quant::qmin(spec);
            if (zc < quant::qmin(spec) || zc > quant::qmax(spec)) continue;
            if ((ok = near(c, quant::qmin(spec) - zc, quant::qmax(spec) - zc))) {
              z = zc;
              p.zero[size_t(r * ng + g)] = zc;
            }
          }
        }
      }
      SINKQ_CHECK(ok,
                  "{}: row {} group {} ({} columns) is not on a {} quantization grid near scale {} (zero point {}): "
                  "the weights were not fake-quantized with this format, so packing them would change them",
                  name, r, g, gcols, t.name, s0, z);
      for (int64_t j = 0; j < gcols; ++j) q[size_t(r * cols + g * gcols + j)] = int8_t(level[size_t(j)] + z - off);
    }
  }
  PackedTensor out = lowbit::pack(f, q.data(), p, rows, cols);
  // The promise, checked: the packed tensor dequantizes to w bit for bit.
  std::vector<float> back(size_t(rows * cols));
  lowbit::dequantize(out, back.data());
  SINKQ_ASSERT(std::memcmp(back.data(), w, back.size() * sizeof(float)) == 0);
  return out;
}

namespace {

RuntimeConfig runtime_config_impl(const quant::Recipe& cfg, const std::vector<quant::StaticQuant>& statics,
                                  const quant::CrossFolds& cross, bool need_scales) {
  cfg.validate();
  SINKQ_CHECK(cfg.w.on(),
              "unquantized weights (--w-bits 16) cannot run on the packed runtime: it runs int8 / int4 linear layers "
              "only (use the full-precision model itself)");
  SINKQ_CHECK(cfg.a.on(),
              "weight-only quantization (W{}A16, fp32 activations) cannot run: the lowbit kernels multiply int8 / "
              "int4 activation codes; quantize activations (--a-bits 8 or 4), or use the simulator", cfg.w.bits);
  SINKQ_CHECK(cfg.a.mode != quant::ActMode::Cross || cfg.a.cross_columns == quant::ColumnMode::Static,
              "CrossQuant activations with --a-cross-cols {} cannot run: their per-element scales s_ij = "
              "rowmax_i^α·colmax_j^(1-α) change with every call's column maxima, and the integer GEMM takes one scale "
              "per token; use --a-cross-cols static (calibrated column maxima folded into the weights, needs --calib), "
              "or the simulator", quant::column_mode_name(cfg.a.cross_columns));
  // A codebook KV (KVQuant) runs on the CodebookKvStore, checked against the model when it is built.
  if (cfg.kv.on() && !cfg.kv.vector()) {
    // The packed KV cache (packed_kv.h); throws for schemes it cannot store. Static params are
    // checked against the model when a Forward gets the cache.
    KvScheme ks = KvScheme::from_sim(cfg.kv, statics);
    ks.validate();
    kv_format(ks);
  }
  RuntimeConfig rt;
  rt.w.bits = cfg.w.bits;
  rt.w.group = cfg.w.group;
  rt.w.symmetric = cfg.w.symmetric;
  rt.w.clip = 1.0f;  // the weights packed are already fake-quantized with the chosen clip
  for (quant::WeightRule r : cfg.weight_rules) {
    r.clip.reset();  // as rt.w.clip: what is packed carries its clip already
    r.clip_grid.reset();
    if (r.bits || r.group || r.symmetric) rt.weight_rules.push_back(std::move(r));
  }
  rt.head = cfg.head;
  rt.a.bits = cfg.a.bits;
  rt.a.symmetric = cfg.a.symmetric;
  rt.a.mode = cfg.a.mode;
  for (const quant::StaticQuant& q : statics) {
    if (!is_act_site(q.site)) continue;  // K / V: the KV scheme's
    SINKQ_CHECK(rt.a.mode == ActMode::Static, "static activation params for layer {} site {} with dynamic "
                "activations", q.layer, site_name(q.site));
    SINKQ_CHECK(q.spec.granularity == quant::Granularity::PerTensor && q.spec.symmetric,
                "static activations of layer {} site {} are {}: the kernels take symmetric per-tensor scales only",
                q.layer, site_name(q.site), quant::describe(q.spec));
    rt.a.scales.push_back({q.layer, q.site, q.params});
  }
  if (rt.a.mode == ActMode::Cross) {
    for (const quant::CrossFold& f : cross)
      SINKQ_CHECK(f.bits == cfg.a.bits && f.alpha == cfg.a.alpha, "a CrossQuant fold of {} bits, alpha {} for "
                  "A{} alpha {} activations", f.bits, f.alpha, cfg.a.bits, cfg.a.alpha);
    rt.a.cross = cross;
  } else {
    SINKQ_CHECK(cross.empty(), "CrossQuant folds given for {} activations", quant::act_mode_name(rt.a.mode));
  }
  RuntimeConfig check = rt;
  if (!need_scales && check.a.mode == ActMode::Static && check.a.scales.empty()) check.a.scales.resize(1);
  if (!need_scales && check.a.mode == ActMode::Cross && check.a.cross.empty())
    check.a.cross.push_back(quant::make_cross_fold(cfg.a.bits, cfg.a.alpha, {1.0f}));
  check.validate();
  return rt;
}

}  // namespace

RuntimeConfig runtime_config(const quant::Recipe& cfg, const std::vector<quant::StaticQuant>& statics,
                             const quant::CrossFolds& cross) {
  return runtime_config_impl(cfg, statics, cross, /*need_scales=*/true);
}

void check_runnable(const quant::Recipe& cfg) { runtime_config_impl(cfg, {}, {}, /*need_scales=*/false); }

namespace {

// m rounded to dtype (owned by w), or m itself when it already has that dtype. Values are
// widened to fp32 first, then rounded to nearest even (f32_to_bf16 / f32_to_f16).
Mat convert_mat(const Mat& m, DType dtype, ModelWeights& w) {
  if (m.dtype == dtype) return m;
  const size_t n = size_t(m.rows * m.cols);
  std::vector<float> f32(n);
  to_f32(m.dtype, m.data, f32.data(), n);
  Mat out = m;
  out.dtype = dtype;
  if (dtype == DType::F32) {
    out.data = w.own(std::move(f32));
    return out;
  }
  std::vector<float> store((n + 1) / 2, 0.0f);  // 16-bit elements in fp32-aligned owned storage
  uint16_t* h = reinterpret_cast<uint16_t*>(store.data());
  for (size_t i = 0; i < n; ++i) h[i] = dtype == DType::BF16 ? f32_to_bf16(f32[i]) : f32_to_f16(f32[i]);
  out.data = w.own(std::move(store));
  return out;
}

}  // namespace

std::shared_ptr<const Model> with_fp_dtype(std::shared_ptr<const Model> m, DType dtype) {
  SINKQ_ASSERT(m != nullptr);
  const ModelWeights& src = m->weights();
  if (src.lm_head_impl) return m;  // an int8 head: no fp table to round
  if (src.embed.dtype == dtype && src.lm_head.dtype == dtype) return m;
  ModelWeights w;
  w.final_norm = src.final_norm;
  w.layers = src.layers;
  const bool tied = src.tied();
  w.embed = convert_mat(src.embed, dtype, w);
  w.lm_head = tied ? w.embed : convert_mat(src.lm_head, dtype, w);
  return Model::with_weights(std::move(m), std::move(w));
}

QuantizedModel build_quantized(const quant::SimModel& sim, const QuantizeOptions& opt) {
  SINKQ_ASSERT(sim.model != nullptr);
  QuantizedModel qm;
  qm.cfg = sim.cfg;
  qm.rt = runtime_config(sim.cfg, sim.statics, sim.cross);
  if (sim.cfg.kv.vector())
    qm.kv_codebook = CodebookKvScheme::from_sim(sim);
  else if (sim.cfg.kv.on())
    qm.kv = KvScheme::from_sim(sim.cfg.kv, sim.statics);
  qm.prefix = sim.prefix;
  qm.recipe = sim.to_json();
  const PackedFormat act = activation_format(qm.rt.a);

  const ModelWeights& src = sim.model->weights();
  const int L = int(src.layers.size());
  quant::check_rule_layers(qm.rt.weight_rules, L);
  std::vector<const quant::Params*> table(size_t(L) * 4, nullptr);
  for (const StaticActScale& e : qm.rt.a.scales) {
    const int slot = linear_input_index(e.site);
    SINKQ_ASSERT(slot >= 0);
    SINKQ_CHECK(e.layer >= 0 && e.layer < L, "static activation scale for layer {}: the model has {} layers", e.layer,
                L);
    table[size_t(e.layer) * 4 + size_t(slot)] = &e.params;
  }

  ModelWeights w;
  w.embed = src.embed;
  w.lm_head = src.lm_head;
  w.final_norm = src.final_norm;
  w.layers = src.layers;
  const LayerRange& stage = sim.model->stage();  // a pipeline stage packs what it holds
  if (opt.fp_dtype && !sim.cfg.head.on()) {  // an int8 head keeps no fp table (pack_head)
    const bool tied = src.tied();
    if (stage.holds_embed(L, tied)) w.embed = convert_mat(src.embed, *opt.fp_dtype, w);
    w.lm_head = tied ? w.embed : stage.last(L) ? convert_mat(src.lm_head, *opt.fp_dtype, w) : src.lm_head;
  }
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < kNumLinearRoles; ++i)
      SINKQ_CHECK(!src.layers[size_t(l)].impl_of(i), "build_quantized: layer {} of the simulator's model already runs "
                  "packed linears", l);
  // m (values on the grid of ws: the simulator's) packed exactly, block by block (the linears and
  // the int8 head alike).
  // CrossQuant: the simulator's weights are folded already; the linears get the fold of their
  // input for the activation side (one shared object per layer and site).
  std::vector<std::shared_ptr<const quant::CrossFold>> folds;
  for (const quant::CrossFold& f : qm.rt.a.cross) folds.push_back(std::make_shared<const quant::CrossFold>(f));
  SINKQ_CHECK(folds.empty() || folds.size() == size_t(L) * 4, "CrossQuant: {} folds for {} layers", folds.size(), L);
  auto pack = [](const Mat& m, const WeightScheme& ws, PackedFormat a, const quant::Params& sp,
                 std::shared_ptr<const quant::CrossFold> fold) -> std::shared_ptr<const LinearImpl> {
    std::vector<float> f32(size_t(m.rows * m.cols));
    to_f32(m.dtype, m.data, f32.data(), f32.size());
    std::vector<PackedLinear::PlanarBlock> blocks;
    std::vector<float> buf;
    for (const WeightBlock& b : weight_blocks(ws, m.cols, m.name)) {
      const float* x = f32.data();
      if (b.cols != m.cols) {
        buf.resize(size_t(m.rows * b.cols));
        for (int64_t r = 0; r < m.rows; ++r)
          std::copy(f32.data() + r * m.cols + b.col0, f32.data() + r * m.cols + b.col0 + b.cols,
                    buf.data() + r * b.cols);
        x = buf.data();
      }
      blocks.push_back({b.col0, pack_exact(b.format, x, m.rows, b.cols, m.name)});
    }
    return std::make_shared<const PackedLinear>(m.name, m.rows, m.cols, std::move(blocks), a, sp, std::move(fold));
  };
  pack_linears(w, [&](int l, int i, const Mat& m) {
    const size_t slot = size_t(l) * 4 + size_t(kLinearRoles[i].input);
    const quant::Params* sp = table[slot];
    return pack(m, qm.rt.weights(l, i, L), act, sp ? *sp : quant::Params{}, folds.empty() ? nullptr : folds[slot]);
  }, stage);
  for (LayerWeights& lw : w.layers)
    for (int i = 0; i < kNumLinearRoles; ++i) {
      // Shape and name only: the packed linear runs, the fp32 matrix is never read (io/weights.h).
      lw.mat(i).data = nullptr;
      lw.mat(i).dtype = DType::F32;
    }
  if (sim.cfg.head.on())
    pack_head(w, [&](const Mat& m) { return pack(m, sim.cfg.head.weights(), head_act_format(), {}, nullptr); },
              stage.first(), stage.last(L));
  qm.model = Model::with_weights(sim.model, std::move(w));
  return qm;
}

std::vector<int> QuantizedModel::attach(Forward& fwd) const {
  SINKQ_CHECK(&fwd.model() == model.get(), "QuantizedModel::attach: the Forward must run QuantizedModel::model");
  std::vector<int> handles = quant::attach_online_rotation(fwd, cfg.rotate);
  if (prefix) fwd.set_prefix(prefix);
  if (kv) attach_packed_kv(fwd, *kv);
  if (kv_codebook) attach_codebook_kv(fwd, *kv_codebook);
  return handles;
}

std::string QuantizedModel::describe() const {
  std::string s = rt.describe();
  if (cfg.rotate.on) s += fmt::format(" | rotate seed={}", cfg.rotate.seed);
  if (kv) s += " | " + kv->describe();
  if (kv_codebook)
    s += fmt::format(" | KV{} {} codebook keys {} values per {}{}{} (packed)", cfg.kv.bits,
                     quant::kv_codebook_name(cfg.kv.codebook), cfg.kv.keys_name(), quant::kv_axis_name(cfg.kv.value_axis),
                     cfg.kv.outliers > 0 ? fmt::format(" outliers {}%", 100 * cfg.kv.outliers) : "",
                     kv_codebook->recent > 0 ? fmt::format(", recent {} rows int8", kv_codebook->recent) : "");
  if (prefix) s += fmt::format(" | prefix {} tokens", prefix->size());
  return s;
}

size_t QuantizedModel::packed_bytes() const {
  size_t n = 0;
  for (const LayerWeights& lw : model->weights().layers)
    for (const auto* impl : {&lw.impl_of(LinearRole::Q), &lw.impl_of(LinearRole::K), &lw.impl_of(LinearRole::V), &lw.impl_of(LinearRole::O), &lw.impl_of(LinearRole::Gate), &lw.impl_of(LinearRole::Up), &lw.impl_of(LinearRole::Down)})
      if (const auto* p = dynamic_cast<const PackedLinear*>(impl->get())) n += p->bytes();
  const ModelWeights& w = model->weights();  // the int8 head's tables (one when tied)
  const LayerRange& st = model->stage();
  const bool first = st.first(), last = st.last(model->config().num_layers), one = tied();
  if (w.lm_head_impl && ((first && (one || last)) || (last && !one))) n += w.lm_head_impl->bytes();
  if (w.embed_impl && first && !one) n += w.embed_impl->bytes();
  return n;
}

bool QuantizedModel::tied() const {
  if (model->whole()) return model->weights().tied();
  return model->config().tie_word_embeddings && !cfg.rotate.on;
}

}  // namespace sinkq::runtime
