// tests/runtime/forcing.h — teacher forcing of the packed path by the simulator, site by site.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "model/sites.h"
#include "util/testutil.h"

namespace sinkq::runtime::testmodels {

// Registers on `sim` (before its quantization hooks) hooks that record every value of `sites`, and
// on `packed` hooks that replace its values there by the recorded ones. One step of <= max_batch
// tokens (one call per site and layer). Before replacing, a packed value is compared with the
// recorded one (`worst`, relative to the site's max |value|): the forcing would otherwise hide
// q/k/v (whose effect reaches only o_in) and gate/up (only down_in).
struct Forcing {
  std::vector<Site> sites{Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn};  // the linear inputs
  std::map<std::pair<int, int>, std::vector<float>> inputs;
  double worst = 0.0;
  std::string worst_at;
  void record(Forward& sim) {
    for (Site s : sites)
      sim.hooks().add(s, -1, [this](SiteView& v) {
        inputs[{v.layer, int(v.site)}].assign(v.data, v.data + v.tokens * v.features);
      });
  }
  void force(Forward& packed) {
    for (Site s : sites)
      packed.hooks().add(s, -1, [this](SiteView& v) {
        const auto it = inputs.find({v.layer, int(v.site)});
        ASSERT_NE(it, inputs.end());
        ASSERT_EQ(it->second.size(), size_t(v.tokens * v.features));
        const double d =
            testing::rel_diff(std::vector<float>(v.data, v.data + v.tokens * v.features), it->second);
        if (d > worst) {
          worst = d;
          worst_at = fmt::format("{} of layer {}", site_name(v.site), v.layer);
        }
        std::copy(it->second.begin(), it->second.end(), v.data);
      });
  }
};

}  // namespace sinkq::runtime::testmodels
