// tests/formats/plain_header_test.cc — formats/packed_format.h is plain data: a translation unit
// that includes it (and nothing before it) gets no std containers or strings, as a CUDA file
// would need, and its tables are usable in constant expressions.
#include "formats/packed_format.h"

#if defined(_GLIBCXX_VECTOR) || defined(_LIBCPP_VECTOR)
#error "formats/packed_format.h pulls in <vector>"
#endif
#if defined(_GLIBCXX_STRING) || defined(_LIBCPP_STRING)
#error "formats/packed_format.h pulls in <string>"
#endif
#if defined(_GLIBCXX_STRING_VIEW) || defined(_LIBCPP_STRING_VIEW)
#error "formats/packed_format.h pulls in <string_view>"
#endif
#if defined(_GLIBCXX_ARRAY) || defined(_LIBCPP_ARRAY)
#error "formats/packed_format.h pulls in <array>"
#endif

namespace sinkq::formats {
namespace {

// Everything a device-side caller needs is a constant expression.
static_assert(kKvFormats[13].format == PackedFormat::KV4_StaticTensor);
static_assert(find_format(PackedFormat::A4_PerTensor)->bits == 4);
static_assert(codebook_rows(Codebook::UniformInt).pack == &uniform::pack_row);
static_assert(uniform::encode(1.0f, 0.25f, 0, 8, true) == 4);

}  // namespace
}  // namespace sinkq::formats

#include <gtest/gtest.h>

namespace sinkq::formats {
namespace {

TEST(PlainHeader, CompilesWithoutStdContainers) {
  EXPECT_EQ(sizeof(FormatDesc), sizeof(void*) == 8 ? 24u : sizeof(FormatDesc));
  EXPECT_EQ(int(kKvFormats[0].format), kKvFirst);
}

}  // namespace
}  // namespace sinkq::formats
