// sinkq/quant/crossquant.cc — see crossquant.h; decisions in docs/quant.md.
#include "quant/crossquant.h"

#include <algorithm>
#include <cfenv>
#include <cfloat>
#include <cmath>

#include "core/error.h"

namespace sinkq::quant {

namespace {

constexpr std::string_view kModeNames[] = {"static", "running_max", "per_call"};

// The two factors of f_ij = fl32(t^α · c^(1-α)): each power in double. pow(x, 0) == 1 and
// pow(x, 1) == x exactly (C standard / glibc's < 1 ulp pow on exact results), so α = 1 gives
// f = t exactly and matches per-token quantization bit for bit.
double row_factor(float t, float alpha) { return std::pow(double(t), double(alpha)); }
double col_factor(float c, float alpha) { return std::pow(double(c), 1.0 - double(alpha)); }
float scale_from(double tf, double cf, float qm) {
  return detail::guard_scale(float(tf * cf) / qm);
}

}  // namespace

std::string_view column_mode_name(ColumnMode m) { return kModeNames[size_t(m)]; }

ColumnMode parse_column_mode(std::string_view name) {
  for (size_t i = 0; i < std::size(kModeNames); ++i)
    if (kModeNames[i] == name) return ColumnMode(i);
  fail("unknown CrossQuant column mode '{}' (expected static, running_max, per_call)", name);
}

void validate(const CrossQuantSpec& s) {
  SINKQ_CHECK(s.bits >= 2 && s.bits <= 8, "crossquant spec: bits = {} is outside 2..8", s.bits);
  SINKQ_CHECK(s.alpha >= 0.0f && s.alpha <= 1.0f, "crossquant spec: alpha = {} must be in [0, 1]",
              s.alpha);
  SINKQ_CHECK(size_t(s.columns) < std::size(kModeNames),
              "crossquant spec: columns = {} is not a ColumnMode", int(s.columns));
}

float crossquant_scale(const CrossQuantSpec& spec, float t, float c) {
  const float qm = float((1 << (spec.bits - 1)) - 1);
  return scale_from(row_factor(t, spec.alpha), col_factor(c, spec.alpha), qm);
}

float cross_fold_factor(float c, float alpha) {
  return c >= FLT_MIN ? float(col_factor(c, alpha)) : 1.0f;
}

float cross_token_scale(int bits, float alpha, float row_absmax, float folded_absmax) {
  const float qm = float((1 << (bits - 1)) - 1);
  const float f = float(row_factor(row_absmax, alpha));
  return detail::guard_scale((bits >= kCrossWidenBits ? std::max(f, folded_absmax) : f) / qm);
}

CrossFold make_cross_fold(int bits, float alpha, std::vector<float> col_max) {
  validate(CrossQuantSpec{bits, alpha, ColumnMode::Static});
  SINKQ_CHECK(!col_max.empty(), "crossquant fold: no column maxima");
  CrossFold f;
  f.bits = bits;
  f.alpha = alpha;
  f.b.resize(col_max.size());
  for (size_t j = 0; j < col_max.size(); ++j) {
    SINKQ_CHECK(std::isfinite(col_max[j]) && col_max[j] >= 0.0f,
                "crossquant fold: column_max[{}] = {} must be finite and >= 0", j, col_max[j]);
    f.b[j] = cross_fold_factor(col_max[j], alpha);
  }
  f.col_max = std::move(col_max);
  return f;
}

namespace {

// The folded rule row by row: emit(i, j, level, s_i) with level = clamp(rne(z_ij / s_i)).
template <class Emit>
void fold_rows(const CrossFold& f, const float* x, int64_t rows, int64_t cols, Emit&& emit) {
  SINKQ_ASSERT(std::fegetround() == FE_TONEAREST);
  std::vector<float> z(size_t(std::max<int64_t>(rows, 0) * cols)), s(size_t(std::max<int64_t>(rows, 0)));
  cross_fold_scales(f, x, rows, cols, z.data(), s.data());
  const float qm = float((1 << (f.bits - 1)) - 1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) emit(i, j, detail::level(z[size_t(i * cols + j)], s[size_t(i)], -qm - 1.0f, qm), s[size_t(i)]);
}

}  // namespace

void cross_fold_scales(const CrossFold& f, const float* x, int64_t rows, int64_t cols, float* z, float* s) {
  SINKQ_CHECK(cols == f.cols(), "crossquant fold: tensor has {} columns, the fold has {}", cols, f.cols());
  SINKQ_CHECK(rows >= 0, "crossquant fold: rows = {} is negative", rows);
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * cols;
    float* zi = z + i * cols;
    float t = 0.0f, zmax = 0.0f;
    int bad = 0;
    // One vectorized pass (the rule runs on every linear input of every token): max is exact in
    // any order for finite values, and a row with an inf or NaN is an error anyway.
    const float* b = f.b.data();
#pragma omp simd reduction(max : t, zmax) reduction(| : bad)
    for (int64_t j = 0; j < cols; ++j) {
      const float a = std::fabs(row[j]);
      bad |= !(a <= FLT_MAX);
      t = std::max(t, a);
      zi[j] = row[j] / b[j];
      zmax = std::max(zmax, std::fabs(zi[j]));
    }
    if (bad) {
      int64_t j = 0;
      while (std::isfinite(row[j])) ++j;
      fail("crossquant: non-finite value {} at row {}, col {}", row[j], i, j);
    }
    s[i] = cross_token_scale(f.bits, f.alpha, t, zmax);
  }
}

