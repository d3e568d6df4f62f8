// sinkq/formats/quantizer.h — the one uniform-integer quantizer definition of the project.
//
// The simulator (fake_quant: quantize -> dequantize in fp32, applied at activation sites and to
// weights) and the real integer kernels (quantize_to_int / dequantize, later SIMD) use exactly
// these definitions; docs/quant.md states every convention and the reason for it.
//
// Data layout: a row-major matrix X[rows, cols] (activations: [tokens, features]; weights:
// [out, in] as in HF nn.Linear).
//
// Integer grid (N = bits, 2..8), x̂ = dequantized value:
//   symmetric   q = clamp(rne(x / s), -2^(N-1), 2^(N-1)-1)        x̂ = s·q
//               s = clip·absmax / (2^(N-1)-1)                      (PrefixQuant eq. 1)
//   asymmetric  q = clamp(rne(x / s) + z, 0, 2^N - 1)              x̂ = s·(q - z)
//               lo = min(min x, 0), hi = max(max x, 0)              (the range always holds 0)
//               s = clip·(hi - lo) / (2^N - 1),  z = clamp(rne(-clip·lo / s), 0, 2^N - 1)
// rne = round half to even (std::nearbyint in the default FE_TONEAREST mode), x / s is a true
// fp32 division (not a multiplication by 1/s). A scale that would be 0 (all-zero group) or
// subnormal is raised to FLT_MIN, so nothing divides by zero and no NaN can appear.
//
// Static vs dynamic: dynamic = compute_params() on the data of each call; static = params computed
// once on calibration data (compute_params, or Calibrator over many batches) and stored. Both then
// go through the same fake_quant / quantize_to_int, so calibrating on the tensor itself equals the
// dynamic result bit for bit.
#pragma once

#include <cfloat>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/granularity.h"
#include "formats/uniform_int.h"

namespace sinkq::quant {

// Granularity (which elements share one scale / zero point): formats/granularity.h.

std::string_view granularity_name(Granularity g);
// Accepts the names above in snake_case ("per_tensor", "per_row", ...) and the aliases
// "per_token" / "per_output_channel" (= per_row) and "per_channel_activation" (= per_column).
// Plain "per_channel" is rejected as ambiguous. Throws sinkq::Error naming the value.
Granularity parse_granularity(std::string_view name);

struct QuantSpec {
  int bits = 8;                   // N, 2..8
  bool symmetric = true;
  Granularity granularity = Granularity::PerTensor;
  int group_size = 0;             // PerGroup only: columns per group; must divide cols
  int head_dim = 0;               // PerHead / PerHeadShared only: must divide cols
  float clip_ratio = 1.0f;        // 0 < r <= 1: the range is shrunk to r·(range) before s is set
};

// Throws sinkq::Error naming the field ("bits", "clip_ratio", "group_size", "head_dim") when the
// spec is invalid on its own; the second form also checks it against a [rows, cols] shape.
void validate(const QuantSpec& spec);
void validate(const QuantSpec& spec, int64_t rows, int64_t cols);
std::string describe(const QuantSpec& spec);  // e.g. "int4 sym per_group(g=128) clip=0.9"

// Integer range of the codes q as defined above (symmetric: [-2^(N-1), 2^(N-1)-1];
// asymmetric: [0, 2^N - 1]).
inline int qmin(const QuantSpec& s) { return s.symmetric ? -(1 << (s.bits - 1)) : 0; }
inline int qmax(const QuantSpec& s) { return s.symmetric ? (1 << (s.bits - 1)) - 1 : (1 << s.bits) - 1; }
// Offset subtracted from q before it is stored as int8 (0 symmetric, 2^(N-1) asymmetric), so
// every code of every mode fits int8_t: stored c = q - code_offset, x̂ = s·(c + code_offset - z).
inline int code_offset(const QuantSpec& s) { return s.symmetric ? 0 : (1 << (s.bits - 1)); }

// Quantization parameters of one tensor. Layout: row-major [prow, pcol] where
//   prow = 1 (row-shared granularities: PerTensor, PerColumn, PerHeadShared) or rows,
//   pcol = cols / col_block, and element (i, j) uses entry [prow == 1 ? 0 : i, j / col_block].
// col_block = cols (PerTensor, PerRow), 1 (PerColumn), group_size (PerGroup), head_dim (PerHead*).
// Row-shared params apply to any number of rows (static activation quantization); per-row params
// only to exactly `prow` rows (weights, or a dynamic call).
struct Params {
  Granularity granularity = Granularity::PerTensor;
  int bits = 0;
  bool symmetric = true;
  int64_t prow = 0, pcol = 0, col_block = 0;
  std::vector<float> scale;    // [prow, pcol], every entry >= FLT_MIN
  std::vector<int32_t> zero;   // [prow, pcol], z in [0, 2^N - 1]; empty when symmetric
  int64_t cols() const { return pcol * col_block; }
};

// Dynamic parameters from the data of x[rows, cols] (values must be finite: throws otherwise).
Params compute_params(const QuantSpec& spec, const float* x, int64_t rows, int64_t cols);

// The statistic a static range is calibrated from (Recipe calib.statistic; docs/quant.md):
//   Max         the range of every row observed: params() equals compute_params() on the
//               row-concatenation of everything observed (max/min are order independent:
//               bit-exact). Grows with the amount of calibration data (an extreme value).
//   SampleMean  per call (one calibration sample) the range of each column, averaged over the
//               calls, then the range over the columns of a scale group: the typical per-sample
//               extreme, as PrefixQuant's code takes it (its get_act_stat: per-sample per-channel
//               maxima, averaged (an EMA) over samples, then the max over the channels).
//               Row-shared granularities only (static activations and KV); symmetric: abs-max
//               per column, asymmetric: min and max per column (each averaged; 0 kept in range).
enum class CalibStatistic { Max, SampleMean };
std::string_view calib_statistic_name(CalibStatistic s);
CalibStatistic parse_calib_statistic(std::string_view name);  // "max" | "sample_mean"; throws naming it

// Accumulates ranges over many calls for static calibration (the statistic above).
// Per-row granularities require the same number of rows in every call (weights).
class Calibrator {
 public:
  explicit Calibrator(const QuantSpec& spec, CalibStatistic stat = CalibStatistic::Max);
  void observe(const float* x, int64_t rows, int64_t cols);
  bool empty() const { return rows_seen_ == 0; }
  Params params() const;  // throws if nothing was observed
  // The same observations under clip ratio r (observe() never reads the ratio: params() of the
  // copy equals that of a Calibrator with ratio r fed the same rows). r in (0, 1].
  Calibrator with_clip(float r) const;

