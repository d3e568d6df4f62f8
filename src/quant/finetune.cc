// sinkq/quant/finetune.cc — the simulation's sites in the training forward, and block-wise
// fine-tuning (finetune.h).
#include "quant/finetune.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "quant/calibrate.h"
#include "quant/hadamard.h"
#include "train/adamw.h"
#include "train/grad_ops.h"
#include "train/ste.h"

namespace sinkq::quant {

using nlohmann::json;

std::function<void(float*, int64_t, int64_t, bool)> training_rotation(const RotateConfig& cfg) {
  if (!cfg.on) return {};
  return [](float* x, int64_t rows, int64_t n, bool transpose) {
    if (transpose)
      fwht_inverse_inplace(x, rows, n);
    else
      fwht_inplace(x, rows, n);
  };
}

std::vector<train::LayerSites<float>> fp_training_sites(const Recipe& cfg, const ModelConfig& mc) {
  std::vector<train::LayerSites<float>> out(size_t(mc.num_layers));
  for (auto& s : out) s.rotate = training_rotation(cfg.rotate);
  return out;
}

namespace {

// A static quantizer's STE form with the given scales / zeros (features = the site's width).
train::StaticSite<float> static_site_of(const StaticQuant& q, const float* scale, const int32_t* zero,
                                        const ModelConfig& mc) {
  const Params& p = q.params;
  SINKQ_CHECK(p.prow == 1 && p.pcol >= 1, "static quantizer at {} layer {}: {} x {} parameters, expected one row",
              site_name(q.site), q.layer, p.prow, p.pcol);
  const int64_t features = q.site == Site::K || q.site == Site::V ? mc.kv_dim()
                           : q.site == Site::OIn                  ? mc.q_dim()
                           : q.site == Site::DownIn               ? mc.intermediate_size
                                                                  : mc.hidden_size;
  SINKQ_CHECK(features % p.pcol == 0, "static quantizer at {} layer {}: {} scales over {} features",
              site_name(q.site), q.layer, p.pcol, features);
  train::StaticSite<float> s;
  s.bits = p.bits;
  s.symmetric = p.symmetric;
  s.group = features / p.pcol;
  s.scale = scale;
  s.zero = p.symmetric ? nullptr : zero;
  return s;
}

}  // namespace

std::vector<train::LayerSites<float>> training_sites(const Recipe& cfg, const ModelConfig& mc,
                                                     const std::vector<StaticQuant>& statics, SiteHooks& hooks) {
  std::vector<train::LayerSites<float>> out = fp_training_sites(cfg, mc);
  attach_dynamic_hooks(hooks, mc, cfg);
  for (auto& s : out) s.hooks = &hooks;
  for (const StaticQuant& q : statics) {
    SINKQ_CHECK(q.layer >= 0 && q.layer < mc.num_layers, "static quantizer for layer {}: the model has {}", q.layer,
                mc.num_layers);
    out[size_t(q.layer)].statics[size_t(q.site)] =
        static_site_of(q, q.params.scale.data(), q.params.zero.empty() ? nullptr : q.params.zero.data(), mc);
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

// One trainable weight matrix of the block: its fp weights, step sizes and (fixed) zero points.
struct TrainedWeight {
  bool quantized = false;
  train::SteLayout layout;
  std::vector<float> scale;
  std::vector<int32_t> zero;
  const int32_t* zp() const { return zero.empty() ? nullptr : zero.data(); }
};

std::vector<float>& mat_of(train::Params<float>::Layer& w, int role) {
  return w.mats[size_t(role)];
}

// Mean squared error of out against y, and its gradient (2/n)(out − y) into d.
double mse_and_grad(const std::vector<float>& out, const std::vector<float>& y, std::vector<float>* d) {
  double sum = 0;
  const float k = 2.0f / float(out.size());
  if (d) d->resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const float e = out[i] - y[i];
    sum += double(e) * double(e);
    if (d) (*d)[i] = k * e;
  }
  return sum / double(out.size());
}

}  // namespace

FinetuneResult finetune_blockwise(std::shared_ptr<const Model> fp, const Recipe& cfg, const ModelClipRatios* clips,
                                  const std::vector<StaticQuant>& statics,
                                  const std::shared_ptr<const KvPrefix>& prefix,
                                  std::span<const std::vector<int32_t>> calib, const CalibProgress& progress) {
  SINKQ_ASSERT(fp != nullptr);
  const FinetuneSim& ft = cfg.finetune;
  SINKQ_CHECK(ft.on(), "finetune_blockwise: the recipe has no fine-tuning epochs");
  SINKQ_CHECK(!calib.empty(), "--finetune blockwise needs calibration samples (--calib)");
  const ModelConfig& mc = fp->config();
  const int L = mc.num_layers;
  const int64_t H = mc.hidden_size;
  if (clips && !clips->empty())
    SINKQ_CHECK(int64_t(clips->size()) == L, "weight clip ratios for {} layers, the model has {}", clips->size(), L);
  const auto t0 = Clock::now();
  const train::Ropes rope(mc);
  train::Params<float> params = train::Params<float>::from_model(*fp);
  const train::PrefixKv<float> pre = prefix ? train::PrefixKv<float>::from(*prefix) : train::PrefixKv<float>{};
  const int64_t P = prefix ? prefix->size() : 0;

  FinetuneResult res;
  res.statics = statics;
  SiteHooks hooks(L);
  std::vector<train::LayerSites<float>> qsites = training_sites(cfg, mc, res.statics, hooks);
  const std::vector<train::LayerSites<float>> fsites = fp_training_sites(cfg, mc);

  // The two trajectories: the fp model's hidden states (targets) and the quantized one's (inputs).
  // A pipeline stage (MPI ranks, model.h StageHandoff) fine-tunes its own blocks: both come from the
  // previous stage and go on to the next.
  const LayerRange& stage = fp->stage();
  const size_t N = calib.size();
  std::vector<std::vector<int32_t>> pos(N);
  std::vector<std::vector<float>> x_fp(N), x_q(N);
  for (size_t s = 0; s < N; ++s) {
    const int64_t T = int64_t(calib[s].size());
    SINKQ_CHECK(T >= 1 && P + T <= mc.max_position_embeddings,
                "--finetune: calibration sample {} has {} tokens behind a {}-token prefix (max positions {})", s, T, P,
                mc.max_position_embeddings);
    for (int64_t t = 0; t < T; ++t) pos[s].push_back(int32_t(P + t));
    x_fp[s].resize(size_t(T * H));
    if (stage.first()) {
      train::embed_forward(params.embed.data(), calib[s], x_fp[s].data(), H);
      x_q[s] = x_fp[s];
    } else {
      x_q[s].resize(x_fp[s].size());
      stage_handoff().receive(x_fp[s].data(), x_fp[s].size());
      stage_handoff().receive(x_q[s].data(), x_q[s].size());
    }
  }
  auto input = [&](size_t s, int l) {
    train::LayerInput<float> in;
    in.pos = pos[s];
    in.tokens = calib[s];
    in.P = P;
    in.prefix_k = P ? pre.k[size_t(l)].data() : nullptr;
    in.prefix_v = P ? pre.v[size_t(l)].data() : nullptr;
    return in;
  };

  const int64_t steps_per_epoch = (int64_t(N) + ft.batch - 1) / ft.batch, total_steps = steps_per_epoch * ft.epochs;
  json records = json::array();  // per layer: the block's report (null: another stage's)
  ModelWeights out;
  const ModelWeights& src = fp->weights();
  out.embed = src.embed;
  out.lm_head = src.lm_head;
  out.final_norm = src.final_norm;
  out.layers = src.layers;
  train::LayerTape<float> tape;
  for (int l = 0; l < L; ++l) {
    if (!stage.holds(l, L)) {
      records.push_back(nullptr);
      continue;
    }
    const auto tl = Clock::now();
    train::Params<float>::Layer& w = params.layers[size_t(l)];
    // Targets (x_fp becomes them): the fp block on the fp trajectory, or on the quantized input.
    for (size_t s = 0; s < N; ++s) {
      if (ft.target == FinetuneSim::Target::QuantInput) x_fp[s] = x_q[s];
      train::layer_forward(mc, rope, w, l, input(s, l), x_fp[s], tape, &fsites[size_t(l)]);
    }

    // This block's quantizers, initialised from the grid search.
    std::array<TrainedWeight, kNumLinearRoles> tw;
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const WeightSim ws = cfg.weights(l, i, L);
      if (!ws.on()) continue;
      const Mat& m = src.layers[size_t(l)].mat(i);
      const ClipRatios* r = clips && !clips->empty() ? &(*clips)[size_t(l)].at(size_t(i)) : nullptr;
      if (r && r->r.empty()) r = nullptr;
      const WeightGrid g = weight_grid(ws, mat_of(w, i).data(), m.rows, m.cols, r);
      TrainedWeight& t = tw[size_t(i)];
      t.quantized = true;
      t.layout = train::SteLayout{.bits = ws.bits, .symmetric = ws.symmetric, .rows = m.rows, .cols = m.cols,
                                  .group = g.groups == 1 ? m.cols : ws.group};
      SINKQ_ASSERT(t.layout.groups() == g.groups);
      t.scale = g.scale;
      t.zero = g.zero;
    }
    train::LayerSites<float>& qs = qsites[size_t(l)];
    std::vector<size_t> my_statics;  // indices into res.statics of this layer's static quantizers
    for (size_t k = 0; k < res.statics.size(); ++k)
      if (res.statics[k].layer == l) my_statics.push_back(k);

    // Optimisers: one per weight matrix, one per step-size vector.
    const train::AdamWOptions ow{.lr = ft.lr_weights}, os{.lr = ft.lr_scales};
    std::vector<train::AdamW<float>> opt_w, opt_ws, opt_st;
    for (int i = 0; i < kNumLinearRoles; ++i) {
      opt_w.emplace_back(mat_of(w, i).size(), ow);
      opt_ws.emplace_back(tw[size_t(i)].scale.size(), os);
    }
    for (size_t k : my_statics) opt_st.emplace_back(res.statics[k].params.scale.size(), os);

    // The block as it runs quantized: weights fake-quantized with the current step sizes.
    train::Params<float>::Layer wq = w;
    auto quantize_weights = [&] {
      for (int i = 0; i < kNumLinearRoles; ++i) {
        const TrainedWeight& t = tw[size_t(i)];
        if (t.quantized)
          train::ste_forward(t.layout, mat_of(w, i).data(), t.scale.data(), t.zp(), mat_of(wq, i).data());
        else
          mat_of(wq, i) = mat_of(w, i);
      }
    };
    auto block_mse = [&](size_t s) {
      std::vector<float> x = x_q[s];
      train::layer_forward(mc, rope, wq, l, input(s, l), x, tape, &qs);
      return mse_and_grad(x, x_fp[s], nullptr);
    };
    quantize_weights();
    double before = 0;
    for (size_t s = 0; s < N; ++s) before += block_mse(s) / double(N);

    json epoch_loss = json::array();
    int64_t step = 0;
    train::Params<float>::Layer gq;  // d(loss)/d(the fake-quantized weights), the seven matrices only
    for (int i = 0; i < kNumLinearRoles; ++i) mat_of(gq, i).resize(mat_of(w, i).size());
    std::vector<std::vector<float>> gst(my_statics.size());
    std::vector<float> dx, gw, gs;
    for (int e = 0; e < ft.epochs; ++e) {
      double sum = 0;
      for (size_t b0 = 0; b0 < N; b0 += size_t(ft.batch)) {
        const size_t b1 = std::min(N, b0 + size_t(ft.batch));
        const float inv = 1.0f / float(b1 - b0);
        quantize_weights();
        for (int i = 0; i < kNumLinearRoles; ++i) std::fill(mat_of(gq, i).begin(), mat_of(gq, i).end(), 0.0f);
        train::LayerGrads<float> lg;
        lg.w = &gq;
        for (size_t k = 0; k < my_statics.size(); ++k) {
          gst[k].assign(res.statics[my_statics[k]].params.scale.size(), 0.0f);
          lg.scale[size_t(res.statics[my_statics[k]].site)] = gst[k].data();
        }
        for (size_t s = b0; s < b1; ++s) {
          std::vector<float> x = x_q[s];
          const train::LayerInput<float> in = input(s, l);
          train::layer_forward(mc, rope, wq, l, in, x, tape, &qs);
          sum += mse_and_grad(x, x_fp[s], &dx);
          for (float& v : dx) v *= inv;  // the batch mean
          train::layer_backward(mc, rope, wq, l, in, tape, &qs, dx, lg);
        }
        const double lr_w = train::cosine_lr(ft.lr_weights, 0.0, step, total_steps);
        const double lr_s = train::cosine_lr(ft.lr_scales, 0.0, step, total_steps);
        for (int i = 0; i < kNumLinearRoles; ++i) {
          std::vector<float>& W = mat_of(w, i);
          const std::vector<float>& dq = mat_of(gq, i);
          TrainedWeight& t = tw[size_t(i)];
          if (!t.quantized) {
            opt_w[size_t(i)].step(W.data(), dq.data(), lr_w);
            continue;
          }
          gw.assign(W.size(), 0.0f);
          gs.assign(t.scale.size(), 0.0f);
          train::ste_backward(t.layout, dq.data(), W.data(), t.scale.data(), t.zp(), gw.data(), gs.data());
          opt_w[size_t(i)].step(W.data(), gw.data(), lr_w);
          opt_ws[size_t(i)].step(t.scale.data(), gs.data(), lr_s);
          for (float& v : t.scale) v = std::max(v, 1e-12f);  // a step size stays positive
        }
        for (size_t k = 0; k < my_statics.size(); ++k) {
          std::vector<float>& sc = res.statics[my_statics[k]].params.scale;
          opt_st[k].step(sc.data(), gst[k].data(), lr_s);
          for (float& v : sc) v = std::max(v, 1e-12f);
        }
        ++step;
      }
      epoch_loss.push_back(sum / double(N));
      if (progress) progress(fmt::format("fine-tuning block {}/{}, epoch", l + 1, L), e + 1, ft.epochs);
    }
    // The block as trained: its weights fake-quantized for good, the next block's inputs.
    quantize_weights();
    double after = 0;
    for (size_t s = 0; s < N; ++s) {
      train::layer_forward(mc, rope, wq, l, input(s, l), x_q[s], tape, &qs);
      after += mse_and_grad(x_q[s], x_fp[s], nullptr) / double(N);
    }
    LayerWeights& lw = out.layers[size_t(l)];
    for (int i = 0; i < kNumLinearRoles; ++i) {
      Mat& m = lw.mat(i);
      m.data = out.own(mat_of(wq, i));
      m.dtype = DType::F32;
    }
    records.push_back({{"layer", l}, {"mse_before", before}, {"mse_after", after}, {"epoch_mse", epoch_loss},
                       {"seconds", round4(std::chrono::duration<double>(Clock::now() - tl).count())}});
    if (progress) progress("fine-tuning (block-wise)", l + 1, L);
  }
  if (!stage.last(L))
    for (size_t s = 0; s < N; ++s) {
      stage_handoff().send(x_fp[s].data(), x_fp[s].size());
      stage_handoff().send(x_q[s].data(), x_q[s].size());
    }
  if (!fp->whole()) records = stage_handoff().gather_layers(std::move(records));
  json blocks = json::array();
  for (json& r : records)
    if (!r.is_null()) blocks.push_back(std::move(r));
  res.model = Model::with_weights(fp, std::move(out));
  res.report = {{"method", "blockwise (PrefixQuant §5.2, EfficientQAT Block-AP)"},
                {"objective", ft.target == FinetuneSim::Target::FpTrajectory
                                  ? "mean squared error of each block's output against the fp block on the fp trajectory"
                                  : "mean squared error of each block's output against the fp block on its quantized input"},
                {"epochs", ft.epochs},
                {"lr_weights", ft.lr_weights},
                {"lr_scales", ft.lr_scales},
                {"batch", ft.batch},
                {"samples", N},
                {"blocks", blocks},
                {"seconds", round4(std::chrono::duration<double>(Clock::now() - t0).count())}};
  return res;
}

}  // namespace sinkq::quant
