// tests/formats/uniform_int_test.cc — the scalar reference rows of the uniform-integer codebook:
// encode / decode round trip over every code of every grid, agreement with the quantizer,
// pack / unpack of rows, and the dots against a double-precision loop with a derived bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "formats/quantizer.h"
#include "formats/uniform_int.h"

namespace sinkq::formats::uniform {
namespace {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

// encode(decode(c)) == c for every stored code c of every (bits, symmetry), several scales, and
// for asymmetric grids several zero points; decode gives the exact level times s.
TEST(UniformInt, EncodeDecodeRoundTripOverAllCodes) {
  for (int bits = 2; bits <= 8; ++bits)
    for (bool sym : {true, false}) {
      const int off = code_offset(bits, sym);
      const std::vector<int> zs = sym ? std::vector<int>{0} : std::vector<int>{0, 1, (1 << bits) / 3, (1 << bits) - 1};
      for (float s : {1.0f, 0.37f, 3e-3f, 41.5f})
        for (int z : zs) {
          SCOPED_TRACE("int" + std::to_string(bits) + (sym ? " sym" : " asym") + " s=" + std::to_string(s) +
                       " z=" + std::to_string(z));
          for (int c = code_min(bits); c <= code_max(bits); ++c) {
            const int q = c + off;
            ASSERT_GE(q, qmin(bits, sym));
            ASSERT_LE(q, qmax(bits, sym));
            const float x = decode(c, z - off, s);
            EXPECT_EQ(x, float(q - z) * s);  // the exact level times s, one rounding
            EXPECT_EQ(encode(x, s, z, bits, sym), c) << "code " << c;
            // Just under half a step either side still encodes to c (past the ends: clamped to c).
            const float below = x - 0.49f * s, above = x + 0.49f * s;
            EXPECT_EQ(encode(below, s, z, bits, sym), c);
            EXPECT_EQ(encode(above, s, z, bits, sym), c);
          }
          // Out of range clamps to the end codes; NaN to the lowest.
          EXPECT_EQ(encode(1e30f, s, z, bits, sym), code_max(bits));
          EXPECT_EQ(encode(-1e30f, s, z, bits, sym), code_min(bits));
          EXPECT_EQ(encode(std::nanf(""), s, z, bits, sym), code_min(bits));
        }
    }
}

// encode / decode are exactly the quantizer's integer path (quant::quantize_to_int / dequantize).
TEST(UniformInt, AgreesWithTheQuantizer) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  const int64_t rows = 5, cols = 64;
  std::vector<float> x(size_t(rows * cols));
  for (float& v : x) v = d(rng);
  for (int bits : {2, 4, 8})
    for (bool sym : {true, false}) {
      quant::QuantSpec spec;
      spec.bits = bits;
      spec.symmetric = sym;
      spec.granularity = quant::Granularity::PerGroup;
      spec.group_size = 16;
      spec.clip_ratio = 0.8f;
      const quant::Params p = quant::compute_params(spec, x.data(), rows, cols);
      std::vector<int8_t> q(x.size());
      quant::quantize_to_int(spec, p, x.data(), rows, cols, q.data());
      std::vector<float> back(x.size());
      quant::dequantize(spec, p, q.data(), rows, cols, back.data());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const size_t k = size_t(i * p.pcol + j / 16), e = size_t(i * cols + j);
          const int z = sym ? 0 : p.zero[k];
          ASSERT_EQ(encode(x[e], p.scale[k], z, bits, sym), q[e]);
          ASSERT_EQ(decode(q[e], z - code_offset(bits, sym), p.scale[k]), back[e]);
        }
    }
}

// pack_row / unpack_row / code_at over every code, odd and even lengths, and the documented bytes.
TEST(UniformInt, PackUnpackRows) {
  for (int bits : {8, 4})
    for (int64_t n : {1, 2, 7, 16, 33, 256}) {
      std::vector<int8_t> c(static_cast<size_t>(n)), back(static_cast<size_t>(n), 99);
      for (int64_t j = 0; j < n; ++j) c[size_t(j)] = int8_t(code_min(bits) + j % (1 << bits));
      std::vector<uint8_t> packed(size_t(row_bytes(bits, n)), 0xAA);
      pack_row(c.data(), n, bits, packed.data());
      unpack_row(packed.data(), n, bits, back.data());
      EXPECT_EQ(back, c) << bits << " bits, n " << n;
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(code_at(packed.data(), j, bits), c[size_t(j)]);
      if (bits == 4 && n % 2 == 1) {
        EXPECT_EQ(packed.back() >> 4, 0) << "odd tail nibble";
      }
    }
  const int8_t c4[] = {-1, 2, 7};
  uint8_t b4[2] = {};
  pack_row(c4, 3, 4, b4);
  EXPECT_EQ(b4[0], 0x2F);
  EXPECT_EQ(b4[1], 0x07);
}

// dequantize_row is decode per element; dot_i8 is exact; dot_f32 is within the recursive-summation
// bound of a double loop: |fl(Σ y·l) - Σ y·l| <= γ_n Σ|y·l|, γ_n = n·u / (1 - n·u) (each product
// and each addition rounds once; l is an exact integer).
TEST(UniformInt, DequantizeAndDots) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int bits : {8, 4})
    for (bool sym : {true, false})
      for (int64_t n : {1, 8, 63, 512, 4096}) {
        SCOPED_TRACE(std::to_string(bits) + (sym ? " sym n=" : " asym n=") + std::to_string(n));
        std::uniform_int_distribution<int> code(code_min(bits), code_max(bits));
        std::vector<int8_t> c(static_cast<size_t>(n)), y8(static_cast<size_t>(n));
        std::vector<float> y(static_cast<size_t>(n)), out(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          c[size_t(j)] = int8_t(code(rng));
          y8[size_t(j)] = int8_t(std::uniform_int_distribution<int>(-128, 127)(rng));
          y[size_t(j)] = d(rng);
        }
        std::vector<uint8_t> packed(size_t(row_bytes(bits, n)));
        pack_row(c.data(), n, bits, packed.data());
        const int off = code_offset(bits, sym), z = sym ? 0 : (1 << bits) / 2 - 1, zc = z - off;
        const float s = 0.0625f * 1.7f;
        dequantize_row(packed.data(), n, bits, zc, s, out.data());
        int64_t exact_i = 0;
        double exact = 0.0, mag = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(out[size_t(j)], decode(c[size_t(j)], zc, s));
          exact_i += int64_t(c[size_t(j)]) * y8[size_t(j)];
          const double t = double(y[size_t(j)]) * double(c[size_t(j)] - zc);
          exact += t;
          mag += std::fabs(t);
        }
        EXPECT_EQ(int64_t(dot_i8(packed.data(), n, bits, y8.data())), exact_i);
        const double gamma = double(n) * kU / (1.0 - double(n) * kU);
        const double got = double(dot_f32(packed.data(), n, bits, zc, y.data()));
        EXPECT_LE(std::fabs(got - exact), gamma * mag) << "got " << got << " exact " << exact;
      }
}

}  // namespace
}  // namespace sinkq::formats::uniform
