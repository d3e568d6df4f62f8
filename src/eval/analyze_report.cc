// sinkq/eval/analyze_report.cc — the analysis report as JSON, text, SVG plots and a report
// directory (analyze.h); the statistics themselves are computed in analyze.cc.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/mmap.h"
#include "eval/analyze.h"
#include "eval/svg.h"

namespace sinkq {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- output ---------------------------------------------------------------------------------

namespace {

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
// A float written as its shortest decimal (0.15, not 0.15000000596046448).
double short_double(float v) { return std::stod(fmt::format("{}", v)); }

std::string alpha_name(float a) { return fmt::format("α={}", a); }

// Token text for a terminal: quoted, control characters escaped.
std::string display(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    const auto u = uint8_t(ch);
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\r') out += "\\r";
    else if (ch == '\'') out += "\\'";
    else if (u < 0x20 || u == 0x7F) out += fmt::format("\\x{:02x}", u);
    else out.push_back(ch);
  }
  return out + "'";
}

std::string token_label(int32_t id, const std::string& text) {
  return text.empty() ? fmt::format("id {}", id) : fmt::format("{} (id {})", display(text), id);
}

}  // namespace

json to_json(const AnalyzeReport& r) {
  json j;
  j["eta"] = r.eta;
  j["bits"] = r.bits;
  json alphas = json::array();
  for (float a : r.alphas) alphas.push_back(short_double(a));
  j["alphas"] = alphas;
  j["samples"] = r.samples;
  j["len"] = r.len;
  j["prefix"] = r.prefix;
  j["model"] = {{"layers", r.layers},     {"heads", r.heads},
                {"kv_heads", r.kv_heads}, {"head_dim", r.head_dim},
                {"sliding_window", r.sliding_window}};
  json sites = json::array();
  for (Site s : kAnalyzedSites) sites.push_back(site_name(s));
  j["sites"] = sites;

  json layers = json::array();
  for (int l = 0; l < int(r.layer.size()); ++l) {
    const LayerReport& lr = r.layer[size_t(l)];
    json tm = json::object();
    for (size_t k = 0; k < kAnalyzedSites.size(); ++k) {
      const TokenMaxStats& s = lr.sites[k];
      tm[std::string(site_name(kAnalyzedSites[k]))] = {
          {"tokens", s.tokens},  {"top1", s.top1}, {"median", s.median},
          {"min1", s.min1},      {"top1_over_median", num(s.top1_over_median())},
          {"median_over_min1", num(s.median_over_min1())}};
    }
    json att = json::object();
    json f1 = json::array(), f4 = json::array();
    for (double v : lr.attention.to_first) f1.push_back(num(v));
    for (double v : lr.attention.to_first4) f4.push_back(num(v));
    att["to_first"] = f1;
    att["to_first4"] = f4;
    att["to_first_mean"] = num(lr.attention.mean_to_first());
    att["to_first_max"] = num(lr.attention.max_to_first());
    att["queries"] = lr.attention.queries;
    att["queries4"] = lr.attention.queries4;
    json kern = json::object();
    for (size_t k = 0; k < kLinearInputSites.size(); ++k) {
      const KernelStats& ks = lr.kernel[k];
      json cq = json::array();
      for (size_t a = 0; a < ks.crossquant.size(); ++a)
        cq.push_back({{"alpha", short_double(r.alphas[a])},
                      {"fraction", ks.crossquant[a].fraction()},
                      {"zeroed", ks.crossquant[a].zeroed}});
      kern[std::string(site_name(kLinearInputSites[k]))] = {{"nonzero", ks.per_token.nonzero},
                                                             {"per_token", ks.per_token.fraction()},
                                                             {"per_token_zeroed", ks.per_token.zeroed},
                                                             {"crossquant", cq}};
    }
    const double mean_count = l < int(r.outliers.mean_count.size()) ? r.outliers.mean_count[size_t(l)] : 0.0;
    const int64_t count = l < int(r.outliers.count.size()) ? r.outliers.count[size_t(l)] : 0;
    layers.push_back({{"layer", l},
                      {"token_max", tm},
                      {"outliers", {{"count", count}, {"mean_per_sequence", mean_count}}},
                      {"attention", att},
                      {"kernel", kern}});
  }
  j["layers"] = layers;

  const OutlierStats& o = r.outliers;
  json toks = json::array();
  for (const OutlierToken& t : o.tokens)
    toks.push_back({{"layer", t.layer},         {"sample", t.sample},       {"position", t.position},
                    {"token_id", t.token_id},   {"text", t.text},           {"site", site_name(t.site)},
                    {"token_max", t.token_max}, {"median", t.median},       {"ratio", num(t.ratio)}});
  json counts = json::array();
  for (const OutlierTokenCount& c : o.counts)
    counts.push_back({{"token_id", c.token_id},
                      {"text", c.text},
                      {"occurrences", c.occurrences},
                      {"non_initial", c.non_initial},
                      {"first_site_occurrences", c.first_site_occurrences},
                      {"first_site_non_initial", c.first_site_non_initial},
                      {"positions", c.positions}});
  json outlier_sites = json::array();
  for (Site site : r.outliers.sites) outlier_sites.push_back(site_name(site));
  j["outliers"] = {{"sites", outlier_sites},
                   {"eta", o.eta},
                   {"sequences", o.sequences},
                   {"count", o.count},
                   {"mean_count", o.mean_count},
                   {"outlier_number", o.outlier_number()},
                   {"tokens", toks},
                   {"counts", counts}};
  return j;
}

