// sinkq/formats/quantizer.cc — see quantizer.h for the definitions; docs/quant.md for the reasons.
#include "formats/quantizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfenv>
#include <cfloat>
#include <cmath>

#include "core/error.h"

namespace sinkq::quant {

namespace {

constexpr std::string_view kGranNames[] = {"per_tensor", "per_row",  "per_column",
                                           "per_group",  "per_head", "per_head_shared"};

bool row_shared(Granularity g) {
  return g == Granularity::PerTensor || g == Granularity::PerColumn || g == Granularity::PerHeadShared;
}

// Columns per parameter block for a tensor with `cols` columns (spec already validated).
int64_t col_block_of(const QuantSpec& s, int64_t cols) {
  switch (s.granularity) {
    case Granularity::PerTensor:
    case Granularity::PerRow: return cols;
    case Granularity::PerColumn: return 1;
    case Granularity::PerGroup: return s.group_size;
    case Granularity::PerHead:
    case Granularity::PerHeadShared: return s.head_dim;
  }
  SINKQ_ASSERT(false);
  return 0;
}

// The rounding convention is part of the definition: refuse to run under another mode.
void check_rounding_mode() { SINKQ_ASSERT(std::fegetround() == FE_TONEAREST); }

// Params must belong to this spec and fit [rows, cols].
void check_params(const QuantSpec& spec, const Params& p, int64_t rows, int64_t cols) {
  validate(spec, rows, cols);
  SINKQ_CHECK(p.bits == spec.bits && p.symmetric == spec.symmetric && p.granularity == spec.granularity,
              "quant params: computed for int{} {} {}, but the spec is {}", p.bits,
              p.symmetric ? "sym" : "asym", granularity_name(p.granularity), describe(spec));
  SINKQ_CHECK(p.col_block == col_block_of(spec, cols) && p.cols() == cols,
              "quant params: computed for {} columns in blocks of {}, tensor has {} columns "
              "({})", p.cols(), p.col_block, cols, describe(spec));
  SINKQ_CHECK(p.prow == 1 || p.prow == rows,
              "quant params: per-row params for {} rows cannot quantize a tensor of {} rows "
              "({}; use a row-shared granularity for static activations)",
              p.prow, rows, describe(spec));
  const size_t n = size_t(p.prow * p.pcol);
  SINKQ_CHECK(p.scale.size() == n && (spec.symmetric ? p.zero.empty() : p.zero.size() == n),
              "quant params: {} scales / {} zero points, expected {} ({})", p.scale.size(),
              p.zero.size(), n, describe(spec));
}

// Calls fn(i, j0, j1, param_index) for every (row, column block) of [rows, cols].
template <class Fn>
void for_each_block(const Params& p, int64_t rows, Fn&& fn) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t prow_i = p.prow == 1 ? 0 : i;
    for (int64_t b = 0; b < p.pcol; ++b) fn(i, b * p.col_block, (b + 1) * p.col_block, prow_i * p.pcol + b);
  }
}

// Per block: the float zero point and the level bounds of detail::level().
struct BlockConst {
  float s, z, lo, hi;
};
BlockConst block_const(const QuantSpec& spec, const Params& p, int64_t k) {
  const float z = spec.symmetric ? 0.0f : float(p.zero[size_t(k)]);
  return {p.scale[size_t(k)], z, float(qmin(spec)) - z, float(qmax(spec)) - z};
}

}  // namespace

std::string_view granularity_name(Granularity g) { return kGranNames[size_t(g)]; }

Granularity parse_granularity(std::string_view name) {
  for (size_t i = 0; i < std::size(kGranNames); ++i)
    if (kGranNames[i] == name) return Granularity(i);
  if (name == "per_token" || name == "per_output_channel") return Granularity::PerRow;
  if (name == "per_channel_activation") return Granularity::PerColumn;
  if (name == "per_channel")
    fail("quant granularity 'per_channel' is ambiguous: use per_row (weights: per output channel) "
         "or per_column (activations: per feature channel)");
  fail("unknown quant granularity '{}' (expected per_tensor, per_row, per_column, per_group, "
       "per_head, per_head_shared, per_token)", name);
}

