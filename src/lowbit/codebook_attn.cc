// sinkq/lowbit/codebook_attn.cc — attention over a codebook KV body (codebook_kv.h):
// attention_codebook (lowbit/attn_driver.h's driver, attention_packed's too, over the CbTables),
// the scalar CbTable and the double oracle.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ref_attention.h"
#include "lowbit/attn_driver.h"
#include "lowbit/codebook_kv.h"
#include "lowbit/kv_kernels.h"

namespace sinkq::lowbit {

namespace detail {

float cb_value(const CbRows& r, int64_t j, int c) {
  for (uint32_t e = r.row_ptr[j]; e < r.row_ptr[j + 1]; ++e)
    if (int(r.col[e]) == r.col0 + c) return f16_to_f32(r.val[e]);
  const float l = r.levels[cb_code(r.codes + j * r.ld, c, r.bits)];
  return r.ch_scale ? l * r.ch_scale[c] + r.ch_zero[c] : l * r.row_sz[2 * j] + r.row_sz[2 * j + 1];
}

namespace {

// Row j decoded into x[D] (outliers patched), then rotated by cs (when given) as rope_apply_cs
// rotates: (x1, x2) -> (x1·c − x2·s, x2·c + x1·s) over the two halves.
void decode_row(const CbRows& r, int64_t j, int D, const float* cs, float* x) {
  const uint8_t* row = r.codes + j * r.ld;
  for (int d = 0; d < D; ++d) {
    const float l = r.levels[cb_code(row, d, r.bits)];
    x[d] = r.ch_scale ? l * r.ch_scale[d] + r.ch_zero[d] : l * r.row_sz[2 * j] + r.row_sz[2 * j + 1];
  }
  for (uint32_t e = r.row_ptr[j]; e < r.row_ptr[j + 1]; ++e) {
    const int c = int(r.col[e]) - r.col0;
    if (c >= 0 && c < D) x[c] = f16_to_f32(r.val[e]);
  }
  if (!cs) return;
  const int h = D / 2;
  for (int d = 0; d < h; ++d) {
    const float x1 = x[d], x2 = x[d + h], c = cs[d], s = cs[h + d];
    x[d] = x1 * c - x2 * s;
    x[d + h] = x2 * c + x1 * s;
  }
}

void scores(const float* q, int64_t ldq, int G, const CbRows& r, int64_t n, int D, const float* cs, float scale,
            float* s, int64_t lds) {
  float k[kKvMaxHeadDim];
  for (int64_t j = 0; j < n; ++j) {
    decode_row(r, j, D, cs ? cs + j * D : nullptr, k);
    for (int i = 0; i < G; ++i) {
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += q[i * ldq + d] * k[d];
      s[i * lds + j] = scale * acc;
    }
  }
}

void weighted_sum(const float* p, int64_t ldp, int G, const CbRows& r, int64_t n, int D, const float* alpha,
                  float* out) {
  for (int i = 0; i < G * D; ++i) out[i] = 0.0f;
  float v[kKvMaxHeadDim];
  for (int64_t j = 0; j < n; ++j) {
    decode_row(r, j, D, nullptr, v);
    for (int i = 0; i < G; ++i)
      for (int d = 0; d < D; ++d) out[i * D + d] += p[i * ldp + j] * v[d];
  }
  for (int i = 0; i < G; ++i)
    for (int d = 0; d < D; ++d) out[i * D + d] = alpha[i] * out[i * D + d];
}

}  // namespace

const CbTable& cb_table_scalar() {
  static const CbTable t{scores, weighted_sum};
  return t;
}

const CbTable& cb_table_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return cb_table_avx512();
    case Isa::Avx2: return cb_table_avx2();
    case Isa::Scalar: break;
  }
  return cb_table_scalar();
}

}  // namespace detail

