// tests/io/gguf_quants_test.cc — ggml block dequantization: bit-for-bit against gguf-py on the
// fixtures in tests/data/gguf (scripts/make_gguf_fixtures.py), hand-built blocks whose expected
// values follow from the layout, and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mmap.h"
#include "core/gguf_quants.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using sinkq::testing::bit_equal;
using sinkq::testing::error_of;

// ggml type ids (the GGUF tensor-info `type` field).
constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
                   kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30;

// tests/data/gguf beside this file's directory, found from the compile-time path of this source.
std::string fixture_dir() {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "gguf").string();
}

std::vector<float> floats_of(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

std::vector<float> dequant(uint32_t type, const void* src, int64_t n) {
  std::vector<float> out(size_t(n), std::nanf(""));
  gguf_dequantize(type, src, out.data(), n, "test");
  return out;
}

// ---------------------------------------------------------------------- gguf-py fixtures

struct Fixture {
  const char* name;
  uint32_t type;
  int block_elems, block_bytes;
};

void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

class GgufQuantFixture : public ::testing::TestWithParam<Fixture> {};

// Every fixture is a [2, 512] tensor (ggml ne = [512, 2]); T.f32 holds gguf.quants.dequantize's
// values for the bytes in T.bin, which are the tensor's bytes inside T.gguf. All arithmetic is fp32
// with exact products (see gguf_quants.cc), so equality is bit for bit: no tolerance.
TEST_P(GgufQuantFixture, MatchesGgufPyBitForBit) {
  const Fixture f = GetParam();
  constexpr int64_t kRows = 2, kCols = 512, kN = kRows * kCols;
  const std::string base = fixture_dir() + "/" + f.name;
  const std::string bin = read_file(base + ".bin");
  const std::vector<float> expected = floats_of(read_file(base + ".f32"));
  const std::string gguf = read_file(base + ".gguf");

  ASSERT_EQ(bin.size(), size_t(kN / f.block_elems * f.block_bytes)) << base << ".bin";
  ASSERT_EQ(expected.size(), size_t(kN)) << base << ".f32";
  EXPECT_NE(gguf.find(bin), std::string::npos) << "the .bin is not the tensor data in " << base
                                               << ".gguf (re-run scripts/make_gguf_fixtures.py)";
  // The fixture is not degenerate: finite, and many distinct values.
  std::set<float> distinct(expected.begin(), expected.end());
  EXPECT_GT(distinct.size(), 64u);
  for (float v : expected) ASSERT_TRUE(std::isfinite(v));

  const std::vector<float> got = dequant(f.type, bin.data(), kN);
  EXPECT_TRUE(bit_equal(got, expected)) << f.name;
  for (int64_t i = 0; i < kN; ++i) {
    if (std::memcmp(&got[size_t(i)], &expected[size_t(i)], 4) != 0) {
      ADD_FAILURE() << f.name << ": first difference at element " << i << " (row " << i / kCols
                    << ", column " << i % kCols << "): got " << got[size_t(i)] << ", gguf-py "
                    << expected[size_t(i)];
      break;
    }
  }

  // Rows are independent (a caller may split them across threads), and the source needs no
  // alignment: row by row from a copy at an odd address gives the same values.
  std::string shifted(bin.size() + 1, '\0');
  std::memcpy(shifted.data() + 1, bin.data(), bin.size());
  const size_t row_bytes = bin.size() / kRows;
  std::vector<float> by_rows(static_cast<size_t>(kN));
  for (int64_t r = 0; r < kRows; ++r)
    gguf_dequantize(f.type, shifted.data() + 1 + r * row_bytes, by_rows.data() + r * kCols, kCols,
                    "row");
  EXPECT_TRUE(bit_equal(by_rows, expected)) << f.name;
}

INSTANTIATE_TEST_SUITE_P(GgufQuant, GgufQuantFixture,
                         ::testing::Values(Fixture{"F32", kF32, 1, 4}, Fixture{"F16", kF16, 1, 2},
                                           Fixture{"BF16", kBF16, 1, 2},
                                           Fixture{"Q4_0", kQ4_0, 32, 18},
                                           Fixture{"Q4_1", kQ4_1, 32, 20},
                                           Fixture{"Q5_0", kQ5_0, 32, 22},
                                           Fixture{"Q5_1", kQ5_1, 32, 24},
                                           Fixture{"Q8_0", kQ8_0, 32, 34},
                                           Fixture{"Q2_K", kQ2_K, 256, 84},
                                           Fixture{"Q3_K", kQ3_K, 256, 110},
                                           Fixture{"Q4_K", kQ4_K, 256, 144},
                                           Fixture{"Q5_K", kQ5_K, 256, 176},
                                           Fixture{"Q6_K", kQ6_K, 256, 210}),
                         [](const ::testing::TestParamInfo<Fixture>& i) { return i.param.name; });

// ---------------------------------------------------------------------- hand-built blocks

void put_f16(std::vector<uint8_t>& b, size_t off, float v) {
  const uint16_t h = f32_to_f16(v);
  ASSERT_EQ(f16_to_f32(h), v) << "pick values exact in f16";
  b[off] = uint8_t(h & 0xff);
  b[off + 1] = uint8_t(h >> 8);
}

// Q8_0: [d f16][32 x int8]; x[j] = d * q[j].
TEST(GgufQuantBlocks, Q8_0) {
  std::vector<uint8_t> b(34);
  put_f16(b, 0, 0.5f);
  const int8_t q[32] = {-128, -127, -64, -3, -2, -1, 0, 1, 2, 3, 64, 127, 5, 6, 7, 8,
                        9,    10,   11,  12, 13, 14, 15, 16, -16, -15, -14, -13, -12, -11, -10, 100};
  std::memcpy(b.data() + 2, q, 32);
  const std::vector<float> y = dequant(kQ8_0, b.data(), 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[size_t(j)], 0.5f * float(q[j])) << j;
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[11], 63.5f);
}

