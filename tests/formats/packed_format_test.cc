// tests/formats/packed_format_test.cc — the format tables composed from their pieces: the
// generated KV rows keep the values and names that artifacts and flags already use, every row
// reads back to its pieces, and the codebook row table points at the scalar reference.
#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <string>

#include "formats/packed_format.h"

namespace sinkq::formats {
namespace {

// The 16 KV names as they were listed by hand before the table was generated (artifacts and
// --kv-format flags store them): value 64 + position.
const char* const kHistoricKvNames[] = {
    "kv8_per_head",      "kv4_per_head",      "kv8_per_head_asym",      "kv4_per_head_asym",
    "kv8_per_token",     "kv4_per_token",     "kv8_per_token_asym",     "kv4_per_token_asym",
    "kv8_static_head",   "kv4_static_head",   "kv8_static_head_asym",   "kv4_static_head_asym",
    "kv8_static_tensor", "kv4_static_tensor", "kv8_static_tensor_asym", "kv4_static_tensor_asym",
};

TEST(PackedFormat, KvRowsKeepTheirValuesAndNames) {
  static_assert(std::size(kHistoricKvNames) == size_t(kKvCount));
  for (int i = 0; i < kKvCount; ++i) {
    const FormatDesc& t = kKvFormats[i];
    EXPECT_EQ(int(t.format), 64 + i);
    EXPECT_STREQ(t.name, kHistoricKvNames[i]);
    EXPECT_EQ(find_kv_format(t.format), &t);
    EXPECT_EQ(find_format(t.format), nullptr);
  }
  EXPECT_EQ(find_kv_format(PackedFormat(63)), nullptr);
  EXPECT_EQ(find_kv_format(PackedFormat(80)), nullptr);
}

// Each generated row is the product of its pieces: kv_value of (bits, symmetry, scope, source)
// names exactly that row, and its granularity / dynamic flag follow from scope and source.
TEST(PackedFormat, KvRowsAreTheProductOfThePieces) {
  int seen = 0;
  for (ScaleSource src : kKvSources)
    for (KvScope scope : kKvScopes)
      for (bool sym : kKvSymmetry)
        for (int bits : kKvBits) {
          const FormatDesc* t = find_kv_format(kv_value(bits, sym, scope, src));
          ASSERT_NE(t, nullptr);
          EXPECT_EQ(int(t->format), 64 + seen++);  // the last axis varies fastest
          EXPECT_EQ(t->bits, bits);
          EXPECT_EQ(t->symmetric, sym);
          EXPECT_EQ(t->source, src);
          EXPECT_EQ(t->dynamic(), src == ScaleSource::Dynamic);
          EXPECT_EQ(t->granularity, kv_granularity(scope, src));
          EXPECT_EQ(t->codebook, Codebook::UniformInt);
          EXPECT_EQ(t->sparse, Sparse::None);
          EXPECT_EQ(t->param_bytes(), sym ? 4 : 5);
        }
  EXPECT_EQ(seen, kKvCount);
  EXPECT_EQ(kv_index(3, true, KvScope::Head, ScaleSource::Dynamic), -1);
}

TEST(PackedFormat, WeightAndActivationRows) {
  for (const FormatDesc& t : kFormats) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(find_format(t.format), &t);
    EXPECT_EQ(find_kv_format(t.format), nullptr);
    EXPECT_EQ(t.codebook, Codebook::UniformInt);
    EXPECT_EQ(t.sparse, Sparse::None);
    EXPECT_EQ(t.param_bytes(), t.symmetric ? 4 : 5);
    EXPECT_EQ(t.group_code_bytes(), t.group * t.bits / 8);
    if (t.role == Role::Weight) {
      EXPECT_FALSE(t.dynamic());
      EXPECT_EQ(t.paired, PackedFormat::A8_PerToken);
    } else {
      EXPECT_EQ(t.dynamic(), t.granularity == Granularity::PerRow);
      EXPECT_EQ(t.paired, t.format);
    }
  }
  EXPECT_STREQ(find_format(PackedFormat::W4_G128_Asym)->name, "w4_g128_asym");
  EXPECT_EQ(find_format(PackedFormat::W4_G128_Asym)->group_code_bytes(), 64);
}

TEST(PackedFormat, CodebookRowsAreTheScalarReference) {
  const CodebookRows& r = codebook_rows(Codebook::UniformInt);
  EXPECT_EQ(r.codebook, Codebook::UniformInt);
  EXPECT_STREQ(r.name, "uniform_int");
  EXPECT_EQ(r.pack, &uniform::pack_row);
  EXPECT_EQ(r.unpack, &uniform::unpack_row);
  EXPECT_EQ(r.dequantize, &uniform::dequantize_row);
  EXPECT_EQ(r.dot_i8, &uniform::dot_i8);
  EXPECT_EQ(r.dot_f32, &uniform::dot_f32);
}

}  // namespace
}  // namespace sinkq::formats
