// sinkq/quant/crossquant.h — CrossQuant (symmetric, per-element scale from row and column maxima).
//
// For X[rows, cols] (activations [tokens, features]; or a weight [out, in]):
//   t_i = max_j |X_ij|  (row abs-max, always from the row itself)
//   c_j = column abs-max (see ColumnMode for which rows it is taken over)
//   s_ij = f_ij / (2^(N-1) - 1),   f_ij = fl32(t_i^α · c_j^(1-α))   (t^α c^(1-α) in double, one rounding)
//   q_ij = clamp(rne(X_ij / s_ij), -2^(N-1), 2^(N-1) - 1),   X̂_ij = s_ij · q_ij
// α = 1 is per-token quantization bit for bit; α = 0.15 is the paper's default. The same element
// rule as quantizer.h (round half to even, clamp before rounding, FLT_MIN zero guard on s_ij).
//
// Decode-time column maxima (ColumnMode, see docs/quant.md): with one token per call the per-call
// maximum is c_j = |x_j| and the "quantization" degenerates (each scale carries its own element),
// so generation needs column maxima that do not come from the element being quantized:
//   Static     (default) c = column abs-max over calibration data, frozen. Causal, identical in
//              prefill and decode, and deployable: c^(1-α) is a per-channel factor that folds into
//              the next weight (SmoothQuant-style), leaving a per-token int8 GEMM (CrossFold below:
//              its codes are the folded rule's, so the simulator and the kernels share them).
//              Values above c_j at inference widen their row's scale at 8 bits, clamp below.
//   RunningMax c_j = max over the rows of this sequence so far, INCLUDING the row being quantized,
//              row by row (causal: row i never sees rows after it), started from the calibrated c
//              if there is one (else from 0, so the first token is nearly lossless). Row-by-row
//              decode equals one prefill call bit for bit. reset() starts a new sequence.
//   PerCall    c_j = max over the rows of this call: the paper's whole-sequence evaluation (and
//              the natural mode for weights). Not causal: earlier tokens depend on later ones;
//              do not use for generation.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/quantizer.h"

