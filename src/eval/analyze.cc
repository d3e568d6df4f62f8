// sinkq/eval/analyze.cc — see analyze.h: the statistics (token-wise maxima, outlier tokens,
// attention on the first token, quantization kernels); the report is in analyze_report.cc.
#include "eval/analyze.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "quant/crossquant.h"

namespace sinkq {

using nlohmann::json;

// ---- the whole analysis ---------------------------------------------------------------------

void validate(const AnalyzeOptions& o) {
  SINKQ_CHECK(std::isfinite(o.eta) && o.eta > 0, "eta = {} must be a positive number", o.eta);
  SINKQ_CHECK(o.bits >= 2 && o.bits <= 8, "bits = {} is outside 2..8", o.bits);
  SINKQ_CHECK(!o.alphas.empty(), "alpha: at least one CrossQuant alpha is needed");
  for (float a : o.alphas) SINKQ_CHECK(a >= 0.0f && a <= 1.0f, "alpha = {} must be in [0, 1]", a);
}

double AttentionStats::mean_to_first() const {
  if (to_first.empty()) return std::nan("");
  double s = 0;
  for (double v : to_first) s += v;
  return s / double(to_first.size());
}

double AttentionStats::max_to_first() const {
  if (to_first.empty()) return std::nan("");
  return *std::max_element(to_first.begin(), to_first.end());
}

const TokenMaxStats& LayerReport::site(Site s) const {
  for (size_t k = 0; k < kAnalyzedSites.size(); ++k)
    if (kAnalyzedSites[k] == s) return sites[k];
  SINKQ_ASSERT(false && "site is not analysed");
  return sites[0];
}

namespace {

// All the per-site observers of analyze(), attached to one Forward (hooks removed on destruction).
class Observers {
 public:
  Observers(Forward& fwd, const AnalyzeOptions& o) : fwd_(fwd), opt_(o) {
    const ModelConfig& c = fwd.model().config();
    L_ = c.num_layers;
    maxima_.assign(kAnalyzedSites.size(), std::vector<std::vector<float>>(size_t(L_)));
    att_sum_.assign(size_t(L_), std::vector<double>(size_t(c.num_heads), 0.0));
    att4_sum_ = att_sum_;
    att_n_.assign(size_t(L_), 0);
    att4_n_.assign(size_t(L_), 0);
    q_buf_.resize(size_t(L_));
    k_rows_.resize(size_t(L_));
    kernel_.resize(size_t(L_));
    for (auto& per_site : kernel_)
      for (KernelStats& k : per_site) k.crossquant.assign(o.alphas.size(), {});

    for (size_t k = 0; k < kAnalyzedSites.size(); ++k)
      handles_.push_back(fwd.hooks().add(kAnalyzedSites[k], -1, [this, k](SiteView& v) { on_max(k, v); }));
    handles_.push_back(fwd.hooks().add(Site::Q, -1, [this](SiteView& v) { on_q(v); }));
    handles_.push_back(fwd.hooks().add(Site::K, -1, [this](SiteView& v) { on_k(v); }));
    for (size_t k = 0; k < kLinearInputSites.size(); ++k)
      handles_.push_back(fwd.hooks().add(kLinearInputSites[k], -1, [this, k](SiteView& v) { on_kernel(k, v); }));
  }
  ~Observers() {
    for (int h : handles_) fwd_.hooks().remove(h);
  }
  Observers(const Observers&) = delete;
  Observers& operator=(const Observers&) = delete;

  void fill(AnalyzeReport& r) const {
    r.layer.resize(size_t(L_));
    for (int l = 0; l < L_; ++l) {
      LayerReport& lr = r.layer[size_t(l)];
      for (size_t k = 0; k < kAnalyzedSites.size(); ++k) lr.sites[k] = token_max_stats(maxima_[k][size_t(l)]);
      AttentionStats& a = lr.attention;
      a.queries = att_n_[size_t(l)];
      a.queries4 = att4_n_[size_t(l)];
      for (double s : att_sum_[size_t(l)]) a.to_first.push_back(a.queries ? s / double(a.queries) : std::nan(""));
      for (double s : att4_sum_[size_t(l)])
        a.to_first4.push_back(a.queries4 ? s / double(a.queries4) : std::nan(""));
      lr.kernel = kernel_[size_t(l)];
    }
  }

