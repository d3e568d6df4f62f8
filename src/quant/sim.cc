// sinkq/quant/sim.cc — running a simulator configuration: fake-quantized weights, the dynamic /
// CrossQuant / static activation and KV hooks, SimModel. The configuration itself (names,
// presets, JSON) is in sim_config.cc.
#include "quant/sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "quant/calibrate.h"

namespace sinkq::quant {

QuantSpec weight_spec(const WeightSim& w, int64_t in) {
  QuantSpec s;
  s.bits = w.bits;
  s.symmetric = w.symmetric;
  s.clip_ratio = w.clip;
  if (w.group > 0 && w.group < in && in % w.group == 0) {
    s.granularity = Granularity::PerGroup;
    s.group_size = w.group;
  } else {
    s.granularity = Granularity::PerRow;  // per channel; also a group >= in (one group per row)
  }
  return s;
}

int64_t weight_groups(const WeightSim& w, int64_t cols) {
  const int64_t G = w.group;
  return G <= 0 || G >= cols ? 1 : (cols + G - 1) / G;
}

namespace {

// Params of one block of a weight matrix where entry k (row-major over [prow, pcol]) uses the
// ratio ratio_of(k): for every distinct ratio, compute_params with spec.clip_ratio = that ratio
// on the whole block, and take the entries that chose it. compute_params is the only place a
// scale is computed; entries are independent (per row / per row-and-group), so an entry of the
// whole-block params equals the params that entry would get alone.
template <class RatioOf>
Params mixed_params(QuantSpec spec, const float* x, int64_t rows, int64_t cols, RatioOf&& ratio_of) {
  spec.clip_ratio = ratio_of(0);
  Params out = compute_params(spec, x, rows, cols);
  const int64_t n = out.prow * out.pcol;
  std::vector<float> done{spec.clip_ratio};
  for (int64_t k = 1; k < n; ++k) {
    const float r = ratio_of(k);
    if (std::find(done.begin(), done.end(), r) != done.end()) continue;
    done.push_back(r);
    spec.clip_ratio = r;
    const Params p = compute_params(spec, x, rows, cols);
    for (int64_t e = k; e < n; ++e) {
      if (ratio_of(e) != r) continue;
      out.scale[size_t(e)] = p.scale[size_t(e)];
      if (!p.zero.empty()) out.zero[size_t(e)] = p.zero[size_t(e)];
    }
  }
  return out;
}

}  // namespace

namespace {

void check_clips(const WeightSim& w, int64_t rows, int64_t cols, const ClipRatios* clip) {
  if (!clip) return;
  const int64_t groups = weight_groups(w, cols);
  SINKQ_CHECK(clip->rows == rows && clip->groups == groups && clip->r.size() == size_t(rows * groups),
              "weight clip ratios are [{}, {}], the matrix needs [{}, {}]", clip->rows, clip->groups, rows, groups);
  for (float r : clip->r) SINKQ_CHECK(r > 0.0f && r <= 1.0f, "weight clip ratio {} is outside (0, 1]", r);
}

// Calls f(c0, width, g0) for the column blocks of a weight matrix: the whole matrix when the group
// divides cols (or per row), else [0, G·⌊cols/G⌋) PerGroup (groups 0 .. main/G − 1) and the ragged
// tail as one more group per row (group main/G).
template <class F>
void for_each_weight_block(const WeightSim& w, int64_t cols, F&& f) {
  const int64_t G = w.group;
  if (G <= 0 || G >= cols || cols % G == 0) {
    f(int64_t(0), cols, int64_t(0));
    return;
  }
  const int64_t main = cols / G * G;
  f(int64_t(0), main, int64_t(0));
  f(main, cols - main, main / G);
}

// The block x[:, c0 : c0 + width] as a dense row-major copy (or x itself when it is the whole row).
template <class T>  // float or const float
T* block_of(T* x, int64_t rows, int64_t cols, int64_t c0, int64_t width, std::vector<float>& buf) {
  if (width == cols) return x;
  buf.resize(size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r) std::copy(x + r * cols + c0, x + r * cols + c0 + width, buf.data() + r * width);
  return buf.data();
}

// The Params of one block (clip ratios of its entries from `clip`, else w.clip).
Params block_params(const WeightSim& w, const float* b, int64_t rows, int64_t width, int64_t g0, const ClipRatios* clip) {
  const QuantSpec spec = weight_spec(w, width);
  if (!clip) return compute_params(spec, b, rows, width);
  const int64_t pcol = spec.granularity == Granularity::PerGroup ? width / spec.group_size : 1;
  // Params entry e = (row e / pcol, group g0 + e % pcol).
  return mixed_params(spec, b, rows, width, [&](int64_t e) { return clip->at(e / pcol, g0 + e % pcol); });
}

}  // namespace

void fake_quant_weight(const WeightSim& w, float* x, int64_t rows, int64_t cols, const ClipRatios* clip) {
  check_clips(w, rows, cols, clip);
  for_each_weight_block(w, cols, [&](int64_t c0, int64_t width, int64_t g0) {
    std::vector<float> buf;
    float* b = block_of(x, rows, cols, c0, width, buf);
    const QuantSpec spec = weight_spec(w, width);
    if (!clip)
      fake_quant_dynamic(spec, b, rows, width);
    else
      fake_quant(spec, block_params(w, b, rows, width, g0, clip), b, rows, width);
    if (b != x)
      for (int64_t r = 0; r < rows; ++r) std::copy(b + r * width, b + (r + 1) * width, x + r * cols + c0);
  });
}

WeightGrid weight_grid(const WeightSim& w, const float* x, int64_t rows, int64_t cols, const ClipRatios* clip) {
  check_clips(w, rows, cols, clip);
  WeightGrid out;
  out.rows = rows;
  out.groups = weight_groups(w, cols);
  out.scale.resize(size_t(rows * out.groups));
  if (!w.symmetric) out.zero.resize(out.scale.size());
  for_each_weight_block(w, cols, [&](int64_t c0, int64_t width, int64_t g0) {
    std::vector<float> buf;
    const float* b = block_of(x, rows, cols, c0, width, buf);
    const Params p = block_params(w, b, rows, width, g0, clip);
    for (int64_t e = 0; e < p.prow * p.pcol; ++e) {
      const size_t k = size_t((e / p.pcol) * out.groups + g0 + e % p.pcol);
      out.scale[k] = p.scale[size_t(e)];
      if (!w.symmetric) out.zero[k] = p.zero[size_t(e)];
    }
  });
  return out;
}

namespace {
// With --a-cross-cols static: one fold per layer and linear input, else an error naming the flag.
void check_cross_folds(const Recipe& cfg, const CrossFolds* folds, int num_layers) {
  if (!cfg.act_cross_static()) return;
  SINKQ_CHECK(folds && folds->size() == size_t(num_layers) * 4,
              "--a-cross-cols static needs the calibrated column maxima of every layer and linear input ({} given for {} "
              "layers): use build_sim with --calib", folds ? folds->size() : 0, num_layers);
}

// The matrices of layer l that fake_quantize_weights replaces, with what it applies to each:
// fn(role index, its WeightSim, its searched ratios or null, its CrossQuant fold or null). A matrix
// a weight rule keeps at full precision without a fold is skipped (shared with the base).
template <class Fn>
void for_each_quantized_matrix(const Recipe& cfg, int l, int num_layers, const ModelClipRatios* clips,
                               const CrossFolds* folds, Fn&& fn) {
  for (int i = 0; i < kNumLinearRoles; ++i) {
    const WeightSim ws = cfg.weights(l, i, num_layers);
    const CrossFold* fold = folds ? &(*folds)[size_t(l) * 4 + size_t(kLinearRoles[i].input)] : nullptr;
    if (!ws.on() && !fold) continue;
    // The searched ratios of this matrix (an empty entry: a rule gave it a fixed ratio).
    const ClipRatios* r = clips && ws.on() ? &(*clips)[size_t(l)].at(size_t(i)) : nullptr;
    if (r && r->r.empty() && !ws.clip_grid) r = nullptr;
    fn(i, ws, r, fold);
  }
}

// m widened to fp32 and fake-quantized under ws (clip: per-(row, group) ratios, or null), owned by w.
Mat fake_quant_mat(const WeightSim& ws, const Mat& m, ModelWeights& w, const ClipRatios* clip = nullptr,
                   const CrossFold* fold = nullptr) {
  std::vector<float> buf(size_t(m.rows * m.cols));
  to_f32(m.dtype, m.data, buf.data(), buf.size());
  if (fold) cross_fold_weight(*fold, buf.data(), m.rows, m.cols);
  if (ws.on()) fake_quant_weight(ws, buf.data(), m.rows, m.cols, clip);
  Mat q = m;
  q.data = w.own(std::move(buf));
  q.dtype = DType::F32;
  return q;
}
}  // namespace

std::shared_ptr<const Model> fake_quantize_weights(std::shared_ptr<const Model> base,
                                                   const Recipe& cfg, const ModelClipRatios* clips,
                                                   const CrossFolds* folds) {
  SINKQ_ASSERT(base != nullptr);
  cfg.validate();
  const ModelWeights& src = base->weights();
  const int num_layers = int(src.layers.size());
  check_cross_folds(cfg, folds, num_layers);
  if (!cfg.act_cross_static()) folds = nullptr;
  if (!cfg.weights_on() && !cfg.head.on() && !folds) return base;
  cfg.check_layers(num_layers);
  SINKQ_CHECK(!cfg.weight_clip_grid() || clips != nullptr,
              "--w-clip grid needs the searched ratios (calibration data, --calib): use build_sim");
  if (clips)
    SINKQ_CHECK(clips->size() == src.layers.size(), "weight clip ratios for {} layers, the model has {}",
                clips->size(), src.layers.size());
  ModelWeights w;  // empty store: every borrowed pointer points into `base`, kept alive
  w.embed = src.embed;
  w.lm_head = src.lm_head;
  w.final_norm = src.final_norm;
  w.layers = src.layers;  // norms and biases shared; matrices replaced below
  const LayerRange& stage = base->stage();  // a pipeline stage quantizes what it holds
  for (int l = 0; l < num_layers; ++l) {
    if (!stage.holds(l, num_layers)) continue;
    LayerWeights& L = w.layers[size_t(l)];
    for_each_quantized_matrix(cfg, l, num_layers, clips, folds, [&](int i, const WeightSim& ws, const ClipRatios* r,
                                                                    const CrossFold* fold) {
      L.mat(i) = fake_quant_mat(ws, L.mat(i), w, r, fold);
    });
  }
  if (cfg.head.on()) {  // the int8 / int4 table: one for both when tied (recipe.h HeadSim)
    const bool tied = src.tied();  // (a middle pipeline stage holds neither table)
    if (stage.last(num_layers) || (tied && stage.first())) w.lm_head = fake_quant_mat(cfg.head.weights(), src.lm_head, w);
    if (stage.first()) w.embed = tied ? w.lm_head : fake_quant_mat(cfg.head.weights(), src.embed, w);
  }
  return Model::with_weights(std::move(base), std::move(w));
}

bool can_fake_quantize_in_place(const Model& m, const Recipe& cfg, const CrossFolds* folds) {
  if (cfg.head.on()) return false;  // the embedding table would change before the search (fake_quantize_weights)
  const ModelWeights& src = m.weights();
  const int num_layers = int(src.layers.size());
  if (!cfg.act_cross_static()) folds = nullptr;
  bool ok = true;
  for (int l = 0; l < num_layers && ok; ++l) {
    if (!m.stage().holds(l, num_layers)) continue;
    for_each_quantized_matrix(cfg, l, num_layers, nullptr, folds, [&](int i, const WeightSim&, const ClipRatios*,
                                                                        const CrossFold*) {
      const Mat& mat = src.layers[size_t(l)].mat(i);
      ok = ok && mat.dtype == DType::F32 && src.owns(mat.data);
    });
  }
  return ok;
}

void fake_quantize_layer_in_place(const Model& m, const Recipe& cfg, int l, const ModelClipRatios* clips,
                                  const CrossFolds* folds) {
  const ModelWeights& src = m.weights();
  const int num_layers = int(src.layers.size());
  SINKQ_CHECK(l >= 0 && l < num_layers && m.stage().holds(l, num_layers), "fake_quantize_layer_in_place: layer {}", l);
  if (!cfg.act_cross_static()) folds = nullptr;
  for_each_quantized_matrix(cfg, l, num_layers, clips, folds, [&](int i, const WeightSim& ws, const ClipRatios* r,
                                                                  const CrossFold* fold) {
    const Mat& mat = src.layers[size_t(l)].mat(i);
    SINKQ_CHECK(mat.dtype == DType::F32 && src.owns(mat.data),
                "fake_quantize_layer_in_place: {} is not an fp32 matrix of the model's own store", mat.name);
    // The model's own buffer (ModelWeights::owned, allocated mutable): the same operations on the
    // same values as fake_quant_mat's copy.
    float* p = const_cast<float*>(static_cast<const float*>(mat.data));
    if (fold) cross_fold_weight(*fold, p, mat.rows, mat.cols);
    if (ws.on()) fake_quant_weight(ws, p, mat.rows, mat.cols, r);
  });
}

namespace {

// Per-token dynamic fake quant of a whole [T, F] view.
SiteFn dynamic_hook(QuantSpec spec) {
  return [spec](SiteView& v) { fake_quant_dynamic(spec, v.data, v.tokens, v.features); };
}

// CrossQuant at one (site, layer): its own quantizer (column state), created on first use since
// the width is only known from the view; a call starting at position 0 is a new sequence.
SiteFn cross_hook(CrossQuantSpec spec) {
  auto q = std::make_shared<std::unique_ptr<CrossQuantizer>>();
  return [spec, q](SiteView& v) {
    if (!*q) *q = std::make_unique<CrossQuantizer>(spec, v.features);
    if (!v.positions.empty() && v.positions[0] == 0) (*q)->reset();
    (*q)->apply(v.data, v.tokens, v.features);
  };
}

// CrossQuant's static columns at one (site, layer): x ← ẑ, the input of the folded weights.
// A copy of the fold: the hooks may outlive the caller's table.
SiteFn cross_fold_hook(const CrossFold& fold) {
  return [f = std::make_shared<const CrossFold>(fold)](SiteView& v) { cross_fold_apply(*f, v.data, v.tokens, v.features); };
}

}  // namespace

std::vector<int> attach_dynamic_hooks(Forward& fwd, const Recipe& cfg, const CrossFolds* folds) {
  return attach_dynamic_hooks(fwd.hooks(), fwd.model().config(), cfg, folds);
}

std::vector<int> attach_dynamic_hooks(SiteHooks& hooks, const ModelConfig& mc, const Recipe& cfg,
                                      const CrossFolds* folds) {
  std::vector<int> handles;
  check_cross_folds(cfg, folds, mc.num_layers);
  if (cfg.a.on() && cfg.a.mode != ActMode::Static) {
    for (Site s : {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn}) {
      for (int l = 0; l < mc.num_layers; ++l) {
        if (cfg.act_cross_static()) {
          handles.push_back(hooks.add(s, l, cross_fold_hook((*folds)[size_t(l) * 4 + size_t(linear_input_index(s))])));
        } else if (cfg.a.mode == ActMode::Cross) {
          handles.push_back(hooks.add(s, l, cross_hook(CrossQuantSpec{cfg.a.bits, cfg.a.alpha, cfg.a.cross_columns})));
        } else {
          QuantSpec spec;
          spec.bits = cfg.a.bits;
          spec.symmetric = cfg.a.symmetric;
          spec.granularity = Granularity::PerRow;
          handles.push_back(hooks.add(s, l, dynamic_hook(spec)));
        }
      }
    }
  }
  if (cfg.head.on()) handles.push_back(hooks.add(Site::HeadIn, -1, dynamic_hook(cfg.head.activations())));
  if (cfg.kv.on() && cfg.kv.mode == KvMode::Dynamic && !cfg.kv.vector()) {
    const QuantSpec spec = cfg.kv.spec(mc.head_dim);
    // layer -1: every layer; the logits site is never K or V, so only k/v of each layer run it.
    for (Site s : {Site::K, Site::V}) handles.push_back(hooks.add(s, -1, dynamic_hook(spec)));
  }
  return handles;
}

std::vector<int> attach(Forward& fwd, const Recipe& cfg) {
  cfg.validate();
  SINKQ_CHECK(!cfg.act_static(), "--a-quant static needs calibrated scales (--calib): use build_sim / SimModel::attach");
  SINKQ_CHECK(!cfg.kv_static(), "--kv-quant static needs calibrated scales (--calib): use build_sim / SimModel::attach");
  SINKQ_CHECK(!cfg.act_cross_static(),
              "--a-cross-cols static needs calibrated column maxima (--calib): use build_sim / SimModel::attach");
  SINKQ_CHECK(!cfg.rotate.on, "--rotate needs the rotated model and its online rotations: use build_sim / SimModel::attach");
  SINKQ_CHECK(!cfg.kv.vector(), "--kv-codebook {} needs its calibrated ranges and levels: use build_sim / SimModel::attach",
              kv_codebook_name(cfg.kv.codebook));
  return attach_dynamic_hooks(fwd, cfg);
}

std::vector<int> SimModel::attach(Forward& fwd) const {
  std::vector<int> handles = attach_hooks(fwd);
  fwd.set_prefix(prefix);
  return handles;
}

std::vector<int> SimModel::attach_hooks(Forward& fwd, bool kv_codecs) const {
  SINKQ_CHECK(&fwd.model() == model.get(), "SimModel::attach: the Forward must run SimModel::model "
              "(the rotated, weight-quantized model its hooks belong to)");
  cfg.validate();
  std::vector<int> handles = attach_online_rotation(fwd, cfg.rotate);
  for (int h : attach_dynamic_hooks(fwd, cfg, &cross)) handles.push_back(h);
  for (const StaticQuant& q : statics) {
    SINKQ_ASSERT(static_site(cfg, q.site));
    handles.push_back(fwd.hooks().add(q.site, q.layer, [spec = q.spec, p = q.params](SiteView& v) {
      fake_quant(spec, p, v.data, v.tokens, v.features);
    }));
  }
  SINKQ_CHECK(!cfg.kv.vector() || kvq.size() == size_t(fwd.model().config().num_layers) || kvq.empty(),
              "SimModel: KV codebooks for {} layers, the model has {}", kvq.size(), fwd.model().config().num_layers);
  if (!kv_codecs) return handles;
  SINKQ_CHECK(cfg.kv.recent == 0 || kvq.empty(),
              "--kv-recent {}: a query sees its recent rows in int8 and older ones coded, which per-row KV hooks cannot "
              "express; it runs through the codebook KV store (runtime::attach_codebook_kv: sinkq ppl, generate and "
              "quantize do this)",
              cfg.kv.recent);
  const Site ksite = cfg.kv.key_pre_rope ? Site::KPreRope : Site::K;
  for (size_t l = 0; l < kvq.size(); ++l) {
    handles.push_back(fwd.hooks().add(ksite, int(l), [c = &kvq[l].k](SiteView& v) { c->apply(v.data, v.tokens, v.features); }));
    handles.push_back(fwd.hooks().add(Site::V, int(l), [c = &kvq[l].v](SiteView& v) { c->apply(v.data, v.tokens, v.features); }));
  }
  return handles;
}

nlohmann::json SimModel::to_json() const {
  nlohmann::json j = cfg.to_json();
  j["calibration_result"] = calibration_report;
  return j;
}

std::string SimModel::describe() const {
  std::string s = cfg.describe();
  if (calibration_report.is_object() && calibration_report.contains("summary"))
    s += " ; chosen " + calibration_report.at("summary").get<std::string>();
  return s;
}

}  // namespace sinkq::quant