void validate(const QuantSpec& s) {
  SINKQ_CHECK(s.bits >= 2 && s.bits <= 8, "quant spec: bits = {} is outside 2..8", s.bits);
  SINKQ_CHECK(s.clip_ratio > 0.0f && s.clip_ratio <= 1.0f,
              "quant spec: clip_ratio = {} must be in (0, 1]", s.clip_ratio);
  SINKQ_CHECK(size_t(s.granularity) < std::size(kGranNames),
              "quant spec: granularity = {} is not a Granularity", int(s.granularity));
  if (s.granularity == Granularity::PerGroup)
    SINKQ_CHECK(s.group_size > 0, "quant spec: group_size = {} must be positive for per_group",
                s.group_size);
  if (s.granularity == Granularity::PerHead || s.granularity == Granularity::PerHeadShared)
    SINKQ_CHECK(s.head_dim > 0, "quant spec: head_dim = {} must be positive for {}", s.head_dim,
                granularity_name(s.granularity));
}

void validate(const QuantSpec& s, int64_t rows, int64_t cols) {
  validate(s);
  SINKQ_CHECK(rows >= 0, "quant: rows = {} is negative", rows);
  SINKQ_CHECK(cols > 0, "quant: cols = {} must be positive", cols);
  if (s.granularity == Granularity::PerGroup)
    SINKQ_CHECK(cols % s.group_size == 0, "quant spec: group_size = {} does not divide cols = {}",
                s.group_size, cols);
  if (s.granularity == Granularity::PerHead || s.granularity == Granularity::PerHeadShared)
    SINKQ_CHECK(cols % s.head_dim == 0, "quant spec: head_dim = {} does not divide cols = {}",
                s.head_dim, cols);
}

std::string describe(const QuantSpec& s) {
  std::string g(granularity_name(s.granularity));
  if (s.granularity == Granularity::PerGroup) g += fmt::format("(g={})", s.group_size);
  if (s.granularity == Granularity::PerHead || s.granularity == Granularity::PerHeadShared)
    g += fmt::format("(head_dim={})", s.head_dim);
  return fmt::format("int{} {} {} clip={}", s.bits, s.symmetric ? "sym" : "asym", g, s.clip_ratio);
}

// ---- calibration ---------------------------------------------------------------------------

std::string_view calib_statistic_name(CalibStatistic s) {
  return s == CalibStatistic::Max ? "max" : "sample_mean";
}

CalibStatistic parse_calib_statistic(std::string_view name) {
  if (name == "max") return CalibStatistic::Max;
  if (name == "sample_mean") return CalibStatistic::SampleMean;
  throw Error(fmt::format("calibration statistic '{}': expected max or sample_mean", name));
}

Calibrator::Calibrator(const QuantSpec& spec, CalibStatistic stat) : spec_(spec), stat_(stat) {
  validate(spec);
  SINKQ_CHECK(stat == CalibStatistic::Max || row_shared(spec.granularity),
              "quant calibration: the sample_mean statistic needs a row-shared granularity, not {}",
              granularity_name(spec.granularity));
}

Calibrator Calibrator::with_clip(float r) const {
  Calibrator c = *this;
  c.spec_.clip_ratio = r;
  validate(c.spec_);
  return c;
}