 private:
  void on_max(size_t k, const SiteView& v) {
    std::vector<float>& out = maxima_[k][size_t(v.layer)];
    const size_t n0 = out.size();
    out.resize(n0 + size_t(v.tokens));
    token_max(v.data, v.tokens, v.features, out.data() + n0);
  }

  // q arrives before k in the same layer (model.cc): keep this call's rows until on_k.
  void on_q(const SiteView& v) {
    std::vector<float>& q = q_buf_[size_t(v.layer)];
    q.assign(v.data, v.data + v.tokens * v.features);
  }

  // Keys of this call are stored at their positions (earlier calls of the sequence are already
  // there), then the attention probabilities of this call's queries are recomputed.
  void on_k(const SiteView& v) {
    const ModelConfig& c = fwd_.model().config();
    const int64_t KV = c.kv_dim(), QD = c.q_dim(), hd = c.head_dim;
    const int heads = c.num_heads, group = c.num_heads / c.num_kv_heads;
    const int64_t window = c.window(v.layer);
    std::vector<float>& K = k_rows_[size_t(v.layer)];
    const std::vector<float>& Q = q_buf_[size_t(v.layer)];
    SINKQ_ASSERT(v.features == KV && int64_t(Q.size()) == v.tokens * QD);
    if (const auto& pre = fwd_.prefix()) {  // the prefix rows: absolute positions 0..P-1
      const KvSegment seg = pre->segment(v.layer);
      if (K.size() < size_t(seg.rows * KV)) K.resize(size_t(seg.rows * KV));
      std::copy(seg.k, seg.k + seg.rows * KV, K.begin());
    }
    for (int64_t t = 0; t < v.tokens; ++t) {
      const size_t p = size_t(v.positions[size_t(t)]);
      if (K.size() < (p + 1) * size_t(KV)) K.resize((p + 1) * size_t(KV));
      std::copy(v.row(t), v.row(t) + KV, K.begin() + std::ptrdiff_t(p * size_t(KV)));
    }
    // The forward's score scale (ModelConfig::attn_scale) and soft-cap, in double.
    const double scale = 1.0 / std::sqrt(c.query_pre_attn_scalar > 0 ? double(c.query_pre_attn_scalar) : double(hd));
    const double cap = double(c.attn_softcap);
    std::vector<double> prob;
    std::vector<double>& sum1 = att_sum_[size_t(v.layer)];
    std::vector<double>& sum4 = att4_sum_[size_t(v.layer)];
    for (int64_t t = 0; t < v.tokens; ++t) {
      const int64_t i = v.positions[size_t(t)];
      if (i < 1) continue;  // query 0 sees only key 0: p = 1 by construction
      const int64_t lo = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
      prob.resize(size_t(i - lo + 1));
      for (int h = 0; h < heads; ++h) {
        const float* q = Q.data() + t * QD + int64_t(h) * hd;
        const int64_t kvh = h / group;
        double mx = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) {
          const float* k = K.data() + j * KV + kvh * hd;
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += double(q[e]) * double(k[e]);
          const double sc = cap > 0 ? cap * std::tanh(d * scale / cap) : d * scale;
          prob[size_t(j - lo)] = sc;
          mx = std::max(mx, sc);
        }
        double z = 0;
        for (double& s : prob) z += (s = std::exp(s - mx));
        double first = 0, first4 = 0;
        for (int64_t j = lo; j <= std::min<int64_t>(i, 3); ++j) {
          const double pj = prob[size_t(j - lo)] / z;
          if (j == 0) first = pj;
          first4 += pj;
        }
        sum1[size_t(h)] += first;
        if (i >= 4) sum4[size_t(h)] += first4;
      }
      ++att_n_[size_t(v.layer)];
      if (i >= 4) ++att4_n_[size_t(v.layer)];
    }
  }

