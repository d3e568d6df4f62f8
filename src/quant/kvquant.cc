// sinkq/quant/kvquant.cc — KVQuant's codebook quantizers and their calibration (kvquant.h).
#include "quant/kvquant.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/mmap.h"
#include "quant/calibrate.h"
#include "quant/rotate.h"
#include "quant/sim.h"
#include "train/fisher.h"

namespace sinkq::quant {

namespace nuq = formats::nuq;
using nlohmann::json;

void normalised_values(const KvCodec& codec, const float* x, const float* fisher, int64_t rows, int64_t cols,
                       std::vector<WeightedValue>& out) {
  codec.for_each(x, rows, cols, [&](int64_t r, int64_t c, const nuq::Range& range) {
    const float e = x[r * cols + c];
    if (nuq::is_outlier(e, range, codec.sparse())) return;
    const float u = std::clamp((e - range.zero()) / range.scale(), -1.0f, 1.0f);
    out.push_back({u, fisher ? fisher[r * cols + c] : 1.0f});
  });
}

std::vector<float> weighted_kmeans_1d(std::vector<WeightedValue>& pts, int k, int max_iter) {
  SINKQ_CHECK(k >= 1 && !pts.empty(), "k-means: {} levels over {} values", k, pts.size());
  std::sort(pts.begin(), pts.end(), [](const WeightedValue& a, const WeightedValue& b) { return a.u < b.u; });
  const size_t n = pts.size();
  // Prefix sums (double): W[i] = Σ_{j<i} w_j, S[i] = Σ_{j<i} w_j·u_j.
  std::vector<double> W(n + 1, 0.0), S(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    W[i + 1] = W[i] + double(pts[i].w);
    S[i + 1] = S[i] + double(pts[i].w) * double(pts[i].u);
  }
  SINKQ_CHECK(W[n] > 0, "k-means: the total weight of {} values is 0 (a Fisher information of zero?)", n);
  // Initial levels: the weighted quantiles (i + ½)/k.
  std::vector<double> c(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    const double target = (double(i) + 0.5) / double(k) * W[n];
    const size_t j = size_t(std::lower_bound(W.begin() + 1, W.end(), target) - (W.begin() + 1));
    c[size_t(i)] = double(pts[std::min(j, n - 1)].u);
  }
  std::vector<size_t> bound(size_t(k) + 1);
  for (int it = 0; it < max_iter; ++it) {
    // Cluster i holds the points in [bound[i], bound[i+1]): u above the midpoint of levels i−1, i
    // (ties to the lower level, as nuq::nearest).
    bound[0] = 0;
    bound[size_t(k)] = n;
    for (int i = 1; i < k; ++i) {
      const float mid = float(0.5 * (c[size_t(i) - 1] + c[size_t(i)]));
      bound[size_t(i)] = size_t(std::upper_bound(pts.begin(), pts.end(), mid, [](float m, const WeightedValue& p) {
                                  return m < p.u;
                                }) - pts.begin());
    }
    double moved = 0;
    for (int i = 0; i < k; ++i) {
      const double w = W[bound[size_t(i) + 1]] - W[bound[size_t(i)]];
      if (w <= 0) continue;  // an empty cluster keeps its level
      const double nc = (S[bound[size_t(i) + 1]] - S[bound[size_t(i)]]) / w;
      moved = std::max(moved, std::abs(nc - c[size_t(i)]));
      c[size_t(i)] = nc;
    }
    std::sort(c.begin(), c.end());
    if (moved < 1e-9) break;
  }
  return std::vector<float>(c.begin(), c.end());
}

std::vector<float> qnorm_levels(std::span<const float> levels, std::span<const WeightedValue> pts) {
  SINKQ_CHECK(!pts.empty(), "Q-Norm: no calibration values");
  double s1 = 0, q1 = 0, s2 = 0, q2 = 0;
  for (const WeightedValue& p : pts) {
    const double q = levels[size_t(nuq::nearest(levels, p.u))];
    s1 += p.u, q1 += double(p.u) * p.u, s2 += q, q2 += q * q;
  }
  const double n = double(pts.size());
  const double mu1 = s1 / n, mu2 = s2 / n;
  const double sd1 = std::sqrt(std::max(0.0, q1 / n - mu1 * mu1)), sd2 = std::sqrt(std::max(0.0, q2 / n - mu2 * mu2));
  std::vector<float> out(levels.begin(), levels.end());
  if (sd2 <= 0) return out;  // every value on one level: nothing to rescale
  for (float& c : out) c = float((double(c) - mu2) * sd1 / sd2 + mu1);
  return out;
}

double codebook_error(std::span<const float> levels, std::span<const WeightedValue> pts) {
  double e = 0, w = 0;
  for (const WeightedValue& p : pts) {
    const double d = double(p.u) - levels[size_t(nuq::nearest(levels, p.u))];
    e += double(p.w) * d * d;
    w += double(p.w);
  }
  return w > 0 ? e / w : 0.0;
}

namespace {

// The calibration rows every layer's K and V site sees, sample after sample, [rows, kv_dim].
struct KvRows {
  std::vector<std::vector<float>> k, v;           // per layer
  std::vector<std::vector<float>> k_fisher, v_fisher;  // per layer (Fisher codebook only)
};

KvCodec make_codec(const KvSim& kv, KvAxis axis, const std::vector<float>& x, const std::vector<float>* fisher,
                   int64_t cols, json& rep) {
  KvCodec c;
  c.per_channel = axis == KvAxis::Channel;
  c.outliers = kv.outliers;
  const int64_t rows = int64_t(x.size()) / cols;
  if (axis == KvAxis::Channel) {
    c.lo.resize(size_t(cols));
    c.hi.resize(size_t(cols));
    for (int64_t j = 0; j < cols; ++j) {
      const nuq::Range r = nuq::outlier_range(x.data() + j, rows, cols, kv.outliers);
      c.lo[size_t(j)] = r.lo;
      c.hi[size_t(j)] = r.hi;
    }
  }
  std::vector<WeightedValue> pts;
  pts.reserve(x.size());
  const bool weighted = kv.codebook == KvCodebook::Fisher;
  normalised_values(c, x.data(), weighted ? fisher->data() : nullptr, rows, cols, pts);
  const std::vector<float> uniform = nuq::uniform_levels(kv.bits);
  switch (kv.codebook) {
    case KvCodebook::Uniform: c.levels = uniform; break;
    case KvCodebook::Nf: c.levels = nuq::nf_levels(kv.bits); break;
    case KvCodebook::Kmeans:
    case KvCodebook::Fisher: {
      std::vector<WeightedValue> sorted = pts;
      c.levels = weighted_kmeans_1d(sorted, 1 << kv.bits);
      break;
    }
    case KvCodebook::Int: SINKQ_ASSERT(false);
  }
  if (kv.qnorm) c.levels = qnorm_levels(c.levels, pts);
  rep = {{"levels", c.levels},
         {"error", round4(codebook_error(c.levels, pts))},
         {"error_uniform", round4(codebook_error(uniform, pts))},
         {"error_weighted_by", weighted ? "fisher" : "none"},
         {"calibration_outlier_fraction", round4(1.0 - double(pts.size()) / double(x.size()))}};
  if (weighted) {
    // The Fisher summary: its mean per element and the share of its mass on the top 1% of
    // elements (how concentrated the sensitivity the levels were weighted by is).
    std::vector<float> f = *fisher;
    double total = 0;
    for (float v : f) total += v;
    const size_t top = std::max<size_t>(1, f.size() / 100);
    std::nth_element(f.begin(), f.begin() + ptrdiff_t(top), f.end(), std::greater<float>());
    double top_mass = 0;
    for (size_t i = 0; i < top; ++i) top_mass += f[i];
    rep["fisher"] = {{"mean", total / double(f.size())}, {"top_1pct_mass_share", round4(total > 0 ? top_mass / total : 0.0)}};
  }
  return c;
}

// Refuses (sinkq::Error) when the calibration K / V activations (and their Fisher information)
// of every layer would not fit in memory: they are held at once.
void check_kv_rows_fit(const ModelConfig& mc, std::span<const std::vector<int32_t>> calib, bool fisher) {
  int64_t tokens = 0;
  for (const auto& s : calib) tokens += int64_t(s.size());
  const uint64_t need =
      uint64_t(mc.num_layers) * 2 * uint64_t(tokens) * uint64_t(mc.kv_dim()) * sizeof(float) * (fisher ? 2 : 1);
  const uint64_t avail = mem_available_bytes();
  SINKQ_CHECK(avail == 0 || need < avail / 2,
              "KV codebook calibration needs {:.2f} GB for the K / V activations{} of {} calibration tokens; {:.2f} GB "
              "is available: lower --calib-samples or --calib-len",
              double(need) / 1e9, fisher ? " and their Fisher information" : "", tokens, double(avail) / 1e9);
}

}  // namespace

KvFisher kvquant_fisher(const std::shared_ptr<const Model>& base, const Recipe& cfg,
                        std::span<const int32_t> prefix_tokens, std::span<const std::vector<int32_t>> calib,
                        const std::function<void(std::string_view, int64_t, int64_t)>& progress) {
  SINKQ_ASSERT(cfg.kv.vector() && cfg.kv.codebook == KvCodebook::Fisher);
  const ModelConfig& mc = base->config();
  const int L = mc.num_layers;
  check_kv_rows_fit(mc, calib, true);
  KvFisher out;
  out.k.resize(size_t(L));
  out.v.resize(size_t(L));
  const train::Params<float> p = train::Params<float>::from_model(*base);
  std::unique_ptr<train::PrefixKv<float>> px;
  if (!prefix_tokens.empty())
    px = std::make_unique<train::PrefixKv<float>>(train::PrefixKv<float>::from(
        *KvPrefix::compute(base, std::vector<int32_t>(prefix_tokens.begin(), prefix_tokens.end()))));
  // ∂ℓ/∂(v·R2) = (∂ℓ/∂v)·R2: the Values' gradient in the rotated model's basis (per head).
  std::function<void(int, std::vector<float>&)> v_basis;
  if (cfg.rotate.on)
    v_basis = [&](int l, std::vector<float>& g) {
      r2_rotation(mc, cfg.rotate, l).forward(g.data(), int64_t(g.size()) / mc.head_dim);
    };
  for (size_t i = 0; i < calib.size(); ++i) {
    const train::FisherSample f = train::fisher_sample(mc, p, calib[i], px.get(), v_basis);
    for (int l = 0; l < L; ++l) {
      out.k[size_t(l)].insert(out.k[size_t(l)].end(), f.k[size_t(l)].begin(), f.k[size_t(l)].end());
      out.v[size_t(l)].insert(out.v[size_t(l)].end(), f.v[size_t(l)].begin(), f.v[size_t(l)].end());
    }
    if (progress) progress("KV codebooks: Fisher information, sample", int64_t(i) + 1, int64_t(calib.size()));
  }
  return out;
}

std::vector<KvQuantLayer> calibrate_kvquant(const SimModel& sm, const std::shared_ptr<const KvPrefix>& fp_prefix,
                                            std::span<const std::vector<int32_t>> calib, KvFisher fisher_in,
                                            const std::function<void(std::string_view, int64_t, int64_t)>& progress,
                                            nlohmann::json& report) {
  const auto t0 = std::chrono::steady_clock::now();
  const Recipe& cfg = sm.cfg;
  const KvSim& kv = cfg.kv;
  SINKQ_ASSERT(kv.vector() && sm.kvq.empty());
  const ModelConfig& mc = sm.model->config();
  const int L = mc.num_layers;
  const int64_t KV = mc.kv_dim();
  const bool fisher = kv.codebook == KvCodebook::Fisher;
  SINKQ_CHECK(!fisher || (int(fisher_in.k.size()) == L && int(fisher_in.v.size()) == L),
              "KV codebook calibration: the Fisher codebook needs the Fisher information of all {} layers (kvquant_fisher)", L);
  if (!kv.vector_calibrated()) {
    // Token vectors with fixed levels (uniform / nf, no Q-Norm): nothing to calibrate.
    KvCodec c;
    c.outliers = kv.outliers;
    c.levels = kv.codebook == KvCodebook::Nf ? nuq::nf_levels(kv.bits) : nuq::uniform_levels(kv.bits);
    report["kv_codebooks"] = {{"calibrated", false}, {"levels", c.levels}};
    return std::vector<KvQuantLayer>(static_cast<size_t>(L), KvQuantLayer{c, c});
  }
  int64_t tokens = 0, longest = 0;
  for (const auto& s : calib) tokens += int64_t(s.size()), longest = std::max(longest, int64_t(s.size()));
  check_kv_rows_fit(mc, calib, fisher);
  KvRows rows;
  rows.k.resize(size_t(L));
  rows.v.resize(size_t(L));
  {
    Forward fwd(sm.model, (fp_prefix ? fp_prefix->size() : 0) + longest);
    sm.attach_hooks(fwd);
    fwd.set_prefix(fp_prefix);
    const Site ksite = kv.key_pre_rope ? Site::KPreRope : Site::K;
    for (Site s : {ksite, Site::V})
      fwd.hooks().add(s, -1, [&rows, s, ksite](SiteView& v) {
        auto& dst = (s == ksite ? rows.k : rows.v)[size_t(v.layer)];
        dst.insert(dst.end(), v.data, v.data + v.tokens * v.features);
      });
    for (size_t i = 0; i < calib.size(); ++i) {
      fwd.reset();
      fwd.step(calib[i], /*all_logits=*/false);
      if (progress) progress("KV codebooks: activations, sample", int64_t(i) + 1, int64_t(calib.size()));
    }
  }
  if (fisher) {
    rows.k_fisher = std::move(fisher_in.k);
    rows.v_fisher = std::move(fisher_in.v);
  }
  std::vector<KvQuantLayer> out(static_cast<size_t>(L));
  json layers = json::array();
  for (int l = 0; l < L; ++l) {
    json jl;
    SINKQ_CHECK(int64_t(rows.k[size_t(l)].size()) == tokens * KV && int64_t(rows.v[size_t(l)].size()) == tokens * KV,
                "KV codebook calibration: layer {} saw {} key values, expected {}", l, rows.k[size_t(l)].size(), tokens * KV);
    SINKQ_CHECK(!fisher || (int64_t(rows.k_fisher[size_t(l)].size()) == tokens * KV &&
                            int64_t(rows.v_fisher[size_t(l)].size()) == tokens * KV),
                "KV codebook calibration: layer {} has {} Fisher values for {} key values (not the same calibration samples)",
                l, rows.k_fisher[size_t(l)].size(), tokens * KV);
    out[size_t(l)].k = make_codec(kv, kv.key_axis, rows.k[size_t(l)], fisher ? &rows.k_fisher[size_t(l)] : nullptr, KV, jl["k"]);
    out[size_t(l)].v = make_codec(kv, kv.value_axis, rows.v[size_t(l)], fisher ? &rows.v_fisher[size_t(l)] : nullptr, KV, jl["v"]);
    std::vector<float>().swap(rows.k[size_t(l)]);
    std::vector<float>().swap(rows.v[size_t(l)]);
    layers.push_back(std::move(jl));
    if (progress) progress("KV codebooks: layer", l + 1, L);
  }
  report["kv_codebooks"] = {
      {"tokens", tokens},
      {"layers", std::move(layers)},
      {"seconds", round4(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())}};
  return out;
}

}  // namespace sinkq::quant
