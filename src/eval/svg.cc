// sinkq/eval/svg.cc — see svg.h.
#include "eval/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace sinkq::svg {

namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
constexpr const char* kFont = "font-family=\"sans-serif\"";

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if it is not one.
size_t utf8_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (n == 2 && c < 0xC2) return 0;                                   // overlong
  if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;               // overlong
  if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;              // surrogates
  if (n == 4 && (c > 0xF4 || (c == 0xF0 && b(i + 1) < 0x90) || (c == 0xF4 && b(i + 1) >= 0x90)))
    return 0;                                                         // overlong / > U+10FFFF
  return n;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

// extra: further attributes (never font-size: that is `size`).
std::string text(double x, double y, std::string_view s, std::string_view extra = {}, int size = 12) {
  return fmt::format("<text x=\"{}\" y=\"{}\" {} font-size=\"{}\"{}{}>{}</text>\n", num(x), num(y), kFont, size,
                     extra.empty() ? "" : " ", extra, escape(s));
}

std::string header(double w, double h, std::string_view title) {
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\">\n",
      int(std::ceil(w)), int(std::ceil(h)));
  s += fmt::format("<title>{}</title>\n", escape(title));
  s += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", int(std::ceil(w)),
                   int(std::ceil(h)));
  s += text(w / 2, 20, title, "font-weight=\"bold\" text-anchor=\"middle\"");
  return s;
}

// A tick label: 3 significant digits, no trailing zeros ("0.001", "250", "1e+05").
std::string tick_label(double v) { return fmt::format("{:.3g}", v); }

// Linear axis ticks: a 1/2/5·10^k step giving about 5 intervals over [lo, hi].
double nice_step(double range) {
  const double raw = range / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * p;
}

}  // namespace

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len(s, i);
    if (n == 0) {
      out.push_back('?');
      ++i;
      continue;
    }
    if (n == 1) {
      const char c = s[i];
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out.push_back(uint8_t(c) < 0x20 || c == 0x7F ? '?' : c);
      }
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string render(const BarChart& c) {
  for (const Series& s : c.series)
    SINKQ_CHECK(s.values.size() == c.groups.size(), "svg bar chart '{}': series '{}' has {} values for {} groups",
                c.title, s.name, s.values.size(), c.groups.size());
  const size_t ng = std::max<size_t>(c.groups.size(), 1), ns = std::max<size_t>(c.series.size(), 1);
  const double bar_w = 10.0, gap = 12.0, group_w = double(ns) * bar_w + gap;
  const double left = 72, right = 20, top = 58, bottom = 52;
  // Wide enough for the groups, the title and the legend (≈ 7 px per character at 12 px).
  double legend_w = 0;
  for (const Series& sr : c.series) legend_w += 28 + 7.0 * double(sr.name.size());
  const double plot_w = std::max({420.0, double(ng) * group_w, 7.5 * double(c.title.size()) - left, legend_w});
  const double plot_h = 280;
  const double W = left + plot_w + right, H = top + plot_h + bottom;

  // Data range over the drawable values.
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : c.series)
    for (double v : s.values) {
      if (!std::isfinite(v) || (c.log_y && v <= 0)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  double a0, a1;  // axis range (log: exponents)
  if (c.log_y) {
    if (!(lo <= hi)) lo = hi = 1.0;
    a0 = std::floor(std::log10(lo));
    a1 = std::ceil(std::log10(hi));
    if (a1 <= a0) a1 = a0 + 1;
  } else {
    if (!(lo <= hi)) lo = hi = 0.0;
    a0 = std::min(0.0, lo);
    a1 = std::max(0.0, hi);
    if (a1 <= a0) a1 = a0 + 1;
    const double step = nice_step(a1 - a0);
    a0 = std::floor(a0 / step) * step;
    a1 = std::ceil(a1 / step) * step;
  }
  const auto y_of = [&](double v) {
    const double t = c.log_y ? (std::log10(v) - a0) / (a1 - a0) : (v - a0) / (a1 - a0);
    return top + plot_h * (1.0 - std::clamp(t, 0.0, 1.0));
  };

  std::string s = header(W, H, c.title);
  // Legend (one row under the title).
  double lx = left;
  for (size_t k = 0; k < c.series.size(); ++k) {
    s += fmt::format("<rect x=\"{}\" y=\"32\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", num(lx),
                     kPalette[k % std::size(kPalette)]);
    s += text(lx + 16, 43, c.series[k].name);
    lx += 28 + 7.0 * double(c.series[k].name.size());
  }
  // Grid and y ticks.
  if (c.log_y) {
    for (int e = int(a0); e <= int(a1); ++e) {
      const double y = y_of(std::pow(10.0, e));
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>\n", num(left), num(y),
                       num(left + plot_w), num(y));
      s += text(left - 6, y + 4, tick_label(std::pow(10.0, e)), "text-anchor=\"end\"");
    }
  } else {
    const double step = nice_step(a1 - a0);
    for (double v = a0; v <= a1 + step * 0.5; v += step) {
      const double y = y_of(v);
      s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>\n", num(left), num(y),
                       num(left + plot_w), num(y));
      s += text(left - 6, y + 4, tick_label(std::fabs(v) < step * 1e-9 ? 0.0 : v), "text-anchor=\"end\"");
    }
  }
  // Bars: from the axis base (log: the bottom decade; linear: 0) to the value.
  const double base_y = c.log_y ? top + plot_h : y_of(0.0);
  const double x0 = left + (plot_w - double(ng) * group_w) / 2;
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = x0 + double(g) * group_w + gap / 2;
    for (size_t k = 0; k < c.series.size(); ++k) {
      const double v = c.series[k].values[g];
      if (!std::isfinite(v) || (c.log_y && v <= 0)) continue;
      const double y = y_of(v);
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}: {}</title></rect>\n",
          num(gx + double(k) * bar_w), num(std::min(y, base_y)), num(bar_w - 1), num(std::fabs(base_y - y)),
          kPalette[k % std::size(kPalette)], escape(c.groups[g]), escape(c.series[k].name), fmt::format("{:.4g}", v));
    }
    s += text(gx + double(ns) * bar_w / 2, top + plot_h + 16, c.groups[g], "text-anchor=\"middle\"");
  }
  // Axes and labels.
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", num(left), num(top),
                   num(top + plot_h));
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", num(left),
                   num(top + plot_h), num(left + plot_w));
  s += text(left + plot_w / 2, H - 12, c.x_label, "text-anchor=\"middle\"");
  s += text(16, top + plot_h / 2, c.y_label + (c.log_y ? " (log scale)" : ""),
            fmt::format("text-anchor=\"middle\" transform=\"rotate(-90 16 {})\"", num(top + plot_h / 2)));
  s += "</svg>\n";
  return s;
}