void cross_fold_quantize(const CrossFold& f, const float* x, int64_t rows, int64_t cols, int8_t* q, float* s) {
  fold_rows(f, x, rows, cols, [&](int64_t i, int64_t j, float lev, float si) {
    if (q) q[i * cols + j] = int8_t(int(lev));
    s[i] = si;
  });
}

void cross_fold_apply(const CrossFold& f, float* x, int64_t rows, int64_t cols) {
  fold_rows(f, x, rows, cols, [&](int64_t i, int64_t j, float lev, float si) { x[i * cols + j] = si * lev; });
}

void cross_fold_weight(const CrossFold& f, float* w, int64_t rows, int64_t cols) {
  SINKQ_CHECK(cols == f.cols(), "crossquant fold: weight has {} input columns, the fold has {}", cols, f.cols());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) w[r * cols + j] *= f.b[size_t(j)];
}

CrossQuantizer::CrossQuantizer(const CrossQuantSpec& spec, int64_t cols) : spec_(spec), cols_(cols) {
  validate(spec);
  SINKQ_CHECK(cols > 0, "crossquant: cols = {} must be positive", cols);
  cal_c_.assign(size_t(cols), 0.0f);
  run_c_.assign(size_t(cols), 0.0f);
}

void CrossQuantizer::calibrate(const float* x, int64_t rows, int64_t cols) {
  SINKQ_CHECK(cols == cols_, "crossquant calibration: tensor has {} columns, quantizer has {}", cols, cols_);
  SINKQ_CHECK(rows >= 0, "crossquant calibration: rows = {} is negative", rows);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float v = x[i * cols + j];
      SINKQ_CHECK(std::isfinite(v), "crossquant calibration: non-finite value {} at row {}, col {}", v, i, j);
      cal_c_[size_t(j)] = std::max(cal_c_[size_t(j)], std::fabs(v));
    }
  calibrated_ = true;
  reset();
}

void CrossQuantizer::set_column_max(std::vector<float> c) {
  SINKQ_CHECK(int64_t(c.size()) == cols_, "crossquant: column_max has {} entries, quantizer has {} columns",
              c.size(), cols_);
  for (size_t j = 0; j < c.size(); ++j)
    SINKQ_CHECK(std::isfinite(c[j]) && c[j] >= 0.0f, "crossquant: column_max[{}] = {} must be finite and >= 0",
                j, c[j]);
  cal_c_ = std::move(c);
  calibrated_ = true;
  reset();
}

