// tests/lowbit/act_quant_test.cc — the fp32 -> A8 / A4 activation quantizers of every ISA
// against quant::compute_params + quantize_to_int: identical codes and scales, bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/quantizer.h"
#include "kernels/kernel_test_util.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"
#include "util/testutil.h"

namespace sinkq::lowbit {
namespace {

using ::testing::HasSubstr;
using sinkq::testing::error_of;

const int64_t kCols[] = {1, 2, 7, 16, 31, 33, 64, 100, 257, 1000};
const int64_t kTokens[] = {1, 3, 7};

// Normal data, a large outlier per row, and exact rounding ties: the first row's abs-max is
// 2^(N-1)-1, so with clip 1 its scale is exactly 1 and the values k + 0.5 sit on ties.
std::vector<float> act_data(std::mt19937_64& rng, int64_t rows, int64_t cols, int bits) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(rows * cols));
  for (float& x : v) x = d(rng);
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  for (int64_t i = 1; i < rows; ++i) v[size_t(i * cols + col(rng))] *= 50.0f;
  const float qmax = float((1 << (bits - 1)) - 1);
  for (int64_t j = 0; j < cols; ++j) v[size_t(j)] = std::fmod(float(j), 2 * qmax) - qmax + 0.5f;
  v[0] = -qmax;
  return v;
}

// The reference: the quantizer's own integer path, packed.
PackedTensor reference(PackedFormat f, const float* x, int64_t rows, int64_t cols, const quant::Params& p) {
  std::vector<int8_t> q(size_t(rows * cols));
  quant::quantize_to_int(quant_spec(f), p, x, rows, cols, q.data());
  return pack(f, q.data(), p, rows, cols);
}

void expect_same(const PackedTensor& got, const PackedTensor& want, const std::string& what) {
  EXPECT_EQ(got.format, want.format) << what;
  EXPECT_EQ(got.rows, want.rows) << what;
  EXPECT_EQ(got.cols, want.cols) << what;
  EXPECT_EQ(got.codes, want.codes) << what;
  EXPECT_EQ(got.scales, want.scales) << what;  // == on floats: bit-equal for non-NaN scales
  EXPECT_TRUE(got.zeros.empty()) << what;
}

TEST(ActQuant, DynamicPerTokenEqualsQuantizeToInt) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(11);
  PackedTensor out;  // reused across calls, as a decode loop would
  int cases = 0;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (PackedFormat f : {PackedFormat::A8_PerToken, PackedFormat::A4_PerToken})
      for (int64_t cols : kCols)
        for (int64_t T : kTokens)
          for (float clip : {1.0f, 0.8f}) {
            const int bits = traits(f).bits;
            const std::vector<float> x = act_data(rng, T, cols, bits);
            quantize_dynamic(f, x.data(), T, cols, clip, out);
            const quant::Params p = quant::compute_params(quant_spec(f, clip), x.data(), T, cols);
            expect_same(out, reference(f, x.data(), T, cols, p),
                        ktest::ctx(isa, std::string(traits(f).name)) + " T=" + std::to_string(T) +
                            " cols=" + std::to_string(cols) + " clip=" + std::to_string(clip));
            ++cases;
          }
  }
  EXPECT_GT(cases, 0);
}

