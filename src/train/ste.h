// sinkq/train/ste.h — fake quantization that trains: the forward is quant::fake_quant's grid
// (formats/uniform_int.h: x̂ = s·l, l = clamp(rne(x/s), qmin − z, qmax − z)), the backward a
// straight-through estimator for x and LSQ's gradient for the step size s (Esser et al., "Learned
// Step Size Quantization", ICLR 2020; EfficientQAT / PrefixQuant §5.2 train step sizes this way):
//   dx̂/dx = 1 inside the clip range (qmin − z <= x/s <= qmax − z), 0 outside;
//   dx̂/ds = l − x/s inside (round's gradient taken as 1), l (the clamped level) outside;
// multiplied by `grad_scale` for s (LSQ's g = 1/sqrt(N·qmax) keeps step-size updates on the
// weights' scale; the trainer chooses it). Zero points are integers and stay fixed (decision: LSQ+
// trains an offset, PrefixQuant's per-tensor activations and KV are symmetric, and the weights'
// asymmetric zeros are re-derived from the trained scale by the packer).
//
// Layout: x [rows, cols]; one (s, z) per block of `group` consecutive columns of a row (group = cols:
// per row; a group that does not divide cols leaves a narrower last block, the simulator's ragged
// weight tail, quant/sim.h fake_quant_weight), and with shared_rows one set of blocks for every row (per tensor: shared_rows and
// group = cols; static per head: shared_rows and group = head_dim). Scales [srows, groups()],
// srows = shared_rows ? 1 : rows. Templated on R as grad_ops.h; R = float forward equals
// quant::fake_quant bit for bit (tests/train/ste_test.cc).
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/uniform_int.h"

namespace sinkq::train {

struct SteLayout {
  int bits = 8;
  bool symmetric = true;
  int64_t rows = 0, cols = 0;
  int64_t group = 0;         // columns per scale (cols: one per row)
  bool shared_rows = false;  // one set of scales for all rows
  int64_t groups() const { return (cols + group - 1) / group; }
  int64_t scale_index(int64_t r, int64_t c) const { return (shared_rows ? 0 : r) * groups() + c / group; }
  int64_t scale_count() const { return (shared_rows ? 1 : rows) * groups(); }
};

namespace detail {
template <typename R>
R ste_level(R v, R lo, R hi) {
  if constexpr (sizeof(R) == sizeof(float)) {
    return formats::uniform::level(float(v), 1.0f, float(lo), float(hi));
  } else {
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return std::nearbyint(v);
  }
}
}  // namespace detail

// y = x̂ (y may alias x). z: integer zero points per scale (null when symmetric).
template <typename R>
void ste_forward(const SteLayout& L, const R* x, const R* s, const int32_t* z, R* y) {
  const R qlo = R(formats::uniform::qmin(L.bits, L.symmetric)), qhi = R(formats::uniform::qmax(L.bits, L.symmetric));
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t c = 0; c < L.cols; ++c) {
      const int64_t j = L.scale_index(r, c);
      const R zf = z ? R(z[j]) : R(0);
      const R v = x[r * L.cols + c] / s[j];  // a true division, as the quantizer's
      y[r * L.cols + c] = detail::ste_level(v, qlo - zf, qhi - zf) * s[j];
    }
}

// dx += dy·1{inside};  ds[j] += grad_scale·Σ dy·(l − x/s inside, l outside) over block j.
template <typename R>
void ste_backward(const SteLayout& L, const R* dy, const R* x, const R* s, const int32_t* z, R* dx, R* ds,
                  R grad_scale = R(1)) {
  const R qlo = R(formats::uniform::qmin(L.bits, L.symmetric)), qhi = R(formats::uniform::qmax(L.bits, L.symmetric));
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t c = 0; c < L.cols; ++c) {
      const int64_t i = r * L.cols + c, j = L.scale_index(r, c);
      const R zf = z ? R(z[j]) : R(0);
      const R lo = qlo - zf, hi = qhi - zf;
      const R v = x[i] / s[j];
      const bool inside = v >= lo && v <= hi;
      const R l = detail::ste_level(v, lo, hi);
      if (dx && inside) dx[i] += dy[i];
      if (ds) ds[j] += grad_scale * dy[i] * (inside ? l - v : l);
    }
}

}  // namespace sinkq::train
