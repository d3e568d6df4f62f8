// sinkq/lowbit/kv_kernels.cc — PackedKvCache (store through the one quantizer, dequantize),
// attention_packed (lowbit/attn_driver.h's driver over the KvTables) and the double oracle.
//
// The per-ISA serial loops over the quantized body are the KvTables (kv_scalar.cc, kv_avx2.cc,
// kv_avx512.cc); the prefix segment and the softmax are the driver's fp32 kernels.
#include "lowbit/kv_kernels.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ref_attention.h"
#include "lowbit/attn_driver.h"

namespace sinkq::lowbit {

namespace detail {

const KvTable& kv_table_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return kv_table_avx512();
    case Isa::Avx2: return kv_table_avx2();
    case Isa::Scalar: break;
  }
  return kv_table_scalar();
}

}  // namespace detail

std::string_view kv_isa_name() { return isa_name(active_isa()); }

namespace {

bool is_static(const FormatDesc& t) { return !t.dynamic(); }

// Scale entries per stored row (dynamic formats).
int64_t per_row_entries(const FormatDesc& t, int kv_heads) {
  return t.granularity == quant::Granularity::PerHead ? kv_heads : 1;
}

void check_static(const FormatDesc& t, const quant::Params& p, int kv_heads, int head_dim, int layer,
                  const char* which) {
  const int64_t kv_dim = int64_t(kv_heads) * head_dim;
  const int64_t pcol = t.granularity == quant::Granularity::PerHeadShared ? kv_heads : 1;
  SINKQ_CHECK(p.granularity == t.granularity && p.bits == t.bits && p.symmetric == t.symmetric,
              "packed KV: the static {} params of layer {} are int{} {} {}, format {} needs int{} {} {}", which,
              layer, p.bits, p.symmetric ? "sym" : "asym", quant::granularity_name(p.granularity), t.name, t.bits,
              t.symmetric ? "sym" : "asym", quant::granularity_name(t.granularity));
  SINKQ_CHECK(p.prow == 1 && p.pcol == pcol && p.cols() == kv_dim &&
                  p.scale.size() == size_t(pcol) && p.zero.size() == (t.symmetric ? 0u : size_t(pcol)),
              "packed KV: the static {} params of layer {} are [{}, {}] over {} columns, format {} needs [1, {}] "
              "over {} (kv_heads {} x head_dim {})",
              which, layer, p.prow, p.pcol, p.cols(), t.name, pcol, kv_dim, kv_heads, head_dim);
  for (int32_t z : p.zero)
    SINKQ_CHECK(z >= 0 && z < (1 << t.bits), "packed KV: zero point {} outside [0, {}]", z, (1 << t.bits) - 1);
}

}  // namespace

PackedKvCache::PackedKvCache(PackedFormat format, int num_layers, int kv_heads, int head_dim, int64_t capacity,
                             std::vector<quant::Params> static_k, std::vector<quant::Params> static_v,
                             int held_begin, int held_end)
    : format_(format), layers_(num_layers), kv_heads_(kv_heads), head_dim_(head_dim), capacity_(capacity) {
  const FormatDesc& t = kv_traits(format);
  SINKQ_CHECK(num_layers > 0 && kv_heads > 0 && head_dim > 0 && capacity >= 0,
              "packed KV: bad shape (layers {}, kv_heads {}, head_dim {}, capacity {})", num_layers, kv_heads,
              head_dim, capacity);
  SINKQ_CHECK(head_dim <= detail::kKvMaxHeadDim, "packed KV: head_dim {} is above the kernels' limit of {}", head_dim,
              detail::kKvMaxHeadDim);
  SINKQ_CHECK(t.bits == 8 || head_dim % 2 == 0,
              "packed KV: {} needs an even head_dim (got {}): two 4-bit codes share a byte and every head "
              "starts on a byte boundary",
              t.name, head_dim);
  if (is_static(t)) {
    SINKQ_CHECK(static_k.size() == size_t(num_layers) && static_v.size() == size_t(num_layers),
                "packed KV: static format {} needs calibrated K and V params for each of the {} layers (got {} "
                "and {})",
                t.name, num_layers, static_k.size(), static_v.size());
  } else {
    SINKQ_CHECK(static_k.empty() && static_v.empty(),
                "packed KV: dynamic format {} takes no static params (scales come from every stored row)", t.name);
  }
  const int64_t rb = kv_row_bytes(t, kv_dim());
  parts_.resize(size_t(2 * num_layers));
  for (int l = 0; l < num_layers; ++l) {
    const int64_t rows = l >= held_begin && (held_end < 0 || l < held_end) ? capacity : 0;
    const int64_t np = kv_param_count(t, kv_heads, rows);
    for (int v = 0; v < 2; ++v) {
      Part& p = parts_[size_t(2 * l + v)];
      p.codes.assign(size_t(rows * rb), 0);
      if (is_static(t)) {
        const quant::Params& sp = v ? static_v[size_t(l)] : static_k[size_t(l)];
        check_static(t, sp, kv_heads, head_dim, l, v ? "V" : "K");
        p.scales = sp.scale;
        p.zeros.assign(sp.zero.begin(), sp.zero.end());
        static_.push_back(sp);
      } else {
        p.scales.assign(size_t(np), 0.0f);
        if (!t.symmetric) p.zeros.assign(size_t(np), 0);
      }
    }
  }
}