std::string to_text(const AnalyzeReport& r) {
  std::string s;
  const auto cell = [](double v) { return std::isfinite(v) ? fmt::format("{:>11.3g}", v) : fmt::format("{:>11}", "-"); };
  s += fmt::format("{} samples × {} tokens; {} layers, {} heads ({} kv), head_dim {}{}\n", r.samples, r.len,
                   r.layers, r.heads, r.kv_heads, r.head_dim,
                   r.sliding_window ? fmt::format(", sliding window {}", r.sliding_window) : "");

  const auto site_table = [&](const char* title, auto&& value) {
    s += fmt::format("\n{}\nlayer", title);
    for (Site st : kAnalyzedSites) s += fmt::format("{:>11}", site_name(st));
    s += "\n";
    for (size_t l = 0; l < r.layer.size(); ++l) {
      s += fmt::format("{:>5}", l);
      for (size_t k = 0; k < kAnalyzedSites.size(); ++k) s += cell(value(r.layer[l].sites[k]));
      s += "\n";
    }
  };
  site_table("token-wise max |x|: top-1 / median (upper outlier tokens; PrefixQuant Fig. 2/3)",
             [](const TokenMaxStats& t) { return t.top1_over_median(); });
  site_table("token-wise max |x|: median / min-1 (lower outlier tokens)",
             [](const TokenMaxStats& t) { return t.median_over_min1(); });
  s += "\ndown_in token-wise max |x|: top-1 / median / min-1\n";
  for (size_t l = 0; l < r.layer.size(); ++l) {
    const TokenMaxStats& t = r.layer[l].site(Site::DownIn);
    s += fmt::format("  layer {}: {:.4g} / {:.4g} / {:.4g}\n", l, t.top1, t.median, t.min1);
  }

  const OutlierStats& o = r.outliers;
  std::vector<std::string_view> where;
  for (Site site : o.sites) where.push_back(site_name(site));
  s += fmt::format("\noutlier tokens at {} (token max / median of its sequence > η = {:g}{}):\n",
                   fmt::join(where, " or "), o.eta,
                   where.size() > 1 ? " at either; the larger ratio shown, r = at out, the residual stream" : "");
  constexpr size_t kShown = 8;
  for (size_t l = 0; l < o.count.size(); ++l) {
    s += fmt::format("  layer {}: {} ({:.2f} per sequence)", l, o.count[l], o.mean_count[l]);
    size_t shown = 0;
    for (const OutlierToken& t : o.tokens) {
      if (t.layer != int(l)) continue;
      if (shown < kShown)
        s += fmt::format("{} s{}:{} {} ×{:.0f}{}", shown ? "," : ":", t.sample, t.position,
                         token_label(t.token_id, t.text), t.ratio, t.site == Site::Out ? "r" : "");
      ++shown;
    }
    if (shown > kShown) s += fmt::format(", ... {} more", shown - kShown);
    s += "\n";
  }
  if (!o.counts.empty()) {
    s += "  by token (hits over layers and samples; non-initial = not at position 0):\n";
    for (size_t i = 0; i < o.counts.size() && i < 16; ++i) {
      const OutlierTokenCount& c = o.counts[i];
      s += fmt::format("    {}: {} hits, {} non-initial, {} positions\n", token_label(c.token_id, c.text),
                       c.occurrences, c.non_initial, c.positions);
    }
    if (o.counts.size() > 16) s += fmt::format("    ... {} more token ids\n", o.counts.size() - 16);
  }
  s += fmt::format("  outlier number o = ceil(max mean count per sequence) = {}\n", o.outlier_number());

  s += "\nattention mass on token 0 (mean over queries >= 1), over heads: mean / max; on tokens 0..3 (queries >= 4): mean\n";
  for (size_t l = 0; l < r.layer.size(); ++l) {
    const AttentionStats& a = r.layer[l].attention;
    double m4 = 0;
    for (double v : a.to_first4) m4 += v;
    m4 = a.to_first4.empty() ? std::nan("") : m4 / double(a.to_first4.size());
    s += fmt::format("  layer {}: {:.4f} / {:.4f}   0..3: {:.4f}\n", l, a.mean_to_first(), a.max_to_first(), m4);
  }

  s += fmt::format("\nquantization kernel at {} bits (share of nonzero elements quantized to 0; CrossQuant "
                   "column maxima per sequence)\nlayer site     per-token",
                   r.bits);
  for (float a : r.alphas) s += fmt::format("{:>11}", fmt::format("a={}", a));
  s += "\n";
  for (size_t l = 0; l < r.layer.size(); ++l)
    for (size_t k = 0; k < kLinearInputSites.size(); ++k) {
      const KernelStats& ks = r.layer[l].kernel[k];
      s += fmt::format("{:>5} {:<8}{:>10.4f}", l, site_name(kLinearInputSites[k]), ks.per_token.fraction());
      for (const quant::KernelCount& kc : ks.crossquant) s += fmt::format("{:>11.4f}", kc.fraction());
      s += "\n";
    }
  return s;
}