 private:
  QuantSpec spec_;
  CalibStatistic stat_;
  int64_t rows_seen_ = 0, prow_ = 0, pcol_ = 0, col_block_ = 0, cols_ = 0, calls_ = 0;
  std::vector<float> lo_, hi_;  // Max: per group: min/max (asymmetric) or 0/absmax (symmetric)
  std::vector<double> col_lo_, col_hi_;  // SampleMean: per column, the sums of the per-call ranges
};

// Quantize -> dequantize x[rows, cols] in place (fp32 simulation). Throws if params do not fit
// the spec or the shape (naming "params"). Non-finite inputs: ±inf clamp to the range ends, NaN
// maps to the lowest code (never UB); values are otherwise expected finite.
void fake_quant(const QuantSpec& spec, const Params& p, float* x, int64_t rows, int64_t cols);

// compute_params + fake_quant; returns the params used.
Params fake_quant_dynamic(const QuantSpec& spec, float* x, int64_t rows, int64_t cols);

// The integer path: q[rows, cols] int8 codes (c = q - code_offset, see above) and back.
// dequantize(quantize_to_int(x)) == fake_quant(x) bit for bit.
void quantize_to_int(const QuantSpec& spec, const Params& p, const float* x, int64_t rows,
                     int64_t cols, int8_t* q);
void dequantize(const QuantSpec& spec, const Params& p, const int8_t* q, int64_t rows, int64_t cols,
                float* x);

// Quantization kernel (CrossQuant Def. 1): counts of nonzero inputs whose dequantized value is 0
// (q == z). Under round-half-even that is |x/s| <= 0.5, i.e. the zero bound B = s/2 inclusive.
struct KernelCount {
  int64_t nonzero = 0;  // elements with x != 0
  int64_t zeroed = 0;   // of those, elements quantized to 0
  double fraction() const { return nonzero ? double(zeroed) / double(nonzero) : 0.0; }
  KernelCount& operator+=(const KernelCount& o) {
    nonzero += o.nonzero;
    zeroed += o.zeroed;
    return *this;
  }
};
KernelCount kernel_count(const QuantSpec& spec, const Params& p, const float* x, int64_t rows,
                         int64_t cols);
double kernel_fraction(const QuantSpec& spec, const Params& p, const float* x, int64_t rows,
                       int64_t cols);

namespace detail {
// The scalar reference of one element (rne_small, level): formats/uniform_int.h.
using formats::uniform::level;
using formats::uniform::rne_small;
// The zero guard of every scale: 0, subnormal or NaN scales become FLT_MIN (so x / s is never
// 0/0; an all-zero group still quantizes to exact zeros).
inline float guard_scale(float s) { return s >= FLT_MIN ? s : FLT_MIN; }
}  // namespace detail

}  // namespace sinkq::quant
