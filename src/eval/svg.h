// sinkq/eval/svg.h — minimal self-contained SVG charts for analysis reports (no dependencies).
//
// Two chart kinds, each rendered to one standalone SVG document (UTF-8, starts with "<svg",
// ends with "</svg>\n"), viewable in any browser:
//   BarChart  grouped bars: one group per x category, one bar per series in each group, with a
//             legend; linear or log10 y axis (log: values <= 0 or non-finite are not drawn, the
//             axis spans whole decades around the data, like PrefixQuant's Fig. 2).
//   Heatmap   a rows × cols grid of cells colored on a white→dark-red scale over [vmin, vmax]
//             (values outside clamp; non-finite cells are grey), with the value printed in each
//             cell when the grid is small enough to read.
// All text is XML-escaped; bytes that are not valid UTF-8 and control characters become '?', so
// any label (token text included) gives well-formed XML.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sinkq::svg {

struct Series {
  std::string name;
  std::vector<double> values;  // one per group
};

struct BarChart {
  std::string title;
  std::string x_label, y_label;
  std::vector<std::string> groups;  // x categories
  std::vector<Series> series;       // each series' values.size() == groups.size()
  bool log_y = false;
};

struct Heatmap {
  std::string title;
  std::string x_label, y_label;
  std::vector<std::string> rows, cols;      // row labels (top to bottom), column labels
  std::vector<std::vector<double>> values;  // [rows][cols]
  double vmin = 0.0, vmax = 1.0;            // color scale range (vmax > vmin)
  std::string value_format = "{:.2f}";      // fmt format of the printed cell values
};

// Throws sinkq::Error when the shapes do not match (a series or row of the wrong length).
std::string render(const BarChart& c);
std::string render(const Heatmap& h);

// XML text/attribute escaping with the UTF-8 sanitizing described above.
std::string escape(std::string_view s);

}  // namespace sinkq::svg
