// sinkq/calib/outliers.cc — see outliers.h.
#include "calib/outliers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"

namespace sinkq {

// ---- token-wise maxima ----------------------------------------------------------------------

void token_max(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = x + i * cols;
    float m = 0.0f;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, std::fabs(r[j]));
    out[i] = m;
  }
}

float lower_median(std::span<const float> v) {
  if (v.empty()) return 0.0f;
  std::vector<float> c(v.begin(), v.end());
  const auto mid = c.begin() + std::ptrdiff_t((c.size() - 1) / 2);
  std::nth_element(c.begin(), mid, c.end());
  return *mid;
}

namespace {
double ratio(double num, double den) {
  if (den > 0) return num / den;
  return num > 0 ? INFINITY : std::nan("");  // 0/0: no information
}
}  // namespace

double TokenMaxStats::top1_over_median() const { return tokens ? ratio(top1, median) : std::nan(""); }
double TokenMaxStats::median_over_min1() const { return tokens ? ratio(median, min1) : std::nan(""); }

TokenMaxStats token_max_stats(std::span<const float> maxima) {
  TokenMaxStats s;
  s.tokens = int64_t(maxima.size());
  if (maxima.empty()) return s;
  const auto [lo, hi] = std::minmax_element(maxima.begin(), maxima.end());
  s.min1 = *lo;
  s.top1 = *hi;
  s.median = lower_median(maxima);
  return s;
}

// ---- outlier tokens -------------------------------------------------------------------------

std::vector<int64_t> outlier_indices(std::span<const float> m, double eta) {
  std::vector<int64_t> out;
  const float med = lower_median(m);
  for (size_t t = 0; t < m.size(); ++t) {
    // M_t / med > eta, written without dividing so that med = 0 behaves as +inf (M_t > 0).
    if (double(m[t]) > eta * double(med)) out.push_back(int64_t(t));
  }
  return out;
}

int OutlierStats::outlier_number() const {
  if (sequences <= 0) return 0;
  int64_t most = 0;
  for (int64_t c : count) most = std::max(most, c);
  return int((most + sequences - 1) / sequences);
}

std::vector<int32_t> OutlierStats::frequent_tokens(int o) const {
  std::vector<int32_t> ids;
  for (const OutlierTokenCount& c : counts) {  // already in the documented order
    if (int(ids.size()) >= o) break;
    if (c.non_initial > 0) ids.push_back(c.token_id);
  }
  return ids;
}

namespace {
std::string text_of(const Tokenizer* tok, int32_t id) {
  if (!tok) return "";
  if (id < 0 || id >= tok->vocab_size()) return fmt::format("<id {}>", id);
  return tok->token_text(id);
}
}  // namespace

OutlierFinder::OutlierFinder(Forward& fwd, double eta, const Tokenizer* tok, std::span<const Site> sites)
    : fwd_(fwd), tok_(tok) {
  SINKQ_CHECK(std::isfinite(eta) && eta > 0, "outlier threshold eta = {} must be a positive number", eta);
  SINKQ_CHECK(!sites.empty(), "outlier tokens: no site to measure at");
  // Rows are recorded at the first site; the layer's sites run in forward order on each chunk.
  for (size_t s = 0; s < sites.size(); ++s)
    SINKQ_CHECK((sites[s] == Site::DownIn || sites[s] == Site::Out) && (s == 0 || sites[s - 1] == Site::DownIn),
                "outlier tokens are measured at down_in and/or out, in that order");
  stats_.sites.assign(sites.begin(), sites.end());
  const int L = fwd.model().config().num_layers;
  stats_.eta = eta;
  stats_.count.assign(size_t(L), 0);
  stats_.mean_count.assign(size_t(L), 0.0);
  rows_.resize(size_t(L));
  max_.assign(size_t(L), std::vector<std::vector<float>>(sites.size()));
  for (size_t s = 0; s < sites.size(); ++s)
    handles_.push_back(fwd.hooks().add(sites[s], -1, [this, s](SiteView& v) {
      if (s == 0) {
        std::vector<Row>& rows = rows_[size_t(v.layer)];
        for (int64_t t = 0; t < v.tokens; ++t) rows.push_back({v.positions[size_t(t)], v.token_ids[size_t(t)]});
      }
      std::vector<float>& m = max_[size_t(v.layer)][s];
      const size_t n0 = m.size();
      m.resize(n0 + size_t(v.tokens));
      token_max(v.data, v.tokens, v.features, m.data() + n0);
    }));
}

OutlierFinder::~OutlierFinder() {
  for (int h : handles_) fwd_.hooks().remove(h);
}

nlohmann::json OutlierFinder::rows_json(int layer) const {
  nlohmann::json j = nlohmann::json::array();
  const std::vector<Row>& rows = rows_.at(size_t(layer));
  for (size_t t = 0; t < rows.size(); ++t) {
    nlohmann::json r = {rows[t].position, rows[t].token_id};
    for (const std::vector<float>& m : max_[size_t(layer)]) r.push_back(m.at(t));
    j.push_back(std::move(r));
  }
  return j;
}

void OutlierFinder::set_rows(int layer, const nlohmann::json& rows) {
  std::vector<Row>& out = rows_.at(size_t(layer));
  out.clear();
  for (std::vector<float>& m : max_.at(size_t(layer))) m.clear();
  for (const auto& r : rows) {
    out.push_back({r.at(0).get<int64_t>(), r.at(1).get<int32_t>()});
    for (size_t s = 0; s < stats_.sites.size(); ++s) max_[size_t(layer)][s].push_back(r.at(2 + s).get<float>());
  }
}