size_t PackedKvCache::bytes() const {
  size_t b = 0;
  for (const Part& p : parts_) b += p.codes.size() + 4 * p.scales.size() + p.zeros.size();
  return b;
}

void PackedKvCache::store_part(Part& part, const quant::Params* fixed, int64_t row0, const float* x, int64_t T) {
  const FormatDesc& t = info();
  const quant::QuantSpec spec = kv_spec(format_, head_dim_);
  const int64_t C = kv_dim();
  quant::Params dyn;
  if (!fixed) dyn = quant::compute_params(spec, x, T, C);
  const quant::Params& p = fixed ? *fixed : dyn;
  static thread_local std::vector<int8_t> q;
  q.resize(size_t(T * C));
  quant::quantize_to_int(spec, p, x, T, C, q.data());
  const int64_t rb = kv_row_bytes(t, C);
  const formats::CodebookRows& cb = formats::codebook_rows(t.codebook);
  for (int64_t i = 0; i < T; ++i) cb.pack(q.data() + i * C, C, t.bits, part.codes.data() + (row0 + i) * rb);
  if (fixed) return;
  const int64_t e = per_row_entries(t, kv_heads_);
  std::copy(p.scale.begin(), p.scale.end(), part.scales.begin() + row0 * e);
  for (size_t k = 0; k < p.zero.size(); ++k) part.zeros[size_t(row0 * e) + k] = uint8_t(p.zero[k]);
}

void PackedKvCache::store(int layer, int64_t row0, const float* k, const float* v, int64_t T) {
  SINKQ_CHECK(layer >= 0 && layer < layers_, "packed KV: layer {} out of range ({} layers)", layer, layers_);
  SINKQ_CHECK(row0 >= 0 && T >= 0 && row0 + T <= capacity_,
              "packed KV: rows [{}, {}) outside the capacity of {} rows", row0, row0 + T, capacity_);
  if (T == 0) return;
  const bool st = is_static(info());
  store_part(parts_[size_t(2 * layer)], st ? &static_[size_t(2 * layer)] : nullptr, row0, k, T);
  store_part(parts_[size_t(2 * layer + 1)], st ? &static_[size_t(2 * layer + 1)] : nullptr, row0, v, T);
}

void PackedKvCache::dequantize(int layer, bool value, int64_t row0, int64_t n, float* out) const {
  SINKQ_CHECK(layer >= 0 && layer < layers_ && row0 >= 0 && n >= 0 && row0 + n <= capacity_,
              "packed KV: dequantize of layer {} rows [{}, {}) is out of range", layer, row0, row0 + n);
  if (n == 0) return;
  const FormatDesc& t = info();
  const Part& part = parts_[size_t(2 * layer + (value ? 1 : 0))];
  const int64_t C = kv_dim(), rb = kv_row_bytes(t, C);
  // The codebook's dequantize row (the x̂ of quant::dequantize, formats/uniform_int.h) over each
  // span that shares one (scale, zero): a head of a row, or the whole row.
  const bool head = t.granularity == quant::Granularity::PerHead || t.granularity == quant::Granularity::PerHeadShared;
  const int64_t e = head ? kv_heads_ : 1, span = C / e, span_bytes = span * t.bits / 8;
  const quant::Params* fixed = is_static(t) ? &static_[size_t(2 * layer + (value ? 1 : 0))] : nullptr;
  const formats::CodebookRows& cb = formats::codebook_rows(t.codebook);
  const int off = formats::uniform::code_offset(t.bits, t.symmetric);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < e; ++k) {
      float s = 0.0f;
      int z = 0;
      if (fixed) {
        s = fixed->scale[size_t(k)];
        if (!t.symmetric) z = fixed->zero[size_t(k)];
      } else {
        const size_t idx = size_t((row0 + i) * e + k);
        s = part.scales[idx];
        if (!t.symmetric) z = part.zeros[idx];
      }
      cb.dequantize(part.codes.data() + (row0 + i) * rb + k * span_bytes, span, t.bits, z - off, s,
                    out + i * C + k * span);
    }
}

