// tests/lowbit/formats_test.cc — the format table, the byte layout, and pack / unpack against
// the quantizer: unpack(pack(q)) == q, and dequantize(pack(quantize_to_int(x))) == fake_quant(x).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/quantizer.h"
#include "lowbit/formats.h"
#include "util/testutil.h"

namespace sinkq::lowbit {
namespace {

using testing::bit_equal;
using ::testing::HasSubstr;
using sinkq::testing::error_of;

// Normal values with a few large outliers per row (attention-sink-like channels).
std::vector<float> outlier_data(std::mt19937_64& rng, int64_t rows, int64_t cols) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(rows * cols));
  for (float& x : v) x = d(rng);
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  for (int64_t i = 0; i < rows; ++i) v[size_t(i * cols + col(rng))] *= 40.0f;
  return v;
}

// Column counts the format accepts: anything for per-row / per-tensor, multiples of the group.
std::vector<int64_t> cols_for(const FormatDesc& t) {
  if (t.group > 0) return {t.group, 3 * t.group, 7 * t.group};
  return {1, 2, 7, 33, 100, 257};
}

TEST(Formats, TableLookupAndNames) {
  for (const FormatDesc& t : kFormats) {
    EXPECT_EQ(&traits(t.format), &t);
    EXPECT_EQ(parse_format(t.name), t.format);
    const quant::QuantSpec s = quant_spec(t.format, 0.9f);
    EXPECT_EQ(s.bits, t.bits);
    EXPECT_EQ(s.symmetric, t.symmetric);
    EXPECT_EQ(s.granularity, t.granularity);
    EXPECT_EQ(s.clip_ratio, 0.9f);
    if (t.group > 0) {
      EXPECT_EQ(s.group_size, t.group);
    }
  }
  // Fixed values (artifacts).
  EXPECT_EQ(int(PackedFormat::W8_PerRow), 1);
  EXPECT_EQ(int(PackedFormat::W4_G128_Asym), 8);
  EXPECT_EQ(int(PackedFormat::A8_PerToken), 32);
  EXPECT_EQ(int(PackedFormat::A4_PerTensor), 35);
  EXPECT_THAT(error_of([] { traits(PackedFormat(99)); }), HasSubstr("99 is not a packed format"));
  EXPECT_THAT(error_of([] { parse_format("w3_per_row"); }), HasSubstr("w4_g128_asym"));
}

// The documented bytes: 4-bit low nibble = even column, two's complement, odd tail padded with 0;
// 8-bit one int8 per byte; asymmetric zero points as uint8.
TEST(Formats, ByteLayout) {
  quant::Params p;
  p.granularity = quant::Granularity::PerRow;
  p.bits = 4;
  p.symmetric = true;
  p.prow = 2;
  p.pcol = 1;
  p.col_block = 3;
  p.scale = {0.5f, 2.0f};
  const int8_t q4[] = {-1, 2, 7, -8, 0, 5};
  const PackedTensor w4 = pack(PackedFormat::W4_PerRow, q4, p, 2, 3);
  EXPECT_EQ(w4.codes, (std::vector<uint8_t>{0x2F, 0x07, 0x08, 0x05}));
  EXPECT_EQ(w4.scales, p.scale);
  EXPECT_TRUE(w4.zeros.empty());
  EXPECT_EQ(w4.bytes(), 4u + 8u);

  p.bits = 8;
  const int8_t q8[] = {-128, 127, 0, -1, 1, 2};
  const PackedTensor w8 = pack(PackedFormat::W8_PerRow, q8, p, 2, 3);
  EXPECT_EQ(w8.codes, (std::vector<uint8_t>{0x80, 0x7F, 0x00, 0xFF, 0x01, 0x02}));

  // W4 g32 asym on [1, 64]: 32 code bytes, 2 scales, 2 zero points.
  std::mt19937_64 rng(1);
  const std::vector<float> x = outlier_data(rng, 1, 64);
  const PackedTensor a = quantize(PackedFormat::W4_G32_Asym, x.data(), 1, 64);
  EXPECT_EQ(a.codes.size(), 32u);
  EXPECT_EQ(a.scales.size(), 2u);
  EXPECT_EQ(a.zeros.size(), 2u);
  EXPECT_EQ(a.bytes(), 32u + 2 * 5u);
  EXPECT_EQ(int64_t(a.bytes()), 64 / 2 + 2 * traits(a.format).param_bytes());
}