void Calibrator::observe(const float* x, int64_t rows, int64_t cols) {
  validate(spec_, rows, cols);
  const bool shared = row_shared(spec_.granularity);
  if (cols_ == 0) {  // first call fixes the layout
    cols_ = cols;
    col_block_ = col_block_of(spec_, cols);
    pcol_ = cols / col_block_;
    prow_ = shared ? 1 : rows;
    // Both modes start at 0: the asymmetric range always holds 0, the symmetric absmax >= 0.
    lo_.assign(size_t(prow_ * pcol_), 0.0f);
    hi_.assign(size_t(prow_ * pcol_), 0.0f);
    if (stat_ == CalibStatistic::SampleMean) {
      col_lo_.assign(size_t(cols), 0.0);
      col_hi_.assign(size_t(cols), 0.0);
    }
  }
  SINKQ_CHECK(cols == cols_, "quant calibration: tensor has {} columns, earlier calls had {}", cols, cols_);
  SINKQ_CHECK(shared || rows == prow_,
              "quant calibration: {} needs the same rows in every call ({} then {})",
              granularity_name(spec_.granularity), prow_, rows);
  const bool sym = spec_.symmetric;
  if (stat_ == CalibStatistic::SampleMean) {
    if (rows == 0) return;
    // This call's range per column (0 kept inside it, as every range of this file), then summed.
    std::vector<float> clo(size_t(cols), 0.0f), chi(size_t(cols), 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = x + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float v = row[j];
        SINKQ_CHECK(std::isfinite(v), "quant: non-finite value {} at row {}, col {}", v, i, j);
        if (sym) {
          chi[size_t(j)] = std::fmax(chi[size_t(j)], std::fabs(v));
        } else {
          clo[size_t(j)] = std::fmin(clo[size_t(j)], v);
          chi[size_t(j)] = std::fmax(chi[size_t(j)], v);
        }
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      col_lo_[size_t(j)] += clo[size_t(j)];
      col_hi_[size_t(j)] += chi[size_t(j)];
    }
    ++calls_;
    rows_seen_ += rows;
    return;  // params() turns the sums into group ranges
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * cols;
    const int64_t base = (shared ? 0 : i) * pcol_;
    for (int64_t b = 0; b < pcol_; ++b) {
      float lo = lo_[size_t(base + b)], hi = hi_[size_t(base + b)];
      bool bad = false;  // any non-finite value (NaN fails the <=): checked once per block
      const int64_t j0 = b * col_block_, j1 = (b + 1) * col_block_;
      for (int64_t j = j0; j < j1; ++j) {
        const float v = row[j];
        bad |= !(std::fabs(v) <= FLT_MAX);
        if (sym) {
          const float a = std::fabs(v);
          hi = a > hi ? a : hi;
        } else {
          lo = v < lo ? v : lo;
          hi = v > hi ? v : hi;
        }
      }
      if (bad)
        for (int64_t j = j0; j < j1; ++j)
          SINKQ_CHECK(std::isfinite(row[j]), "quant: non-finite value {} at row {}, col {}", row[j], i, j);
      lo_[size_t(base + b)] = lo;
      hi_[size_t(base + b)] = hi;
    }
  }
  rows_seen_ += rows;
}

Params Calibrator::params() const {
  SINKQ_CHECK(cols_ > 0, "quant calibration: no data observed ({})", describe(spec_));
  Params p;
  p.granularity = spec_.granularity;
  p.bits = spec_.bits;
  p.symmetric = spec_.symmetric;
  p.prow = prow_;
  p.pcol = pcol_;
  p.col_block = col_block_;
  const size_t n = size_t(prow_ * pcol_);
  std::vector<float> lo_mean, hi_mean;
  if (stat_ == CalibStatistic::SampleMean) {
    // The group ranges: the mean per column over the calls, then the range over the group's columns.
    lo_mean.assign(n, 0.0f);
    hi_mean.assign(n, 0.0f);
    for (int64_t b = 0; b < pcol_; ++b)
      for (int64_t j = b * col_block_; j < (b + 1) * col_block_; ++j) {
        lo_mean[size_t(b)] = std::fmin(lo_mean[size_t(b)], float(col_lo_[size_t(j)] / double(calls_)));
        hi_mean[size_t(b)] = std::fmax(hi_mean[size_t(b)], float(col_hi_[size_t(j)] / double(calls_)));
      }
  }
  const std::vector<float>& lo = stat_ == CalibStatistic::SampleMean ? lo_mean : lo_;
  const std::vector<float>& hi = stat_ == CalibStatistic::SampleMean ? hi_mean : hi_;
  p.scale.resize(n);
  const float clip = spec_.clip_ratio;
  if (spec_.symmetric) {
    // s = clip·absmax / (2^(N-1) - 1), evaluated in fp32 in exactly this order.
    const float denom = float((1 << (spec_.bits - 1)) - 1);
    for (size_t k = 0; k < n; ++k) p.scale[k] = detail::guard_scale((clip * hi[k]) / denom);
  } else {
    // s = clip·(hi - lo) / (2^N - 1); z = clamp(rne(-clip·lo / s), 0, 2^N - 1).
    const float denom = float((1 << spec_.bits) - 1);
    p.zero.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const float range = hi[k] - lo[k];
      SINKQ_CHECK(std::isfinite(range), "quant: value range [{}, {}] overflows fp32", lo[k], hi[k]);
      const float s = detail::guard_scale((clip * range) / denom);
      const float z = std::nearbyint(std::fmin(std::fmax(-(clip * lo[k]) / s, 0.0f), denom));
      p.scale[k] = s;
      p.zero[k] = int32_t(z);
    }
  }
  return p;
}

