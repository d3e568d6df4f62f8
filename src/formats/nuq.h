// sinkq/formats/nuq.h — KVQuant's per-vector codebook quantizer (KVQuant §3.3–3.5): the one
// definition the simulator (quant/kvquant.h) uses and the packed KV store will use.
//
// A "vector" is what shares one normalisation: a channel (a column of K over tokens, scales
// calibrated offline) or a token (a row of K or V, scales computed online from that row).
//
//   range        [lo, hi] of the vector. Without outliers: its min and max. With a dense-and-sparse
//                fraction p: the values that are not among the round(p·n/2) largest or the
//                round(p·n/2) smallest of the vector's n elements (outlier_range; online for a
//                token; per channel the calibration's quantiles, quant/kvquant.h).
//   normalise    u = (x − z) / s with z = (hi + lo)/2, s = (hi − lo)/2, so the range maps to [−1, 1]
//                (s guarded to FLT_MIN as every scale of sinkq: a constant vector codes exactly).
//   code         the index of the nearest codebook level to clamp(u, −1, 1) (ties to the lower
//                level), levels sorted ascending, 2^bits of them (bits 2..4; 8 for tests).
//   dequantize   x̂ = level[code]·s + z.
//   outliers     with p > 0, a value outside [lo, hi] is not coded: it is kept as an fp16 number
//                (x̂ = fp16(x), round to nearest even) in the sparse part. With p = 0 a value
//                outside the range (a per-channel range from calibration) clamps to the end level.
//
// Codebooks (levels in [−1, 1] before Q-Norm):
//   uniform   −1 + 2i/(2^b − 1), i = 0..2^b−1: asymmetric min-max integer quantization of the vector
//             (the "int" baseline in the same per-vector framework).
//   nf        NormalFloat (QLoRA): 2^(b−1) quantiles of N(0,1) on the positive side and 2^(b−1) − 1
//             on the negative side plus 0, each side scaled to ±1 (nf_levels).
//   kmeans    learned offline (quant/kvquant.h): weighted 1-D k-means of calibration values
//             normalised as above; weights 1 (kmeans) or the Fisher information (KVQuant's nuqX).
// Q-Norm (§3.5) only moves the learned levels (Ĉ = (C − μ2)·σ1/σ2 + μ1), so it is part of the
// levels and costs nothing here; levels may then lie slightly outside [−1, 1].
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sinkq::formats::nuq {

inline constexpr int kMinBits = 2, kMaxBits = 8;

// The uniform and NormalFloat codebooks of `bits` levels (2^bits, ascending).
std::vector<float> uniform_levels(int bits);
std::vector<float> nf_levels(int bits);

// The index of the level nearest to u (levels ascending; u is clamped to [levels.front(),
// levels.back()] first; a tie goes to the lower level).
int nearest(std::span<const float> levels, float u);

// Round to fp16 and back (round to nearest even; overflow to ±inf is clamped to ±65504, the
// largest fp16, so an outlier never becomes infinite).
float fp16_round(float x);

// The normalisation of a range.
struct Range {
  float lo = 0, hi = 0;
  float zero() const { return 0.5f * (hi + lo); }
  float scale() const;  // (hi − lo)/2, at least FLT_MIN
};

// Outliers per side of an n-element vector at fraction p (0 ≤ p < 1): round(p·n/2).
int64_t outliers_per_side(int64_t n, double p);

// The range of x[0], x[stride], ..., x[(n−1)·stride] (n ≥ 1): min/max of what is left after the
// outliers_per_side(n, p) largest and smallest values are set aside.
Range outlier_range(const float* x, int64_t n, int64_t stride, double p);

// One element: the index of its level (normalised, clamped to [−1, 1], nearest level) and the value
// that index decodes to. Every coder of sinkq (the simulator's fake quant, the packed KV store)
// goes through these two, so their values are the same bits.
int encode(float x, const Range& r, std::span<const float> levels);
inline float decode(int code, const Range& r, std::span<const float> levels) {
  return levels[size_t(code)] * r.scale() + r.zero();
}
// Whether x is an outlier of range r (outside it, with the sparse part on).
inline bool is_outlier(float x, const Range& r, bool sparse) { return sparse && (x > r.hi || x < r.lo); }

// One element: the dequantized value (the sparse fp16 value for an outlier when sparse), and
// whether it was an outlier.
struct Coded {
  float value;
  bool outlier;
};
Coded code_one(float x, const Range& r, std::span<const float> levels, bool sparse);

// One layer's K or V quantizer: its vectors are channels (per_channel: the calibrated range of
// every column in lo / hi) or tokens (a row's range computed from the row), with `outliers` the
// dense-and-sparse fraction and `levels` the codebook (quant/kvquant.h calibrates them).
struct Codec {
  bool per_channel = false;
  double outliers = 0;
  std::vector<float> levels;  // ascending, 2^bits
  std::vector<float> lo, hi;  // per_channel: [cols]
  bool sparse() const { return outliers > 0; }
  // The range of row `row` [cols] (token vectors) or of column c (channel vectors).
  Range row_range(const float* row, int64_t cols) const { return outlier_range(row, cols, 1, outliers); }
  Range channel_range(int64_t c) const { return {lo[size_t(c)], hi[size_t(c)]}; }
  struct Count {
    int64_t values = 0, outliers = 0;
  };
  // Calls f(row, col, range) for every element of x [rows, cols]: a token's range computed once
  // from its row, a channel's the calibrated one. Throws when a channel codec's width differs.
  template <class F>
  void for_each(const float* x, int64_t rows, int64_t cols, F&& f) const {
    check_width(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const Range tr = per_channel ? Range{} : row_range(x + r * cols, cols);
      for (int64_t c = 0; c < cols; ++c) f(r, c, per_channel ? channel_range(c) : tr);
    }
  }
  // Fake-quantizes x [rows, cols] in place (code_one per element): the simulator's quantizer and
  // the scalar reference of the packed store.
  Count apply(float* x, int64_t rows, int64_t cols) const;
  void check_width(int64_t cols) const;
};

}  // namespace sinkq::formats::nuq
