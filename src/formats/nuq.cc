// sinkq/formats/nuq.cc — the per-vector codebook quantizer (nuq.h).
#include "formats/nuq.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace sinkq::formats::nuq {

namespace {

void check_bits(int bits) {
  SINKQ_CHECK(bits >= kMinBits && bits <= kMaxBits, "codebook bits must be {}..{}, got {}", kMinBits, kMaxBits, bits);
}

// Φ⁻¹(p) of the standard normal by bisection on Φ(x) = erfc(−x/√2)/2 (monotone; 200 halvings of
// [−40, 40] reach double precision): codebooks are built once, speed does not matter.
double normal_ppf(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

std::vector<float> uniform_levels(int bits) {
  check_bits(bits);
  const int n = 1 << bits;
  std::vector<float> c(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) c[size_t(i)] = float(-1.0 + 2.0 * i / (n - 1));
  return c;
}

// QLoRA's construction (bitsandbytes create_normal_map with the extra positive value), for any
// bits: positive levels Φ⁻¹ at 2^(b−1) points evenly spaced from `offset` down to (excluding) 0.5,
// negative levels −Φ⁻¹ at 2^(b−1) − 1 points the same way, and 0; divided by Φ⁻¹(offset) so the
// ends are ±1. offset = 1 − (1/(2(2^b − 1)) + 1/(2·2^b))/2, which is QLoRA's 0.9677 at 4 bits.
std::vector<float> nf_levels(int bits) {
  check_bits(bits);
  const int half = 1 << (bits - 1);
  const double n = double(1 << bits);
  const double offset = 1.0 - 0.5 * (1.0 / (2.0 * (n - 1.0)) + 1.0 / (2.0 * n));
  const double top = normal_ppf(offset);
  std::vector<double> v;
  auto side = [&](int count, double sign) {  // linspace(offset, 0.5, count + 1) without its end
    for (int i = 0; i < count; ++i) v.push_back(sign * normal_ppf(offset + (0.5 - offset) * i / count) / top);
  };
  side(half, 1.0);
  side(half - 1, -1.0);
  v.push_back(0.0);
  std::sort(v.begin(), v.end());
  std::vector<float> c(v.size());
  for (size_t i = 0; i < v.size(); ++i) c[i] = float(v[i]);
  c.front() = -1.0f;  // exactly ±1 (the division above is exact only up to rounding)
  c.back() = 1.0f;
  return c;
}

int nearest(std::span<const float> levels, float u) {
  SINKQ_ASSERT(!levels.empty());
  // First level whose upper decision boundary (midpoint to the next level) is >= u: the lower of
  // two levels wins a tie. With the levels ascending the boundaries are too, so that index is the
  // count of boundaries below u — counted without a branch (a data-dependent loop exit
  // mispredicts about once per element).
  const int n = int(levels.size());
  const float* l = levels.data();
  int i = 0;
  for (int j = 0; j + 1 < n; ++j) i += u > 0.5f * (l[j] + l[j + 1]);
  return i;
}

float fp16_round(float x) {
  const float c = std::clamp(x, -65504.0f, 65504.0f);
  return f16_to_f32(f32_to_f16(c));
}

float Range::scale() const {
  const float s = 0.5f * (hi - lo);
  return s >= FLT_MIN ? s : FLT_MIN;
}

int64_t outliers_per_side(int64_t n, double p) {
  SINKQ_CHECK(p >= 0.0 && p < 1.0, "outlier fraction must be in [0, 1), got {}", p);
  return int64_t(std::llround(p * double(n) / 2.0));
}

Range outlier_range(const float* x, int64_t n, int64_t stride, double p) {
  SINKQ_ASSERT(n >= 1);
  const int64_t k = std::min<int64_t>(outliers_per_side(n, p), (n - 1) / 2);
  if (k == 0) {
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < n; ++i) lo = std::min(lo, x[i * stride]), hi = std::max(hi, x[i * stride]);
    return {lo, hi};
  }
  if (k <= 8) {
    // A few per side (p = 1% of a kv row: 1 to 3): one pass keeping the k + 1 smallest and the
    // k + 1 largest in sorted arrays — the same order statistics as the selection below.
    float lo[9], hi[9];
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = x[i * stride];
      if (m < k + 1) {  // fill both arrays with the first k + 1 values
        int64_t j = m++;
        for (; j > 0 && lo[j - 1] > a; --j) lo[j] = lo[j - 1];
        lo[j] = a;
        j = m - 1;
        for (; j > 0 && hi[j - 1] < a; --j) hi[j] = hi[j - 1];
        hi[j] = a;
        continue;
      }
      if (a < lo[k]) {
        int64_t j = k;
        for (; j > 0 && lo[j - 1] > a; --j) lo[j] = lo[j - 1];
        lo[j] = a;
      }
      if (a > hi[k]) {
        int64_t j = k;
        for (; j > 0 && hi[j - 1] < a; --j) hi[j] = hi[j - 1];
        hi[j] = a;
      }
    }
    return {lo[k], hi[k]};
  }
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = x[i * stride];
  // The (k+1)-th smallest and the (k+1)-th largest: what is left after k per side.
  std::nth_element(v.begin(), v.begin() + k, v.end());
  const float lo = v[size_t(k)];
  std::nth_element(v.begin(), v.begin() + (n - 1 - k), v.end());
  const float hi = v[size_t(n - 1 - k)];
  return {lo, hi};
}

int encode(float x, const Range& r, std::span<const float> levels) {
  return nearest(levels, std::clamp((x - r.zero()) / r.scale(), -1.0f, 1.0f));
}

Coded code_one(float x, const Range& r, std::span<const float> levels, bool sparse) {
  if (is_outlier(x, r, sparse)) return {fp16_round(x), true};
  return {decode(encode(x, r, levels), r, levels), false};
}

void Codec::check_width(int64_t cols) const {
  SINKQ_CHECK(!per_channel || (int64_t(lo.size()) == cols && int64_t(hi.size()) == cols),
              "KV codec: calibrated for {} channels, the site has {}", lo.size(), cols);
}

Codec::Count Codec::apply(float* x, int64_t rows, int64_t cols) const {
  Count n;
  for_each(x, rows, cols, [&](int64_t r, int64_t c, const Range& range) {
    float& e = x[r * cols + c];
    const Coded q = code_one(e, range, levels, sparse());
    e = q.value;
    n.outliers += q.outlier;
  });
  n.values = rows * cols;
  return n;
}

}  // namespace sinkq::formats::nuq