void OutlierFinder::end_sequence() {
  const int64_t sample = stats_.sequences++;
  std::set<int64_t> positions;  // outlier in at least one layer
  std::map<int32_t, OutlierTokenCount> by_id;
  for (const OutlierTokenCount& c : stats_.counts) by_id[c.token_id] = c;
  for (size_t l = 0; l < rows_.size(); ++l) {
    std::vector<Row>& rows = rows_[l];
    // Per token, its largest ratio over the sites where it is an outlier (one hit per layer).
    std::map<int64_t, OutlierToken> hit;
    for (size_t s = 0; s < stats_.sites.size(); ++s) {
      const std::vector<float>& m = max_[l][s];
      SINKQ_ASSERT(m.size() == rows.size());
      const float med = lower_median(m);
      for (int64_t t : outlier_indices(m, stats_.eta)) {
        const Row& r = rows[size_t(t)];
        const double q = ratio(m[size_t(t)], med);
        auto [it, fresh] = hit.try_emplace(t);
        if (s == 0) it->second.at_first_site = true;
        if (!fresh && it->second.ratio >= q) continue;
        OutlierToken& o = it->second;
        o.layer = int(l);
        o.sample = sample;
        o.position = r.position;
        o.token_id = r.token_id;
        o.site = stats_.sites[s];
        o.token_max = m[size_t(t)];
        o.median = med;
        o.ratio = q;
        o.text = text_of(tok_, r.token_id);
      }
    }
    std::vector<OutlierToken> found;
    for (auto& [t, o] : hit) found.push_back(std::move(o));
    std::sort(found.begin(), found.end(), [](const OutlierToken& a, const OutlierToken& b) {
      return a.position < b.position;
    });
    for (OutlierToken& o : found) {
      OutlierTokenCount& c = by_id[o.token_id];
      c.token_id = o.token_id;
      c.text = o.text;
      ++c.occurrences;
      if (o.position != 0) ++c.non_initial;
      if (o.at_first_site) {
        ++c.first_site_occurrences;
        if (o.position != 0) ++c.first_site_non_initial;
      }
      if (positions.insert(o.position).second) ++c.positions;
      ++stats_.count[l];
      stats_.tokens.push_back(std::move(o));
    }
    rows.clear();
    for (std::vector<float>& m : max_[l]) m.clear();
  }
  // Keep `tokens` ordered by (layer, sample, position): a stable sort after appending.
  std::stable_sort(stats_.tokens.begin(), stats_.tokens.end(),
                   [](const OutlierToken& a, const OutlierToken& b) { return a.layer < b.layer; });
  for (size_t l = 0; l < stats_.count.size(); ++l)
    stats_.mean_count[l] = double(stats_.count[l]) / double(stats_.sequences);
  stats_.counts.clear();
  for (auto& [id, c] : by_id) stats_.counts.push_back(std::move(c));
  std::sort(stats_.counts.begin(), stats_.counts.end(), [](const OutlierTokenCount& a, const OutlierTokenCount& b) {
    // Tokens the first site sees, by its counts alone (the paper's ranking); then the others.
    if (a.first_site_non_initial != b.first_site_non_initial) return a.first_site_non_initial > b.first_site_non_initial;
    if (a.first_site_occurrences != b.first_site_occurrences) return a.first_site_occurrences > b.first_site_occurrences;
    if (a.first_site_occurrences > 0) return a.token_id < b.token_id;
    if (a.non_initial != b.non_initial) return a.non_initial > b.non_initial;
    if (a.occurrences != b.occurrences) return a.occurrences > b.occurrences;
    return a.token_id < b.token_id;
  });
}

OutlierStats find_outlier_tokens(Forward& fwd, const std::vector<std::vector<int32_t>>& samples, double eta,
                                 const Tokenizer* tok, const std::function<void(int64_t, int64_t)>& progress,
                                 std::span<const Site> sites) {
  OutlierFinder finder(fwd, eta, tok, sites);
  const Model& m = fwd.model();
  if (!m.whole()) {
    // A pipeline stage (model.h StageHandoff): each sample through this stage's layers, its rows
    // gathered on the first stage, which counts them as one process does (the others' stats
    // hold their own layers only).
    const LayerRange& st = m.stage();
    const int L = m.config().num_layers;
    for (size_t i = 0; i < samples.size(); ++i) {
      SINKQ_CHECK(!samples[i].empty(), "outlier tokens: sample {} is empty", i);
      fwd.reset();
      stage_step(fwd, samples[i]);
      nlohmann::json rec = nlohmann::json::array();
      for (int l = 0; l < L; ++l) rec.push_back(st.holds(l, L) ? finder.rows_json(l) : nlohmann::json());
      rec = stage_handoff().gather_layers(std::move(rec));
      if (st.first())
        for (int l = 0; l < L; ++l)
          if (!st.holds(l, L)) finder.set_rows(l, rec.at(size_t(l)));
      finder.end_sequence();
      if (progress) progress(int64_t(i + 1), int64_t(samples.size()));
    }
    return finder.stats();
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    SINKQ_CHECK(!samples[i].empty(), "outlier tokens: sample {} is empty", i);
    fwd.reset();
    fwd.step(samples[i], /*all_logits=*/false);
    finder.end_sequence();
    if (progress) progress(int64_t(i + 1), int64_t(samples.size()));
  }
  return finder.stats();
}

}  // namespace sinkq