TEST(Formats, UnpackOfPackIsIdentity) {
  std::mt19937_64 rng(2);
  for (const FormatDesc& t : kFormats)
    for (int64_t cols : cols_for(t))
      for (int64_t rows : {1, 3, 16}) {
        // Every code of the range, including -2^(N-1) (reached only when clipping).
        const int lo = -(1 << (t.bits - 1)), hi = (1 << (t.bits - 1)) - 1;
        std::uniform_int_distribution<int> d(lo, hi);
        std::vector<int8_t> q(size_t(rows * cols));
        for (int8_t& c : q) c = int8_t(d(rng));
        q[0] = int8_t(lo);
        q.back() = int8_t(hi);
        std::vector<float> x = outlier_data(rng, rows, cols);
        const quant::Params p = quant::compute_params(quant_spec(t.format), x.data(), rows, cols);
        const PackedTensor pt = pack(t.format, q.data(), p, rows, cols);
        EXPECT_EQ(unpack_codes(pt), q) << t.name << " [" << rows << ", " << cols << "]";
        const quant::Params back = params_of(pt);
        EXPECT_EQ(back.scale, p.scale);
        EXPECT_EQ(back.zero, p.zero);
        EXPECT_EQ(back.prow, p.prow);
        EXPECT_EQ(back.col_block, p.col_block);
      }
}

// dequantize(pack(quantize_to_int(x))) == fake_quant(x), bit for bit, clip 1 and < 1.
TEST(Formats, DequantizeEqualsFakeQuant) {
  std::mt19937_64 rng(3);
  int cases = 0;
  for (const FormatDesc& t : kFormats)
    for (int64_t cols : cols_for(t))
      for (float clip : {1.0f, 0.7f}) {
        const int64_t rows = 5;
        std::vector<float> x = outlier_data(rng, rows, cols);
        const PackedTensor pt = quantize(t.format, x.data(), rows, cols, clip);
        std::vector<float> got(x.size());
        dequantize(pt, got.data());
        std::vector<float> want = x;
        quant::fake_quant_dynamic(quant_spec(t.format, clip), want.data(), rows, cols);
        EXPECT_TRUE(bit_equal(got, want)) << t.name << " cols " << cols << " clip " << clip;
        ++cases;
      }
  EXPECT_GT(cases, 50);
}

TEST(Formats, PackRejectsMismatches) {
  std::mt19937_64 rng(4);
  const std::vector<float> x = outlier_data(rng, 2, 64);
  const quant::Params p8 = quant::compute_params(quant_spec(PackedFormat::W8_PerRow), x.data(), 2, 64);
  std::vector<int8_t> q(128, 0);
  EXPECT_THAT(error_of([&] { pack(PackedFormat::W4_PerRow, q.data(), p8, 2, 64); }),
              HasSubstr("format w4_per_row needs int4 sym per_row"));
  EXPECT_THAT(error_of([&] { pack(PackedFormat::W8_PerRow, q.data(), p8, 3, 64); }), HasSubstr("needs [3, 1]"));
  const quant::Params p4 = quant::compute_params(quant_spec(PackedFormat::W4_PerRow), x.data(), 2, 64);
  q[70] = 8;  // outside [-8, 7]
  EXPECT_THAT(error_of([&] { pack(PackedFormat::W4_PerRow, q.data(), p4, 2, 64); }),
              HasSubstr("code 8 at row 1, col 6 outside [-8, 7]"));
  q[70] = 0;
  quant::Params pa = quant::compute_params(quant_spec(PackedFormat::W4_G32_Asym), x.data(), 2, 64);
  pa.zero[1] = 16;
  EXPECT_THAT(error_of([&] { pack(PackedFormat::W4_G32_Asym, q.data(), pa, 2, 64); }),
              HasSubstr("zero point 16 outside [0, 15]"));
  EXPECT_THAT(error_of([&] { quantize(PackedFormat::W4_G128, x.data(), 2, 64); }), HasSubstr("group_size"));
  PackedTensor bad = quantize(PackedFormat::W8_PerRow, x.data(), 2, 64);
  bad.codes.pop_back();
  EXPECT_THAT(error_of([&] { unpack_codes(bad); }), HasSubstr("127 code bytes, expected 128"));
}

}  // namespace
}  // namespace sinkq::lowbit
