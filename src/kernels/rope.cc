// sinkq/kernels/rope.cc — rotary position embeddings, reproducing HF's fp32 arithmetic.
//
// HF (modeling_rope_utils.py + LlamaRotaryEmbedding, fp32 model):
//   inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim))        all fp32 tensor ops
//   llama3:   wavelen = 2*pi / inv_freq, then keep / divide by factor / smooth blend (fp32)
//   linear:   inv_freq /= factor                                         (fp32)
//   freqs = inv_freq[i] * float(pos)      (a K=1 matmul: one fp32 product)
//   cos, sin = cos(freqs), sin(freqs) in fp32; q' = q*cos + rotate_half(q)*sin (fp32 ops)
// Each fp32 step is done here as one fp32 operation so the values match HF's bit for bit except
// powf / cos / sin, which are correctly rounded here (libm, double) and within 1 ulp in torch.
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/team.h"

namespace sinkq {

RopeTable RopeTable::make(const RopeParams& p) {
  RopeTable rt;
  rt.head_dim = p.head_dim;
  SINKQ_CHECK(rt.head_dim > 0 && rt.head_dim % 2 == 0, "RoPE: head_dim {} must be positive and even",
              rt.head_dim);
  SINKQ_CHECK(p.theta > 0.0f, "RoPE: rope_theta {} must be positive", p.theta);
  const int half = rt.head_dim / 2;
  const float base = p.theta, dim = float(rt.head_dim);
  rt.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) {
    const float expo = float(2 * i) / dim;          // arange(...).float() / dim
    rt.inv_freq[i] = 1.0f / std::pow(base, expo);   // powf, then fp32 reciprocal
  }
  const RopeScaling& sc = p.scaling;
  if (sc.type == "none" || sc.type == "default") return rt;
  if (sc.type == "freq_factors") {  // llama.cpp's rope_freqs: one divisor per frequency
    SINKQ_CHECK(int(sc.freq_factors.size()) == half, "RoPE: {} frequency factors for head_dim {} (want {})",
                sc.freq_factors.size(), rt.head_dim, half);
    for (int i = 0; i < half; ++i) rt.inv_freq[size_t(i)] = rt.inv_freq[size_t(i)] / sc.freq_factors[size_t(i)];
    return rt;
  }
  SINKQ_CHECK(sc.factor > 0.0f, "RoPE: rope_scaling.factor {} must be positive", sc.factor);
  if (sc.type == "linear") {
    // HF >= 4.38 folds the factor into inv_freq (older code divided positions: same angles up to
    // one rounding). position_scale stays 1.
    for (float& f : rt.inv_freq) f = f / sc.factor;
    return rt;
  }
  SINKQ_CHECK(sc.type == "llama3", "RoPE: unsupported rope_scaling type '{}'", sc.type);
  SINKQ_CHECK(sc.high_freq_factor != sc.low_freq_factor && sc.low_freq_factor > 0.0f &&
                  sc.original_max_position_embeddings > 0,
              "RoPE llama3: need low_freq_factor > 0, high_freq_factor != low_freq_factor and "
              "original_max_position_embeddings > 0");
  // Python floats (double) that torch then uses as fp32 scalars against fp32 tensors.
  const double old_ctx = sc.original_max_position_embeddings;
  const float low_wavelen = float(old_ctx / sc.low_freq_factor);
  const float high_wavelen = float(old_ctx / sc.high_freq_factor);
  const float two_pi = float(2.0 * std::numbers::pi);
  const float band = float(double(sc.high_freq_factor) - double(sc.low_freq_factor));
  for (float& f : rt.inv_freq) {
    const float wavelen = two_pi / f;
    if (wavelen < high_wavelen) continue;  // high frequency: unchanged
    if (wavelen > low_wavelen) {           // low frequency: interpolated by factor
      f = f / sc.factor;
      continue;
    }
    const float smooth = (float(old_ctx) / wavelen - sc.low_freq_factor) / band;
    f = (1.0f - smooth) * f / sc.factor + smooth * f;  // left to right, as in HF
  }
  return rt;
}

namespace {

// cos/sin of angle = inv_freq[i] * p in fp32 (HF), rounded from double to fp32.
void cos_sin(const RopeTable& rt, int32_t pos, float* c, float* s) {
  const float p = rt.position_scale == 1.0f ? float(pos) : float(pos) * rt.position_scale;
  const int half = rt.head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float a = rt.inv_freq[i] * p;
    c[i] = float(std::cos(double(a)));
    s[i] = float(std::sin(double(a)));
  }
}

// One token's heads rotated with its cos (c) and sin (s) rows.
void rotate_heads(float* x, int n_heads, int D, const float* c, const float* s) {
  const int half = D / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * D;
    for (int i = 0; i < half; ++i) {  // products rounded separately, like torch (no FMA)
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = b * c[i] + a * s[i];
    }
  }
}

}  // namespace

void rope_cos_sin(const RopeTable& rt, int32_t pos, float* cs) { cos_sin(rt, pos, cs, cs + rt.head_dim / 2); }

void rope_apply_cs(const float* cs, int head_dim, float* x, int64_t T, int n_heads) {
  for (int64_t t = 0; t < T; ++t)
    rotate_heads(x + t * n_heads * head_dim, n_heads, head_dim, cs + t * head_dim, cs + t * head_dim + head_dim / 2);
}

void rope_apply(const RopeTable& rt, float* x, int64_t T, int n_heads, std::span<const int32_t> pos) {
  SINKQ_ASSERT(int64_t(pos.size()) == T && rt.head_dim > 0 && int(rt.inv_freq.size()) * 2 == rt.head_dim);
  const int D = rt.head_dim, half = D / 2;
  // cos/sin cost ~40 ns per (token, i) pair: split from ~16 tokens on (20 us; ~3 inside a team).
  const int nt = detail::threads_for(double(T) * half * 40 + double(T) * n_heads * D);
  parallel_ranges(nt, T, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(static_cast<size_t>(D));  // [cos(half) | sin(half)] of the current token
    for (int64_t t = t0; t < t1; ++t) {
      cos_sin(rt, pos[t], cs.data(), cs.data() + half);
      rotate_heads(x + t * n_heads * D, n_heads, D, cs.data(), cs.data() + half);
    }
  });
}

}  // namespace sinkq