  void on_kernel(size_t k, const SiteView& v) {
    KernelStats& ks = kernel_[size_t(v.layer)][k];
    quant::QuantSpec spec;
    spec.bits = opt_.bits;
    spec.symmetric = true;
    spec.granularity = quant::Granularity::PerRow;
    const quant::Params p = quant::compute_params(spec, v.data, v.tokens, v.features);
    ks.per_token += quant::kernel_count(spec, p, v.data, v.tokens, v.features);
    for (size_t a = 0; a < opt_.alphas.size(); ++a) {
      quant::CrossQuantizer cq({opt_.bits, opt_.alphas[a], quant::ColumnMode::PerCall}, v.features);
      scratch_.assign(v.data, v.data + v.tokens * v.features);
      cq.apply(scratch_.data(), v.tokens, v.features, &ks.crossquant[a]);
    }
  }

  Forward& fwd_;
  const AnalyzeOptions& opt_;
  int L_ = 0;
  std::vector<int> handles_;
  std::vector<std::vector<std::vector<float>>> maxima_;  // [site][layer][token]
  std::vector<std::vector<double>> att_sum_, att4_sum_;   // [layer][head]
  std::vector<int64_t> att_n_, att4_n_;                   // [layer]
  std::vector<std::vector<float>> q_buf_;                 // [layer] this call's q rows
  std::vector<std::vector<float>> k_rows_;                // [layer] [position, kv_dim] of the sequence
  std::vector<std::array<KernelStats, kLinearInputSites.size()>> kernel_;  // [layer][site]
  std::vector<float> scratch_;
};

}  // namespace

AnalyzeReport analyze(std::shared_ptr<const Model> model, const std::vector<std::vector<int32_t>>& samples,
                      const AnalyzeOptions& opt) {
  validate(opt);
  SINKQ_CHECK(!samples.empty(), "analyze: no samples");
  const ModelConfig& c = model->config();
  int64_t len = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    SINKQ_CHECK(!samples[i].empty(), "analyze: sample {} is empty", i);
    for (int32_t id : samples[i])
      SINKQ_CHECK(id >= 0 && id < c.vocab_size, "analyze: sample {} has token id {} outside the vocabulary [0, {})", i,
                  id, c.vocab_size);
    len = std::max<int64_t>(len, int64_t(samples[i].size()));
  }
  SINKQ_CHECK(len <= c.max_position_embeddings,
              "analyze: samples of {} tokens are longer than the model's max_position_embeddings ({})", len,
              c.max_position_embeddings);

  // One call per sample: max_batch = the longest sample.
  Forward fwd(model, len, len);
  if (opt.prefix) fwd.set_prefix(opt.prefix);  // checks the shape and prefix + len <= max positions
  AnalyzeReport r;
  r.eta = opt.eta;
  r.bits = opt.bits;
  r.alphas = opt.alphas;
  r.samples = int64_t(samples.size());
  r.len = len;
  if (opt.prefix) r.prefix = opt.prefix->tokens();
  r.layers = c.num_layers;
  r.heads = c.num_heads;
  r.kv_heads = c.num_kv_heads;
  r.head_dim = c.head_dim;
  r.sliding_window = c.sliding_window;
  {
    Observers obs(fwd, opt);
    OutlierFinder finder(fwd, opt.eta, opt.tokenizer, opt.outlier_sites);
    for (size_t i = 0; i < samples.size(); ++i) {
      fwd.reset();
      fwd.step(samples[i], /*all_logits=*/false);
      finder.end_sequence();
      if (opt.progress) opt.progress(int64_t(i + 1), int64_t(samples.size()));
    }
    obs.fill(r);
    r.outliers = finder.stats();
  }
  return r;
}

}  // namespace sinkq