namespace sinkq::quant {

enum class ColumnMode : uint8_t { Static, RunningMax, PerCall };
std::string_view column_mode_name(ColumnMode m);
ColumnMode parse_column_mode(std::string_view name);  // "static", "running_max", "per_call"

struct CrossQuantSpec {
  int bits = 8;         // N, 2..8
  float alpha = 0.15f;  // 0 <= α <= 1
  ColumnMode columns = ColumnMode::Static;
};
void validate(const CrossQuantSpec& spec);  // throws naming "bits" / "alpha"

// The element-wise scale s_ij from t_i, c_j (exposed for tests and kernels).
float crossquant_scale(const CrossQuantSpec& spec, float t, float c);

// ---- static column maxima, folded into the weights (the form the integer kernels run) --------
//
// With frozen column maxima c the column factor is a constant per input feature, so it moves into
// the consuming linear's weights before they are quantized (issue 19 goal 5), and what is left
// is a per-token quantization with the CrossQuant token factor:
//   b_j  = fl32(c_j^(1-α))  (pow in double, one rounding; b_j = 1 where c_j < FLT_MIN: a column
//          calibration never saw nonzero is not folded)
//   W'   = W · diag(b)      (every linear the site feeds; then the weight quantizer as usual)
//   z_ij = fl32(x_ij / b_j),  t_i = max_j |x_ij|,  f_i = fl32(t_i^α)
//   s_i = guard(max(f_i, max_j |z_ij|) / (2^(N-1) - 1))  for N >= 8,  guard(f_i / (2^(N-1) - 1)) below
//   q_ij = clamp(rne(z_ij / s_i), -2^(N-1), 2^(N-1) - 1),  ẑ_ij = s_i · q_ij
// and the linear computes ẑ · Ŵ'ᵀ = Σ_j s_i q_ij · Q(W b)_oj: an integer GEMM with one scale per
// token. Against the element-wise rule above the codes differ only where fl32 rounding of
// x / (t^α c^(1-α) / qmax) taken in two steps lands on the other side of a rounding boundary; the
// weights differ by design (W·diag(b) is quantized, not W). While every |x_ij| <= c_j,
// |z_ij| = |x_ij|^α |x_ij|^(1-α) / c_j^(1-α) <= t_i^α, so s_i is CrossQuant's token factor. A value
// above its calibrated maximum: at 8 bits it widens its row's scale, below 8 bits it is clamped
// (decision, docs/quant.md, measured on SmolLM2: at A8 clamping cost +0.33 nats and widening
// nothing; at A4 widening a row's 7 levels zeroes the rest of the row and cost +0.5 nats more
// than clamping). α = 1 gives b = 1,
// s_i = t_i / qmax: dynamic per-token quantization bit for bit. Decision (docs/quant.md): the fold is the only
// deployable form — an element-wise scale has no integer GEMM — so Static means this rule
// everywhere (CrossQuantizer's Static mode gives the same codes, unfolded: x̂ = (b_j · s_i) · q).
struct CrossFold {
  int bits = 8;
  float alpha = 0.15f;
  std::vector<float> col_max;  // c: calibrated column abs-max, [cols]
  std::vector<float> b;        // the fold factors, [cols]
  int64_t cols() const { return int64_t(b.size()); }
};
// Validates bits / alpha (as CrossQuantSpec) and c (finite, >= 0, non-empty); computes b.
CrossFold make_cross_fold(int bits, float alpha, std::vector<float> col_max);
float cross_fold_factor(float c, float alpha);                  // b_j
// s_i from the row's abs-max t_i and the abs-max of its folded values max_j |x_ij / b_j| (used
// from kCrossWidenBits bits on).
inline constexpr int kCrossWidenBits = 8;
float cross_token_scale(int bits, float alpha, float row_absmax, float folded_absmax);
// The first half of the rule: z = fl32(x / b) into z[rows, cols] and the token scales s[rows];
// the codes are then quantize_to_int of each z row at its s (what the packed linears do with
// lowbit::quantize_rows). Throws sinkq::Error naming the row and column of a non-finite input.
void cross_fold_scales(const CrossFold& fold, const float* x, int64_t rows, int64_t cols, float* z, float* s);
// The folded quantizer of x[rows, cols] (fold.cols() columns): codes q (nullable) and the token
// scales s[rows]. Throws sinkq::Error naming the row and column of a non-finite input.
void cross_fold_quantize(const CrossFold& fold, const float* x, int64_t rows, int64_t cols, int8_t* q, float* s);
// x ← ẑ in place (the linear's input in the folded basis: what the simulator's hook feeds W').
void cross_fold_apply(const CrossFold& fold, float* x, int64_t rows, int64_t cols);
// w[rows, cols] ← w · diag(b) (fp32 products), the fold of one consuming weight matrix.
void cross_fold_weight(const CrossFold& fold, float* w, int64_t rows, int64_t cols);

// One quantizer per (site, layer): holds the calibrated and running column maxima.
class CrossQuantizer {
 public:
  CrossQuantizer(const CrossQuantSpec& spec, int64_t cols);

  const CrossQuantSpec& spec() const { return spec_; }
  int64_t cols() const { return cols_; }

  // Static calibration: c_j = max(c_j, max_i |x_ij|) over every call. Also seeds RunningMax.
  void calibrate(const float* x, int64_t rows, int64_t cols);
  // Sets the calibrated column maxima directly (loaded from a file): [cols], finite, >= 0.
  void set_column_max(std::vector<float> c);
  bool calibrated() const { return calibrated_; }
  const std::vector<float>& calibrated_column_max() const { return cal_c_; }

  // RunningMax: forget the tokens seen (new sequence); the calibrated seed stays.
  void reset();
  const std::vector<float>& running_column_max() const { return run_c_; }

  // Fake-quantizes x[rows, cols] in place. Static without calibration throws. RunningMax
  // advances its state. If kc is given, the quantization kernel of this call is added to it.
  void apply(float* x, int64_t rows, int64_t cols, KernelCount* kc = nullptr);

  // The integer path of apply(): q[rows, cols] codes in [-2^(N-1), 2^(N-1)-1] and the scale of
  // every element scale[rows, cols], so x̂ = scale · q. Advances RunningMax like apply().
  void quantize(const float* x, int64_t rows, int64_t cols, int8_t* q, float* scale);

  // Kernel fraction of quantizing x with the current state; does not change any state.
  double kernel_fraction(const float* x, int64_t rows, int64_t cols) const;

 private:
  // Core: for each row, the column maxima to use are chosen per mode; emit(i, j, level, s).
  template <class Emit>
  void run(const float* x, int64_t rows, int64_t cols, Emit&& emit);

  CrossQuantSpec spec_;
  int64_t cols_;
  bool calibrated_ = false;
  std::vector<float> cal_c_;   // [cols] calibrated column abs-max
  std::vector<float> run_c_;   // [cols] running column abs-max of the current sequence
};

}  // namespace sinkq::quant