namespace {

void check_call(const AttnShape& s, const KvSegment& prefix, const CodebookKvCache& c, int layer, int64_t n_past,
                int64_t T) {
  SINKQ_CHECK(s.n_heads > 0 && s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.sliding_window >= 0,
              "codebook KV attention: {} heads over {} kv heads", s.n_heads, s.n_kv_heads);
  SINKQ_CHECK(int64_t(s.n_kv_heads) * s.head_dim == c.kv_dim() && s.head_dim <= detail::kKvMaxHeadDim &&
                  s.head_dim % 2 == 0,
              "codebook KV attention: {} kv heads x {} do not fit the cache's kv_dim {} (head_dim even, <= {})",
              s.n_kv_heads, s.head_dim, c.kv_dim(), detail::kKvMaxHeadDim);
  SINKQ_CHECK(layer >= 0 && layer < c.num_layers(), "codebook KV attention: layer {} out of range", layer);
  SINKQ_CHECK(n_past >= 0 && T >= 0 && n_past + T <= c.rows_written(layer) && prefix.rows >= 0,
              "codebook KV attention: rows [0, {}) with {} written", n_past + T, c.rows_written(layer));
}

}  // namespace

void attention_codebook(const AttnShape& s, const float* q, const float* q_body, const KvSegment& prefix,
                        const CodebookKvCache& c, int layer, int64_t n_past, int64_t T, const float* cs, float* out) {
  check_call(s, prefix, c, layer, n_past, T);
  const detail::CbTable& cb = detail::cb_table_for(active_isa());
  const int D = s.head_dim;
  std::vector<CbRows> kr(size_t(s.n_kv_heads)), vr(size_t(s.n_kv_heads));
  for (int g = 0; g < s.n_kv_heads; ++g) {
    kr[size_t(g)] = c.rows(layer, false, g, D);
    vr[size_t(g)] = c.rows(layer, true, g, D);
  }
  detail::attention_driver(
      s, q, q_body ? q_body : q, prefix, n_past, T, /*flops_per_key=*/6.0,
      [&](int g, int64_t blo, int64_t nb, const float* qp, int64_t ldq, int G, float scale, float* sc, int64_t lds) {
        cb.scores(qp, ldq, G, kr[size_t(g)].from(blo), nb, D, cs ? cs + blo * D : nullptr, scale, sc, lds);
      },
      [&](int g, int64_t blo, int64_t nb, float* p, int64_t ldp, int G, const float* alpha, float* o) {
        cb.weighted_sum(p, ldp, G, vr[size_t(g)].from(blo), nb, D, alpha, o);
      },
      out);
}

namespace ref {

void attention_codebook(const AttnShape& s, const float* q, const float* q_body, const KvSegment& prefix,
                        const CodebookKvCache& c, int layer, int64_t n_past, int64_t T, const float* cs, float* out) {
  check_call(s, prefix, c, layer, n_past, T);
  const int Hkv = s.n_kv_heads, D = s.head_dim, h = D / 2;
  const int64_t P = prefix.rows;
  std::vector<CbRows> kr, vr;
  for (int g = 0; g < Hkv; ++g) kr.push_back(c.rows(layer, false, g, D)), vr.push_back(c.rows(layer, true, g, D));
  sinkq::ref::attention_over(s, q, P, n_past, T,
                             [&](bool value, int64_t j, int g, int d) -> double {
                               if (j < P) return double((value ? prefix.v : prefix.k)[j * Hkv * D + g * D + d]);
                               const CbRows& r = (value ? vr : kr)[size_t(g)];
                               const int64_t b = j - P;
                               const double x = detail::cb_value(r, b, d);
                               if (value || !cs) return x;
                               const float* row = cs + b * D;
                               const int i = d % h;
                               const double other = detail::cb_value(r, b, d < h ? d + h : d - h);
                               return d < h ? x * row[i] - other * row[h + i] : x * row[i] + other * row[h + i];
                             },
                             out, q_body);
}

}  // namespace ref

}  // namespace sinkq::lowbit
