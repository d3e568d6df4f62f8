#include "quant/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/ops.h"

namespace sinkq::quant {

bool static_site(const Recipe& c, Site s) {
  if (s == Site::K || s == Site::V) return c.kv_static();
  return c.act_static() && (s == Site::AttnIn || s == Site::OIn || s == Site::MlpIn || s == Site::DownIn);
}

QuantSpec static_spec(const Recipe& c, Site s, const ModelConfig& mc) {
  SINKQ_ASSERT(static_site(c, s));
  if (s == Site::K || s == Site::V) return c.kv.spec(mc.head_dim);
  QuantSpec spec;
  spec.bits = c.a.bits;
  spec.symmetric = c.a.symmetric;
  spec.granularity = Granularity::PerTensor;
  return spec;
}


using nlohmann::json;

std::vector<int64_t> select_rows(int64_t total, int64_t max_rows) {
  SINKQ_ASSERT(total >= 0 && max_rows >= 1);
  std::vector<int64_t> rows;
  if (total <= max_rows) {
    for (int64_t i = 0; i < total; ++i) rows.push_back(i);
    return rows;
  }
  // k·total/max_rows: strictly increasing in k because total > max_rows (steps of >= 1).
  for (int64_t k = 0; k < max_rows; ++k) rows.push_back(int64_t((__int128)k * total / max_rows));
  return rows;
}

// ---- weight clip objective -----------------------------------------------------------------

namespace {

// The layer-output objective of one matrix against fixed inputs X: the inputs are split once into
// contiguous per-group column blocks, then each evaluation quantizes W with the given ratios and
// computes e per (row, group).
class ClipObjective {
 public:
  ClipObjective(const WeightSim& w, const float* W, int64_t rows, int64_t cols, const float* X, int64_t n)
      : w_(w), W_(W), rows_(rows), cols_(cols), X_(X), n_(n), groups_(weight_groups(w, cols)) {
    SINKQ_CHECK(rows > 0 && cols > 0 && n >= 0, "weight clip search: bad shape [{}, {}] with {} inputs", rows, cols, n);
    if (groups_ > 1) {
      for (int64_t g = 0; g < groups_; ++g) {
        const int64_t c0 = g * w.group, width = std::min<int64_t>(w.group, cols - c0);
        std::vector<float> part(size_t(n * width));
        for (int64_t t = 0; t < n; ++t) std::copy(X + t * cols + c0, X + t * cols + c0 + width, part.data() + t * width);
        xg_.push_back(std::move(part));
      }
    }
  }
  int64_t groups() const { return groups_; }

  std::vector<double> eval(const ClipRatios& ratios) const {
    std::vector<float> d(W_, W_ + rows_ * cols_);
    fake_quant_weight(w_, d.data(), rows_, cols_, &ratios);
    for (size_t k = 0; k < d.size(); ++k) d[k] = W_[k] - d[k];  // D = W − Q_r(W)
    std::vector<double> e(size_t(rows_ * groups_), 0.0);
    if (n_ == 0) return e;
    std::vector<float> y(size_t(n_ * rows_));
    std::vector<float> dg;
    for (int64_t g = 0; g < groups_; ++g) {
      // y [n, rows] = X_g · D_gᵀ, the error of each output (group: partial dot product).
      Mat m;
      m.dtype = DType::F32;
      m.rows = rows_;
      m.name = "weight clip error";
      const float* x = X_;
      if (groups_ == 1) {
        m.cols = cols_;
        m.data = d.data();
      } else {
        const int64_t c0 = g * w_.group, width = std::min<int64_t>(w_.group, cols_ - c0);
        dg.resize(size_t(rows_ * width));
        for (int64_t i = 0; i < rows_; ++i)
          std::copy(d.data() + i * cols_ + c0, d.data() + i * cols_ + c0 + width, dg.data() + i * width);
        m.cols = width;
        m.data = dg.data();
        x = xg_[size_t(g)].data();
      }
      matmul(x, n_, m, nullptr, y.data());
      for (int64_t t = 0; t < n_; ++t) {
        const float* row = y.data() + t * rows_;
        for (int64_t i = 0; i < rows_; ++i) e[size_t(i * groups_ + g)] += double(row[i]) * double(row[i]);
      }
    }
    return e;
  }

