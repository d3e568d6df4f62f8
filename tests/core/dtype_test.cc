// tests/core/dtype_test.cc — fp16/bf16 conversions against independent oracles.
//
// Oracles: f16 -> f32 by the IEEE formula with ldexp; f32 -> f16/bf16 by picking the nearest of the
// two neighbouring representable values in double arithmetic (exact: every f16/bf16/f32 value is a
// double), ties to the even bit pattern, and overflow decided as if the exponent were unbounded.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace sinkq {
namespace {

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

double f16_formula(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(double(m), -24);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

// Value of a non-negative half pattern for rounding, with 0x7c00 (inf) standing for 2^16: the
// next "representable" value if the exponent range continued.
double f16_rounding_value(uint16_t h) { return h == 0x7c00 ? 65536.0 : f16_formula(h); }

uint16_t f32_to_f16_oracle(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const double a = std::fabs(double(f));
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65536.0) return sign | 0x7c00;
  // Binary search for the largest half pattern lo with value <= a (patterns are monotonic).
  uint16_t lo = 0, hi = 0x7c00;
  while (hi - lo > 1) {
    const uint16_t mid = uint16_t((lo + hi) / 2);
    (f16_rounding_value(mid) <= a ? lo : hi) = mid;
  }
  if (f16_rounding_value(hi) <= a) lo = hi;
  const uint16_t up = uint16_t(lo + 1);
  if (lo == 0x7c00) return sign | lo;
  const double dl = a - f16_rounding_value(lo), du = f16_rounding_value(up) - a;
  const uint16_t r = dl < du ? lo : du < dl ? up : ((lo & 1) ? up : lo);
  return sign | r;
}

uint16_t f32_to_bf16_oracle(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return 0;  // not used for NaN
  const uint32_t lo = u & 0xffff0000u;
  const double vlo = std::fabs(double(std::bit_cast<float>(lo)));
  const uint32_t mag_hi = (lo & 0x7fffffffu) + 0x10000u;
  const double vhi = mag_hi == 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(double(std::bit_cast<float>(mag_hi | (lo & 0x80000000u))));
  const double a = std::fabs(double(f));
  const double dl = a - vlo, du = vhi - a;
  const bool up = du < dl || (du == dl && ((lo >> 16) & 1));
  return uint16_t((up ? (lo + 0x10000u) : lo) >> 16);
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_FALSE(parse_dtype("I8"));
  EXPECT_FALSE(parse_dtype("f32"));  // safetensors spelling is upper case
}

TEST(DType, F16AllHalvesWidenExactlyAndRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = f16_to_f32(h);
    if (f16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(f16_is_nan(f32_to_f16(f))) << std::hex << i;
      continue;
    }
    ASSERT_EQ(double(f), f16_formula(h)) << std::hex << i;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << i;  // includes -0, subnormals, +-inf
  }
}

TEST(DType, Bf16AllHalvesRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = bf16_to_f32(h);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), uint32_t(h) << 16);
    if (bf16_is_nan(h)) {
      EXPECT_TRUE(bf16_is_nan(f32_to_bf16(f))) << std::hex << i;
    } else {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << i;
    }
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.1f), 0x2e66);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                 // largest half
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);               // just below the overflow tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                 // tie, rounds to even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0xfbff), -65504.0f);
}

TEST(DType, F16Subnormals) {
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);    // tie 0 / 1 -> even 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);    // above the tie
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);    // tie 1 / 2 -> even 2
  EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);    // tie 2 / 3 -> even 2
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);    // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff); // largest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400); // tie 0x3ff / 0x400 -> even 0x400
  EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x8200), -std::ldexp(1.0f, -15));
}

TEST(DType, RoundToNearestEvenTies) {
  // f16: 1 + 2^-11 is halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01).
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // bf16: 1 + 2^-8 halfway between 0x3f80 and 0x3f81.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max: inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);  // below the tie: max
}

TEST(DType, RandomFloatsMatchOracle) {
  std::mt19937 rng(123);
  for (int i = 0; i < 1'000'000; ++i) {
    const uint32_t u = i < 65536 * 4 ? 0x33000000u + uint32_t(i) * 61 : uint32_t(rng());
    const float f = std::bit_cast<float>(u);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), f32_to_f16_oracle(f)) << std::hex << u;
    ASSERT_EQ(f32_to_bf16(f), f32_to_bf16_oracle(f)) << std::hex << u;
  }
}

TEST(DType, ToF32Widens) {
  const std::vector<float> want = {0.0f, -1.5f, 3.25f, 65504.0f};
  std::vector<uint16_t> h, b;
  for (float v : want) h.push_back(f32_to_f16(v)), b.push_back(f32_to_bf16(v));
  std::vector<float> out(want.size());
  to_f32(DType::F32, want.data(), out.data(), out.size());
  EXPECT_EQ(out, want);
  to_f32(DType::F16, h.data(), out.data(), out.size());
  EXPECT_EQ(out, want);
  to_f32(DType::BF16, b.data(), out.data(), 3);  // 65504 is not a bf16 value
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), std::vector<float>(want.begin(), want.begin() + 3));
}

}  // namespace
}  // namespace sinkq