// Q4_1: [d f16][m f16][16 bytes: low nibble -> x[j], high nibble -> x[j + 16]]; x = d*q + m.
TEST(GgufQuantBlocks, Q4_1) {
  std::vector<uint8_t> b(20);
  put_f16(b, 0, 0.25f);
  put_f16(b, 2, -1.5f);
  for (int j = 0; j < 16; ++j) b[size_t(4 + j)] = uint8_t(j | ((15 - j) << 4));
  const std::vector<float> y = dequant(kQ4_1, b.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], 0.25f * float(j) - 1.5f) << j;
    EXPECT_EQ(y[size_t(j + 16)], 0.25f * float(15 - j) - 1.5f) << j + 16;
  }
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[15], 2.25f);   // q = 15
  EXPECT_EQ(y[16], 2.25f);   // high nibble of byte 0 = 15
  EXPECT_EQ(y[31], -1.5f);
}

// Q4_K scale bytes S[0..11] for 6-bit scales sc[8] and mins mn[8], packed from the layout:
// S[s] (s < 4) = sc[s] | top 2 bits of sc[s + 4] in bits 6..7; S[s + 4] likewise for mn;
// S[8 + i] = low nibble of sc[4 + i] | low nibble of mn[4 + i] << 4.
void pack_k4_scales(const int (&sc)[8], const int (&mn)[8], uint8_t* S) {
  for (int s = 0; s < 4; ++s) {
    S[s] = uint8_t(sc[s] | ((sc[s + 4] >> 4) << 6));
    S[s + 4] = uint8_t(mn[s] | ((mn[s + 4] >> 4) << 6));
    S[8 + s] = uint8_t((sc[s + 4] & 15) | ((mn[s + 4] & 15) << 4));
  }
}

// Q4_K: [d][dmin][12 scale bytes][128 bytes of nibbles]; sub-block s = e / 32 has scale d*sc[s] and
// min dmin*mn[s]; element e = 64c + 32u + l is nibble u of qs[32c + l].
TEST(GgufQuantBlocks, Q4_K) {
  // Scales and mins using all 6 bits, so the top-2-bit packing of sub-blocks 4..7 matters.
  const int sc[8] = {1, 17, 33, 63, 5, 40, 22, 59};
  const int mn[8] = {0, 2, 63, 31, 48, 7, 16, 33};
  std::vector<uint8_t> b(144);
  put_f16(b, 0, 0.5f);    // d
  put_f16(b, 2, 0.125f);  // dmin
  pack_k4_scales(sc, mn, b.data() + 4);
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 7 + e / 32) & 15;
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, u = (e / 32) % 2, l = e % 32;
    b[size_t(16 + 32 * c + l)] |= uint8_t(q[e] << (4 * u));
  }
  const std::vector<float> y = dequant(kQ4_K, b.data(), 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(y[size_t(e)], 0.5f * float(sc[s]) * float(q[e]) - 0.125f * float(mn[s])) << e;
  }
  // Spot checks written out: e = 0: q 0, sc 1, mn 0 -> 0. e = 224 (s 7): q = (1568 + 7) & 15 = 7,
  // 0.5*59*7 - 0.125*33 = 206.5 - 4.125. e = 160 (s 5): q = (1120 + 5) & 15 = 5, 0.5*40*5 - 0.875.
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[224], 202.375f);
  EXPECT_EQ(y[160], 99.125f);
  // The packed bytes themselves, for sub-block 7: sc 59 = 0b111011 -> low nibble 11 in S[11],
  // top bits 0b11 in bits 6..7 of S[3] (with sc[3] = 63: 0xff); mn 33 = 0b100001 -> 1 in the high
  // nibble of S[11], top bits 0b10 in S[7] (with mn[3] = 31: 0x9f).
  EXPECT_EQ(b[4 + 3], 0xff);
  EXPECT_EQ(b[4 + 7], 0x9f);
  EXPECT_EQ(b[4 + 11], 0x1b);
}