Params compute_params(const QuantSpec& spec, const float* x, int64_t rows, int64_t cols) {
  Calibrator c(spec);
  c.observe(x, rows, cols);
  return c.params();
}

// ---- quantization --------------------------------------------------------------------------

void fake_quant(const QuantSpec& spec, const Params& p, float* x, int64_t rows, int64_t cols) {
  check_params(spec, p, rows, cols);
  check_rounding_mode();
  for_each_block(p, rows, [&](int64_t i, int64_t j0, int64_t j1, int64_t k) {
    const BlockConst c = block_const(spec, p, k);
    float* row = x + i * cols;
    for (int64_t j = j0; j < j1; ++j) row[j] = detail::level(row[j], c.s, c.lo, c.hi) * c.s;
  });
}

Params fake_quant_dynamic(const QuantSpec& spec, float* x, int64_t rows, int64_t cols) {
  Params p = compute_params(spec, x, rows, cols);
  fake_quant(spec, p, x, rows, cols);
  return p;
}

void quantize_to_int(const QuantSpec& spec, const Params& p, const float* x, int64_t rows,
                     int64_t cols, int8_t* q) {
  check_params(spec, p, rows, cols);
  check_rounding_mode();
  const float off = float(code_offset(spec));
  for_each_block(p, rows, [&](int64_t i, int64_t j0, int64_t j1, int64_t k) {
    const BlockConst c = block_const(spec, p, k);
    // stored code = (level + z) - offset; every term is a small exact integer in fp32.
    for (int64_t j = j0; j < j1; ++j)
      q[i * cols + j] = int8_t(int(detail::level(x[i * cols + j], c.s, c.lo, c.hi) + c.z - off));
  });
}

void dequantize(const QuantSpec& spec, const Params& p, const int8_t* q, int64_t rows, int64_t cols,
                float* x) {
  check_params(spec, p, rows, cols);
  const int off = code_offset(spec);
  for_each_block(p, rows, [&](int64_t i, int64_t j0, int64_t j1, int64_t k) {
    const float s = p.scale[size_t(k)];
    const int zc = (spec.symmetric ? 0 : p.zero[size_t(k)]) - off;
    for (int64_t j = j0; j < j1; ++j) x[i * cols + j] = formats::uniform::decode(q[i * cols + j], zc, s);
  });
}

KernelCount kernel_count(const QuantSpec& spec, const Params& p, const float* x, int64_t rows,
                         int64_t cols) {
  check_params(spec, p, rows, cols);
  check_rounding_mode();
  KernelCount kc;
  for_each_block(p, rows, [&](int64_t i, int64_t j0, int64_t j1, int64_t k) {
    const BlockConst c = block_const(spec, p, k);
    for (int64_t j = j0; j < j1; ++j) {
      const float v = x[i * cols + j];
      if (v == 0.0f) continue;
      ++kc.nonzero;
      if (detail::level(v, c.s, c.lo, c.hi) == 0.0f) ++kc.zeroed;
    }
  });
  return kc;
}

double kernel_fraction(const QuantSpec& spec, const Params& p, const float* x, int64_t rows,
                       int64_t cols) {
  return kernel_count(spec, p, x, rows, cols).fraction();
}

}  // namespace sinkq::quant