std::string render(const Heatmap& h) {
  SINKQ_CHECK(h.values.size() == h.rows.size(), "svg heatmap '{}': {} value rows for {} row labels", h.title,
              h.values.size(), h.rows.size());
  for (const auto& r : h.values)
    SINKQ_CHECK(r.size() == h.cols.size(), "svg heatmap '{}': a row has {} values for {} columns", h.title, r.size(),
                h.cols.size());
  SINKQ_CHECK(h.vmax > h.vmin, "svg heatmap '{}': vmax {} must exceed vmin {}", h.title, h.vmax, h.vmin);
  const double cw = 44, ch = 24;
  const double left = 84, top = 44, right = 90, bottom = 46;
  const double grid_w = std::max(200.0, double(h.cols.size()) * cw);
  const double W = std::max(left + grid_w + right, 7.5 * double(h.title.size()) + 20);
  const double H = top + std::max(60.0, double(h.rows.size()) * ch) + bottom;
  const bool print_values = h.cols.size() <= 40;

  std::string s = header(W, H, h.title);
  for (size_t i = 0; i < h.rows.size(); ++i) {
    const double y = top + double(i) * ch;
    s += text(left - 6, y + ch / 2 + 4, h.rows[i], "text-anchor=\"end\"");
    for (size_t j = 0; j < h.cols.size(); ++j) {
      const double v = h.values[i][j];
      const double x = left + double(j) * cw;
      std::string fill = "#bbbbbb";
      double t = 0;
      if (std::isfinite(v)) {
        t = std::clamp((v - h.vmin) / (h.vmax - h.vmin), 0.0, 1.0);
        // white (255,255,255) -> dark red (165,15,21)
        fill = fmt::format("rgb({},{},{})", int(std::lround(255 - 90 * t)), int(std::lround(255 - 240 * t)),
                           int(std::lround(255 - 234 * t)));
      }
      const std::string val = std::isfinite(v) ? fmt::format(fmt::runtime(h.value_format), v) : "n/a";
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"><title>{} / {}: {}</title></rect>\n",
          num(x), num(y), num(cw), num(ch), fill, escape(h.rows[i]), escape(h.cols[j]), escape(val));
      if (print_values)
        s += text(x + cw / 2, y + ch / 2 + 4, val,
                  fmt::format("text-anchor=\"middle\" fill=\"{}\"", t > 0.55 ? "white" : "black"), 10);
    }
  }
  for (size_t j = 0; j < h.cols.size(); ++j)
    s += text(left + (double(j) + 0.5) * cw, top + double(h.rows.size()) * ch + 16, h.cols[j],
              "text-anchor=\"middle\"");
  // Color bar.
  const double bx = left + grid_w + 24, bh = std::max(60.0, double(h.rows.size()) * ch);
  s += "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
       "<stop offset=\"0\" stop-color=\"rgb(255,255,255)\"/><stop offset=\"1\" stop-color=\"rgb(165,15,21)\"/>"
       "</linearGradient></defs>\n";
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"{}\" fill=\"url(#scale)\" stroke=\"#999\"/>\n",
                   num(bx), num(top), num(bh));
  s += text(bx + 18, top + 10, tick_label(h.vmax));
  s += text(bx + 18, top + bh, tick_label(h.vmin));
  s += text(left + grid_w / 2, H - 10, h.x_label, "text-anchor=\"middle\"");
  s += text(14, top + bh / 2, h.y_label,
            fmt::format("text-anchor=\"middle\" transform=\"rotate(-90 14 {})\"", num(top + bh / 2)));
  s += "</svg>\n";
  return s;
}

}  // namespace sinkq::svg
