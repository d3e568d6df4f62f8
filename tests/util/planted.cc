// tests/util/planted.cc — see planted.h.
#include "util/planted.h"

#include <fmt/format.h>

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace sinkq::testing {

namespace {

// Element i of a tensor, in its own dtype.
void set(TinyTensor& t, int64_t i, float v) {
  std::byte* p = t.bytes.data() + size_t(i) * dtype_size(t.dtype);
  if (t.dtype == DType::F32) {
    std::memcpy(p, &v, 4);
  } else {
    const uint16_t h = t.dtype == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
    std::memcpy(p, &h, 2);
  }
}

TinyTensor& get(std::map<std::string, TinyTensor>& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) fail("planted model: tensor '{}' is missing", name);
  if (it->second.shape.size() != 2) fail("planted model: tensor '{}' is not a matrix", name);
  return it->second;
}

// W[out, in]: column c (every output reads input c) set to v.
void set_column(TinyTensor& t, int64_t c, float v) {
  for (int64_t o = 0; o < t.shape[0]; ++o) set(t, o * t.shape[1] + c, v);
}
// W[out, in]: row r set to v.
void set_row(TinyTensor& t, int64_t r, float v) {
  for (int64_t i = 0; i < t.shape[1]; ++i) set(t, r * t.shape[1] + i, v);
}

}  // namespace

TinyTensorEdit planted_outlier_edit(const PlantedOutlierSpec& s) {
  const TinyModelSpec& b = s.base;
  const int e = s.dim >= 0 ? s.dim : b.hidden - 1;
  const int r = s.neuron >= 0 ? s.neuron : b.intermediate - 1;
  if (e >= b.hidden) fail("planted model: dim {} is outside [0, {})", e, b.hidden);
  if (r >= b.intermediate) fail("planted model: neuron {} is outside [0, {})", r, b.intermediate);
  for (int32_t id : s.token_ids)
    if (id < 0 || id >= b.vocab) fail("planted model: token id {} is outside [0, {})", id, b.vocab);
  for (int l : s.layers)
    if (l < 0 || l >= b.layers) fail("planted model: layer {} is outside [0, {})", l, b.layers);

  return [s, e, r](std::map<std::string, TinyTensor>& m) {
    TinyTensor& emb = get(m, "model.embed_tokens.weight");
    set_column(emb, e, 0.0f);
    for (int32_t id : s.token_ids) set(emb, int64_t(id) * emb.shape[1] + e, s.marker);
    for (int l = 0; l < s.base.layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                            "mlp.gate_proj.weight", "mlp.up_proj.weight"})
        set_column(get(m, p + n), e, 0.0f);  // nothing reads dim e...
      set_row(get(m, p + "self_attn.o_proj.weight"), e, 0.0f);  // ...and nothing writes it
      set_row(get(m, p + "mlp.down_proj.weight"), e, 0.0f);
    }
    for (int l : s.layers) {
      const std::string p = fmt::format("model.layers.{}.", l);
      TinyTensor& gate = get(m, p + "mlp.gate_proj.weight");
      TinyTensor& up = get(m, p + "mlp.up_proj.weight");
      set_row(gate, r, 0.0f);
      set_row(up, r, 0.0f);
      set(gate, int64_t(r) * gate.shape[1] + e, s.weight);
      set(up, int64_t(r) * up.shape[1] + e, s.weight);
      set_column(get(m, p + "mlp.down_proj.weight"), r, 0.0f);  // the outlier does not feed back
    }
  };
}

void write_planted_model(const std::string& dir, const PlantedOutlierSpec& spec) {
  write_tiny_model(dir, spec.base, planted_outlier_edit(spec));
}

}  // namespace sinkq::testing
