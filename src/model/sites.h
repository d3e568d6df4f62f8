// sinkq/model/sites.h — named activation sites: where observers read and hooks replace values.
//
// Every intermediate of the forward pass that a method needs has a stable name per layer
// (DESIGN.md). A hook registered for (site, layer) is called with a mutable view of the whole
// [tokens, features] block of the current forward call, with each row's absolute position and
// token id, and may change the values in place (simulated quantization) or only read them
// (calibration statistics). With nothing registered a site costs one table lookup.
//
// Site            shape [T, F]          meaning (per layer l)
// attn_in         [T, hidden]           input_layernorm(x): the input of q/k/v_proj
// q               [T, heads*head_dim]   q_proj(+bias), after RoPE
// k_pre_rope      [T, kv_heads*head_dim] k_proj(+bias), before RoPE (KVQuant quantizes here)
// k               [T, kv_heads*head_dim] after RoPE: exactly what is stored in the KV cache
//                                       (not run when a KV store keeps keys before RoPE, kv_store.h)
// v               [T, kv_heads*head_dim] v_proj(+bias): exactly what is stored in the KV cache
// o_in            [T, heads*head_dim]   attention output, the input of o_proj
// mlp_in          [T, hidden]           post_attention_layernorm(x): the input of gate/up_proj
// down_in         [T, intermediate]     silu(gate)·up: the input of down_proj
// out             [T, hidden]           the residual stream after the layer
// logits          [T, vocab]            layer = -1; only rows that the caller asked logits for
// head_in         [T, hidden]           layer = -1; the final norm's output: the input of lm_head,
//                                       for those rows only (int8 head quantization, recipe.h HeadSim)
// Edits to k_pre_rope propagate (RoPE is applied after the hook); edits to k and v are what
// later tokens attend to.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace sinkq {

// The per-layer sites come first: [0, Logits) are the sites of every layer.
enum class Site : uint8_t { AttnIn, Q, KPreRope, K, V, OIn, MlpIn, DownIn, Out, Logits, HeadIn, kCount };
inline constexpr int kNumSites = int(Site::kCount);
inline constexpr std::array<std::string_view, kNumSites> kSiteNames = {
    "attn_in", "q", "k_pre_rope", "k", "v", "o_in", "mlp_in", "down_in", "out", "logits", "head_in"};

inline std::string_view site_name(Site s) { return kSiteNames[size_t(s)]; }

// The four activations that feed the linear layers, indexed by LinearRoleInfo::input
// (io/weights.h kLinearRoles): the sites activation quantization applies to.
inline constexpr std::array<Site, 4> kLinearInputSites = {Site::AttnIn, Site::OIn, Site::MlpIn, Site::DownIn};
// Index of `s` in kLinearInputSites, or -1.
constexpr int linear_input_index(Site s) {
  for (int i = 0; i < 4; ++i)
    if (kLinearInputSites[i] == s) return i;
  return -1;
}
std::optional<Site> parse_site(std::string_view name);

struct SiteView {
  Site site;
  int layer;                            // -1 for logits
  float* data;                          // row-major [tokens, features], mutable
  int64_t tokens;
  int64_t features;
  std::span<const int32_t> positions;   // absolute position of each row (cache row)
  std::span<const int32_t> token_ids;   // token id of each row
  float* row(int64_t t) const { return data + t * features; }
};

using SiteFn = std::function<void(SiteView&)>;

class SiteHooks {
 public:
  explicit SiteHooks(int num_layers = 0) { resize(num_layers); }
  void resize(int num_layers);
  // layer = -1: every layer (and the logits site). Returns a handle for remove().
  int add(Site site, int layer, SiteFn fn);
  void remove(int handle);
  void clear();
  // The hot-path check: one load.
  bool active(Site site, int layer) const {
    return any_ && active_[size_t(site) * stride_ + size_t(layer + 1)] != 0;
  }
  void run(SiteView& v) const;

 private:
  struct Entry {
    int handle;
    Site site;
    int layer;
    SiteFn fn;
  };
  void rebuild();
  std::vector<Entry> entries_;
  std::vector<uint8_t> active_;  // [site][layer + 1] (slot 0 = layer -1, the logits site)
  size_t stride_ = 1;
  int num_layers_ = 0;
  int next_handle_ = 1;
  bool any_ = false;
};

}  // namespace sinkq
