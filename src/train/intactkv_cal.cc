// sinkq/train/intactkv_cal.cc — IntactKV+Cal (intactkv_cal.h).
#include "train/intactkv_cal.h"

#include <algorithm>

#include "core/error.h"
#include "train/adamw.h"
#include "train/grad_layer.h"
#include "train/grad_model.h"

namespace sinkq::train {

IntactKvCalResult train_intactkv(const Model& fp, const Model& quant, const KvPrefix& prefix,
                                 const std::vector<std::vector<int32_t>>& bodies, const IntactKvCalOptions& opt,
                                 const std::vector<LayerSites<float>>* quant_sites,
                                 const std::vector<LayerSites<float>>* fp_sites) {
  const ModelConfig& c = quant.config();
  SINKQ_CHECK(opt.epochs >= 1, "--prefix-train: epochs must be >= 1 (got {})", opt.epochs);
  SINKQ_CHECK(opt.lr > 0, "--prefix-train-lr must be > 0 (got {})", opt.lr);
  SINKQ_CHECK(opt.batch >= 1, "--prefix-train: batch must be >= 1 (got {})", opt.batch);
  SINKQ_CHECK(!bodies.empty(), "--prefix-train needs calibration samples (--calib)");
  SINKQ_CHECK(fp.config().num_layers == c.num_layers && fp.config().hidden_size == c.hidden_size &&
                  fp.config().kv_dim() == c.kv_dim(),
              "--prefix-train: the full-precision and quantized models differ in shape");
  for (size_t s = 0; s < bodies.size(); ++s)
    SINKQ_CHECK(!bodies[s].empty() && prefix.size() + int64_t(bodies[s].size()) <= c.max_position_embeddings,
                "--prefix-train: calibration sample {} has {} tokens behind a {}-token prefix (max positions {})", s,
                bodies[s].size(), prefix.size(), c.max_position_embeddings);
  const Params<float> pf = Params<float>::from_model(fp), pq = Params<float>::from_model(quant);
  const PrefixKv<float> init = PrefixKv<float>::from(prefix);
  // The targets: the full-precision model's layer outputs behind the full-precision prefix.
  std::vector<std::vector<std::vector<float>>> targets;
  for (const auto& b : bodies) targets.push_back(layer_outputs(c, pf, b, &init, fp_sites));

  PrefixKv<float> cur = init;
  const int64_t n = cur.P * c.kv_dim();
  std::vector<AdamW<float>> opt_k, opt_v;
  const AdamWOptions ao{.lr = opt.lr};
  for (int l = 0; l < c.num_layers; ++l) {
    opt_k.emplace_back(size_t(n), ao);
    opt_v.emplace_back(size_t(n), ao);
  }
  IntactKvCalResult r;
  for (size_t s = 0; s < bodies.size(); ++s)
    r.initial_loss += double(layer_mse(c, pq, bodies[s], targets[s], &cur, quant_sites)) / double(bodies.size());
  std::vector<std::vector<float>> gk(size_t(c.num_layers), std::vector<float>(size_t(n))), gv = gk;
  for (int e = 0; e < opt.epochs; ++e) {
    double sum = 0;
    for (size_t b0 = 0; b0 < bodies.size(); b0 += size_t(opt.batch)) {
      const size_t b1 = std::min(bodies.size(), b0 + size_t(opt.batch));
      for (auto& g : gk) std::fill(g.begin(), g.end(), 0.0f);
      for (auto& g : gv) std::fill(g.begin(), g.end(), 0.0f);
      for (size_t s = b0; s < b1; ++s) {
        const Gradients<float> g = layer_mse_and_grad(c, pq, bodies[s], targets[s], &cur, quant_sites);
        sum += double(g.loss);
        for (int l = 0; l < c.num_layers; ++l)
          for (int64_t i = 0; i < n; ++i) {
            gk[size_t(l)][size_t(i)] += g.prefix_k[size_t(l)][size_t(i)] / float(b1 - b0);
            gv[size_t(l)][size_t(i)] += g.prefix_v[size_t(l)][size_t(i)] / float(b1 - b0);
          }
      }
      for (int l = 0; l < c.num_layers; ++l) {
        opt_k[size_t(l)].step(cur.k[size_t(l)].data(), gk[size_t(l)].data());
        opt_v[size_t(l)].step(cur.v[size_t(l)].data(), gv[size_t(l)].data());
      }
    }
    r.epoch_loss.push_back(sum / double(bodies.size()));
    if (opt.progress) opt.progress(e + 1, opt.epochs, r.epoch_loss.back());
  }
  std::vector<float> k, v;
  for (int l = 0; l < c.num_layers; ++l) {
    k.insert(k.end(), cur.k[size_t(l)].begin(), cur.k[size_t(l)].end());
    v.insert(v.end(), cur.v[size_t(l)].begin(), cur.v[size_t(l)].end());
  }
  r.prefix = KvPrefix::from_rows(prefix.tokens(), c.num_layers, c.kv_dim(), std::move(k), std::move(v));
  return r;
}

}  // namespace sinkq::train