// Q3_K: [hmask 32][qs 64][scales 12][d]; x[e] = d * (sc[e/16] - 32) * q, q = low2 - 4 * !hbit.
TEST(GgufQuantBlocks, Q3_K) {
  int sc[16];  // biased 6-bit scales, all 6 bits in use
  for (int s = 0; s < 16; ++s) sc[s] = (s * 23 + 5) % 64;
  std::vector<uint8_t> b(110);
  uint8_t* S = b.data() + 96;
  for (int s = 0; s < 16; ++s) {
    S[s % 8] |= uint8_t((sc[s] & 15) << (s < 8 ? 0 : 4));  // low nibbles: 0..7, then 8..15
    S[8 + s % 4] |= uint8_t((sc[s] >> 4) << (2 * (s / 4)));  // top 2 bits
  }
  put_f16(b, 108, -0.25f);
  int q[256];
  for (int e = 0; e < 256; ++e) {
    const int low2 = (e * 5 + 1) & 3, hbit = (e / 3) & 1;
    q[e] = low2 - (hbit ? 0 : 4);
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    b[size_t(32 + 32 * h + l)] |= uint8_t(low2 << (2 * k));
    b[size_t(l)] |= uint8_t(hbit << (e / 32));
  }
  const std::vector<float> y = dequant(kQ3_K, b.data(), 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[size_t(e)], -0.25f * float(sc[e / 16] - 32) * float(q[e])) << e;
  // e = 250: sc 30, low2 = 1251 & 3 = 3, hbit = 83 & 1 = 1 -> q 3: -0.25 * -2 * 3 = 1.5.
  EXPECT_EQ(y[250], 1.5f);
  // e = 16: sc[1] = 28, low2 = 81 & 3 = 1, hbit = 5 & 1 = 1 -> q 1: -0.25 * -4 = 1.
  EXPECT_EQ(y[16], 1.0f);
}

// Q6_K with one hand-built block: x[e] = d * sc[e/16] * (q - 32).
TEST(GgufQuantBlocks, Q6_K) {
  std::vector<uint8_t> b(210);
  int q[256];
  for (int e = 0; e < 256; ++e) {
    q[e] = (e * 37 + 11) % 64;
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    b[size_t(64 * h + 32 * (k & 1) + l)] |= uint8_t((q[e] & 15) << (k < 2 ? 0 : 4));
    b[size_t(128 + 32 * h + l)] |= uint8_t((q[e] >> 4) << (2 * k));
  }
  int8_t sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = int8_t(s * 17 - 128);
  std::memcpy(b.data() + 192, sc, 16);
  put_f16(b, 208, 0.0625f);
  const std::vector<float> y = dequant(kQ6_K, b.data(), 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[size_t(e)], 0.0625f * float(sc[e / 16]) * float(q[e] - 32)) << e;
}

// ---------------------------------------------------------------------- errors and type set

TEST(GgufQuantErrors, CountNotAMultipleOfTheBlockSize) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> out(4096);
  EXPECT_THAT(error_of([&] { gguf_dequantize(kQ4_K, buf.data(), out.data(), 300, "blk.0.ffn_up"); }),
              AllOf(HasSubstr("blk.0.ffn_up"), HasSubstr("300"), HasSubstr("Q4_K"), HasSubstr("256")));
  EXPECT_THAT(error_of([&] { gguf_dequantize(kQ8_0, buf.data(), out.data(), 33, "t"); }),
              AllOf(HasSubstr("t:"), HasSubstr("33"), HasSubstr("Q8_0"), HasSubstr("32")));
  EXPECT_THAT(error_of([&] { gguf_dequantize(kF32, buf.data(), out.data(), -1, "neg"); }),
              AllOf(HasSubstr("neg"), HasSubstr("-1")));
  // Zero elements is fine, with no buffers at all.
  gguf_dequantize(kQ6_K, nullptr, nullptr, 0, "empty");
}

TEST(GgufQuantErrors, UnsupportedTypeIsNamed) {
  uint8_t buf[256] = {};
  float out[256];
  EXPECT_THAT(error_of([&] { gguf_dequantize(16, buf, out, 256, "tok_embd"); }),
              AllOf(HasSubstr("tok_embd"), HasSubstr("16"), HasSubstr("IQ2_XXS")));
  EXPECT_THAT(error_of([&] { gguf_dequantize(15, buf, out, 256, "x"); }), HasSubstr("Q8_K"));
  EXPECT_THAT(error_of([&] { gguf_dequantize(4, buf, out, 32, "x"); }), HasSubstr("type 4"));
  EXPECT_THAT(error_of([&] { gguf_dequantize(1234, buf, out, 32, "x"); }), AllOf(HasSubstr("type 1234"), HasSubstr("unknown")));
}

TEST(GgufQuantErrors, SupportedTypeSet) {
  const std::set<uint32_t> supported = {kF32,  kF16,  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0,
                                        kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kBF16};
  for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(gguf_can_dequantize(t), supported.count(t) == 1) << t;
  EXPECT_FALSE(gguf_can_dequantize(0xffffffffu));
}

}  // namespace
}  // namespace sinkq