void CrossQuantizer::reset() { run_c_ = cal_c_; }

template <class Emit>
void CrossQuantizer::run(const float* x, int64_t rows, int64_t cols, Emit&& emit) {
  SINKQ_CHECK(cols == cols_, "crossquant: tensor has {} columns, quantizer has {}", cols, cols_);
  SINKQ_CHECK(rows >= 0, "crossquant: rows = {} is negative", rows);
  SINKQ_ASSERT(std::fegetround() == FE_TONEAREST);
  const float alpha = spec_.alpha;
  const float qm = float((1 << (spec_.bits - 1)) - 1);
  const float lo = -qm - 1.0f, hi = qm;
  const ColumnMode mode = spec_.columns;
  SINKQ_CHECK(mode != ColumnMode::Static || calibrated_,
              "crossquant: column mode 'static' needs calibrate() or set_column_max() first");

  if (mode == ColumnMode::Static) {  // the folded rule's codes, unfolded: x̂ = fl32(b_j · s_i) · q
    const CrossFold f = make_cross_fold(spec_.bits, alpha, cal_c_);
    fold_rows(f, x, rows, cols, [&](int64_t i, int64_t j, float lev, float si) { emit(i, j, lev, f.b[size_t(j)] * si); });
    return;
  }
  // c^(1-α) per column for the column maxima in force.
  std::vector<float> c;
  if (mode == ColumnMode::PerCall) {
    c.assign(size_t(cols), 0.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) c[size_t(j)] = std::max(c[size_t(j)], std::fabs(x[i * cols + j]));
  } else {
    c = run_c_;
  }
  std::vector<double> cf(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) cf[size_t(j)] = col_factor(c[size_t(j)], alpha);

  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * cols;
    float t = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float a = std::fabs(row[j]);
      SINKQ_CHECK(std::isfinite(a), "crossquant: non-finite value {} at row {}, col {}", row[j], i, j);
      t = std::max(t, a);
      if (mode == ColumnMode::RunningMax && a > run_c_[size_t(j)]) {  // this row is in its own prefix
        run_c_[size_t(j)] = a;
        cf[size_t(j)] = col_factor(a, alpha);
      }
    }
    const double tf = row_factor(t, alpha);
    for (int64_t j = 0; j < cols; ++j) {
      const float s = scale_from(tf, cf[size_t(j)], qm);
      emit(i, j, detail::level(row[j], s, lo, hi), s);
    }
  }
}

void CrossQuantizer::apply(float* x, int64_t rows, int64_t cols, KernelCount* kc) {
  KernelCount local;
  run(x, rows, cols, [&](int64_t i, int64_t j, float lev, float s) {
    float& v = x[i * cols + j];
    if (v != 0.0f) {
      ++local.nonzero;
      if (lev == 0.0f) ++local.zeroed;
    }
    v = lev * s;
  });
  if (kc) *kc += local;
}

void CrossQuantizer::quantize(const float* x, int64_t rows, int64_t cols, int8_t* q, float* scale) {
  run(x, rows, cols, [&](int64_t i, int64_t j, float lev, float s) {
    q[i * cols + j] = int8_t(int(lev));
    scale[i * cols + j] = s;
  });
}

double CrossQuantizer::kernel_fraction(const float* x, int64_t rows, int64_t cols) const {
  CrossQuantizer tmp = *this;  // RunningMax state must not advance
  KernelCount kc;
  tmp.run(x, rows, cols, [&](int64_t i, int64_t j, float lev, float) {
    if (x[i * cols + j] != 0.0f) {
      ++kc.nonzero;
      if (lev == 0.0f) ++kc.zeroed;
    }
  });
  return kc.fraction();
}

}  // namespace sinkq::quant