 private:
  WeightSim w_;
  const float* W_;
  int64_t rows_, cols_;
  const float* X_;
  int64_t n_, groups_;
  std::vector<std::vector<float>> xg_;  // X's columns of each group, contiguous (groups > 1)
};

}  // namespace

std::vector<double> weight_clip_objective(const WeightSim& w, const float* W, int64_t rows, int64_t cols,
                                          const float* X, int64_t n, const ClipRatios& ratios) {
  return ClipObjective(w, W, rows, cols, X, n).eval(ratios);
}

WeightClipResult search_weight_clip(const WeightSim& w, const float* W, int64_t rows, int64_t cols,
                                    const float* X, int64_t n, std::span<const float> grid, int refine_steps,
                                    float refine_width) {
  SINKQ_CHECK(!grid.empty(), "weight clip search: empty grid");
  const ClipObjective obj(w, W, rows, cols, X, n);
  const int64_t entries = rows * obj.groups();
  WeightClipResult res;
  res.ratios.rows = rows;
  res.ratios.groups = obj.groups();
  res.ratios.r.assign(size_t(entries), grid[0]);
  res.objective.reserve(grid.size() * size_t(entries));
  ClipRatios uniform = res.ratios;
  for (float r : grid) {
    std::fill(uniform.r.begin(), uniform.r.end(), r);
    const std::vector<double> e = obj.eval(uniform);
    res.objective.insert(res.objective.end(), e.begin(), e.end());
  }
  res.chosen.resize(size_t(entries));
  for (int64_t k = 0; k < entries; ++k) {
    size_t best = 0;
    for (size_t c = 1; c < grid.size(); ++c)  // strict <: ties keep the earlier candidate
      if (res.objective[c * size_t(entries) + size_t(k)] < res.objective[best * size_t(entries) + size_t(k)]) best = c;
    res.ratios.r[size_t(k)] = grid[best];
    res.chosen[size_t(k)] = res.objective[best * size_t(entries) + size_t(k)];
  }
  if (refine_steps > 0) {
    const std::vector<float> centre = res.ratios.r;
    ClipRatios step = res.ratios;
    for (int i = 0; i < refine_steps; ++i) {
      const float off = refine_steps == 1 ? 0.0f : -refine_width + 2.0f * refine_width * float(i) / float(refine_steps - 1);
      for (int64_t k = 0; k < entries; ++k) {
        const float r = centre[size_t(k)] + off;
        step.r[size_t(k)] = r > 0.0f && r <= 1.0f ? r : centre[size_t(k)];
      }
      const std::vector<double> e = obj.eval(step);
      for (int64_t k = 0; k < entries; ++k)
        if (e[size_t(k)] < res.chosen[size_t(k)]) {
          res.chosen[size_t(k)] = e[size_t(k)];
          res.ratios.r[size_t(k)] = step.r[size_t(k)];
        }
    }
  }
  return res;
}

// ---- the pipeline --------------------------------------------------------------------------

double round4(double v) { return std::round(v * 1e4) / 1e4; }

namespace {

int64_t max_len(std::span<const std::vector<int32_t>> calib) {
  int64_t m = 0;
  for (const auto& s : calib) m = std::max<int64_t>(m, int64_t(s.size()));
  return m;
}

// Step 2 of build_sim: the weight clip search, layer by layer on the fp (rotated) model.
}  // namespace

ModelClipRatios search_weight_clips(std::shared_ptr<const Model> fp, const Recipe& cfg,
                                    std::span<const std::vector<int32_t>> calib,
                                    const std::shared_ptr<const KvPrefix>& prefix, const CalibProgress& progress,
                                    json& report, const CrossFolds* folds) {
  const ModelConfig& mc = fp->config();
  const int64_t L = max_len(calib);
  if (!cfg.act_cross_static()) folds = nullptr;
  SINKQ_ASSERT(!folds || folds->size() == size_t(mc.num_layers) * 4);
  Forward fwd(fp, L, L);  // one sample = one run_layer call
  attach_online_rotation(fwd, cfg.rotate);
  fwd.set_prefix(prefix);  // the body runs behind the fp prefix (null: none); hooks see body rows only

  // The rows used: select_rows over all tokens in hook order; picks[s] = (row in sample s, row in X).
  int64_t total = 0;
  for (const auto& s : calib) total += int64_t(s.size());
  const std::vector<int64_t> sel = select_rows(total, cfg.calib.weight_rows);
  const int64_t n = int64_t(sel.size());
  std::vector<std::vector<std::pair<int64_t, int64_t>>> picks(calib.size());
  {
    size_t k = 0;
    int64_t off = 0;
    for (size_t s = 0; s < calib.size(); ++s) {
      for (; k < sel.size() && sel[k] < off + int64_t(calib[s].size()); ++k) picks[s].emplace_back(sel[k] - off, int64_t(k));
      off += int64_t(calib[s].size());
    }
  }

  const int64_t feat[4] = {mc.hidden_size, mc.q_dim(), mc.hidden_size, mc.intermediate_size};
  // A pipeline stage (model.h StageHandoff) searches its own layers: its inputs come from the
  // previous stage, and the report's per-layer records are gathered on the first stage.
  const LayerRange& stage = fp->stage();
  std::vector<std::vector<float>> xs = stage_inputs(fwd, calib);
  ModelClipRatios out(size_t(mc.num_layers));
  json records = json::array();  // per layer: per matrix mean ratio, error, chosen / r1 sums; histogram
  const auto& grid = cfg.calib.grid;
  const auto one = std::find(grid.begin(), grid.end(), 1.0f);
  for (int l = 0; l < mc.num_layers; ++l) {
    if (!stage.holds(l, mc.num_layers)) {
      records.push_back(nullptr);
      continue;
    }
    std::map<float, int64_t> layer_hist;
    json sums = json::array();
    // Capture the selected rows of the four linear inputs of layer l while the fp layer runs.
    std::vector<float> X[4];
    size_t cur = 0;
    std::vector<int> handles;
    for (int i = 0; i < 4; ++i) {
      X[i].assign(size_t(n * feat[i]), 0.0f);
      handles.push_back(fwd.hooks().add(kLinearInputSites[i], l, [&, i](SiteView& v) {
        SINKQ_ASSERT(v.tokens == int64_t(calib[cur].size()) && v.features == feat[i]);
        for (const auto& [t, k] : picks[cur]) std::copy(v.row(t), v.row(t) + v.features, X[i].data() + k * feat[i]);
      }));
    }
    for (cur = 0; cur < calib.size(); ++cur) fwd.run_layer(l, calib[cur], xs[cur].data());
    for (int h : handles) fwd.hooks().remove(h);
    if (folds)  // the folded inputs x / b (crossquant.h): what W·diag(b) will see
      for (int i = 0; i < 4; ++i) {
        const CrossFold& f = (*folds)[size_t(l) * 4 + size_t(i)];
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < feat[i]; ++j) X[i][size_t(k * feat[i] + j)] /= f.b[size_t(j)];
      }

    const LayerWeights& lw = fp->weights().layers[size_t(l)];
    json lm = json::array(), le = json::array();
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const WeightSim ws = cfg.weights(l, i, mc.num_layers);
      if (!ws.on() || !ws.clip_grid) {  // a weight rule gives this matrix a fixed ratio (or none)
        lm.push_back(nullptr);
        le.push_back(nullptr);
        sums.push_back(nullptr);
        out[size_t(l)].emplace_back();
        continue;
      }
      const Mat& m = lw.mat(i);
      std::vector<float> W(size_t(m.rows * m.cols));
      to_f32(m.dtype, m.data, W.data(), W.size());
      if (folds) cross_fold_weight((*folds)[size_t(l) * 4 + size_t(kLinearRoles[i].input)], W.data(), m.rows, m.cols);
      WeightClipResult r = search_weight_clip(ws, W.data(), m.rows, m.cols, X[kLinearRoles[i].input].data(), n, grid,
                                              cfg.calib.refine_steps, cfg.calib.refine_width);
      double mean = 0, chosen = 0, r1 = 0;
      const size_t entries = r.ratios.r.size();
      for (size_t k = 0; k < entries; ++k) {
        mean += r.ratios.r[k];
        ++layer_hist[r.ratios.r[k]];
        chosen += r.chosen[k];
        if (one != grid.end()) r1 += r.objective[size_t(one - grid.begin()) * entries + k];
      }
      lm.push_back(round4(mean / double(entries)));
      le.push_back(one != grid.end() && r1 > 0 ? json(round4(chosen / r1)) : json(nullptr));
      sums.push_back({chosen, r1});
      out[size_t(l)].push_back(std::move(r.ratios));
    }
    json h = json::array();
    for (const auto& [ratio, count] : layer_hist) h.push_back({ratio, count});
    records.push_back({{"mean", lm}, {"error", le}, {"sums", sums}, {"histogram", h}});
    if (progress) progress("weight clip search, layer", l + 1, mc.num_layers);
  }
  stage_outputs(*fp, xs);
  if (!fp->whole()) records = stage_handoff().gather_layers(std::move(records));
  // The report from the layers' records, in layer order (one process or a pipeline's first stage:
  // the same sums in the same order).
  std::map<float, int64_t> histogram;
  json mean_ratio = json::array(), rel_error = json::array();
  double sum_chosen = 0, sum_r1 = 0;
  for (const json& rec : records) {
    if (rec.is_null()) continue;  // another stage's layer, on a stage that is not the first
    mean_ratio.push_back(rec["mean"]);
    rel_error.push_back(rec["error"]);
    for (const json& s : rec["sums"])
      if (!s.is_null()) {
        sum_chosen += s[0].get<double>();
        sum_r1 += s[1].get<double>();
      }
    for (const json& e : rec["histogram"]) histogram[e[0].get<float>()] += e[1].get<int64_t>();
  }
  json hist = json::object();
  int64_t entries = 0, clipped = 0;
  double mean = 0;
  for (auto it = histogram.rbegin(); it != histogram.rend(); ++it) {
    hist[fmt::format("{}", it->first)] = it->second;
    entries += it->second;
    mean += double(it->first) * double(it->second);
    if (it->first < 1.0f) clipped += it->second;
  }
  report["weights"] = {
      {"rows_per_layer", n},
      {"entries", entries},
      {"mean_ratio", round4(mean / double(std::max<int64_t>(entries, 1)))},
      {"clipped_fraction", round4(double(clipped) / double(std::max<int64_t>(entries, 1)))},
      {"ratio_histogram", hist},
      {"matrices", kWeightNames},
      {"mean_ratio_per_layer", mean_ratio},
      // Σ e(chosen) / Σ e(1) per layer and matrix: the layer-output error left relative to r = 1.
      {"objective_vs_r1_per_layer", rel_error},
      {"objective_vs_r1", one != grid.end() && sum_r1 > 0 ? json(round4(sum_chosen / sum_r1)) : json(nullptr)}};
  return out;
}