// Static per-tensor: calibrated on other data, so values beyond the range clamp; ±inf clamp to
// the ends and NaN gives the lowest code, as quantize_to_int does.
TEST(ActQuant, StaticPerTensorEqualsQuantizeToInt) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(12);
  PackedTensor out;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (PackedFormat f : {PackedFormat::A8_PerTensor, PackedFormat::A4_PerTensor})
      for (int64_t cols : kCols)
        for (int64_t T : kTokens) {
          const int bits = traits(f).bits;
          const std::vector<float> calib = act_data(rng, 4, cols, bits);
          const quant::Params p = quant::compute_params(quant_spec(f, 0.9f), calib.data(), 4, cols);
          std::vector<float> x = act_data(rng, T, cols, bits);
          for (float& v : x) v *= 1.5f;  // beyond the calibrated range
          x[0] = std::numeric_limits<float>::infinity();
          x[x.size() / 2] = -std::numeric_limits<float>::infinity();
          x.back() = std::numeric_limits<float>::quiet_NaN();
          quantize_static(f, x.data(), T, cols, p, out);
          expect_same(out, reference(f, x.data(), T, cols, p),
                      ktest::ctx(isa, std::string(traits(f).name)) + " T=" + std::to_string(T) +
                          " cols=" + std::to_string(cols));
        }
  }
}

// Per-token codes at given scales (CrossQuant's token factor, quant/crossquant.h): each row as
// quantize_to_int with that row's scale — rows whose scale is below their abs-max / qmax clamp.
TEST(ActQuant, GivenTokenScalesEqualQuantizeToInt) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(15);
  std::uniform_real_distribution<float> shrink(0.3f, 2.0f);
  PackedTensor out;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (PackedFormat f : {PackedFormat::A8_PerToken, PackedFormat::A4_PerToken})
      for (int64_t cols : kCols)
        for (int64_t T : kTokens) {
          const int bits = traits(f).bits;
          const std::vector<float> x = act_data(rng, T, cols, bits);
          quant::Params p = quant::compute_params(quant_spec(f), x.data(), T, cols);
          for (float& sc : p.scale) sc *= shrink(rng);
          quantize_rows(f, x.data(), T, cols, p.scale.data(), out);
          expect_same(out, reference(f, x.data(), T, cols, p),
                      ktest::ctx(isa, std::string(traits(f).name)) + " T=" + std::to_string(T) +
                          " cols=" + std::to_string(cols));
        }
  }
  const std::vector<float> x(8, 1.0f), bad = {1.0f, 0.0f};
  EXPECT_THAT(error_of([&] { quantize_rows(PackedFormat::A8_PerToken, x.data(), 2, 4, bad.data(), out); }),
              HasSubstr("token 1's scale 0 is not a positive normal fp32"));
  EXPECT_THAT(error_of([&] { quantize_rows(PackedFormat::A8_PerTensor, x.data(), 2, 4, bad.data(), out); }),
              HasSubstr("not a per-token activation format"));
}