KvRows PackedKvCache::rows(int layer, bool value, int head) const {
  SINKQ_ASSERT(layer >= 0 && layer < layers_ && head >= 0 && head < kv_heads_);
  const FormatDesc& t = info();
  const Part& part = parts_[size_t(2 * layer + (value ? 1 : 0))];
  KvRows r;
  r.bits = t.bits;
  r.ld = kv_row_bytes(t, kv_dim());
  r.codes = part.codes.data() + int64_t(head) * head_dim_ * t.bits / 8;
  int64_t off = 0;
  switch (t.granularity) {
    case quant::Granularity::PerHead: off = head, r.ls = kv_heads_; break;
    case quant::Granularity::PerRow: off = 0, r.ls = 1; break;
    case quant::Granularity::PerHeadShared: off = head, r.ls = 0; break;
    default: off = 0, r.ls = 0; break;
  }
  r.scale = part.scales.data() + off;
  r.zero = t.symmetric ? nullptr : part.zeros.data() + off;
  return r;
}

namespace {

// Rows r advanced to body row j0.
KvRows from(KvRows r, int64_t j0) {
  r.codes += j0 * r.ld;
  r.scale += j0 * r.ls;
  if (r.zero) r.zero += j0 * r.ls;
  return r;
}

void check_call(const AttnShape& s, const KvSegment& prefix, const PackedKvCache& c, int layer, int64_t n_past,
                int64_t T) {
  SINKQ_CHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.sliding_window >= 0,
              "packed KV attention: {} heads over {} kv heads", s.n_heads, s.n_kv_heads);
  SINKQ_CHECK(s.n_kv_heads == c.kv_heads() && s.head_dim == c.head_dim(),
              "packed KV attention: shape {} kv heads x {} does not match the cache's {} x {}", s.n_kv_heads,
              s.head_dim, c.kv_heads(), c.head_dim());
  SINKQ_CHECK(layer >= 0 && layer < c.num_layers(), "packed KV attention: layer {} out of range", layer);
  SINKQ_CHECK(n_past >= 0 && T >= 0 && n_past + T <= c.capacity() && prefix.rows >= 0,
              "packed KV attention: rows [0, {}) outside the capacity of {}", n_past + T, c.capacity());
}

}  // namespace

void attention_packed(const AttnShape& s, const float* q, const KvSegment& prefix, const PackedKvCache& c,
                      int layer, int64_t n_past, int64_t T, float* out) {
  check_call(s, prefix, c, layer, n_past, T);
  const detail::KvTable& kv = detail::kv_table_for(active_isa());
  const int D = s.head_dim;
  std::vector<KvRows> kr(size_t(s.n_kv_heads)), vr(size_t(s.n_kv_heads));
  for (int g = 0; g < s.n_kv_heads; ++g) {
    kr[size_t(g)] = c.rows(layer, false, g);
    vr[size_t(g)] = c.rows(layer, true, g);
  }
  detail::attention_driver(
      s, q, q, prefix, n_past, T, /*flops_per_key=*/4.0,
      [&](int g, int64_t blo, int64_t nb, const float* qp, int64_t ldq, int G, float scale, float* sc, int64_t lds) {
        kv.scores(qp, ldq, G, from(kr[size_t(g)], blo), nb, D, scale, sc, lds);
      },
      [&](int g, int64_t blo, int64_t nb, float* p, int64_t ldp, int G, const float* alpha, float* o) {
        kv.weighted_sum(p, ldp, G, from(vr[size_t(g)], blo), nb, D, alpha, o);
      },
      out);
}

namespace ref {

void attention_packed(const AttnShape& s, const float* q, const KvSegment& prefix, const PackedKvCache& c,
                      int layer, int64_t n_past, int64_t T, float* out) {
  check_call(s, prefix, c, layer, n_past, T);
  const int Hkv = s.n_kv_heads, D = s.head_dim;
  const int64_t P = prefix.rows;
  // Element d of absolute position j (prefix: fp32; body: s_j·l_jd, exact in double).
  sinkq::ref::attention_over(s, q, P, n_past, T,
                             [&](bool value, int64_t j, int g, int d) -> double {
                               if (j < P) return double((value ? prefix.v : prefix.k)[j * Hkv * D + g * D + d]);
                               const KvRows r = c.rows(layer, value, g);
                               const int64_t b = j - P;
                               const int l = detail::kv_code(r.codes + b * r.ld, d, r.bits) - detail::kv_zc(r, b);
                               return double(r.scale[b * r.ls]) * double(l);
                             },
                             out);
}

}  // namespace ref

}  // namespace sinkq::lowbit