CrossFolds calibrate_cross_columns(std::shared_ptr<const Model> fp, const Recipe& cfg,
                                   std::span<const std::vector<int32_t>> calib,
                                   const std::shared_ptr<const KvPrefix>& prefix, const CalibProgress& progress,
                                   json& report) {
  SINKQ_CHECK(cfg.act_cross_static(), "calibrate_cross_columns: the recipe has no static CrossQuant columns");
  const ModelConfig& mc = fp->config();
  const int64_t L = max_len(calib);
  // Decision: the column maxima come from the fp (rotated) model, not layer by layer from the
  // quantized one: the fold must be known before any weight is quantized (the clip search and the
  // weights use W·diag(b)), and a column maximum is robust to the small input shifts quantizing
  // earlier layers causes (a value above it widens its row's scale: crossquant.h).
  Forward fwd(fp, L, L);
  attach_online_rotation(fwd, cfg.rotate);
  fwd.set_prefix(prefix);  // body rows only: the prefix's own rows never reach the linears
  std::vector<std::vector<float>> cmax(size_t(mc.num_layers) * 4);
  for (int l = 0; l < mc.num_layers; ++l)
    for (int s = 0; s < 4; ++s) {
      auto& c = cmax[size_t(l) * 4 + size_t(s)];
      fwd.hooks().add(kLinearInputSites[s], l, [&c](SiteView& v) {
        if (c.empty()) c.assign(size_t(v.features), 0.0f);
        for (int64_t t = 0; t < v.tokens; ++t)
          for (int64_t j = 0; j < v.features; ++j) {
            const float a = std::fabs(v.row(t)[j]);
            SINKQ_CHECK(std::isfinite(a), "CrossQuant column calibration: non-finite value {} at layer {} site {} "
                        "feature {}", v.row(t)[j], v.layer, site_name(v.site), j);
            c[size_t(j)] = std::max(c[size_t(j)], a);
          }
      });
    }
  // A pipeline stage (model.h StageHandoff) runs each sample through its own layers (step()'s
  // chunks), whose maxima it keeps; another stage's layers get a placeholder fold (never applied
  // here: nothing of those layers runs on this stage) and report record.
  const LayerRange& stage = fp->stage();
  for (size_t k = 0; k < calib.size(); ++k) {
    fwd.reset();
    if (fp->whole()) fwd.step(calib[k], /*all_logits=*/false);
    else stage_step(fwd, calib[k]);
    if (progress) progress("CrossQuant column maxima, sample", int(k + 1), int(calib.size()));
  }
  CrossFolds out;
  json records = json::array();  // per layer: the four sites' geometric-mean fold factors
  for (int l = 0; l < mc.num_layers; ++l) {
    if (!stage.holds(l, mc.num_layers)) {
      for (int s = 0; s < 4; ++s) out.push_back(make_cross_fold(cfg.a.bits, cfg.a.alpha, {1.0f}));
      records.push_back(nullptr);
      continue;
    }
    json row = json::array();
    for (int s = 0; s < 4; ++s) {
      out.push_back(make_cross_fold(cfg.a.bits, cfg.a.alpha, std::move(cmax[size_t(l) * 4 + size_t(s)])));
      double m = 0;
      for (float b : out.back().b) m += std::log(double(b));
      row.push_back(round4(std::exp(m / double(out.back().b.size()))));
    }
    records.push_back(row);
  }
  if (!fp->whole()) records = stage_handoff().gather_layers(std::move(records));
  json mean_b = json::array();
  for (json& r : records)
    if (!r.is_null()) mean_b.push_back(std::move(r));
  report["cross_columns"] = {{"alpha", cfg.a.alpha},
                             {"sites", {"attn_in", "o_in", "mlp_in", "down_in"}},
                             {"geomean_fold_factor_per_layer", mean_b}};
  return out;
}