std::vector<std::pair<std::string, std::string>> report_svgs(const AnalyzeReport& r) {
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> layer_names;
  for (size_t l = 0; l < r.layer.size(); ++l) layer_names.push_back(std::to_string(l));

  for (size_t k = 0; k < kAnalyzedSites.size(); ++k) {
    const std::string name(site_name(kAnalyzedSites[k]));
    svg::BarChart c;
    c.title = fmt::format("token-wise max |x| at {} ({} samples × {} tokens)", name, r.samples, r.len);
    c.x_label = "layer";
    c.y_label = "token-wise max |x|";
    c.groups = layer_names;
    c.log_y = true;
    c.series = {{"top-1", {}}, {"median", {}}, {"min-1", {}}};
    for (const LayerReport& lr : r.layer) {
      c.series[0].values.push_back(lr.sites[k].top1);
      c.series[1].values.push_back(lr.sites[k].median);
      c.series[2].values.push_back(lr.sites[k].min1);
    }
    files.emplace_back("token_max_" + name + ".svg", svg::render(c));
  }

  svg::Heatmap h;
  h.title = "attention mass on token 0 (mean over queries at positions >= 1)";
  h.x_label = "query head";
  h.y_label = "layer";
  for (int hh = 0; hh < r.heads; ++hh) h.cols.push_back(fmt::format("h{}", hh));
  for (size_t l = 0; l < r.layer.size(); ++l) {
    h.rows.push_back(fmt::format("layer {}", l));
    h.values.push_back(r.layer[l].attention.to_first);
  }
  h.vmin = 0.0;
  h.vmax = 1.0;
  h.value_format = "{:.3f}";
  files.emplace_back("attention_token0.svg", svg::render(h));

  for (size_t k = 0; k < kLinearInputSites.size(); ++k) {
    const std::string name(site_name(kLinearInputSites[k]));
    svg::BarChart c;
    c.title = fmt::format("quantization kernel at {}, {} bits: per-token vs CrossQuant", name, r.bits);
    c.x_label = "layer";
    c.y_label = "share of nonzero elements quantized to 0";
    c.groups = layer_names;
    c.series.push_back({"per-token", {}});
    for (float a : r.alphas) c.series.push_back({alpha_name(a), {}});
    for (const LayerReport& lr : r.layer) {
      const KernelStats& ks = lr.kernel[k];
      c.series[0].values.push_back(ks.per_token.fraction());
      for (size_t a = 0; a < ks.crossquant.size(); ++a) c.series[a + 1].values.push_back(ks.crossquant[a].fraction());
    }
    files.emplace_back("kernel_" + name + ".svg", svg::render(c));
  }
  return files;
}

namespace {
// dir without trailing slashes ("out/" -> "out"; "/" stays "/").
fs::path normalized(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return fs::path(d);
}
}  // namespace

void check_output_dir(const std::string& dir) {
  SINKQ_CHECK(!dir.empty(), "output directory: empty path");
  const fs::path p = normalized(dir);
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (fs::exists(st)) {
    SINKQ_CHECK(fs::is_directory(st), "output directory '{}' exists and is not a directory", dir);
    SINKQ_CHECK(fs::is_empty(p, ec) && !ec,
                "output directory '{}' exists and is not empty (give a new or empty directory)", dir);
  }
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  SINKQ_CHECK(fs::is_directory(parent, ec), "output directory '{}': its parent '{}' is not a directory", dir,
              parent.string());
}

void write_output_dir(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  check_output_dir(dir);
  const fs::path p = normalized(dir);
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  static std::atomic<int> counter{0};
  const fs::path tmp =
      parent / fmt::format(".{}.tmp.{}.{}", p.filename().string(), ::getpid(), counter.fetch_add(1));
  std::error_code ec;
  SINKQ_CHECK(fs::create_directory(tmp, ec) && !ec, "output directory '{}': cannot create '{}': {}", dir,
              tmp.string(), ec ? ec.message() : "it exists");
  try {
    for (const auto& [name, content] : files) write_file_atomic((tmp / name).string(), content);
    // rename(2) replaces an empty directory; a non-empty one (created meanwhile) fails.
    fs::rename(tmp, p, ec);
    SINKQ_CHECK(!ec, "output directory '{}': cannot move '{}' into place: {}", dir, tmp.string(), ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

void write_report_dir(const AnalyzeReport& r, const json& report, const std::string& dir) {
  check_output_dir(dir);
  std::vector<std::pair<std::string, std::string>> files = report_svgs(r);
  files.insert(files.begin(), {"report.json", report.dump(2, ' ', false, json::error_handler_t::replace) + "\n"});
  write_output_dir(dir, files);
}

}  // namespace sinkq