// The SIMD rows multiply by RN(1/s) and divide only near rounding boundaries (table.h): values
// within a few ulps of every half-integer quotient (k + 1/2)·s, for scales whose reciprocal is
// inexact, and scales outside the reciprocal's range (always divided), give quantize_to_int's codes.
TEST(ActQuant, ReciprocalPathEqualsDivisionNearRoundingBoundaries) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(14);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  PackedTensor out;
  int cases = 0;
  for (PackedFormat f : {PackedFormat::A8_PerTensor, PackedFormat::A4_PerTensor}) {
    const int bits = traits(f).bits, qmax = (1 << (bits - 1)) - 1;
    std::vector<float> scales = {3.0f, 0.1f, 1.0f / 3.0f, 7e-3f, 1e30f, 3e-30f, 0x1p96f, 0x1.000002p96f};
    for (int i = 0; i < 24; ++i) scales.push_back(std::ldexp(mant(rng), int(rng() % 40) - 20));
    for (float s : scales) {
      // (k + 1/2)·s and its neighbours up to 3 ulps away, for every k of the range and beyond.
      std::vector<float> x;
      for (int k = -qmax - 3; k <= qmax + 2; ++k) {
        float v = (float(k) + 0.5f) * s;
        for (int j = 0; j < 3; ++j) v = std::nextafter(v, -INFINITY);
        for (int j = 0; j < 7; ++j, v = std::nextafter(v, INFINITY)) x.push_back(v);
      }
      while (x.size() % 64 != 0) x.push_back(float(x.size() % 5) * s);  // whole vectors + none left
      const int64_t cols = int64_t(x.size());
      // Per-tensor params for `cols` columns, with the scale set to exactly s.
      std::vector<float> calib(size_t(cols), 0.0f);
      calib[0] = s;
      quant::Params p = quant::compute_params(quant_spec(f), calib.data(), 1, cols);
      p.scale[0] = s;
      for (Isa isa : ktest::all_isas()) {
        set_isa(isa);
        quantize_static(f, x.data(), 1, cols, p, out);
        expect_same(out, reference(f, x.data(), 1, cols, p),
                    ktest::ctx(isa, std::string(traits(f).name)) + " s=" + std::to_string(s));
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// Many tokens: the threaded split gives the same bytes as one thread.
TEST(ActQuant, ThreadCountDoesNotMatter) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(13);
  const int64_t T = 300, cols = 1000;
  const std::vector<float> x = act_data(rng, T, cols, 8);
  const quant::Params p = quant::compute_params(quant_spec(PackedFormat::A8_PerTensor), x.data(), T, cols);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    PackedTensor d1, d2, s1, s2;
    set_num_threads(1);
    quantize_dynamic(PackedFormat::A8_PerToken, x.data(), T, cols, 1.0f, d1);
    quantize_static(PackedFormat::A8_PerTensor, x.data(), T, cols, p, s1);
    set_num_threads(2);
    quantize_dynamic(PackedFormat::A8_PerToken, x.data(), T, cols, 1.0f, d2);
    quantize_static(PackedFormat::A8_PerTensor, x.data(), T, cols, p, s2);
    expect_same(d2, d1, ktest::ctx(isa, "dynamic"));
    expect_same(s2, s1, ktest::ctx(isa, "static"));
    const quant::Params pd = quant::compute_params(quant_spec(PackedFormat::A8_PerToken), x.data(), T, cols);
    expect_same(d2, reference(PackedFormat::A8_PerToken, x.data(), T, cols, pd), ktest::ctx(isa, "dynamic ref"));
  }
}

TEST(ActQuant, Errors) {
  ktest::StateGuard guard;
  std::vector<float> x(2 * 40, 1.0f);
  PackedTensor out;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    x[40 + 37] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THAT(error_of([&] { quantize_dynamic(PackedFormat::A8_PerToken, x.data(), 2, 40, 1.0f, out); }),
                HasSubstr("non-finite value nan at token 1, feature 37"));
    x[40 + 37] = 1.0f;
  }
  EXPECT_THAT(error_of([&] { quantize_dynamic(PackedFormat::A8_PerTensor, x.data(), 2, 40, 1.0f, out); }),
              HasSubstr("not a per-token activation format"));
  EXPECT_THAT(error_of([&] { quantize_dynamic(PackedFormat::W8_PerRow, x.data(), 2, 40, 1.0f, out); }),
              HasSubstr("not a per-token activation format"));
  EXPECT_THAT(error_of([&] { quantize_dynamic(PackedFormat::A8_PerToken, x.data(), 2, 40, 1.5f, out); }),
              HasSubstr("clip_ratio"));
  const quant::Params pt = quant::compute_params(quant_spec(PackedFormat::A8_PerTensor), x.data(), 2, 40);
  EXPECT_THAT(error_of([&] { quantize_static(PackedFormat::A4_PerTensor, x.data(), 2, 40, pt, out); }),
              HasSubstr("were not calibrated for a4_per_tensor"));
  EXPECT_THAT(error_of([&] { quantize_static(PackedFormat::A8_PerTensor, x.data(), 4, 20, pt, out); }),
              HasSubstr("40 columns"));
  EXPECT_THAT(error_of([&] { quantize_static(PackedFormat::A8_PerToken, x.data(), 2, 40, pt, out); }),
              HasSubstr("not a per-tensor activation format"));
}

}  // namespace
}  // namespace sinkq::lowbit