namespace {

// The state of one static site during the search, read by its hook.
struct Slot {
  enum class State { Off, Observe, Apply } state = State::Off;
  QuantSpec spec;
  std::optional<Calibrator> observer;  // Observe: fed every row the hook sees (clip ratio 1)
  Params params;                       // Apply
};

// Step 4 of build_sim: static activation / KV scales by block-output grid search.
}  // namespace

std::vector<StaticQuant> search_statics(std::shared_ptr<const Model> fp, std::shared_ptr<const Model> qmodel,
                                        const Recipe& cfg, std::span<const std::vector<int32_t>> calib,
                                        const std::shared_ptr<const KvPrefix>& prefix, const CalibProgress& progress,
                                        json& report, const CrossFolds* folds, const std::function<void(int)>& prepare) {
  const ModelConfig& mc = fp->config();
  const int64_t L = max_len(calib), H = mc.hidden_size;
  Forward ffp(fp, L, L), fq(qmodel, L, L);
  attach_online_rotation(ffp, cfg.rotate);
  attach_online_rotation(fq, cfg.rotate);
  // Both the quantized block and its fp target attend to the same fp prefix (null: none).
  ffp.set_prefix(prefix);
  fq.set_prefix(prefix);
  attach_dynamic_hooks(fq, cfg, folds);  // non-searched quantizers stay on throughout

  std::vector<Site> order;
  for (Site s : {Site::AttnIn, Site::K, Site::V, Site::OIn, Site::MlpIn, Site::DownIn})
    if (static_site(cfg, s)) order.push_back(s);
  std::map<Site, std::shared_ptr<Slot>> slots;
  for (Site s : order) {
    auto slot = std::make_shared<Slot>();
    slots[s] = slot;
    // Layer -1: one hook per site for every layer; only the layer being calibrated runs.
    fq.hooks().add(s, -1, [slot](SiteView& v) {
      switch (slot->state) {
        case Slot::State::Off: break;
        case Slot::State::Observe:
          slot->observer->observe(v.data, v.tokens, v.features);
          break;
        case Slot::State::Apply: fake_quant(slot->spec, slot->params, v.data, v.tokens, v.features); break;
      }
    });
  }

  const LayerRange& stage = qmodel->stage();  // a pipeline stage searches its own layers
  std::vector<std::vector<float>> xq = stage_inputs(fq, calib);
  // Candidates are scored on the first n_score samples (CalibSim::search_samples); every sample
  // feeds the ranges and the next block's inputs.
  const size_t n_score = cfg.calib.search_samples > 0 ? std::min(calib.size(), size_t(cfg.calib.search_samples))
                                                      : calib.size();
  std::vector<std::vector<float>> target(n_score);
  std::vector<LayerResume> saved(n_score);  // the block's state before a resumable site, per scored sample
  int64_t count = 0;
  for (size_t s = 0; s < n_score; ++s) count += int64_t(calib[s].size()) * H;
  // Block-output MSE of fq's layer l against the targets; resume: from the state saved at the
  // site (o_in / mlp_in / down_in: what precedes it is the same for every candidate, so the same
  // bits as running the whole block, Forward::resume_layer).
  auto block_mse = [&](int l, bool resume) {
    double e = 0;
    std::vector<float> y;
    for (size_t s = 0; s < n_score; ++s) {
      if (resume) {
        y.resize(xq[s].size());
        fq.resume_layer(l, calib[s], saved[s], y.data());
      } else {
        y = xq[s];
        fq.run_layer(l, calib[s], y.data());
      }
      for (size_t k = 0; k < y.size(); ++k) {
        const double d = double(y[k]) - double(target[s][k]);
        e += d * d;
      }
    }
    return e / double(count);
  };

  std::vector<StaticQuant> statics;
  json records = json::array();  // per layer, per site: ratio, mse, mse_at_1 (, scale)
  for (int l = 0; l < mc.num_layers; ++l) {
    if (!stage.holds(l, mc.num_layers)) {
      records.push_back(nullptr);
      continue;
    }
    json rec = json::object();
    for (auto& [s, slot] : slots) slot->state = Slot::State::Off;
    for (size_t s = 0; s < n_score; ++s) {
      target[s] = xq[s];
      ffp.run_layer(l, calib[s], target[s].data());
    }
    if (prepare) prepare(l);  // after the fp targets: fp and qmodel may be one model (build_sim)
    for (Site site : order) {
      Slot& slot = *slots.at(site);
      const bool kv = site == Site::K || site == Site::V;
      const bool grid_on = kv ? cfg.kv.clip_grid : cfg.a.clip_grid;
      const std::vector<float> grid = grid_on ? cfg.calib.grid : std::vector<float>{kv ? cfg.kv.clip : cfg.a.clip};
      const QuantSpec base = static_spec(cfg, site, mc);
      const bool resume = LayerResume::resumable(site);
      // Observe: the site unquantized, earlier sites at their chosen scales, later ones off.
      slot.observer.emplace(base, cfg.calib.statistic);
      slot.state = Slot::State::Observe;
      for (size_t s = 0; s < calib.size(); ++s) {
        std::vector<float> y = xq[s];
        if (resume && s < n_score) {
          saved[s].site = site;
          fq.run_layer(l, calib[s], y.data(), &saved[s]);
        } else {
          fq.run_layer(l, calib[s], y.data());
        }
      }
      const Calibrator observed = std::move(*slot.observer);
      slot.observer.reset();
      // Score every candidate; strict < keeps the earlier ratio on ties.
      slot.state = Slot::State::Apply;
      slot.spec = base;
      std::vector<float> tried;
      std::vector<double> mse;
      size_t best = 0;
      auto score = [&](float r) {
        slot.params = observed.with_clip(r).params();
        tried.push_back(r);
        mse.push_back(block_mse(l, resume));
        if (mse.back() < mse[best]) best = mse.size() - 1;
      };
      for (float r : grid) score(r);
      // Refinement around the best grid ratio (CalibSim::refine_steps); ratios already tried or
      // outside (0, 1] are skipped.
      const int steps = grid_on ? cfg.calib.refine_steps : 0;
      const float c = tried[best], w = cfg.calib.refine_width;
      for (int i = 0; i < steps; ++i) {
        const float r = steps == 1 ? c : c - w + 2.0f * w * float(i) / float(steps - 1);
        if (r > 0.0f && r <= 1.0f && std::find(tried.begin(), tried.end(), r) == tried.end()) score(r);
      }
      slot.spec.clip_ratio = tried[best];
      slot.params = observed.with_clip(tried[best]).params();
      statics.push_back(StaticQuant{site, l, slot.spec, slot.params});
      const auto one = std::find(tried.begin(), tried.end(), 1.0f);
      json& r = rec[std::string(site_name(site))];
      r["ratio"] = json_float(tried[best]);
      r["mse"] = mse[best];
      r["mse_at_1"] = one != tried.end() ? json(mse[size_t(one - tried.begin())]) : json(nullptr);
      if (slot.params.scale.size() == 1) r["scale"] = slot.params.scale[0];
    }
    records.push_back(std::move(rec));
    // The quantized block's output is the next block's input.
    for (size_t s = 0; s < calib.size(); ++s) fq.run_layer(l, calib[s], xq[s].data());
    if (progress) progress("static scale search, layer", l + 1, mc.num_layers);
  }
  stage_outputs(*qmodel, xq);
  if (!qmodel->whole()) records = stage_handoff().gather_layers(std::move(records));
  std::map<Site, json> rep;  // per site: ratio / mse / mse_at_1 / scale arrays over layers
  for (const json& rec : records) {
    if (rec.is_null()) continue;  // another stage's layer, on a stage that is not the first
    for (Site site : order) {
      const json& r = rec.at(std::string(site_name(site)));
      json& out = rep[site];
      for (const char* k : {"ratio", "mse", "mse_at_1", "scale"})
        if (r.contains(k)) out[k].push_back(r[k]);
    }
  }
  json acts = json::object(), kvs = json::object();
  for (auto& [site, r] : rep) ((site == Site::K || site == Site::V) ? kvs : acts)[std::string(site_name(site))] = r;
  if (cfg.act_static()) report["activations"] = acts;
  if (cfg.kv_static()) report["kv"] = kvs;
  return statics;
}


}  // namespace sinkq::quant
