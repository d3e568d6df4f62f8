#include "model/sites.h"

#include <algorithm>

namespace sinkq {

std::optional<Site> parse_site(std::string_view name) {
  for (int i = 0; i < kNumSites; ++i)
    if (kSiteNames[size_t(i)] == name) return Site(i);
  return std::nullopt;
}

void SiteHooks::resize(int num_layers) {
  num_layers_ = num_layers;
  stride_ = size_t(num_layers) + 1;
  rebuild();
}

int SiteHooks::add(Site site, int layer, SiteFn fn) {
  const int h = next_handle_++;
  entries_.push_back({h, site, layer, std::move(fn)});
  rebuild();
  return h;
}

void SiteHooks::remove(int handle) {
  std::erase_if(entries_, [&](const Entry& e) { return e.handle == handle; });
  rebuild();
}

void SiteHooks::clear() {
  entries_.clear();
  rebuild();
}

void SiteHooks::rebuild() {
  active_.assign(size_t(kNumSites) * stride_, 0);
  for (const Entry& e : entries_) {
    const size_t base = size_t(e.site) * stride_;
    if (e.layer < 0) {
      std::fill(active_.begin() + long(base), active_.begin() + long(base + stride_), 1);
    } else if (size_t(e.layer) + 1 < stride_) {
      active_[base + size_t(e.layer) + 1] = 1;
    }
  }
  any_ = !entries_.empty();
}

void SiteHooks::run(SiteView& v) const {
  for (const Entry& e : entries_)
    if (e.site == v.site && (e.layer < 0 || e.layer == v.layer)) e.fn(v);
}

}  // namespace sinkq
